// SPDX-License-Identifier: Apache-2.0
// Finding the GPU the benchmark runs on: device 0 as this process sees it (choose another with
// CUDA_VISIBLE_DEVICES), its name, UUID, memory, driver and CUDA versions. The probe runs in a
// forked child: the benchmark's parent must stay free of CUDA to fork its workers.
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#ifdef GPUSHARE_BENCH_CUDA
#include <cuda_runtime_api.h>

#include <gpushare/cuda.hpp>
#include <harness/simulated_runtime.hpp>
#endif

#include <harness/no_gpu.hpp>
#include <harness/run_in_child.hpp>

#include "phase.hpp"

namespace bench {

/// What the probe child found (plain bytes, sent through a pipe).
struct probe_report {
  int usable = 0;
  char reason[240] = {};
  char name[100] = {};
  char uuid[64] = {};
  char driver[32] = {};
  char simulator[64] = {}; ///< "cudasim <version>" on the simulated CUDA runtime, else ""
  std::uint64_t memory = 0;
  int cuda_driver = 0, cuda_runtime = 0, multiprocessors = 0, major = 0, minor = 0;
};

/// The NVIDIA driver's version string from NVML, loaded at run time ("" when unavailable).
inline std::string nvidia_driver_version() {
  void* nvml = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!nvml) return "";
  using init_fn = int (*)();
  using version_fn = int (*)(char*, unsigned);
  auto init = reinterpret_cast<init_fn>(::dlsym(nvml, "nvmlInit_v2"));
  auto version = reinterpret_cast<version_fn>(::dlsym(nvml, "nvmlSystemGetDriverVersion"));
  auto shutdown = reinterpret_cast<init_fn>(::dlsym(nvml, "nvmlShutdown"));
  std::string out;
  if (init && version && shutdown && init() == 0) {
    char buf[96] = {};
    if (version(buf, sizeof buf) == 0) out = buf;
    shutdown();
  }
  ::dlclose(nvml);
  return out;
}

#ifdef GPUSHARE_BENCH_CUDA
inline probe_report probe_device() {
  probe_report r;
  try {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= 0) {
      const char* name = e != cudaSuccess ? cudaGetErrorName(e) : "";
      std::snprintf(
          r.reason, sizeof r.reason, "%s",
          demo::no_gpu_reason(name ? name : "cudaError", demo::find_nvidia_driver()).c_str());
      return r;
    }
    const gpushare::cuda::device_info info = gpushare::cuda::describe_device(0);
    std::snprintf(r.name, sizeof r.name, "%s", info.name.c_str());
    std::snprintf(r.uuid, sizeof r.uuid, "%s", info.uuid.c_str());
    r.memory = info.total_memory;
    r.major = info.compute_major;
    r.minor = info.compute_minor;
    (void)cudaDeviceGetAttribute(&r.multiprocessors, cudaDevAttrMultiProcessorCount, 0);
    (void)cudaDriverGetVersion(&r.cuda_driver);
    (void)cudaRuntimeGetVersion(&r.cuda_runtime);
    std::snprintf(r.driver, sizeof r.driver, "%s", nvidia_driver_version().c_str());
    std::snprintf(r.simulator, sizeof r.simulator, "%s", demo::simulated_runtime().c_str());
    r.usable = 1;
  } catch (const std::exception& e) {
    std::snprintf(r.reason, sizeof r.reason, "%s", e.what());
  }
  return r;
}
#endif

/// The device to run on: the GPU, or the simulated one (with the reason) when `simulate` is
/// asked for or no GPU is usable. On the simulated CUDA runtime (tools/cudasim) the "GPU" is
/// cudasim's, and `mode.simulator` says so.
inline device_info find_device(bool simulate) {
  device_info d;
  if (simulate) {
    d.mode.why_simulated = "--simulate";
    return d;
  }
#ifdef GPUSHARE_BENCH_CUDA
  const auto r = demo::run_in_child<probe_report>([] { return probe_device(); });
  if (!r) {
    d.mode.why_simulated = "the GPU probe process failed or hung";
    return d;
  }
  if (!r->usable) {
    d.mode.why_simulated = r->reason;
    return d;
  }
  d.mode.gpu = true;
  d.mode.simulator = r->simulator;
  d.mode.device_name = r->name;
  d.mode.uuid = r->uuid;
  d.mode.memory = r->memory;
  d.driver = r->driver;
  d.cuda_driver = r->cuda_driver;
  d.cuda_runtime = r->cuda_runtime;
  d.multiprocessors = r->multiprocessors;
  d.compute_major = r->major;
  d.compute_minor = r->minor;
#else
  d.mode.why_simulated = "built without CUDA";
#endif
  return d;
}

} // namespace bench
