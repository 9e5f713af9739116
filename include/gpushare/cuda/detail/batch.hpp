// SPDX-License-Identifier: Apache-2.0
// Guards timed in batches (guard_timing::batched; docs/design.md section 12, "Batched timing").
// While a session is uncontended, consecutive guards on one stream share one region: the first
// records its start event, every guard re-records the batch's one stop event as it ends, and the
// batch becomes an ordinary region in flight (regions.hpp) once it closes: at an exit that finds
// the session contended, at about a quarter of the in-flight bound of work, at a host gap over
// 20 us between two guards, or when a drain, a yield or the session's end needs it. A guard
// inside a batch makes one CUDA call of its own (the stop event's record) and takes this
// component's mutex once at its entry and once at its end. Part of device_state (state.hpp); the
// mutex is a leaf.
//
// Why it is safe:
//   * A batch is closed only while no guard runs in it (`running` counts them, under the mutex),
//     and a guard re-records the stop event before it leaves the count: a closed batch's stop
//     event marks the end of every guard it timed.
//   * A guard joins only a batch whose start event is recorded, on its own stream: the batch's
//     work is one stream's, in order, between its two events.
//   * Whatever is in an open batch counts as in flight (device_state::regions_in_flight), so an
//     exit that hands the device over drains it: the drain closes it first.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>
#include <optional>

#include <gpushare/cuda/detail/device_options.hpp>
#include <gpushare/cuda/detail/event_pool.hpp>
#include <gpushare/cuda/detail/regions.hpp>
#include <gpushare/cuda/detail/timeline.hpp>

#include <gpushare/cuda/detail/runtime_names_begin.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

class region_batch {
public:
  region_batch(event_pool& events, accounting_timeline& timeline,
               in_flight_regions& regions) noexcept
      : events_(events), timeline_(timeline), regions_(regions) {}
  region_batch(const region_batch&) = delete;
  region_batch& operator=(const region_batch&) = delete;

  /// A guard enters on `stream` (not capturing). `limit`: the most guards a batch may hold now
  /// (0: this guard may not be batched: the session is contended, or nothing is measured yet).
  /// An idle batch this guard cannot join is closed first (its region goes in flight, waiting
  /// as a guard's end would: `bound_ns`, `keep_one`), its device time added to `used`. Returns
  /// the batch's stop event if the guard is in a batch (it then records nothing at its entry,
  /// and passes the event to exit()), else nullptr.
  cudaEvent_t enter(cudaStream_t stream, std::uint32_t limit, std::uint64_t span_ns,
                    std::uint64_t now, std::uint64_t bound_ns, bool keep_one, std::uint64_t& used) {
    std::optional<region> closed;
    cudaEvent_t joined = nullptr;
    bool opening = false, broken = false;
    {
      std::lock_guard lock(m_);
      if (b_ && b_->running == 0 &&
          (limit == 0 || b_->stream != stream || full(*b_, limit, span_ns, now) ||
           now - b_->last_exit_ns > max_batch_gap_ns)) {
        broken = b_->broken;
        closed = detach();
      }
      if (limit != 0 && b_ && b_->ready && b_->stream == stream &&
          !full(*b_, limit, span_ns, now)) {
        ++b_->running;
        ++b_->guards;
        joined = b_->stop;
      } else if (limit != 0 && !b_) {
        b_ = open_batch{stream, nullptr, nullptr, 0, 1, 1, now, now, false, false};
        opening = true;
      }
    }
    if (closed) {
      try {
        used += close(*closed, broken, bound_ns, keep_one);
      } catch (...) {
        // No memory to wait for it: the region stays in flight, accounted by a later drain.
        // Not rethrown: this guard has joined (or opens) a batch and must reach its exit.
      }
    }
    if (joined) return joined;
    return opening ? record_start(stream) : nullptr;
  }

  /// What a batched guard's end did.
  struct exit_result {
    std::uint64_t used = 0;        ///< device time of regions now known to be finished
    cudaEvent_t stop = nullptr;    ///< the batch's stop event, recorded after this guard's work
    std::uint32_t open_guards = 0; ///< the guards of the batch if it stays open, else 0
  };

  /// A batched guard on `stream` ends: re-records the batch's stop event `stop` (what enter()
  /// returned; the batch stays open while the guard runs in it), leaves the batch, and closes it
  /// if `keep` is false (the session is contended now) or it is full, and no other guard runs in
  /// it.
  exit_result exit(cudaStream_t stream, cudaEvent_t stop, bool keep, std::uint32_t limit,
                   std::uint64_t span_ns, std::uint64_t bound_ns, bool keep_one) {
    exit_result out;
    out.stop = stop;
    const bool recorded = cudaEventRecord(stop, stream) == cudaSuccess;
    std::optional<region> closed;
    bool broken = false;
    {
      std::lock_guard lock(m_);
      const std::uint64_t now = gpushare::detail::monotonic_ns();
      --b_->running;
      b_->last_exit_ns = now;
      if (!recorded) b_->broken = true;
      if (b_->running == 0 && (!keep || b_->broken || full(*b_, limit, span_ns, now))) {
        broken = b_->broken;
        closed = detach();
      } else {
        out.open_guards = b_->guards;
      }
    }
    if (closed) out.used = close(*closed, broken, bound_ns, keep_one);
    return out;
  }

  /// Closes the batch if no guard runs in it: its region goes in flight without a wait (for a
  /// drain to wait for it). Returns whether a batch is still open (a guard of another thread
  /// runs in it).
  bool close_idle() {
    std::optional<region> closed;
    bool broken = false;
    {
      std::lock_guard lock(m_);
      if (!b_) return false;
      if (b_->running != 0) return true;
      broken = b_->broken;
      closed = detach();
    }
    if (broken)
      abandon(*closed);
    else
      regions_.add_region(*closed);
    return false;
  }

  /// Whether a batch is open (its work counts as in flight).
  bool is_open() {
    std::lock_guard lock(m_);
    return b_.has_value();
  }

  /// The guards of the open batch (0 if none is open).
  std::uint32_t open_guards() {
    std::lock_guard lock(m_);
    return b_ ? b_->guards : 0;
  }

  /// The guards timed in batches so far.
  std::uint64_t batched_guards() {
    std::lock_guard lock(m_);
    return batched_ + (b_ ? b_->guards : 0);
  }
  /// The batches closed so far.
  std::uint64_t batches() {
    std::lock_guard lock(m_);
    return batches_;
  }

private:
  struct open_batch {
    cudaStream_t stream;
    cudaEvent_t start, stop;
    std::int64_t mark;
    std::uint32_t guards, running;
    std::uint64_t opened_ns, last_exit_ns;
    bool ready;  // its start event is recorded: guards may join
    bool broken; // a stop record failed: never accounted
  };

  static bool full(const open_batch& b, std::uint32_t limit, std::uint64_t span_ns,
                   std::uint64_t now) noexcept {
    return b.guards >= limit || now - b.opened_ns >= span_ns;
  }

  /// Takes the open batch as a region. Call with m_ held.
  region detach() noexcept {
    const region r{b_->start, b_->stop, b_->mark, b_->guards};
    batched_ += b_->guards;
    ++batches_;
    b_.reset();
    return r;
  }

  /// The opening guard records the start event and gets the stop event; on failure the batch is
  /// given up (nobody joined: joining waits for `ready`) and the guard times a region of its own.
  cudaEvent_t record_start(cudaStream_t stream) {
    cudaEvent_t start = nullptr, stop = nullptr;
    try {
      start = events_.take(event_kind::timing);
      stop = events_.take(event_kind::timing);
      if (cudaEventRecord(start, stream) == cudaSuccess) {
        const std::int64_t mark = timeline_.open();
        std::lock_guard lock(m_);
        b_->start = start;
        b_->stop = stop;
        b_->mark = mark;
        b_->ready = true;
        return stop;
      }
    } catch (...) {
    }
    events_.give(start, event_kind::timing);
    events_.give(stop, event_kind::timing);
    std::lock_guard lock(m_);
    b_.reset();
    return nullptr;
  }

  /// A batch whose stop event could not be recorded: not accounted, its events dropped.
  void abandon(const region& r) noexcept {
    timeline_.abandon(r.mark);
    event_pool::drop(r.start);
    event_pool::drop(r.stop);
  }

  /// A detached batch goes in flight as a region (see in_flight_regions::ended), or is abandoned.
  std::uint64_t close(const region& r, bool broken, std::uint64_t bound_ns, bool keep_one) {
    if (broken) {
      abandon(r);
      return 0;
    }
    return regions_.ended(r, bound_ns, keep_one);
  }

  event_pool& events_;
  accounting_timeline& timeline_;
  in_flight_regions& regions_;
  std::mutex m_;
  std::optional<open_batch> b_;
  std::uint64_t batched_ = 0; // guards of closed batches
  std::uint64_t batches_ = 0; // closed batches
};

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare

#include <gpushare/cuda/detail/runtime_names_end.hpp>
