// SPDX-License-Identifier: Apache-2.0
// The CUDA layer's reader of NVML's process records (cuda/detail/nvml_records.hpp), against a
// fake nvmlDeviceGetComputeRunningProcesses_v3 that writes 24-byte nvmlProcessInfo_t records,
// the 32-byte records of R535-era drivers, or bytes of no known layout. CUDA-free: g++ alone.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include <gpushare/cuda/detail/nvml_records.hpp>

namespace gd = gpushare::cuda::detail;

namespace {

/// A fake NVML device with `processes` processes (pid 1000 + i, 4 MiB * (i + 1) each, MIG
/// instance ids `instance`), writing records of `record` bytes: 24, 32, or 16 (pid and bytes
/// only: the layout of the v1 call, which the reader does not know). Counts its calls.
struct fake_nvml {
  std::size_t processes = 0;
  std::size_t record = 24;
  std::uint32_t instance = ~0u;
  int calls = 0;

  int operator()(unsigned* count, void* infos) {
    ++calls;
    if (*count < processes) {
      *count = static_cast<unsigned>(processes);
      return 7; // NVML_ERROR_INSUFFICIENT_SIZE
    }
    auto* out = static_cast<unsigned char*>(infos);
    for (std::size_t i = 0; i < processes; ++i) {
      unsigned char r[32] = {};
      const std::uint32_t pid = static_cast<std::uint32_t>(1000 + i);
      const std::uint64_t used = (i + 1) << 22;
      std::memcpy(r, &pid, 4);
      std::memcpy(r + 8, &used, 8);
      if (record >= 24) {
        std::memcpy(r + 16, &instance, 4);
        std::memcpy(r + 20, &instance, 4);
      }
      std::memcpy(out + i * record, r, record); // (32: usedGpuCcProtectedMemory 0)
    }
    *count = static_cast<unsigned>(processes);
    return 0;
  }
};

void check_records(const std::optional<std::vector<gd::nvml_process_record>>& got,
                   std::size_t processes) {
  REQUIRE(got.has_value());
  REQUIRE(got->size() == processes);
  for (std::size_t i = 0; i < processes; ++i) {
    CHECK((*got)[i].pid == 1000 + i);
    CHECK((*got)[i].used == (i + 1) << 22);
  }
}

} // namespace

TEST_CASE("NVML's 24-byte nvmlProcessInfo_t records are read as nvml.h declares them") {
  for (const std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{5}}) {
    CAPTURE(n);
    fake_nvml nvml{n, 24};
    check_records(gd::read_nvml_process_records(nvml), n);
    nvml.instance = 3; // MIG: a GPU instance id
    check_records(gd::read_nvml_process_records(nvml), n);
  }
}

TEST_CASE("32-byte records (R535-era drivers) are read at their own stride") {
  for (const std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{5}}) {
    CAPTURE(n);
    fake_nvml nvml{n, 32};
    check_records(gd::read_nvml_process_records(nvml), n);
    nvml.instance = 0;
    check_records(gd::read_nvml_process_records(nvml), n);
  }
}

TEST_CASE("many 32-byte records fit the room the reader gives after NVML asks for more") {
  // 60 records of 32 bytes (1920) would overflow room for 60 + 16 nvmlProcessInfo_t (1824):
  // the reader gives 32 bytes a record (the sanitizer build would catch an overflow).
  fake_nvml nvml{60, 32};
  check_records(gd::read_nvml_process_records(nvml), 60);
  CHECK(nvml.calls == 2); // the first call said how many
}

TEST_CASE("records of no known layout give no figure rather than a wrong one") {
  fake_nvml v1{3, 16}; // pid and bytes only: the instance ids would be the marker bytes
  CHECK_FALSE(gd::read_nvml_process_records(v1).has_value());
  fake_nvml bad_ids{2, 24, 0x12345678u};
  CHECK_FALSE(gd::read_nvml_process_records(bad_ids).has_value());
  auto zero_pid = [](unsigned* count, void* infos) {
    std::memset(infos, 0, 24);
    *count = 1;
    return 0;
  };
  CHECK_FALSE(gd::read_nvml_process_records(zero_pid).has_value());
}

TEST_CASE("no process, an NVML error, or a list that keeps growing") {
  fake_nvml none{0, 24};
  const auto empty = gd::read_nvml_process_records(none);
  REQUIRE(empty.has_value());
  CHECK(empty->empty());
  CHECK_FALSE(gd::read_nvml_process_records([](unsigned*, void*) { return 999; }).has_value());
  unsigned asked = 0;
  auto growing = [&asked](unsigned* count, void*) {
    *count = (asked += 100); // never enough room
    return 7;
  };
  CHECK_FALSE(gd::read_nvml_process_records(growing).has_value());
  auto overcounting = [](unsigned* count, void*) {
    *count += 1; // claims more records than the room it was given
    return 0;
  };
  CHECK_FALSE(gd::read_nvml_process_records(overcounting).has_value());
}
