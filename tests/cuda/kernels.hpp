// SPDX-License-Identifier: Apache-2.0
// Test kernels (compiled by nvcc in kernels.cu), callable from host C++ compiled by g++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gpushare_test {

/// Enqueues a kernel on `stream` that keeps `blocks` blocks busy for `ns` nanoseconds of GPU
/// time (it spins on the GPU's global timer). Returns the launch's error.
cudaError_t launch_spin(cudaStream_t stream, std::uint64_t ns, unsigned blocks = 1);

/// Enqueues a kernel that faults on a GPU (__trap(): a sticky error). cudasim runs no device
/// code: there a test makes the launch fault with CUDASIM_STICKY_AT_LAUNCH.
cudaError_t launch_trap(cudaStream_t stream);

/// Enqueues a kernel that writes value i*3+1 into out[i] for i < n.
cudaError_t launch_fill(cudaStream_t stream, std::uint32_t* out, std::uint32_t n);

} // namespace gpushare_test
