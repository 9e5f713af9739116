// SPDX-License-Identifier: Apache-2.0
// The context-overhead policy of the CUDA layer: which measurement of this process's CUDA context
// to believe (device_session::context_overhead(), overhead_method()). Pure decisions, free of
// CUDA headers, tested without a GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include <gpushare/cuda/detail/device_options.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

/// A measured context overhead above this is not believed: a CUDA context with its modules is a
/// few hundred MiB (public reports give 256-555 MiB), so a figure of several GiB means the
/// measurement caught something else (another process's allocations, in the device delta).
inline constexpr std::uint64_t max_plausible_context_overhead = 4ull << 30;

/// How the context overhead of a device session was obtained.
enum class overhead_source {
  configured,            ///< device_options::context_overhead or GPUSHARE_CONTEXT_OVERHEAD
  measured_per_process,  ///< this process's device memory (NVML's per-process figure) right after
                         ///< it created its context, which then held nothing else
  measured_device_delta, ///< device free memory (NVML) before and after this process created its
                         ///< context: this process is not in NVML's list (another PID namespace)
  estimated,             ///< could not be measured: estimated_context_overhead
  estimated_implausible, ///< a measurement was taken but was implausible (0, over
                         ///< max_plausible_context_overhead or over the device's memory):
                         ///< estimated_context_overhead
};

/// What could be measured while a device session created this process's context.
struct overhead_measurement {
  /// This process's usage of the device (NVML), read after the context was created.
  std::optional<std::uint64_t> per_process;
  /// The device's free memory before the context was created less after (NVML).
  std::optional<std::uint64_t> device_delta;
  /// The device's memory (0: unknown).
  std::uint64_t device_total = 0;
};

/// Whether a measured overhead can be believed: more than 0, at most
/// max_plausible_context_overhead, and less than the device's memory.
inline bool plausible_context_overhead(std::uint64_t bytes, std::uint64_t device_total) noexcept {
  return bytes > 0 && bytes <= max_plausible_context_overhead &&
         (device_total == 0 || bytes < device_total);
}

/// Picks the overhead and says where it came from: the configured value; else the per-process
/// figure (immune to other processes creating contexts or allocating at the same moment); else,
/// when this process is not listed, the device delta; a measurement that is implausible is
/// replaced by the estimate (estimated_implausible, so overhead_method() says so); with no
/// measurement at all, the estimate.
inline std::pair<std::uint64_t, overhead_source>
choose_context_overhead(const std::optional<std::uint64_t>& configured,
                        const overhead_measurement& m) noexcept {
  if (configured) return {*configured, overhead_source::configured};
  if (m.per_process && plausible_context_overhead(*m.per_process, m.device_total))
    return {*m.per_process, overhead_source::measured_per_process};
  if (m.device_delta && plausible_context_overhead(*m.device_delta, m.device_total))
    return {*m.device_delta, overhead_source::measured_device_delta};
  if (m.per_process || m.device_delta)
    return {estimated_context_overhead, overhead_source::estimated_implausible};
  return {estimated_context_overhead, overhead_source::estimated};
}

/// Whether `s` is a measurement (worth remembering for the process's other sessions on the
/// device, which find the context existing and cannot measure it again).
inline bool is_measured(overhead_source s) noexcept {
  return s == overhead_source::measured_per_process || s == overhead_source::measured_device_delta;
}

inline const char* to_string(overhead_source s) noexcept {
  switch (s) {
  case overhead_source::configured: return "configured";
  case overhead_source::measured_per_process: return "measured (per process)";
  case overhead_source::measured_device_delta: return "measured (device delta)";
  case overhead_source::estimated: return "estimated";
  case overhead_source::estimated_implausible: return "estimated (measurement implausible)";
  }
  return "?";
}

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare
