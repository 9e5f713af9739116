// SPDX-License-Identifier: Apache-2.0
// Kernels with names, for the simulator's tests of kernel models by name: host stubs registered
// the way nvcc's generated code registers every kernel at load (__cudaRegisterFatBinary, then
// __cudaRegisterFunction with the kernel's mangled device name), compiled by g++. Launched with
// cudaLaunchKernel; only the simulated runtime accepts them (no device code exists).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include <cudasim/cudasim.h>

extern "C" {
// The registration entry points of the CUDA runtime (the toolkit declares them in
// crt/host_runtime.h, for nvcc's generated code).
void** __cudaRegisterFatBinary(void* fat_cubin);
void __cudaRegisterFatBinaryEnd(void** handle);
void __cudaRegisterFunction(void** handle, const char* host_fun, char* device_fun,
                            const char* device_name, int thread_limit, uint3* tid, uint3* bid,
                            dim3* block, dim3* grid, int* warp_size);
}

namespace simtest {

/// Distinct host stubs of a kernel `(int n, float* out)`, one per registered name.
template <int I> void named_stub(int, float*) {}

/// Registers `stub` as the kernel whose device name is `device_name` (mangled, as nvcc passes
/// it). Returns the stub, to launch.
inline const void* register_named(const char* device_name, void (*stub)(int, float*)) {
  static void** const handle = [] {
    void** h = __cudaRegisterFatBinary(nullptr);
    __cudaRegisterFatBinaryEnd(h);
    return h;
  }();
  const auto* host = reinterpret_cast<const char*>(stub);
  __cudaRegisterFunction(handle, host, const_cast<char*>(device_name), device_name, -1, nullptr,
                         nullptr, nullptr, nullptr, nullptr);
  return reinterpret_cast<const void*>(stub);
}

/// Launches a registered stub with (n, out) on `stream`, synchronises, and returns the device
/// time the simulator gave it (cudasimStats::kernel_ns before and after); ~0ull on an error.
inline unsigned long long timed_launch(const void* kernel, int n, float* out,
                                       cudaStream_t stream = cudaStreamLegacy) {
  const unsigned long long before = cudasim::stats().kernel_ns;
  void* args[] = {&n, &out};
  if (cudaLaunchKernel(kernel, dim3(1), dim3(1), args, 0, stream) != cudaSuccess) return ~0ull;
  if (cudaStreamSynchronize(stream) != cudaSuccess) return ~0ull;
  return cudasim::stats().kernel_ns - before;
}

} // namespace simtest
