// SPDX-License-Identifier: Apache-2.0
// A GPU's or MIG instance's UUID as text, the way nvidia-smi and NVML write it, and the rule that
// picks its prefix. CUDA-free, so it is unit-tested without a GPU.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

/// "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (lower-case hex, 4-2-2-2-6 bytes) from the 16 bytes of
/// cudaDeviceProp::uuid, without a prefix.
inline std::string format_uuid_hex(const unsigned char (&bytes)[16]) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += hex[bytes[i] >> 4];
    s += hex[bytes[i] & 15];
  }
  return s;
}

/// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx": a whole GPU's UUID as nvidia-smi writes it. The
/// same physical GPU gives the same text in every process, whatever CUDA_VISIBLE_DEVICES says, so
/// it names the GPU's table.
inline std::string format_gpu_uuid(const unsigned char (&bytes)[16]) {
  return "GPU-" + format_uuid_hex(bytes);
}

/// Whether CUDA_VISIBLE_DEVICES (`visible`, comma-separated) names the device whose UUID text is
/// `hex` (format_uuid_hex) as a MIG instance: an entry "MIG-<uuid>" or "MIG-<unique prefix of
/// it>" (CUDA accepts UUID prefixes; PG, "CUDA Environment Variables"). Case-insensitive; spaces
/// around entries are ignored. The pre-R470 form "MIG-GPU-<uuid>/<gi>/<ci>" names the parent
/// GPU, not the instance, so it never matches.
inline bool visible_devices_name_mig(std::string_view visible, std::string_view hex) {
  const auto lower = [](char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  };
  while (!visible.empty()) {
    const std::size_t comma = visible.find(',');
    std::string_view entry = visible.substr(0, comma);
    visible = comma == std::string_view::npos ? std::string_view() : visible.substr(comma + 1);
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
    if (entry.size() <= 4 || entry.size() - 4 > hex.size()) continue;
    bool match = lower(entry[0]) == 'm' && lower(entry[1]) == 'i' && lower(entry[2]) == 'g' &&
                 entry[3] == '-';
    for (std::size_t i = 4; match && i < entry.size(); ++i)
      match = lower(entry[i]) == lower(hex[i - 4]);
    if (match) return true;
  }
  return false;
}

/// The prefix of a device's UUID: the form NVML knows it by ("GPU-" tried first, then "MIG-": in
/// MIG mode cudaDeviceProp::uuid is the instance's UUID, which NVML and nvidia-smi write
/// "MIG-..."), else "MIG-" when CUDA_VISIBLE_DEVICES names the device so (NVML unavailable),
/// else "GPU-".
inline const char* choose_uuid_prefix(bool nvml_knows_gpu, bool nvml_knows_mig,
                                      bool visible_names_mig) noexcept {
  if (nvml_knows_gpu) return "GPU-";
  if (nvml_knows_mig || visible_names_mig) return "MIG-";
  return "GPU-";
}

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare
