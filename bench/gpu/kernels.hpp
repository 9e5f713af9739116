// SPDX-License-Identifier: Apache-2.0
// The benchmark's own GPU kernels (compiled by nvcc in kernels.cu), callable from host C++ built
// by g++. The heavy work is cuBLAS's; these are the elementwise kernels a training or inference
// step runs between its GEMMs, the fill that gives every buffer random (never zero) values, and
// the stamp that records when a request's first kernel started.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace bench::gpu {

/// Fills `n` bf16 values at `p` with pseudo-random values in [-1, 1) drawn from `seed`.
cudaError_t launch_fill_random(cudaStream_t stream, void* p, std::size_t n, std::uint32_t seed);

/// The activation between GEMMs: x = x > 0 ? x : 0.01 x over `n` bf16 values, in place.
cudaError_t launch_activation(cudaStream_t stream, void* p, std::size_t n);

/// One thread writes the GPU's global timer (%globaltimer, ns) to `out` when the kernel starts.
cudaError_t launch_stamp(cudaStream_t stream, std::uint64_t* out);

} // namespace bench::gpu
