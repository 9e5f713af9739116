// SPDX-License-Identifier: Apache-2.0
// Options of the CUDA layer and the pure decisions behind them (capacity from device memory,
// how much guarded work may stay in flight). Deliberately free of CUDA headers: plain C++ tests
// check every rule here without a GPU.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <gpushare/error.hpp>
#include <gpushare/options.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {

/// Device memory left out of a device table's capacity by default: 2% of the device, and at
/// least 256 MiB. It covers what no session accounts for: allocator rounding (cudaMalloc hands
/// out 2 MiB pages), library workspaces allocated behind the application's back, and processes
/// that do not use gpushare.
inline constexpr std::uint64_t default_headroom_ppm = 20'000;
inline constexpr std::uint64_t min_default_headroom = 256ull << 20;
/// Used when the context overhead cannot be measured (see device_session): a typical CUDA 12/13
/// context with the runtime's modules loaded on a Hopper GPU is a few hundred MiB.
inline constexpr std::uint64_t estimated_context_overhead = 512ull << 20;
inline constexpr std::uint64_t default_allocation_timeout_ns = 60'000'000'000; // 60 s
inline constexpr std::uint64_t default_max_in_flight_ns = 2'000'000;           // 2 ms
inline constexpr std::uint64_t default_drain_timeout_ns = 2'000'000'000;       // 2 s
/// Never more unfinished guarded regions than this, whatever their measured length.
inline constexpr std::uint32_t max_in_flight_regions = 64;
inline constexpr std::uint64_t no_timeout = UINT64_MAX;

/// What a session waits for before it hands the device over (device_options::drain).
enum class drain_scope {
  stream, ///< its guarded regions (the streams it guards)
  device, ///< also all other work of this process on the device (cudaDeviceSynchronize)
};

/// Options of a device session beyond session_options. Unset fields take the GPUSHARE_*
/// variable named beside them, else the default. Precedence: code > environment > default.
struct device_options {
  /// GPUSHARE_DEVICE_HEADROOM: device memory kept out of the table's capacity when this process
  /// creates the table (bytes, "1GiB", or a percentage of the device, "5%"). Default: 2% of the
  /// device, at least 256 MiB. Ignored when session_options::capacity is set.
  std::optional<memory_amount> headroom;
  /// GPUSHARE_CONTEXT_OVERHEAD: device memory this process uses outside gpushare's allocations
  /// (its CUDA context, library workspaces), counted against its limit and the capacity, once per
  /// process and table however many device sessions the process opens on the device. Default:
  /// measured when the session opens (see device_session::overhead_method()).
  std::optional<std::uint64_t> context_overhead;
  /// GPUSHARE_ALLOC_TIMEOUT: how long a budgeted allocation waits for other sessions to free
  /// memory before failing with errc::timeout ("30s", "2min", "500ms", or "none" to wait without
  /// end). Default 60 s.
  std::optional<std::chrono::nanoseconds> allocation_timeout;
  /// GPUSHARE_MAX_IN_FLIGHT: how much guarded work (estimated device time) may still be queued
  /// on the device after its guards ended while nobody else waits ("2ms"; 1 us .. 10 s).
  /// Bounds how long a session that takes the device over may find the previous one's work in
  /// its way. Default 2 ms.
  std::optional<std::chrono::nanoseconds> max_in_flight;
  /// GPUSHARE_DRAIN_TIMEOUT: the longest a session waits for its own guarded work to finish
  /// before it hands the device over ("500ms", "2s", or "none"). Past it the device is handed
  /// over anyway and cuda_stats::drain_timeouts counts it: guarded work that waits on another
  /// process (an IPC event, a flag a peer writes) cannot deadlock with that peer waiting for the
  /// device. Default 2 s.
  std::optional<std::chrono::nanoseconds> drain_timeout;
  /// GPUSHARE_DRAIN ("stream" or "device"): what a session waits for before it hands the device
  /// over. `stream` (the default): its guarded regions. `device`: after them, also every other
  /// piece of work this process has on the device (cudaDeviceSynchronize), for applications that
  /// cannot guard every stream (a library's internal streams, NCCL's). That wait is not bounded
  /// by the drain timeout, and it is skipped (cuda_stats::device_drains_skipped) while a blocking
  /// stream of the process is being captured; do not use `device` while the application captures
  /// on a non-blocking stream, which that check cannot see.
  std::optional<drain_scope> drain;
};

struct resolved_device_options {
  memory_amount headroom = memory_amount::of_ppm(default_headroom_ppm);
  bool headroom_is_default = true;
  std::optional<std::uint64_t> context_overhead;
  std::uint64_t allocation_timeout_ns = default_allocation_timeout_ns;
  std::uint64_t max_in_flight_ns = default_max_in_flight_ns;
  std::uint64_t drain_timeout_ns = default_drain_timeout_ns;
  drain_scope drain = drain_scope::stream;
};

namespace detail {

inline constexpr std::string_view timeout_forms =
    "a duration with a unit: ms, s, min or h, at most 24h (\"500ms\", \"30s\", \"2min\"), or "
    "\"none\" to wait without end";

/// "500ms", "30s", "2min", "1.5h" (at most 24 h) or "none"/"infinite" (no_timeout).
inline std::uint64_t parse_timeout_ns(std::string_view s) {
  using gpushare::detail::iequals;
  static constexpr gpushare::detail::value_kind kind{"timeout", timeout_forms};
  if (iequals(s, "none") || iequals(s, "infinite")) return no_timeout;
  const auto d = gpushare::detail::parse_decimal(kind, s, s);
  const std::string_view unit = s.substr(d.length);
  std::uint64_t per = 0;
  if (iequals(unit, "ms"))
    per = 1'000'000;
  else if (iequals(unit, "s"))
    per = 1'000'000'000;
  else if (iequals(unit, "min"))
    per = 60'000'000'000;
  else if (iequals(unit, "h"))
    per = 3'600'000'000'000;
  else
    gpushare::detail::reject(kind, s, unit.empty() ? "a unit is required" : "unknown unit");
  constexpr std::uint64_t day_ns = 86'400'000'000'000;
  if (d.whole > day_ns / per) gpushare::detail::reject(kind, s, "longer than 24h");
  const std::uint64_t ns = d.whole * per + static_cast<std::uint64_t>(d.micros) * (per / 1'000'000);
  if (ns > day_ns) gpushare::detail::reject(kind, s, "longer than 24h");
  return ns;
}

/// A byte count: "1073741824", "512MiB", "1.5GB" (percentages are not accepted: the overhead is
/// a fact about this process, not a fraction of anything).
inline std::uint64_t parse_byte_count(std::string_view s) {
  const memory_amount m = gpushare::detail::parse_memory_amount(s);
  if (m.kind != memory_amount::unit::bytes)
    gpushare::detail::reject(
        {"byte count", "a number of bytes, with or without a unit (\"512MiB\")"}, s,
        "a percentage is not accepted here");
  return m.value;
}

inline constexpr std::string_view drain_forms = "\"stream\" or \"device\"";

/// "stream" or "device" (any case).
inline drain_scope parse_drain_scope(std::string_view s) {
  using gpushare::detail::iequals;
  if (iequals(s, "stream")) return drain_scope::stream;
  if (iequals(s, "device")) return drain_scope::device;
  gpushare::detail::reject({"drain scope", drain_forms}, s, "unknown scope");
}

inline void check_in_code(const char* field, bool ok, const std::string& why) {
  if (!ok) throw error(errc::invalid_argument, std::string("device_options::") + field + " " + why);
}

} // namespace detail

/// Fills in every device option: code, then environment, then default. Malformed variables throw
/// errc::invalid_environment naming the variable; bad values set in code, errc::invalid_argument.
inline resolved_device_options resolve_device_options(const device_options& o,
                                                      const env_lookup& env = process_environment) {
  using gpushare::detail::pick_option;
  resolved_device_options r;
  const auto headroom = pick_option(
      o.headroom, env, "GPUSHARE_DEVICE_HEADROOM", gpushare::detail::memory_amount_forms,
      gpushare::detail::parse_memory_amount, [](const memory_amount& m) {
        detail::check_in_code("headroom",
                              m.kind == memory_amount::unit::bytes || m.value <= 1'000'000,
                              "is a fraction over 100%");
      });
  if (headroom) {
    r.headroom = *headroom;
    r.headroom_is_default = false;
  }
  r.context_overhead = pick_option(o.context_overhead, env, "GPUSHARE_CONTEXT_OVERHEAD",
                                   "a number of bytes, with or without a unit (\"512MiB\")",
                                   detail::parse_byte_count, [](std::uint64_t b) {
                                     detail::check_in_code("context_overhead",
                                                           b <= gpushare::detail::max_memory_bytes,
                                                           "is over 2^63 bytes");
                                   });
  const auto to_ns = [](const std::optional<std::chrono::nanoseconds>& d) {
    if (!d) return std::optional<std::uint64_t>();
    if (*d == std::chrono::nanoseconds::max()) return std::optional<std::uint64_t>(no_timeout);
    return std::optional<std::uint64_t>(
        static_cast<std::uint64_t>(std::max<std::int64_t>(d->count(), 0)));
  };
  if (o.allocation_timeout && o.allocation_timeout->count() < 0)
    throw error(errc::invalid_argument,
                "device_options::allocation_timeout is negative; give 0 to fail at once or "
                "std::chrono::nanoseconds::max() to wait without end");
  const auto timeout =
      pick_option(to_ns(o.allocation_timeout), env, "GPUSHARE_ALLOC_TIMEOUT", detail::timeout_forms,
                  detail::parse_timeout_ns, [](std::uint64_t) {});
  if (timeout) r.allocation_timeout_ns = *timeout;
  const auto in_flight = pick_option(
      to_ns(o.max_in_flight), env, "GPUSHARE_MAX_IN_FLIGHT", gpushare::detail::duration_forms,
      gpushare::detail::parse_duration_ns, [](std::uint64_t ns) {
        detail::check_in_code("max_in_flight",
                              ns >= gpushare::detail::min_quantum_ns &&
                                  ns <= gpushare::detail::max_quantum_ns,
                              "must be from 1us to 10s");
      });
  if (in_flight) r.max_in_flight_ns = *in_flight;
  if (o.drain_timeout && o.drain_timeout->count() < 0)
    throw error(errc::invalid_argument,
                "device_options::drain_timeout is negative; give 0 to hand over at once or "
                "std::chrono::nanoseconds::max() to wait without end");
  const auto drain =
      pick_option(to_ns(o.drain_timeout), env, "GPUSHARE_DRAIN_TIMEOUT", detail::timeout_forms,
                  detail::parse_timeout_ns, [](std::uint64_t) {});
  if (drain) r.drain_timeout_ns = *drain;
  const auto scope = pick_option(
      o.drain, env, "GPUSHARE_DRAIN", detail::drain_forms, detail::parse_drain_scope,
      [](drain_scope d) {
        detail::check_in_code("drain", d == drain_scope::stream || d == drain_scope::device,
                              "is not a drain_scope");
      });
  if (scope) r.drain = *scope;
  return r;
}

/// The capacity a new device table gets: the device's memory less the headroom. A headroom that
/// leaves nothing is an error (errc::invalid_argument or, from the environment, the caller's).
inline std::uint64_t capacity_for_device(std::uint64_t device_total,
                                         const resolved_device_options& o) {
  std::uint64_t headroom = o.headroom.resolve(device_total);
  if (o.headroom_is_default) headroom = std::max(headroom, min_default_headroom);
  if (headroom >= device_total)
    throw error(errc::invalid_argument,
                "the device headroom (" + gpushare::detail::format_bytes(headroom) +
                    ") leaves no memory of the device's " +
                    gpushare::detail::format_bytes(device_total) +
                    " for sessions; lower GPUSHARE_DEVICE_HEADROOM / device_options::headroom");
  return device_total - headroom;
}

namespace detail {

/// How many guarded regions may still be unfinished on the device when a guard ends and nobody
/// else waits: as many as fit in `max_in_flight_ns` at the recent average region length, at most
/// max_in_flight_regions. A region longer than the bound fits 0 times: the guard's exit then
/// waits for it, so queued work never exceeds the bound (as estimated by the average). With no
/// measurement yet: 0 (the first region is waited for, which measures it).
inline std::uint32_t in_flight_allowance(std::uint64_t avg_region_ns,
                                         std::uint64_t max_in_flight_ns) noexcept {
  if (avg_region_ns == 0) return 0;
  const std::uint64_t n = max_in_flight_ns / avg_region_ns;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(n, max_in_flight_regions));
}
/// Exponentially weighted average of region lengths (weight 1/8 for the newest sample).
inline std::uint64_t update_average(std::uint64_t avg, std::uint64_t sample) noexcept {
  if (avg == 0) return sample;
  return avg - avg / 8 + sample / 8;
}

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
