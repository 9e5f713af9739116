// SPDX-License-Identifier: Apache-2.0
#include "kernels.hpp"

namespace gpushare_test {
namespace {

__device__ std::uint64_t global_timer_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(std::uint64_t ns) {
  const std::uint64_t start = global_timer_ns();
  while (global_timer_ns() - start < ns) {
  }
}

__global__ void fill_kernel(std::uint32_t* out, std::uint32_t n) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * 3 + 1;
}

} // namespace

cudaError_t launch_spin(cudaStream_t stream, std::uint64_t ns, unsigned blocks) {
  spin_kernel<<<blocks, 1, 0, stream>>>(ns);
  return cudaGetLastError();
}

cudaError_t launch_fill(cudaStream_t stream, std::uint32_t* out, std::uint32_t n) {
  fill_kernel<<<(n + 255) / 256, 256, 0, stream>>>(out, n);
  return cudaGetLastError();
}

} // namespace gpushare_test
