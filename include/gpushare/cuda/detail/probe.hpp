// SPDX-License-Identifier: Apache-2.0
// What NVML and the driver say about this process and its devices, without linking either:
//   * NVML (the driver's management library, loaded with dlopen, so gpushare never needs it at
//     link time): which UUID form a device has (GPU-... or MIG-...), a device's free memory, and
//     the device memory one process uses (nvmlDeviceGetComputeRunningProcesses_v3), from which a
//     process's CUDA context overhead is measured;
//   * the driver's cuDevicePrimaryCtxGetState (reached through cudaGetDriverEntryPointByVersion,
//     so no link to libcuda either): whether this process has a context on a device already.
// Any step that is unavailable makes its answer unavailable; the caller then uses an estimate or
// a fallback and says so.
#pragma once

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <gpushare/cuda/detail/calls.hpp>
#include <gpushare/cuda/detail/nvml_records.hpp>
#include <gpushare/cuda/detail/runtime_names_begin.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

/// The few NVML entry points gpushare uses, resolved at run time. NVML's C ABI: functions return
/// an int status (0 = success); a device is an opaque pointer; nvmlMemory_t (version 1) is three
/// unsigned long long: total, free, used; the v2/v3 process calls' records are read by
/// read_nvml_process_records() (nvml_records.hpp), whatever their size.
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
    processes_ = reinterpret_cast<int (*)(void*, unsigned*, void*)>(
        ::dlsym(handle_, "nvmlDeviceGetComputeRunningProcesses_v3"));
    if (!processes_) // older drivers: the _v2 call, with the same record
      processes_ = reinterpret_cast<int (*)(void*, unsigned*, void*)>(
          ::dlsym(handle_, "nvmlDeviceGetComputeRunningProcesses_v2"));
    if (init_ && shutdown_ && by_uuid_ && memory_ && init_() == 0) initialised_ = true;
  }
  nvml_library(const nvml_library&) = delete;
  nvml_library& operator=(const nvml_library&) = delete;
  ~nvml_library() {
    if (initialised_) shutdown_();
    if (handle_) ::dlclose(handle_);
  }

  bool usable() const noexcept { return initialised_; }

  /// Whether NVML knows a device by this UUID text ("GPU-..." or "MIG-...").
  bool knows(const std::string& uuid) const { return device(uuid) != nullptr; }

  /// Free bytes on the device with this UUID ("GPU-..." or "MIG-..."), or nullopt.
  std::optional<std::uint64_t> free_memory(const std::string& uuid) const {
    void* d = device(uuid);
    if (!d) return std::nullopt;
    memory_v1 m{};
    if (memory_(d, &m) != 0) return std::nullopt;
    return m.free;
  }

  /// Bytes process `pid` uses on the device with this UUID, as NVML lists it among the device's
  /// compute processes; nullopt when NVML cannot tell (no such call, the process is not listed,
  /// e.g. because it runs in another PID namespace, its figure is not available, or the records
  /// fit no layout read_nvml_process_records() knows).
  std::optional<std::uint64_t> process_memory(const std::string& uuid, unsigned pid) const {
    void* d = device(uuid);
    if (!d || !processes_) return std::nullopt;
    const auto records = read_nvml_process_records(
        [&](unsigned* count, void* infos) { return processes_(d, count, infos); });
    if (!records) return std::nullopt;
    for (const nvml_process_record& r : *records)
      if (r.pid == pid) {
        if (r.used == value_not_available) return std::nullopt;
        return r.used;
      }
    return std::nullopt;
  }

private:
  struct memory_v1 {
    unsigned long long total, free, used;
  };
  static constexpr unsigned long long value_not_available = ~0ull; // NVML_VALUE_NOT_AVAILABLE

  void* device(const std::string& uuid) const {
    if (!initialised_) return nullptr;
    void* d = nullptr;
    if (by_uuid_(uuid.c_str(), &d) != 0) return nullptr;
    return d;
  }

  void* handle_ = nullptr;
  bool initialised_ = false;
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*by_uuid_)(const char*, void**) = nullptr;
  int (*memory_)(void*, memory_v1*) = nullptr;
  int (*processes_)(void*, unsigned*, void*) = nullptr;
};

/// This process's NVML, loaded and initialised on first use (nvmlInit can take a while on a real
/// system, and describe_device() asks NVML about every device it describes). Never unloaded: a
/// static destructor of another object may still describe a device at exit.
inline const nvml_library& process_nvml() {
  static const nvml_library* const nvml = new nvml_library();
  return *nvml;
}

/// Whether this process's primary context on device `ordinal` is active already (the
/// application used the device before opening its session), or nullopt if the driver cannot
/// tell us. Creates no context.
inline std::optional<bool> primary_context_active(int ordinal) {
  using device_get_t = int (*)(int*, int);
  using ctx_state_t = int (*)(int, unsigned*, int*);
  void* get = driver_entry_point("cuDeviceGet");
  void* state = get ? driver_entry_point("cuDevicePrimaryCtxGetState") : nullptr;
  if (!get || !state) return std::nullopt;
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

#include <gpushare/cuda/detail/runtime_names_end.hpp>
