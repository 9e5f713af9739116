// SPDX-License-Identifier: Apache-2.0
// The accounting timeline of one device session: the device time already accounted, so that
// regions of the session that overlap on the device (guards on several streams) are accounted
// once, as their union. A finished region is placed on the timeline by its start event's time
// since a reference event (the start of an earlier region); only the part of it no region
// accounted before covers counts. Part of device_state (state.hpp, which states the lock order).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include <gpushare/cuda/detail/event_pool.hpp>
#include <gpushare/cuda/detail/intervals.hpp>
#include <gpushare/detail/budget.hpp>

#include <gpushare/cuda/detail/runtime_names_begin.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

/// A guarded region recorded on a stream: its start and stop events (timing ones), its mark, and
/// how many guards it times (more than one for a batch: guard_timing::batched).
struct region {
  cudaEvent_t start, stop;
  std::int64_t mark;        // from accounting_timeline::open
  std::uint32_t guards = 1; // the guards it times
};

class accounting_timeline {
public:
  explicit accounting_timeline(event_pool& events) noexcept : events_(events) {}
  accounting_timeline(const accounting_timeline&) = delete;
  accounting_timeline& operator=(const accounting_timeline&) = delete;

  /// A region is opened (its start event recorded): returns its mark, a point of the timeline its
  /// work cannot start before. Accounted time after the oldest mark is kept.
  std::int64_t open() {
    std::lock_guard lock(m_);
    if (!marks_.empty() && marks_.back().first == watermark_)
      ++marks_.back().second;
    else
      marks_.emplace_back(watermark_, 1);
    return watermark_;
  }

  /// A region opened but never handed over (its stop event could not be recorded).
  void abandon(std::int64_t mark) noexcept {
    std::lock_guard lock(m_);
    forget_mark(mark);
  }

  /// Regions that will never be accounted (CUDA cannot say whether they finished).
  void forget(const std::vector<region>& rs) noexcept {
    std::lock_guard lock(m_);
    for (const region& r : rs) forget_mark(r.mark);
    tidy();
  }

  /// Device time of finished regions not accounted yet: for each region, in order, its elapsed
  /// time, then the part of it the timeline does not cover yet; `measured(ns)` is called with
  /// each region's elapsed time per guard (with this timeline's mutex held: see state.hpp for the
  /// lock order). Regions on one stream never overlap; guards of the session on several streams do,
  /// and then the session held the device once, not twice. Returns the events to the pool.
  template <class F> std::uint64_t settle(const std::vector<region>& rs, F&& measured) {
    if (rs.empty()) return 0;
    std::uint64_t sum = 0;
    std::lock_guard lock(m_);
    for (const region& r : rs) {
      float ms = 0;
      std::uint64_t ns = 0;
      if (cudaEventElapsedTime(&ms, r.start, r.stop) == cudaSuccess && ms > 0)
        ns = static_cast<std::uint64_t>(static_cast<double>(ms) * 1e6);
      sum = gpushare::detail::sat_add(sum, ns > 0 ? uncovered(r.start, ns) : 0);
      measured(ns / std::max<std::uint32_t>(r.guards, 1));
      forget_mark(r.mark);
      if (r.start != ref_) events_.give(r.start, event_kind::timing);
      events_.give(r.stop, event_kind::timing);
    }
    tidy();
    return sum;
  }

  /// Destroys the reference event, at the session's end.
  void drop_reference() noexcept {
    event_pool::drop(ref_);
    ref_ = nullptr;
  }

private:
  /// The part of a finished region of `ns` starting at event `start` that the accounted
  /// timeline does not cover yet (adding it). The reference event is the start of an earlier
  /// region; it moves to a newer one once a second from it, so that the float milliseconds of
  /// cudaEventElapsedTime keep sub-microsecond precision. Call with m_ held.
  std::uint64_t uncovered(cudaEvent_t start, std::uint64_t ns) {
    constexpr std::int64_t max_ns = INT64_MAX / 4;
    const std::int64_t len = static_cast<std::int64_t>(std::min<std::uint64_t>(ns, max_ns));
    std::int64_t at = 0;
    if (!ref_) {
      ref_ = start; // kept (not returned to the pool) while it is the reference
      base_ = watermark_ == INT64_MIN ? 0 : watermark_;
      at = base_;
    } else {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, ref_, start) != cudaSuccess) return ns; // cannot place it
      const double rel = std::clamp(static_cast<double>(ms) * 1e6, -1e15, 1e15);
      at = base_ + static_cast<std::int64_t>(std::llround(rel));
      if (rel > 1e9) { // a second away: this start becomes the reference
        events_.give(ref_, event_kind::timing);
        ref_ = start;
        base_ = at;
      }
    }
    const std::uint64_t fresh = covered_.add(at, at + len);
    watermark_ = std::max(watermark_, at + len);
    return fresh;
  }

  /// Forgets accounted time that no region still open or in flight can overlap: they started
  /// after their mark. Call with m_ held.
  void tidy() noexcept {
    covered_.drop_before(marks_.empty() ? watermark_ : marks_.front().first);
    covered_.keep_newest(1024);
  }

  /// Removes one region's mark. Call with m_ held.
  void forget_mark(std::int64_t mark) noexcept {
    const auto it = std::lower_bound(marks_.begin(), marks_.end(), mark,
                                     [](const std::pair<std::int64_t, std::uint32_t>& m,
                                        std::int64_t v) { return m.first < v; });
    if (it == marks_.end() || it->first != mark) return;
    if (--it->second == 0) marks_.erase(it);
  }

  event_pool& events_;
  // In ns: the reference event and its place on the timeline, the time accounted lately, the
  // latest end accounted, and the marks of the regions open or in flight (ascending, with
  // counts).
  std::mutex m_;
  cudaEvent_t ref_ = nullptr;
  std::int64_t base_ = 0;
  interval_set covered_;
  std::int64_t watermark_ = INT64_MIN;
  std::deque<std::pair<std::int64_t, std::uint32_t>> marks_;
};

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare

#include <gpushare/cuda/detail/runtime_names_end.hpp>
