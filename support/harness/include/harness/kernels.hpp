// SPDX-License-Identifier: Apache-2.0
// The demos' GPU kernel (compiled by nvcc in kernels.cu), callable from host C++ built by g++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace demo::gpu {

/// Enqueues on `stream` a kernel of `blocks` blocks of 256 threads in which every thread does
/// `iterations` dependent multiply-adds. It is a fixed amount of work, so it takes longer when
/// another process shares the GPU. (A kernel that spins until a clock deadline would not: time
/// sliced away from it still counts towards its deadline.) Returns the launch's error.
cudaError_t launch_busy(cudaStream_t stream, std::uint64_t iterations, unsigned blocks);

} // namespace demo::gpu
