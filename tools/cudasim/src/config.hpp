// SPDX-License-Identifier: Apache-2.0
// cudasim's configuration: read once from CUDASIM_* environment variables (docs/cudasim.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cudasim {

/// One entry of CUDASIM_KERNELS or CUDASIM_KERNELS_FILE: kernels whose names match `pattern`
/// last `ns` (kernel_names.hpp says which names).
struct kernel_rule {
  std::string pattern;
  std::uint64_t ns = 0;
};

struct config {
  int gpus = 1;                               ///< CUDASIM_DEVICES
  std::uint64_t memory = 80ull << 30;         ///< CUDASIM_MEMORY, per GPU
  std::string name = "cudasim simulated GPU"; ///< CUDASIM_NAME
  int mig = 0;                                ///< CUDASIM_MIG: instances per GPU
  std::uint64_t context_bytes = 500ull << 20; ///< CUDASIM_CONTEXT_BYTES
  std::uint64_t slice_ns = 2'000'000;         ///< CUDASIM_SLICE_US
  std::uint64_t teardown_ns = 200'000'000;    ///< CUDASIM_TEARDOWN_MS
  std::uint64_t kernel_ns = 10'000;           ///< CUDASIM_KERNEL_US: unmodelled kernels
  std::vector<kernel_rule> kernels;   ///< CUDASIM_KERNELS's entries, then CUDASIM_KERNELS_FILE's
  std::uint64_t context_delay_ns = 0; ///< CUDASIM_CONTEXT_DELAY_MS
  std::uint64_t open_delay_ns = 0;    ///< CUDASIM_OPEN_DELAY_MS
  std::uint64_t fail_alloc_after_bytes = UINT64_MAX; ///< CUDASIM_FAIL_ALLOC_AFTER_BYTES
  std::uint64_t fail_alloc_after_calls = UINT64_MAX; ///< CUDASIM_FAIL_ALLOC_AFTER_CALLS
  std::uint64_t sticky_at_launch = 0;                ///< CUDASIM_STICKY_AT_LAUNCH (1-based)
  unsigned nvml_process_record = 24;                 ///< CUDASIM_NVML_PROCESS_RECORD: bytes
  std::string state;                                 ///< CUDASIM_STATE: shm object name
  std::string error; ///< why the configuration is unusable ("" when it is fine)

  int units() const { return gpus * (mig > 0 ? mig : 1); }
};

/// The process's configuration (read at first use; a bad variable is reported on stderr once
/// and every runtime call then fails with cudaErrorInitializationError).
const config& cfg();

/// Parses "512", "64MiB", "2GiB", "1.5GiB" (binary units; also K/M/G/KB/MB/GB). False if bad.
bool parse_size(const std::string& text, std::uint64_t& out);
/// Parses a kernel's duration with its unit: "40ns", "250us" (or "µs"), "1.5ms", "2s"; at most
/// 60 s. False if bad.
bool parse_kernel_duration(const std::string& text, std::uint64_t& ns);

} // namespace cudasim
