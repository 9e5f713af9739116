// SPDX-License-Identifier: Apache-2.0
// The records of NVML's nvmlDeviceGetComputeRunningProcesses_v3, read whatever their size.
// nvml.h declares them nvmlProcessInfo_t: pid (unsigned int), usedGpuMemory (unsigned long
// long), gpuInstanceId and computeInstanceId (unsigned int), 24 bytes. R535-era drivers write
// 32-byte records for the same call (an extra usedGpuCcProtectedMemory): read at a 24-byte
// stride they give wrong pids and figures, and written into an array sized for 24-byte records
// they overflow it. So the reader gives NVML room for 32-byte records, fills the room with a
// marker byte first, tells the record size from where NVML stopped writing, and checks every
// record; when the bytes fit neither layout it reports nothing rather than a wrong figure.
// CUDA-free, so it is unit-tested with a fake NVML (tests/unit-nvml.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

/// One process NVML lists on a device.
struct nvml_process_record {
  unsigned pid = 0;
  std::uint64_t used = 0; ///< bytes; ~0 (NVML_VALUE_NOT_AVAILABLE) when NVML cannot tell
};

inline constexpr std::size_t nvml_record_24 = 24; ///< nvmlProcessInfo_t
inline constexpr std::size_t nvml_record_32 = 32; ///< R535-era drivers' record
inline constexpr unsigned char nvml_record_fill = 0xa5;

/// Whether `id` can be a GPU or compute instance id: 0xFFFFFFFF without MIG, else a small index.
inline bool plausible_instance_id(std::uint32_t id) noexcept { return id == ~0u || id < 1024; }

/// The `count` records NVML wrote into `bytes` (`size` bytes, all nvml_record_fill before the
/// call, at least count * 32), or nullopt when they fit neither record size. The size: 24 when
/// the bytes 24-32 of a 32-byte record's room behind the last 24-byte record are untouched,
/// else 32; either way every record's pid and instance ids must be plausible.
inline std::optional<std::vector<nvml_process_record>>
parse_nvml_process_records(const unsigned char* bytes, std::size_t size, std::size_t count) {
  if (count * nvml_record_32 > size) return std::nullopt;
  bool untouched = true;
  for (std::size_t i = count * nvml_record_24; i < count * nvml_record_32; ++i)
    untouched = untouched && bytes[i] == nvml_record_fill;
  const std::size_t stride = untouched ? nvml_record_24 : nvml_record_32;
  std::vector<nvml_process_record> out;
  for (std::size_t i = 0; i < count; ++i) {
    const unsigned char* r = bytes + i * stride;
    std::uint32_t pid = 0, gpu_instance = 0, compute_instance = 0;
    std::uint64_t used = 0;
    std::memcpy(&pid, r, 4);
    std::memcpy(&used, r + 8, 8);
    std::memcpy(&gpu_instance, r + 16, 4);
    std::memcpy(&compute_instance, r + 20, 4);
    if (pid == 0 || pid > (1u << 22) || !plausible_instance_id(gpu_instance) ||
        !plausible_instance_id(compute_instance))
      return std::nullopt; // PID_MAX_LIMIT is 2^22
    out.push_back({pid, used});
  }
  return out;
}

/// Calls `call(unsigned* count, void* infos)` (nvmlDeviceGetComputeRunningProcesses_v3 or _v2 on
/// one device, returning its nvmlReturn_t) with room for 32-byte records, growing the room while
/// NVML says it is too small (NVML_ERROR_INSUFFICIENT_SIZE, 7), and parses what it wrote.
/// nullopt when NVML fails or its records fit neither layout.
template <typename Call>
std::optional<std::vector<nvml_process_record>> read_nvml_process_records(Call&& call) {
  constexpr int insufficient_size = 7;
  std::size_t capacity = 32;
  for (int attempt = 0; attempt < 4; ++attempt) {
    std::vector<std::uint64_t> storage(capacity * nvml_record_32 / 8); // 8-byte aligned
    auto* bytes = reinterpret_cast<unsigned char*>(storage.data());
    const std::size_t size = storage.size() * 8;
    std::memset(bytes, nvml_record_fill, size);
    auto count = static_cast<unsigned>(capacity);
    const int r = call(&count, static_cast<void*>(bytes));
    if (r == insufficient_size) {
      capacity = static_cast<std::size_t>(count) + 16;
      continue;
    }
    if (r != 0 || count > capacity) return std::nullopt;
    return parse_nvml_process_records(bytes, size, count);
  }
  return std::nullopt;
}

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare
