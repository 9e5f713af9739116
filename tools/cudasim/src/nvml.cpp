// SPDX-License-Identifier: Apache-2.0
// libnvidia-ml.so.1 subset: what gpushare and its tests read through NVML, served from the
// shared simulated device state. NVML lists every GPU whatever CUDA_VISIBLE_DEVICES says, as the
// real NVML does; in MIG mode a GPU's instances are MIG devices, reached through the MIG calls
// (nvmlDeviceGetMigDeviceHandleByIndex, ...) or by their MIG-... UUID, never by index. Types are
// declared here from NVML's documented ABI (the toolkit ships no nvml.h).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "config.hpp"
#include "shared.hpp"

using namespace cudasim;

namespace {

enum nvml_return : int {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_UNKNOWN = 999,
};

constexpr unsigned NVML_DEVICE_MIG_DISABLE = 0, NVML_DEVICE_MIG_ENABLE = 1;
/// nvmlDeviceGetMaxMigDeviceCount in MIG mode: the most instances an A100 or H100 has.
constexpr unsigned max_mig_devices = 7;
constexpr int max_gpus = 8; // CUDASIM_DEVICES' limit

struct nvml_memory {
  unsigned long long total, free, used;
};

struct nvml_process_info { // nvmlProcessInfo_t (nvmlProcessInfo_v2_t): 24 bytes
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

/// The record R535-era drivers write for the same call (fault injection: 32 bytes, see
/// CUDASIM_NVML_PROCESS_RECORD): nvmlProcessInfo_t and usedGpuCcProtectedMemory.
struct nvml_process_info_32 {
  nvml_process_info info;
  unsigned long long usedGpuCcProtectedMemory;
};
static_assert(sizeof(nvml_process_info) == 24 && sizeof(nvml_process_info_32) == 32);

int init_count = 0;

/// Device handles are pointers into these arrays: a GPU's (nvmlDeviceGetHandleByIndex_v2) holds
/// its GPU index, a MIG device's its unit index.
int gpu_handles[max_gpus];
int mig_handles[max_units];

/// What a handle names: a GPU (mig false) or one MIG instance of it (unit).
struct target {
  int gpu = -1;
  int unit = -1; ///< the MIG instance's unit; -1 for a GPU handle
  bool mig() const { return unit >= 0; }
};

std::optional<target> resolve(void* handle) {
  const auto* p = static_cast<int*>(handle);
  const shared& sh = shared::get();
  if (p >= gpu_handles && p < gpu_handles + max_gpus) {
    if (*p < 0 || static_cast<std::size_t>(*p) >= sh.gpus().size()) return std::nullopt;
    return target{*p, -1};
  }
  if (p >= mig_handles && p < mig_handles + max_units) {
    if (*p < 0 || static_cast<std::size_t>(*p) >= sh.units().size()) return std::nullopt;
    const unit_info& u = sh.units()[static_cast<std::size_t>(*p)];
    if (u.mig < 0) return std::nullopt;
    return target{u.gpu, u.index};
  }
  return std::nullopt;
}

/// The units a handle covers: its instance, or all of its GPU's (in MIG mode, NVML's "aggregate
/// information" for a GPU handle).
std::vector<int> units_of(const target& t) {
  if (t.mig()) return {t.unit};
  return shared::get().gpus()[static_cast<std::size_t>(t.gpu)].units;
}

bool mig_mode(const target& t) {
  return shared::get().units()[static_cast<std::size_t>(units_of(t).front())].mig >= 0;
}

/// nvmlDeviceGetComputeRunningProcesses_v3 writing records of `record` bytes (24, or 32 as
/// R535-era drivers do: CUDASIM_NVML_PROCESS_RECORD).
int running_processes(void* device, unsigned int* count, void* infos, unsigned record) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  const auto t = resolve(device);
  if (!t || !count) return NVML_ERROR_INVALID_ARGUMENT;
  struct entry {
    process_usage usage;
    int mig;
  };
  std::vector<entry> list;
  for (const int u : units_of(*t))
    for (const auto& p : shared::get().processes(u))
      list.push_back({p, shared::get().units()[static_cast<std::size_t>(u)].mig});
  if (!infos || *count < list.size()) {
    *count = static_cast<unsigned>(list.size());
    return list.empty() ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (std::size_t i = 0; i < list.size(); ++i) {
    nvml_process_info_32 r{};
    r.info.pid = static_cast<unsigned>(list[i].usage.pid);
    r.info.usedGpuMemory = list[i].usage.bytes;
    r.info.gpuInstanceId = list[i].mig >= 0 ? static_cast<unsigned>(list[i].mig) : 0xffffffffu;
    r.info.computeInstanceId = list[i].mig >= 0 ? 0 : 0xffffffffu;
    std::memcpy(static_cast<unsigned char*>(infos) + i * record, &r, record);
  }
  *count = static_cast<unsigned>(list.size());
  return NVML_SUCCESS;
}

} // namespace

extern "C" {

int nvmlInit_v2(void) {
  if (!cfg().error.empty()) return NVML_ERROR_DRIVER_NOT_LOADED;
  if (!shared::get().ok()) {
    std::fprintf(stderr, "cudasim (NVML): %s\n", shared::get().error().c_str());
    return NVML_ERROR_DRIVER_NOT_LOADED;
  }
  for (int i = 0; i < max_gpus; ++i) gpu_handles[i] = i;
  for (int i = 0; i < max_units; ++i) mig_handles[i] = i;
  ++init_count;
  return NVML_SUCCESS;
}

int nvmlInit(void) { return nvmlInit_v2(); }
int nvmlInitWithFlags(unsigned int) { return nvmlInit_v2(); }

int nvmlShutdown(void) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  --init_count;
  return NVML_SUCCESS;
}

const char* nvmlErrorString(int result) {
  switch (result) {
  case NVML_SUCCESS: return "Success";
  case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
  case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
  case NVML_ERROR_NOT_FOUND: return "Not Found";
  case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
  case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
  default: return "Unknown Error";
  }
}

int nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (!version || length < 8) return NVML_ERROR_INVALID_ARGUMENT;
  std::snprintf(version, length, "%s", "580.00 (cudasim)");
  return NVML_SUCCESS;
}

int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = static_cast<unsigned>(shared::get().gpus().size());
  return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (!device || index >= shared::get().gpus().size()) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &gpu_handles[index];
  return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByUUID(const char* uuid, void** device) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
  for (const auto& g : shared::get().gpus())
    if (g.uuid == uuid) {
      *device = &gpu_handles[g.index];
      return NVML_SUCCESS;
    }
  for (const auto& u : shared::get().units()) // "The UUID of the target GPU or MIG instance"
    if (u.mig >= 0 && u.uuid == uuid) {
      *device = &mig_handles[u.index];
      return NVML_SUCCESS;
    }
  return NVML_ERROR_NOT_FOUND;
}

int nvmlDeviceGetUUID(void* device, char* uuid, unsigned int length) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  const auto t = resolve(device);
  if (!t || !uuid) return NVML_ERROR_INVALID_ARGUMENT;
  const shared& sh = shared::get();
  const std::string& text = t->mig() ? sh.units()[static_cast<std::size_t>(t->unit)].uuid
                                     : sh.gpus()[static_cast<std::size_t>(t->gpu)].uuid;
  if (length <= text.size()) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::snprintf(uuid, length, "%s", text.c_str());
  return NVML_SUCCESS;
}

int nvmlDeviceGetName(void* device, char* name, unsigned int length) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (!resolve(device) || !name || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
  std::snprintf(name, length, "%s", cfg().name.c_str());
  return NVML_SUCCESS;
}

int nvmlDeviceGetMemoryInfo(void* device, nvml_memory* memory) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  const auto t = resolve(device);
  if (!t || !memory) return NVML_ERROR_INVALID_ARGUMENT;
  memory_info sum;
  for (const int u : units_of(*t)) {
    const memory_info m = shared::get().memory(u);
    sum.total += m.total;
    sum.used += std::min(m.used, m.total);
  }
  memory->total = sum.total;
  memory->used = sum.used;
  memory->free = sum.total - sum.used;
  return NVML_SUCCESS;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned int* count, void* infos) {
  return running_processes(device, count, infos, cfg().nvml_process_record);
}

int nvmlDeviceGetComputeRunningProcesses_v2(void* device, unsigned int* count, void* infos) {
  return running_processes(device, count, infos, sizeof(nvml_process_info));
}

int nvmlDeviceIsMigDeviceHandle(void* device, unsigned int* is_mig) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  const auto t = resolve(device);
  if (!t || !is_mig) return NVML_ERROR_INVALID_ARGUMENT;
  *is_mig = t->mig() ? 1 : 0;
  return NVML_SUCCESS;
}

int nvmlDeviceGetMigMode(void* device, unsigned int* current, unsigned int* pending) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  const auto t = resolve(device);
  if (!t || !current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
  if (t->mig()) return NVML_ERROR_NOT_SUPPORTED; // an instance has no MIG mode of its own
  *current = *pending = mig_mode(*t) ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
  return NVML_SUCCESS;
}

int nvmlDeviceGetMaxMigDeviceCount(void* device, unsigned int* count) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  const auto t = resolve(device);
  if (!t || t->mig() || !count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = mig_mode(*t) ? max_mig_devices : 0; // "zero if MIG is not supported or enabled"
  return NVML_SUCCESS;
}

int nvmlDeviceGetMigDeviceHandleByIndex(void* device, unsigned int index, void** mig_device) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  const auto t = resolve(device);
  if (!t || t->mig() || !mig_device || !mig_mode(*t) || index >= max_mig_devices)
    return NVML_ERROR_INVALID_ARGUMENT;
  const std::vector<int>& units = shared::get().gpus()[static_cast<std::size_t>(t->gpu)].units;
  if (index >= units.size()) return NVML_ERROR_NOT_FOUND; // "no valid MIG device ... at index"
  *mig_device = &mig_handles[units[index]];
  return NVML_SUCCESS;
}

int nvmlDeviceGetDeviceHandleFromMigDeviceHandle(void* mig_device, void** device) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  const auto t = resolve(mig_device);
  if (!t || !t->mig() || !device) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &gpu_handles[t->gpu];
  return NVML_SUCCESS;
}

int nvmlDeviceGetGpuInstanceId(void* device, unsigned int* id) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  const auto t = resolve(device);
  if (!t || !t->mig() || !id) return NVML_ERROR_INVALID_ARGUMENT;
  *id = static_cast<unsigned>(shared::get().units()[static_cast<std::size_t>(t->unit)].mig);
  return NVML_SUCCESS;
}

int nvmlDeviceGetComputeInstanceId(void* device, unsigned int* id) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  const auto t = resolve(device);
  if (!t || !t->mig() || !id) return NVML_ERROR_INVALID_ARGUMENT;
  *id = 0; // one compute instance per GPU instance
  return NVML_SUCCESS;
}

} // extern "C"
