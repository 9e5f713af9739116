// SPDX-License-Identifier: Apache-2.0
// The message of errc::no_device, in words a user can act on. CUDA reports a machine with no
// NVIDIA driver at all as cudaErrorInsufficientDriver, which read alone suggests upgrading a
// driver that is not there; so the message looks at the driver first: its kernel module's
// /proc/driver/nvidia/version. No CUDA here (the choice is a pure function, tested without a GPU).
#pragma once

#include <cctype>
#include <fstream>
#include <string>
#include <string_view>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

/// What the NVIDIA kernel driver says about itself.
struct nvidia_driver {
  bool present = false; ///< /proc/driver/nvidia/version exists
  std::string version;  ///< e.g. "580.95.05"; "" when it could not be read
};

/// The driver version in the first line of /proc/driver/nvidia/version ("NVRM version: NVIDIA
/// UNIX x86_64 Kernel Module  580.95.05  Tue ..."): the first word made of digits and at least
/// one dot. "" when there is none.
inline std::string parse_nvidia_driver_version(std::string_view line) {
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    const std::size_t start = i;
    while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    const std::string_view word = line.substr(start, i - start);
    bool digits = !word.empty(), dot = false;
    for (char c : word) {
      if (c == '.')
        dot = true;
      else if (!std::isdigit(static_cast<unsigned char>(c)))
        digits = false;
    }
    if (digits && dot && word.front() != '.' && word.back() != '.') return std::string(word);
  }
  return "";
}

inline nvidia_driver find_nvidia_driver(const char* path = "/proc/driver/nvidia/version") {
  nvidia_driver d;
  std::ifstream in(path);
  if (!in) return d;
  d.present = true;
  std::string line;
  if (std::getline(in, line)) d.version = parse_nvidia_driver_version(line);
  return d;
}

/// "12.4" for the CUDA version number 12040; "" for 0 (unknown).
inline std::string format_cuda_version(int v) {
  if (v <= 0) return "";
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

/// The message for a CUDA error that means there is no usable GPU.
///   `error_name`:  cudaGetErrorName, e.g. "cudaErrorInsufficientDriver"
///   `described`:   the name with CUDA's text, e.g. "cudaErrorNoDevice (no CUDA-capable ...)"
///   `from`:        the call that failed, e.g. "cudaGetDeviceCount"
///   `driver`:      what find_nvidia_driver() found
///   `runtime`:     cudaRuntimeGetVersion (0: unknown)
/// No device or "driver too old" with no NVIDIA driver loaded: there is no driver or GPU. Driver
/// too old with a driver loaded: says so, naming the driver's version. Otherwise CUDA's error,
/// with what to check.
inline std::string no_device_message(std::string_view error_name, std::string_view described,
                                     std::string_view from, const nvidia_driver& driver,
                                     int runtime = 0) {
  const bool no_device = error_name == "cudaErrorNoDevice";
  const bool old_driver = error_name == "cudaErrorInsufficientDriver";
  const std::string where = std::string(error_name) + ", from " + std::string(from);
  if ((no_device || old_driver) && !driver.present)
    return "no NVIDIA driver or GPU found (" + where + ")";
  if (old_driver) {
    const std::string cuda = format_cuda_version(runtime);
    return std::string("the NVIDIA driver") +
           (driver.version.empty() ? std::string() : " " + driver.version) + " is too old for " +
           (cuda.empty() ? std::string("this CUDA runtime") : "CUDA runtime " + cuda) + " (" +
           where + "); install a newer NVIDIA driver";
  }
  return "no CUDA device available: " + std::string(described) + " (from " + std::string(from) +
         "); check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES";
}

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare
