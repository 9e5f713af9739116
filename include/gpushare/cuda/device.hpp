// SPDX-License-Identifier: Apache-2.0
// Which GPUs this process sees, and the name of each one's table.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include <gpushare/cuda/detail/probe.hpp>
#include <gpushare/cuda/detail/uuid.hpp>
#include <gpushare/cuda/error.hpp>

#include <gpushare/cuda/detail/runtime_names_begin.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {

/// What the CUDA runtime says about one device.
struct device_info {
  int ordinal = 0; ///< as this process sees it (after CUDA_VISIBLE_DEVICES)
  /// "GPU-8f1e..." ("MIG-..." for a MIG instance), as nvidia-smi and NVML write it: the same in
  /// every process; the table's key
  std::string uuid;
  std::string name;               ///< e.g. "NVIDIA H100 80GB HBM3"
  std::string pci_bus_id;         ///< e.g. "0000:17:00.0"
  std::uint64_t total_memory = 0; ///< bytes of device memory
  /// Compute capability, major and minor (9 and 0 on an H100).
  ///@{
  int compute_major = 0, compute_minor = 0;
  ///@}
};

/// Number of CUDA devices this process sees. Throws errc::no_device when there is none, no
/// driver, or the driver is too old ("no NVIDIA driver or GPU found (<CUDA's error>, from
/// cudaGetDeviceCount)" on a machine without the NVIDIA driver; see detail::no_device_error());
/// never crashes.
inline int device_count() {
  int n = 0;
  const cudaError_t e = detail::own_call([&] { return cudaGetDeviceCount(&n); });
  if (e != cudaSuccess) {
    throw detail::no_device_error(e, "cudaGetDeviceCount");
  }
  if (n <= 0)
    throw error(errc::no_device, "no CUDA device available: the runtime reports 0 devices; check "
                                 "CUDA_VISIBLE_DEVICES");
  return n;
}

namespace detail {

/// The device's UUID text with the prefix NVML knows it by: "GPU-..." for a GPU, "MIG-..." for a
/// MIG instance (cudaDeviceProp::uuid is the instance's UUID then). NVML is asked for both forms;
/// without NVML, CUDA_VISIBLE_DEVICES decides (an entry "MIG-<this UUID or a prefix of it>"),
/// else "GPU-" (see choose_uuid_prefix()).
inline std::string device_uuid_text(const unsigned char (&bytes)[16]) {
  const std::string hex = format_uuid_hex(bytes);
  const nvml_library& nvml = process_nvml();
  const bool gpu = nvml.knows("GPU-" + hex);
  const bool mig = !gpu && nvml.knows("MIG-" + hex);
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return choose_uuid_prefix(gpu, mig, visible && visible_devices_name_mig(visible, hex)) + hex;
}

} // namespace detail

/// Describes device `ordinal` (errc::invalid_argument when out of range). Creates no context.
inline device_info describe_device(int ordinal) {
  const int n = device_count();
  if (ordinal < 0 || ordinal >= n)
    throw error(errc::invalid_argument,
                "CUDA device " + std::to_string(ordinal) + " does not exist: this process sees " +
                    std::to_string(n) + " device(s), 0.." + std::to_string(n - 1));
  cudaDeviceProp p{};
  detail::check(detail::own_call([&] { return cudaGetDeviceProperties(&p, ordinal); }),
                "cudaGetDeviceProperties");
  device_info d;
  d.ordinal = ordinal;
  unsigned char uuid[16];
  for (int i = 0; i < 16; ++i) uuid[i] = static_cast<unsigned char>(p.uuid.bytes[i]);
  d.uuid = detail::device_uuid_text(uuid);
  d.name = p.name;
  char bus[32] = {};
  if (detail::own_call([&] { return cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal); }) ==
      cudaSuccess)
    d.pci_bus_id = bus;
  d.total_memory = p.totalGlobalMem;
  d.compute_major = p.major;
  d.compute_minor = p.minor;
  return d;
}

/// The calling thread's current device (cudaGetDevice), checked.
inline int current_device() {
  int d = 0;
  detail::check(detail::own_call([&] { return cudaGetDevice(&d); }), "cudaGetDevice");
  return d;
}

} // namespace cuda
} // namespace v0
} // namespace gpushare

#include <gpushare/cuda/detail/runtime_names_end.hpp>
