// SPDX-License-Identifier: Apache-2.0
// Guarded regions of one device session still in flight on the device (a start and a stop event
// each): how many may stay queued when a guard ends, the drains that wait for them, and the
// device time of those found finished (placed on the accounting timeline, timeline.hpp). Part of
// device_state (state.hpp, which states the lock order).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include <gpushare/cuda/detail/calls.hpp>
#include <gpushare/cuda/detail/device_options.hpp>
#include <gpushare/cuda/detail/errors.hpp>
#include <gpushare/cuda/detail/event_pool.hpp>
#include <gpushare/cuda/detail/host_signal.hpp>
#include <gpushare/cuda/detail/timeline.hpp>
#include <gpushare/cuda/stats.hpp>
#include <gpushare/detail/budget.hpp>
#include <gpushare/detail/posix.hpp>

#include <gpushare/cuda/detail/runtime_names_begin.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

/// How long a drain waits for the regions in flight.
enum class wait_limit {
  drain_timeout, ///< at most the drain timeout; the regions still unfinished stay in flight
  none,          ///< as long as it takes (synchronize())
};

class in_flight_regions {
public:
  in_flight_regions(int ordinal, const state_options& options, accounting_timeline& timeline,
                    side_stream& side) noexcept
      : ordinal_(ordinal), options_(options), timeline_(timeline), side_(side) {}
  in_flight_regions(const in_flight_regions&) = delete;
  in_flight_regions& operator=(const in_flight_regions&) = delete;

  /// A guarded region ended on the host (its events recorded, its mark from the timeline): waits
  /// only for the oldest regions beyond the in-flight allowance, of `bound_ns` of queued work
  /// (with `keep_one`, at least the newest region stays). Returns the device time of the
  /// regions now known to be finished: the caller accounts it.
  std::uint64_t ended(const region& r, std::uint64_t bound_ns, bool keep_one) {
    add(r);
    relaxed_capture relaxed;
    std::vector<region> finished, unknown, to_wait;
    {
      std::lock_guard lock(m_);
      while (!pending_.empty()) {
        const event_state s = query_event(pending_.front().stop);
        if (s == event_state::pending) break;
        (s == event_state::done ? finished : unknown).push_back(pop_front());
      }
      const std::uint64_t avg = avg_region_ns_.load(std::memory_order_relaxed);
      const std::uint64_t allowed = in_flight_guards_allowed(avg, bound_ns);
      if (keep_one) ++stats_.lower_bound_exits;
      while (!pending_.empty() &&
             (pending_.size() > max_in_flight_regions || pending_guards_ > allowed)) {
        if (keep_one && avg != 0 && pending_.size() == 1) break; // the newest stays queued
        to_wait.push_back(pop_front());
      }
    }
    wait_all(to_wait, finished, unknown, wait_limit::drain_timeout);
    drop_unknown(unknown);
    return settle(finished);
  }

  /// A guarded region ended on the host and the device is about to be handed over: drains.
  std::uint64_t ended_before_handover(const region& r) {
    add(r);
    return drain_for_handover();
  }

  /// Waits until every region has finished; returns their device time (to account). With
  /// wait_limit::drain_timeout, gives up after it, leaves the unfinished regions in flight and
  /// counts a drain timeout.
  std::uint64_t drain(wait_limit limit) {
    const std::vector<region> all = take_all();
    relaxed_capture relaxed;
    return wait_and_settle(all, limit);
  }

  /// A drain before the device is handed over (bounded by the drain timeout); with
  /// drain_scope::device, then also waits for all other work of this process on the device.
  std::uint64_t drain_for_handover() {
    const std::vector<region> all = take_all();
    relaxed_capture relaxed; // the device drain too runs in the relaxed capture mode
    const std::uint64_t used = wait_and_settle(all, wait_limit::drain_timeout);
    if (options_.drain == drain_scope::device) drain_device();
    return used;
  }

  /// Regions recorded but not yet known to be finished (no lock: may be a moment old).
  std::size_t in_flight() const noexcept { return size_.load(std::memory_order_relaxed); }
  /// The guards those regions time.
  std::uint64_t guards_in_flight() const noexcept {
    return guards_.load(std::memory_order_relaxed);
  }

  /// The recent average device time per guard (0 before the first region finished).
  std::uint64_t average_ns() const noexcept {
    return avg_region_ns_.load(std::memory_order_relaxed);
  }

  /// Adds a region as in flight, without waiting for any (a batch closed before a drain).
  void add_region(const region& r) { add(r); }

  void count_captured_guard() noexcept {
    std::lock_guard lock(m_);
    ++stats_.captured_guards;
  }

  /// The counters kept here (the others of cuda_stats stay 0).
  cuda_stats stats() {
    std::lock_guard lock(m_);
    return stats_;
  }

private:
  void add(const region& r) {
    std::lock_guard lock(m_);
    pending_.push_back(r);
    pending_guards_ += r.guards;
    publish();
  }

  /// Publishes pending_'s size and guards for the lock-free readers. Call with m_ held.
  void publish() noexcept {
    size_.store(pending_.size(), std::memory_order_relaxed);
    guards_.store(pending_guards_, std::memory_order_relaxed);
  }

  /// The oldest region in flight, taken off. Call with m_ held and pending_ not empty.
  region pop_front() noexcept {
    const region r = pending_.front();
    pending_.pop_front();
    pending_guards_ -= std::min<std::uint64_t>(pending_guards_, r.guards);
    publish();
    return r;
  }

  /// Takes every region in flight, counting a drain.
  std::vector<region> take_all() {
    std::lock_guard lock(m_);
    std::vector<region> all(pending_.begin(), pending_.end());
    pending_.clear();
    pending_guards_ = 0;
    publish();
    ++stats_.drains;
    return all;
  }

  /// Waits for `all` (see wait_all), drops the unknown ones, settles the finished ones.
  std::uint64_t wait_and_settle(const std::vector<region>& all, wait_limit limit) {
    std::vector<region> finished, unknown;
    wait_all(all, finished, unknown, limit);
    drop_unknown(unknown);
    return settle(finished);
  }

  /// Waits for each region's stop event, sorting them into finished, unknown (CUDA cannot say)
  /// and, when the drain timeout passes, back into pending_ (oldest first). A bounded wait
  /// blocks on a host_signal raised when the last of them executed (the thread wakes as the work
  /// ends, no polling); where one cannot be armed, it polls (wait_polling).
  void wait_all(const std::vector<region>& rs, std::vector<region>& finished,
                std::vector<region>& unknown, wait_limit limit) {
    const bool forever = limit == wait_limit::none || options_.drain_timeout_ns == no_timeout;
    std::vector<region> open;
    std::vector<cudaEvent_t> stops;
    for (const region& r : rs) {
      const event_state s = forever ? wait_for_event(r.stop) : query_event(r.stop);
      if (s == event_state::pending) {
        open.push_back(r);
        stops.push_back(r.stop);
      } else {
        (s == event_state::done ? finished : unknown).push_back(r);
      }
    }
    if (open.empty()) return;
    const std::uint64_t deadline =
        gpushare::detail::sat_add(gpushare::detail::monotonic_ns(), options_.drain_timeout_ns);
    std::vector<region> late;
    if (const auto sig = host_signal::after(side_, stops)) {
      (void)sig->wait_until(deadline);
      std::lock_guard lock(m_);
      ++stats_.signalled_waits;
    } else {
      wait_polling(open, deadline);
    }
    for (const region& r : open) {
      const event_state s = query_event(r.stop);
      (s == event_state::done ? finished : s == event_state::unknown ? unknown : late).push_back(r);
    }
    if (late.empty()) return;
    std::lock_guard lock(m_);
    ++stats_.drain_timeouts;
    pending_.insert(pending_.begin(), late.begin(), late.end());
    for (const region& r : late) pending_guards_ += r.guards;
    publish();
  }

  /// Without a host function: sleeps most of a region's expected length first, then polls
  /// every 1/32 of it (10 us to 1 ms) until every region of `rs` finished or `deadline` passed.
  void wait_polling(const std::vector<region>& rs, std::uint64_t deadline) {
    const std::uint64_t avg = average_ns();
    const std::uint64_t pause = std::clamp<std::uint64_t>(avg / 32, 10'000, 1'000'000);
    std::uint64_t first = std::max<std::uint64_t>(avg / 8 * 7, pause);
    for (const region& r : rs) {
      if (wait_for_event(r.stop, deadline, first, pause) != event_state::done) return;
      first = pause; // the next regions ran meanwhile, mostly
    }
  }

  /// Regions whose completion CUDA cannot report: not accounted, events dropped (they may
  /// still be in use, so not reused).
  void drop_unknown(const std::vector<region>& rs) noexcept {
    if (rs.empty()) return;
    for (const region& r : rs) {
      event_pool::drop(r.start);
      event_pool::drop(r.stop);
    }
    timeline_.forget(rs);
    std::lock_guard lock(m_);
    stats_.unknown_regions += rs.size();
  }

  /// Device time of finished regions not accounted yet (the timeline's), updating the average.
  std::uint64_t settle(const std::vector<region>& rs) {
    return timeline_.settle(rs, [this](std::uint64_t ns) {
      std::lock_guard lock(m_); // inside the timeline's mutex (state.hpp's lock order)
      avg_region_ns_.store(update_average(avg_region_ns_.load(std::memory_order_relaxed), ns),
                           std::memory_order_relaxed);
    });
  }

  /// Waits for all work of this process on the device (GPUSHARE_DRAIN=device), unless a
  /// blocking stream is being captured (the legacy stream then reports capturing): a device
  /// synchronisation would break that capture.
  void drain_device() {
    bool capturing = false;
    device_scope on(ordinal_);
    if (capture_state(cudaStreamLegacy, capturing) != cudaSuccess || capturing) {
      std::lock_guard lock(m_);
      ++stats_.device_drains_skipped;
      return;
    }
    (void)own_call([] { return cudaDeviceSynchronize(); });
    std::lock_guard lock(m_);
    ++stats_.device_drains;
  }

  int ordinal_;
  state_options options_;
  accounting_timeline& timeline_;
  side_stream& side_;
  std::mutex m_;
  std::deque<region> pending_;                  // oldest first
  std::uint64_t pending_guards_ = 0;            // the guards pending_'s regions time
  std::atomic<std::uint64_t> avg_region_ns_{0}; // per guard; written with m_ held
  std::atomic<std::size_t> size_{0};            // pending_.size(), for in_flight()
  std::atomic<std::uint64_t> guards_{0};        // pending_guards_, for guards_in_flight()
  cuda_stats stats_; // drains, drain_timeouts, device drains, captured_guards, unknown_regions
};

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare

#include <gpushare/cuda/detail/runtime_names_end.hpp>
