// SPDX-License-Identifier: Apache-2.0
// Why no GPU is usable, in words a user can act on, with CUDA's error name in parentheses. CUDA
// reports a machine with no NVIDIA driver at all as cudaErrorInsufficientDriver, which read
// alone suggests upgrading a driver that is not there; so the driver's presence is looked at
// first. No CUDA here: the demos' parent and the tests use it too.
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <string>
#include <string_view>

namespace demo {

/// What is installed: the NVIDIA kernel driver (/proc/driver/nvidia/version) and its CUDA
/// library (libcuda.so.1, loadable).
struct driver_presence {
  bool kernel_module = false;
  bool libcuda = false;
};

inline driver_presence find_nvidia_driver() {
  driver_presence d;
  d.kernel_module = ::access("/proc/driver/nvidia/version", F_OK) == 0;
  if (void* h = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
    d.libcuda = true;
    ::dlclose(h);
  }
  return d;
}

/// The reason for the mode line. `error_name`: CUDA's name for the failure of
/// cudaGetDeviceCount ("" when it succeeded but found 0 devices).
inline std::string no_gpu_reason(std::string_view error_name, const driver_presence& d) {
  const std::string name = error_name.empty() ? "0 devices" : std::string(error_name);
  if (!d.kernel_module && !d.libcuda) return "no NVIDIA driver or GPU found (" + name + ")";
  if (error_name == "cudaErrorInsufficientDriver") {
    if (!d.libcuda)
      return "the NVIDIA driver's CUDA library libcuda.so.1 was not found (" + name + ")";
    return "the NVIDIA driver is too old for this CUDA runtime (" + name + ")";
  }
  if (error_name.empty() || error_name == "cudaErrorNoDevice")
    return "no NVIDIA GPU visible to this process (" + name + "; see CUDA_VISIBLE_DEVICES)";
  return "no usable NVIDIA GPU (" + name + ")";
}

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

} // namespace demo
