// SPDX-License-Identifier: Apache-2.0
// Options of the CUDA layer: device_options, resolve_device_options() and the capacity a device
// table gets. The pure rules behind them are in cuda/detail/device_options.hpp and
// cuda/detail/overhead.hpp (included here: the defaults and drain_scope are part of this API).
// Deliberately free of CUDA headers: plain C++ tests check every rule without a GPU.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <gpushare/cuda/detail/device_options.hpp>
#include <gpushare/cuda/detail/overhead.hpp>
#include <gpushare/error.hpp>
#include <gpushare/options.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {

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
  /// GPUSHARE_MAX_IN_FLIGHT_LOWER: the same bound while a session of a higher priority class
  /// than this one asked for the device within the last 100 ms ("250us"; 1 us .. 10 s; the
  /// smaller of the two applies, and the newest region always stays queued). The higher class's
  /// next request waits behind what is queued here, so this is its latency floor on top of the
  /// longest kernel. Default 0.25 ms.
  std::optional<std::chrono::nanoseconds> max_in_flight_lower;
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
  /// GPUSHARE_GUARD_TIMING ("batched" or "each"): how guards are timed on the device. `batched`
  /// (the default): while the session is uncontended (nobody else waits, no other priority class
  /// asked for the device in the last 100 ms), consecutive guards on one stream are timed as one
  /// region, which costs a guard one event record and no other CUDA call; the time between them
  /// counts (a batch closes at a host gap over 20 us, and at about a quarter of the in-flight
  /// bound of work). `each`: every guard is timed on its own (two event records, a query and two
  /// elapsed-time reads per guard), for exact per-guard figures.
  std::optional<guard_timing> timing;
};

/// The device options with every field filled in (resolve_device_options()): code, then
/// environment, then defaults. Each field is the device_options field of the same name.
struct resolved_device_options {
  /// device_options::headroom
  memory_amount headroom = memory_amount::of_ppm(default_headroom_ppm);
  bool headroom_is_default = true; ///< neither code nor environment set it (then at least 256 MiB)
  std::optional<std::uint64_t> context_overhead; ///< nullopt: measured when the session opens
  std::uint64_t allocation_timeout_ns = default_allocation_timeout_ns;   ///< in ns
  std::uint64_t max_in_flight_ns = default_max_in_flight_ns;             ///< in ns
  std::uint64_t max_in_flight_lower_ns = default_max_in_flight_lower_ns; ///< in ns
  std::uint64_t drain_timeout_ns = default_drain_timeout_ns;             ///< in ns
  drain_scope drain = drain_scope::stream;                               ///< device_options::drain
  guard_timing timing = guard_timing::batched;                           ///< device_options::timing
};

namespace detail {
/// An in-flight bound: device_options::`field` in code, else environment variable `var`.
inline std::optional<std::uint64_t> pick_in_flight(const std::optional<std::chrono::nanoseconds>& v,
                                                   const env_lookup& env, const char* var,
                                                   const char* field) {
  return gpushare::detail::pick_option(
      to_ns(v), env, var, gpushare::detail::duration_forms(max_in_flight_option),
      parse_max_in_flight_ns, [&](std::uint64_t ns) {
        gpushare::detail::check_duration(max_in_flight_option, ns,
                                         std::string("device_options::") + field);
      });
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
  const auto timeout = pick_option(
      detail::timeout_in_code("allocation_timeout", o.allocation_timeout, "fail at once"), env,
      "GPUSHARE_ALLOC_TIMEOUT", gpushare::detail::duration_forms(detail::allocation_timeout_option),
      detail::parse_timeout_ns, [](std::uint64_t) {});
  if (timeout) r.allocation_timeout_ns = *timeout;
  if (const auto b =
          detail::pick_in_flight(o.max_in_flight, env, "GPUSHARE_MAX_IN_FLIGHT", "max_in_flight"))
    r.max_in_flight_ns = *b;
  if (const auto b = detail::pick_in_flight(o.max_in_flight_lower, env,
                                            "GPUSHARE_MAX_IN_FLIGHT_LOWER", "max_in_flight_lower"))
    r.max_in_flight_lower_ns = *b;
  const auto drain = pick_option(
      detail::timeout_in_code("drain_timeout", o.drain_timeout, "hand over at once"), env,
      "GPUSHARE_DRAIN_TIMEOUT", gpushare::detail::duration_forms(detail::drain_timeout_option),
      detail::parse_timeout_ns, [](std::uint64_t) {});
  if (drain) r.drain_timeout_ns = *drain;
  const auto scope = pick_option(
      o.drain, env, "GPUSHARE_DRAIN", detail::drain_forms, detail::parse_drain_scope,
      [](drain_scope d) {
        detail::check_in_code("drain", d == drain_scope::stream || d == drain_scope::device,
                              "is not a drain_scope");
      });
  if (scope) r.drain = *scope;
  const auto timing = pick_option(
      o.timing, env, "GPUSHARE_GUARD_TIMING", detail::guard_timing_forms,
      detail::parse_guard_timing, [](guard_timing t) {
        detail::check_in_code("timing", t == guard_timing::batched || t == guard_timing::each,
                              "is not a guard_timing");
      });
  if (timing) r.timing = *timing;
  return r;
}

/// The text forms of the CUDA layer's settings, as GPUSHARE_* variables take them (for programs
/// and bindings that read the same settings from elsewhere: they agree to the byte).
/// GPUSHARE_ALLOC_TIMEOUT and GPUSHARE_DRAIN_TIMEOUT: "500ms", "30s", "2min" (at most 24 h) or
/// "none" (no_timeout).
inline std::uint64_t parse_timeout(std::string_view s) { return detail::parse_timeout_ns(s); }
/// The range and forms of those timeouts, for gpushare::parse_duration.
inline constexpr duration_option timeout_setting = detail::allocation_timeout_option;
/// The range and forms of GPUSHARE_MAX_IN_FLIGHT and GPUSHARE_MAX_IN_FLIGHT_LOWER (1 us .. 10 s).
inline constexpr duration_option in_flight_setting = detail::max_in_flight_option;
/// GPUSHARE_DRAIN: "stream" or "device" (any case).
inline drain_scope parse_drain(std::string_view s) { return detail::parse_drain_scope(s); }
/// GPUSHARE_GUARD_TIMING: "batched" or "each" (any case).
inline guard_timing parse_guard_timing(std::string_view s) { return detail::parse_guard_timing(s); }

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

} // namespace cuda
} // namespace v0
} // namespace gpushare
