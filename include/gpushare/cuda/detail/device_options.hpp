// SPDX-License-Identifier: Apache-2.0
// The values and rules behind the CUDA layer's options that its internals need: the defaults and
// bounds, drain_scope, the parsers of the GPUSHARE_* variables that only the CUDA layer reads,
// how much guarded work may stay in flight, and state_options (what device_state uses of the
// resolved options). Deliberately free of CUDA headers: plain C++ tests check every rule here
// without a GPU. The public header is <gpushare/cuda/options.hpp>, which includes this one; the
// constants and drain_scope below are part of its API.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <gpushare/detail/parse.hpp>
#include <gpushare/error.hpp>

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
inline constexpr std::uint64_t default_max_in_flight_lower_ns = 250'000;       // 0.25 ms
inline constexpr std::uint64_t default_drain_timeout_ns = 2'000'000'000;       // 2 s
/// Never more unfinished guarded regions than this, whatever their measured length.
inline constexpr std::uint32_t max_in_flight_regions = 64;
inline constexpr std::uint64_t no_timeout = UINT64_MAX;

/// How a session times its guards on the device (device_options::guard_timing).
enum class guard_timing {
  /// While the session is uncontended (its guards run on its lease, nobody else waits, no other
  /// priority class asked lately), consecutive guards on one stream share one region: a start
  /// event at the first, a stop event each guard re-records, closed at about a quarter of the
  /// in-flight bound of work or at a host gap over 20 us. The rest of the time, as `each`.
  batched,
  each, ///< every guard its own region: a start and a stop event, timed and settled each
};

/// What a session waits for before it hands the device over (device_options::drain).
enum class drain_scope {
  stream, ///< its guarded regions (the streams it guards)
  device, ///< also all other work of this process on the device (cudaDeviceSynchronize)
};

namespace detail {

/// What device_state uses of resolved_device_options (<gpushare/cuda/options.hpp>).
struct state_options {
  std::uint64_t allocation_timeout_ns = default_allocation_timeout_ns;
  std::uint64_t max_in_flight_ns = default_max_in_flight_ns;
  std::uint64_t max_in_flight_lower_ns = default_max_in_flight_lower_ns;
  std::uint64_t drain_timeout_ns = default_drain_timeout_ns;
  drain_scope drain = drain_scope::stream;
  guard_timing timing = guard_timing::batched;
};

/// The duration options of a device session (device_options, GPUSHARE_*): the one grammar of
/// <gpushare/detail/parse.hpp>, each with its range.
inline constexpr duration_option allocation_timeout_option{"timeout",
                                                           0,
                                                           86'400'000'000'000,
                                                           true,
                                                           no_timeout,
                                                           "wait without end",
                                                           0,
                                                           "\"500ms\", \"30s\", \"2min\""};
inline constexpr duration_option drain_timeout_option = allocation_timeout_option;
inline constexpr duration_option max_in_flight_option{
    "in-flight bound", 1'000, 10'000'000'000, false, 0, {}, 0, "\"500us\", \"2ms\""};

/// GPUSHARE_ALLOC_TIMEOUT, GPUSHARE_DRAIN_TIMEOUT: "500ms", "30s", "2min", "1.5h" (at most 24 h)
/// or "none" (no_timeout).
inline std::uint64_t parse_timeout_ns(std::string_view s) {
  return gpushare::detail::parse_duration(s, allocation_timeout_option);
}

/// GPUSHARE_MAX_IN_FLIGHT and GPUSHARE_MAX_IN_FLIGHT_LOWER: "500us", "2ms", from 1us to 10s.
inline std::uint64_t parse_max_in_flight_ns(std::string_view s) {
  return gpushare::detail::parse_duration(s, max_in_flight_option);
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

inline constexpr std::string_view guard_timing_forms = "\"batched\" or \"each\"";

/// "batched" or "each" (any case).
inline guard_timing parse_guard_timing(std::string_view s) {
  using gpushare::detail::iequals;
  if (iequals(s, "batched")) return guard_timing::batched;
  if (iequals(s, "each")) return guard_timing::each;
  gpushare::detail::reject({"guard timing", guard_timing_forms}, s, "unknown timing");
}

inline void check_in_code(const char* field, bool ok, const std::string& why) {
  if (!ok) throw error(errc::invalid_argument, std::string("device_options::") + field + " " + why);
}

/// A duration set in code, in ns: std::chrono::nanoseconds::max() is no_timeout, a negative one 0.
inline std::optional<std::uint64_t> to_ns(const std::optional<std::chrono::nanoseconds>& d) {
  if (!d) return std::nullopt;
  if (*d == std::chrono::nanoseconds::max()) return no_timeout;
  return static_cast<std::uint64_t>(std::max<std::int64_t>(d->count(), 0));
}

/// A timeout set in code (device_options::`field`), in ns; a negative one is refused, naming what
/// 0 means (`zero_means`).
inline std::optional<std::uint64_t>
timeout_in_code(const char* field, const std::optional<std::chrono::nanoseconds>& d,
                const char* zero_means) {
  if (d && d->count() < 0)
    throw error(errc::invalid_argument,
                std::string("device_options::") + field + " is negative; give 0 to " + zero_means +
                    " or std::chrono::nanoseconds::max() to wait without end");
  return to_ns(d);
}

/// How many guards' work may still be unfinished when a guard ends: as many as fit in
/// `max_in_flight_ns` at the recent average device time per guard (a batch of regions counts
/// each of its guards); 0 with no measurement yet.
inline std::uint64_t in_flight_guards_allowed(std::uint64_t avg_guard_ns,
                                              std::uint64_t max_in_flight_ns) noexcept {
  return avg_guard_ns == 0 ? 0 : max_in_flight_ns / avg_guard_ns;
}

/// A batch of guards (guard_timing::batched) closes once it holds about a quarter of the
/// in-flight bound of work, so that with the regions queued before it the session keeps about
/// the bound queued, or once this much host time passed since it opened.
inline std::uint64_t batch_span_ns(std::uint64_t max_in_flight_ns) noexcept {
  return std::max<std::uint64_t>(max_in_flight_ns / 4, 1);
}
/// The most guards one batch holds: its span at the average device time per guard, at most
/// max_batch_guards; 0 (no batching) with no measurement yet or when a guard alone fills the span.
inline constexpr std::uint32_t max_batch_guards = 4096;
inline std::uint32_t batch_guard_limit(std::uint64_t avg_guard_ns,
                                       std::uint64_t max_in_flight_ns) noexcept {
  if (avg_guard_ns == 0) return 0;
  const std::uint64_t n = batch_span_ns(max_in_flight_ns) / avg_guard_ns;
  return n < 2 ? 0 : static_cast<std::uint32_t>(std::min<std::uint64_t>(n, max_batch_guards));
}
/// A batch closes at a guard's entry when the session's last guard left it longer ago than this:
/// the GPU may have been idle meanwhile, and a batch counts the time between its guards.
inline constexpr std::uint64_t max_batch_gap_ns = 20'000;

/// The CUDA stream priority for gpushare priority class `cls`, given the device's range (CUDA's
/// numbers: `least` is the default, 0 on current GPUs, and `greatest` the most urgent, -5 there;
/// a lower number is more urgent). Classes up to priority::normal get the default; each class
/// above it one step more, down to `greatest`: low and normal streams compete as equals with the
/// process's other streams, a high (2) stream's blocks are scheduled before theirs, class 3
/// before class 2, and so on.
inline int stream_priority_for(int cls, int least, int greatest) noexcept {
  if (greatest > least) std::swap(least, greatest); // a runtime that numbers the other way
  const int above = std::clamp(cls, 0, 7) - 1;      // priority::normal is 1
  if (above <= 0) return least;
  return std::max(greatest, least - above);
}

/// Exponentially weighted average of region lengths (weight 1/8 for the newest sample).
inline std::uint64_t update_average(std::uint64_t avg, std::uint64_t sample) noexcept {
  if (avg == 0) return sample;
  return avg - avg / 8 + sample / 8;
}

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare
