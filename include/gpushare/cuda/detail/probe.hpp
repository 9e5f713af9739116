// SPDX-License-Identifier: Apache-2.0
// Measuring a process's CUDA context overhead: device free memory before and after the context
// is created. Before a context exists the runtime cannot report free memory, so the "before"
// figure comes from NVML (the driver's management library, loaded with dlopen so that gpushare
// never needs it at link time), and whether a context exists comes from the driver's
// cuDevicePrimaryCtxGetState (reached through cudaGetDriverEntryPointByVersion, so no link to
// libcuda either). Any step that is unavailable makes the measurement unavailable; the caller
// then uses an estimate and says so.
#pragma once

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdint>
#include <optional>
#include <string>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

/// The few NVML entry points gpushare uses, resolved at run time. NVML's C ABI: functions return
/// an int status (0 = success); a device is an opaque pointer; nvmlMemory_t (version 1) is three
/// unsigned long long: total, free, used.
class nvml_library {
public:
  nvml_library() {
    handle_ = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!handle_) return;
    init_ = reinterpret_cast<int (*)()>(::dlsym(handle_, "nvmlInit_v2"));
    shutdown_ = reinterpret_cast<int (*)()>(::dlsym(handle_, "nvmlShutdown"));
    by_uuid_ = reinterpret_cast<int (*)(const char*, void**)>(
        ::dlsym(handle_, "nvmlDeviceGetHandleByUUID"));
    memory_ =
        reinterpret_cast<int (*)(void*, memory_v1*)>(::dlsym(handle_, "nvmlDeviceGetMemoryInfo"));
    if (init_ && shutdown_ && by_uuid_ && memory_ && init_() == 0) initialised_ = true;
  }
  nvml_library(const nvml_library&) = delete;
  nvml_library& operator=(const nvml_library&) = delete;
  ~nvml_library() {
    if (initialised_) shutdown_();
    if (handle_) ::dlclose(handle_);
  }

  bool usable() const noexcept { return initialised_; }

  /// Free bytes on the GPU with this UUID ("GPU-..."), or nullopt.
  std::optional<std::uint64_t> free_memory(const std::string& uuid) const {
    if (!initialised_) return std::nullopt;
    void* device = nullptr;
    if (by_uuid_(uuid.c_str(), &device) != 0 || device == nullptr) return std::nullopt;
    memory_v1 m{};
    if (memory_(device, &m) != 0) return std::nullopt;
    return m.free;
  }

private:
  struct memory_v1 {
    unsigned long long total, free, used;
  };
  void* handle_ = nullptr;
  bool initialised_ = false;
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*by_uuid_)(const char*, void**) = nullptr;
  int (*memory_)(void*, memory_v1*) = nullptr;
};

/// Whether this process's primary context on device `ordinal` is active already (the
/// application used the device before opening its session), or nullopt if the driver cannot
/// tell us. Creates no context.
inline std::optional<bool> primary_context_active(int ordinal) {
  using device_get_t = int (*)(int*, int);
  using ctx_state_t = int (*)(int, unsigned*, int*);
  void* get = nullptr;
  void* state = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuDeviceGet", &get, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess || !get) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &state, 12000,
                                       cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || !state) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  int device = 0;
  if (reinterpret_cast<device_get_t>(get)(&device, ordinal) != 0) return std::nullopt;
  unsigned flags = 0;
  int active = 0;
  if (reinterpret_cast<ctx_state_t>(state)(device, &flags, &active) != 0) return std::nullopt;
  return active != 0;
}

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare
