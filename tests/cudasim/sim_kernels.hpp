// SPDX-License-Identifier: Apache-2.0
// A "kernel" for simulator tests, compiled by g++: a host function registered with cudasim as a
// kernel whose device time is its first argument (nanoseconds). Launched with cudaLaunchKernel;
// only the simulated runtime accepts it (a real runtime knows no such kernel).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include <cudasim/cudasim.h>

namespace simtest {

inline void timed_kernel(std::uint64_t) {}

/// A kernel that adds 1 to *counter when it completes: shows stream order.
inline void count_kernel(std::uint64_t, int*) {}

inline bool declare_kernels() {
  static const bool done = [] {
    const bool a = cudasim::set_kernel_model<std::uint64_t>(
        reinterpret_cast<const void*>(&timed_kernel), [](const cudasimLaunch* l) {
          return static_cast<unsigned long long>(*static_cast<std::uint64_t*>(l->args[0]));
        });
    const bool b = cudasim::set_kernel_model<std::uint64_t, int*>(
        reinterpret_cast<const void*>(&count_kernel),
        [](const cudasimLaunch* l) {
          return static_cast<unsigned long long>(*static_cast<std::uint64_t*>(l->args[0]));
        },
        [](const cudasimLaunch* l) { ++**static_cast<int**>(l->args[1]); });
    return a && b;
  }();
  return done;
}

/// Enqueues a kernel that occupies the device for `ns`.
inline cudaError_t launch(cudaStream_t stream, std::uint64_t ns) {
  declare_kernels();
  void* args[] = {&ns};
  return cudaLaunchKernel(reinterpret_cast<const void*>(&timed_kernel), dim3(1), dim3(1), args, 0,
                          stream);
}

/// Enqueues a kernel of `ns` that increments *counter when it completes.
inline cudaError_t launch_count(cudaStream_t stream, std::uint64_t ns, int* counter) {
  declare_kernels();
  void* args[] = {&ns, &counter};
  return cudaLaunchKernel(reinterpret_cast<const void*>(&count_kernel), dim3(1), dim3(1), args, 0,
                          stream);
}

} // namespace simtest
