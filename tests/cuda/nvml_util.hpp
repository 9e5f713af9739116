// SPDX-License-Identifier: Apache-2.0
// What NVML says, for the CUDA tests: device UUIDs, a device's memory, the memory one process uses
// on it. Loaded with dlopen, independently of gpushare's own NVML code (which is what the tests
// check), from the same libnvidia-ml.so.1: the driver's, or the simulator's (docs/cudasim.md).
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cutest {

class nvml {
public:
  nvml() {
    lib_ = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) return;
    init_ = sym<int (*)()>("nvmlInit_v2");
    shutdown_ = sym<int (*)()>("nvmlShutdown");
    count_ = sym<int (*)(unsigned*)>("nvmlDeviceGetCount_v2");
    by_index_ = sym<int (*)(unsigned, void**)>("nvmlDeviceGetHandleByIndex_v2");
    by_uuid_ = sym<int (*)(const char*, void**)>("nvmlDeviceGetHandleByUUID");
    uuid_ = sym<int (*)(void*, char*, unsigned)>("nvmlDeviceGetUUID");
    memory_ = sym<int (*)(void*, memory_v1*)>("nvmlDeviceGetMemoryInfo");
    processes_ =
        sym<int (*)(void*, unsigned*, process_info*)>("nvmlDeviceGetComputeRunningProcesses_v3");
    max_mig_ = sym<int (*)(void*, unsigned*)>("nvmlDeviceGetMaxMigDeviceCount");
    mig_by_index_ = sym<int (*)(void*, unsigned, void**)>("nvmlDeviceGetMigDeviceHandleByIndex");
    ok_ = init_ && shutdown_ && count_ && by_index_ && by_uuid_ && uuid_ && memory_ && processes_ &&
          init_() == 0;
  }
  ~nvml() {
    if (ok_) shutdown_();
    if (lib_) ::dlclose(lib_);
  }
  nvml(const nvml&) = delete;
  nvml& operator=(const nvml&) = delete;

  bool ok() const { return ok_; }

  /// The UUID of every GPU NVML lists by index ("GPU-...") and of each GPU's MIG devices
  /// ("MIG-..."), which NVML reaches through the GPU (nvmlDeviceGetMaxMigDeviceCount,
  /// nvmlDeviceGetMigDeviceHandleByIndex), never by index.
  std::vector<std::string> uuids() const {
    std::vector<std::string> out;
    unsigned n = 0;
    if (!ok_ || count_(&n) != 0) return out;
    for (unsigned i = 0; i < n; ++i) {
      void* d = nullptr;
      char text[96] = {};
      if (by_index_(i, &d) != 0 || uuid_(d, text, sizeof text) != 0) continue;
      out.emplace_back(text);
      unsigned max = 0;
      if (!max_mig_ || !mig_by_index_ || max_mig_(d, &max) != 0) continue;
      for (unsigned m = 0; m < max; ++m) { // indices without a MIG device: NVML_ERROR_NOT_FOUND
        void* mig = nullptr;
        char mig_text[96] = {};
        if (mig_by_index_(d, m, &mig) == 0 && uuid_(mig, mig_text, sizeof mig_text) == 0)
          out.emplace_back(mig_text);
      }
    }
    return out;
  }

  /// The pids NVML lists on the device, in its order.
  std::vector<unsigned> pids(const std::string& uuid) const {
    std::vector<unsigned> out;
    void* d = device(uuid);
    if (!d) return out;
    std::vector<process_info> list(256);
    auto n = static_cast<unsigned>(list.size());
    if (processes_(d, &n, list.data()) != 0) return out;
    for (unsigned i = 0; i < n; ++i) out.push_back(list[i].pid);
    return out;
  }

  /// Whether NVML finds a device by this UUID text.
  bool knows(const std::string& uuid) const { return device(uuid) != nullptr; }

  /// The device's free bytes.
  std::optional<std::uint64_t> free_memory(const std::string& uuid) const {
    void* d = device(uuid);
    memory_v1 m{};
    if (!d || memory_(d, &m) != 0) return std::nullopt;
    return m.free;
  }

  /// Bytes process `pid` uses on the device; nullopt when it is not listed there.
  std::optional<std::uint64_t> used_by(const std::string& uuid, unsigned pid) const {
    void* d = device(uuid);
    if (!d) return std::nullopt;
    std::vector<process_info> list(256);
    auto n = static_cast<unsigned>(list.size());
    if (processes_(d, &n, list.data()) != 0) return std::nullopt;
    for (unsigned i = 0; i < n; ++i)
      if (list[i].pid == pid) return list[i].used;
    return std::nullopt;
  }

private:
  struct memory_v1 {
    unsigned long long total, free, used;
  };
  struct process_info {
    unsigned pid;
    unsigned long long used;
    unsigned gpu_instance, compute_instance;
  };
  template <class F> F sym(const char* name) { return reinterpret_cast<F>(::dlsym(lib_, name)); }
  void* device(const std::string& uuid) const {
    void* d = nullptr;
    if (!ok_ || by_uuid_(uuid.c_str(), &d) != 0) return nullptr;
    return d;
  }

  void* lib_ = nullptr;
  bool ok_ = false;
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*count_)(unsigned*) = nullptr;
  int (*by_index_)(unsigned, void**) = nullptr;
  int (*by_uuid_)(const char*, void**) = nullptr;
  int (*uuid_)(void*, char*, unsigned) = nullptr;
  int (*memory_)(void*, memory_v1*) = nullptr;
  int (*processes_)(void*, unsigned*, process_info*) = nullptr;
  int (*max_mig_)(void*, unsigned*) = nullptr;
  int (*mig_by_index_)(void*, unsigned, void**) = nullptr;
};

} // namespace cutest
