// SPDX-License-Identifier: Apache-2.0
#include "kernels.hpp"

namespace demo::gpu {
namespace {

__device__ float busy_sink;

// `marker` is never reached (the caller passes -1 and x stays positive); the store it guards
// keeps the compiler from removing the loop.
__global__ void busy_kernel(std::uint64_t iterations, float marker) {
  float x = 1.0f + 1e-6f * static_cast<float>(threadIdx.x);
  for (std::uint64_t i = 0; i < iterations; ++i) x = fmaf(x, 0.999999f, 1e-6f);
  if (x == marker) busy_sink = x;
}

} // namespace

cudaError_t launch_busy(cudaStream_t stream, std::uint64_t iterations, unsigned blocks) {
  busy_kernel<<<blocks, 256, 0, stream>>>(iterations, -1.0f);
  return cudaGetLastError();
}

} // namespace demo::gpu
