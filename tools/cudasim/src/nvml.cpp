// SPDX-License-Identifier: Apache-2.0
// libnvidia-ml.so.1 subset: what gpushare and its tests read through NVML, served from the
// shared simulated device state. NVML lists every device unit whatever CUDA_VISIBLE_DEVICES
// says, as the real NVML does. Types are declared here from NVML's documented ABI (the toolkit
// ships no nvml.h).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "config.hpp"
#include "shared.hpp"

using namespace cudasim;

namespace {

enum nvml_return : int {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_UNKNOWN = 999,
};

struct nvml_memory {
  unsigned long long total, free, used;
};

struct nvml_process_info { // nvmlProcessInfo_t (v2 and v3 share this layout)
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

int init_count = 0;

/// A device handle is a pointer into this array of unit indices.
int handles[max_units];

int unit_of(void* handle) {
  if (!handle) return -1;
  const auto* p = static_cast<int*>(handle);
  if (p < handles || p >= handles + max_units) return -1;
  const int u = *p;
  return u >= 0 && static_cast<std::size_t>(u) < shared::get().units().size() ? u : -1;
}

} // namespace

extern "C" {

int nvmlInit_v2(void) {
  if (!cfg().error.empty()) return NVML_ERROR_DRIVER_NOT_LOADED;
  if (!shared::get().ok()) {
    std::fprintf(stderr, "cudasim (NVML): %s\n", shared::get().error().c_str());
    return NVML_ERROR_DRIVER_NOT_LOADED;
  }
  for (int i = 0; i < max_units; ++i) handles[i] = i;
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
  *count = static_cast<unsigned>(shared::get().units().size());
  return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (!device || index >= shared::get().units().size()) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &handles[index];
  return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByUUID(const char* uuid, void** device) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
  for (const auto& u : shared::get().units())
    if (u.uuid == uuid) {
      *device = &handles[u.index];
      return NVML_SUCCESS;
    }
  return NVML_ERROR_NOT_FOUND;
}

int nvmlDeviceGetUUID(void* device, char* uuid, unsigned int length) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  const int u = unit_of(device);
  if (u < 0 || !uuid) return NVML_ERROR_INVALID_ARGUMENT;
  const std::string& text = shared::get().units()[static_cast<std::size_t>(u)].uuid;
  if (length <= text.size()) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::snprintf(uuid, length, "%s", text.c_str());
  return NVML_SUCCESS;
}

int nvmlDeviceGetName(void* device, char* name, unsigned int length) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (unit_of(device) < 0 || !name || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
  std::snprintf(name, length, "%s", cfg().name.c_str());
  return NVML_SUCCESS;
}

int nvmlDeviceGetMemoryInfo(void* device, nvml_memory* memory) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  const int u = unit_of(device);
  if (u < 0 || !memory) return NVML_ERROR_INVALID_ARGUMENT;
  const memory_info m = shared::get().memory(u);
  memory->total = m.total;
  memory->used = std::min(m.used, m.total);
  memory->free = m.total - memory->used;
  return NVML_SUCCESS;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned int* count,
                                            nvml_process_info* infos) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  const int u = unit_of(device);
  if (u < 0 || !count) return NVML_ERROR_INVALID_ARGUMENT;
  const auto list = shared::get().processes(u);
  if (!infos || *count < list.size()) {
    *count = static_cast<unsigned>(list.size());
    return list.empty() ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
  }
  const auto& info = shared::get().units()[static_cast<std::size_t>(u)];
  for (std::size_t i = 0; i < list.size(); ++i) {
    infos[i].pid = static_cast<unsigned>(list[i].pid);
    infos[i].usedGpuMemory = list[i].bytes;
    infos[i].gpuInstanceId = info.mig >= 0 ? static_cast<unsigned>(info.mig) : 0xffffffffu;
    infos[i].computeInstanceId = info.mig >= 0 ? 0 : 0xffffffffu;
  }
  *count = static_cast<unsigned>(list.size());
  return NVML_SUCCESS;
}

int nvmlDeviceGetComputeRunningProcesses_v2(void* device, unsigned int* count,
                                            nvml_process_info* infos) {
  return nvmlDeviceGetComputeRunningProcesses_v3(device, count, infos);
}

int nvmlDeviceIsMigDeviceHandle(void* device, unsigned int* is_mig) {
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  const int u = unit_of(device);
  if (u < 0 || !is_mig) return NVML_ERROR_INVALID_ARGUMENT;
  *is_mig = shared::get().units()[static_cast<std::size_t>(u)].mig >= 0 ? 1 : 0;
  return NVML_SUCCESS;
}

} // extern "C"
