// SPDX-License-Identifier: Apache-2.0
// cudasim's own interface, for programs that run on the simulated CUDA runtime (docs/cudasim.md).
//
// A simulator cannot execute device code, so a kernel launch only occupies the simulated device
// for a while. A program tells cudasim how long its kernels take (and, if it wants, what they do
// to memory) with cudasim::set_kernel_model(). On the real CUDA runtime these functions do not
// exist: the C++ helpers below look them up at run time and do nothing there, so the same binary
// runs on a GPU and on the simulator. Include this header from host code (g++ or nvcc).
#pragma once

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/// What a kernel model sees of one launch. `args` points at cudasim's copies of the kernel's
/// arguments (sizes declared with the model), so a model may read them when the kernel runs.
typedef struct cudasimLaunch {
  void** args;
  dim3 grid;
  dim3 block;
  size_t shared_mem;
} cudasimLaunch;

/// How long a launch occupies the device, in nanoseconds of device time.
typedef unsigned long long (*cudasimDurationFn)(const cudasimLaunch* launch);
/// What the kernel does, run on the host when the kernel completes in stream order (device
/// pointers are host-addressable on the simulator). May be null.
typedef void (*cudasimExecuteFn)(const cudasimLaunch* launch);

/// Counters of this process, for tests that compare implementations.
typedef struct cudasimStats {
  unsigned long long api_calls;        ///< CUDA runtime calls made by this process
  unsigned long long spin_wait_ns;     ///< host time spent in spin-waits (no cudaEventBlockingSync)
  unsigned long long blocking_wait_ns; ///< host time spent in blocking waits
  unsigned long long kernels;          ///< kernels that completed
  unsigned long long kernel_ns;        ///< device time those kernels ran
  unsigned long long context_switches; ///< time-slice switches on this process's devices
} cudasimStats;

/// Declares the model of the kernel whose host stub is `kernel` (the function's address, as for
/// cudaLaunchKernel). `arg_sizes[i]` is sizeof the i-th parameter. Returns 0, or an error code.
int cudasimSetKernelModel(const void* kernel, int arg_count, const size_t* arg_sizes,
                          cudasimDurationFn duration, cudasimExecuteFn execute);
/// Declares the model of every kernel whose name matches `pattern`, for kernels that have no
/// model of their own (by address). `pattern` is matched whole against the kernel's mangled
/// name, its demangled name and its qualified name without parameters or return type, `*`
/// standing for any characters and `?` for one (docs/cudasim.md, "Kernels: durations and
/// models"). The first pattern declared that matches wins; declaring a pattern again replaces
/// its model. Returns 0, or an error code.
int cudasimSetKernelModelByName(const char* pattern, int arg_count, const size_t* arg_sizes,
                                cudasimDurationFn duration, cudasimExecuteFn execute);
/// Fills `stats` (whose size the caller passes, for forward compatibility). Returns 0.
int cudasimGetStats(cudasimStats* stats, size_t size);
/// How many times this process called the runtime function `name` (all functions when null).
unsigned long long cudasimApiCalls(const char* name);
/// "cudasim <version>"; present only in the simulator, so a program can tell where it runs.
const char* cudasimVersion(void);

#ifdef __cplusplus
} // extern "C"

namespace cudasim {

/// Whether this process runs on the simulated runtime.
inline bool active() noexcept { return ::dlsym(RTLD_DEFAULT, "cudasimVersion") != nullptr; }

namespace detail {
template <typename T> inline T lookup(const char* name) noexcept {
  return reinterpret_cast<T>(::dlsym(RTLD_DEFAULT, name));
}
} // namespace detail

/// Declares a kernel's model (see cudasimSetKernelModel): on the simulator it returns true once
/// recorded; on real CUDA it does nothing and returns false. Example, for a kernel
/// `__global__ void spin(unsigned long long ns)` whose device time is its argument:
///   cudasim::set_kernel_model<unsigned long long>(
///       reinterpret_cast<const void*>(&spin),
///       [](const cudasimLaunch* l) { return *static_cast<unsigned long long*>(l->args[0]); });
template <typename... Args>
inline bool set_kernel_model(const void* kernel, cudasimDurationFn duration,
                             cudasimExecuteFn execute = nullptr) noexcept {
  const auto set =
      detail::lookup<int (*)(const void*, int, const size_t*, cudasimDurationFn, cudasimExecuteFn)>(
          "cudasimSetKernelModel");
  if (!set) return false;
  const size_t sizes[sizeof...(Args) + 1] = {sizeof(Args)..., 0};
  return set(kernel, static_cast<int>(sizeof...(Args)), sizes, duration, execute) == 0;
}

/// Declares the model of the kernels whose names match `pattern` (see
/// cudasimSetKernelModelByName); the template arguments are the kernels' parameter types. On the
/// simulator it returns true once recorded; on real CUDA it does nothing and returns false.
/// Example, for `__global__ void scale(float* data, int n)` taking 2 ns per element:
///   cudasim::set_kernel_model_by_name<float*, int>(
///       "scale", [](const cudasimLaunch* l) { return 2ull * *static_cast<int*>(l->args[1]); });
template <typename... Args>
inline bool set_kernel_model_by_name(const char* pattern, cudasimDurationFn duration,
                                     cudasimExecuteFn execute = nullptr) noexcept {
  const auto set =
      detail::lookup<int (*)(const char*, int, const size_t*, cudasimDurationFn, cudasimExecuteFn)>(
          "cudasimSetKernelModelByName");
  if (!set) return false;
  const size_t sizes[sizeof...(Args) + 1] = {sizeof(Args)..., 0};
  return set(pattern, static_cast<int>(sizeof...(Args)), sizes, duration, execute) == 0;
}

/// This process's counters, or all zero on real CUDA.
inline cudasimStats stats() noexcept {
  cudasimStats s{};
  if (const auto get = detail::lookup<int (*)(cudasimStats*, size_t)>("cudasimGetStats"))
    get(&s, sizeof s);
  return s;
}

/// Calls of one runtime function by this process (all functions for nullptr); 0 on real CUDA.
inline unsigned long long api_calls(const char* name = nullptr) noexcept {
  const auto get = detail::lookup<unsigned long long (*)(const char*)>("cudasimApiCalls");
  return get ? get(name) : 0;
}

} // namespace cudasim
#endif
