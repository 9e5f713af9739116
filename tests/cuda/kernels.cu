// SPDX-License-Identifier: Apache-2.0
#include "kernels.hpp"

#include <cudasim/cudasim.h>

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

__global__ void trap_kernel() { __trap(); }

__global__ void fill_kernel(std::uint32_t* out, std::uint32_t n) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * 3 + 1;
}

// On the simulated runtime (docs/cudasim.md) device code does not run: these models say how long
// each kernel occupies the device and, for fill_kernel, what it writes. On a GPU they are unused.
std::uint64_t spin_duration(const cudasimLaunch* l) {
  return *static_cast<const std::uint64_t*>(l->args[0]);
}
std::uint64_t fill_duration(const cudasimLaunch* l) {
  return 1000 + *static_cast<const std::uint32_t*>(l->args[1]) / 4; // ~4 values per ns
}
void fill_execute(const cudasimLaunch* l) {
  std::uint32_t* out = *static_cast<std::uint32_t* const*>(l->args[0]);
  const std::uint32_t n = *static_cast<const std::uint32_t*>(l->args[1]);
  for (std::uint32_t i = 0; i < n; ++i) out[i] = i * 3 + 1;
}
[[maybe_unused]] const bool models_declared = [] {
  cudasim::set_kernel_model<std::uint64_t>(
      reinterpret_cast<const void*>(&spin_kernel),
      [](const cudasimLaunch* l) -> unsigned long long { return spin_duration(l); });
  return cudasim::set_kernel_model<std::uint32_t*, std::uint32_t>(
      reinterpret_cast<const void*>(&fill_kernel),
      [](const cudasimLaunch* l) -> unsigned long long { return fill_duration(l); }, &fill_execute);
}();

} // namespace

cudaError_t launch_spin(cudaStream_t stream, std::uint64_t ns, unsigned blocks) {
  spin_kernel<<<blocks, 1, 0, stream>>>(ns);
  return cudaGetLastError();
}

cudaError_t launch_trap(cudaStream_t stream) {
  trap_kernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

cudaError_t launch_fill(cudaStream_t stream, std::uint32_t* out, std::uint32_t n) {
  fill_kernel<<<(n + 255) / 256, 256, 0, stream>>>(out, n);
  return cudaGetLastError();
}

} // namespace gpushare_test
