// SPDX-License-Identifier: Apache-2.0
// A guard over the work a region puts on a CUDA stream, timed by CUDA events.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>

#include <gpushare/cuda/default_stream.hpp>
#include <gpushare/cuda/device_session.hpp>
#include <gpushare/detail/posix.hpp>

#include <gpushare/cuda/detail/runtime_names_begin.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {

/// Guards the work a region enqueues on `stream` (kernels, cuBLAS or Thrust calls, CUDA Graph
/// launches). Construction waits until this session may use the GPU (priorities, shares,
/// quanta, compute limit), then records a start event on the stream; destruction records a stop
/// event and ends the region. The region's GPU time, measured between the two events once they
/// have executed, is what the arbitration accounts (the host time of asynchronous launches says
/// nothing about the GPU).
///
/// While the session is uncontended, consecutive guards on one stream are timed as one region
/// (device_options::timing, GPUSHARE_GUARD_TIMING=batched, the default): such a guard makes
/// one CUDA call of its own, the record of the batch's stop event.
///
/// Launches are asynchronous, so a region may still be running on the GPU when its guard ends.
/// The guard bounds that:
///   * if the guard's end hands the GPU to another session (decided under the table lock), it
///     first waits for this session's work to finish (a drain, bounded by
///     GPUSHARE_DRAIN_TIMEOUT), so the next holder starts on an idle GPU and this session's
///     time is exact;
///   * otherwise it lets work stay queued, up to about GPUSHARE_MAX_IN_FLIGHT (default 2 ms) of
///     recent average region time, or GPUSHARE_MAX_IN_FLIGHT_LOWER (default 0.25 ms, at least
///     the newest region) while a session of a higher priority class asked for the device in
///     the last 100 ms; older regions, and a region longer than that bound, are waited for
///     (sleeping, not spinning).
/// A session that takes the GPU over therefore finds at most that much of the previous
/// holder's work ahead of it. Work a guard leaves queued is marked in the table until it
/// finished (a host function on a side stream clears the mark while a lower class is active):
/// no session of a lower class is granted the GPU before, so a high-priority request's kernels
/// never share the GPU with a lower class's that started after them.
///
/// What a guard covers: the work enqueued on `stream` between its construction and its end.
/// Work on other streams (a library's internal streams, NCCL's, async copies elsewhere) and
/// unguarded launches are neither timed nor drained, unless GPUSHARE_DRAIN=device
/// (device_options::drain), with which a handover also waits for all of the process's work on
/// the device. Guards of one session on several streams may overlap on the device: the session
/// is accounted the union of their device time, not the sum. `stream` defaults to the default
/// stream of the file that creates the guard (GPUSHARE_CUDA_DEFAULT_STREAM: per-thread in a file
/// compiled for it); an explicit 0 means the legacy default stream.
///
/// A stream being captured into a CUDA Graph is not timed (nothing runs during capture; the
/// legacy stream while another stream captures counts as capturing); guard the cudaGraphLaunch
/// instead. gpushare's own event queries run in the Relaxed capture mode, so they never break an
/// application's capture. Not copyable or movable.
class [[nodiscard]] scoped_kernel {
public:
  /// Waits for the device for `s`, then times the work on `stream` (see the class comment).
  [[nodiscard]] explicit scoped_kernel(device_session& s,
                                       cudaStream_t stream = GPUSHARE_CUDA_DEFAULT_STREAM)
      : state_(s.shared_state()), stream_(stream), requested_ns_(gpushare::detail::monotonic_ns()),
        entry_(state_->core().begin_guard(requested_ns_)) {
    start_region();
  }
  /// Like scoped_kernel(s, stream), but waits at most `timeout` for the GPU; then throws
  /// errc::timeout naming the session that holds it (typically one stopped or hung inside its
  /// own guard), as gpushare::scoped_kernel's timeout constructor does. Nothing is held after
  /// the throw.
  template <class Rep, class Period>
  [[nodiscard]] scoped_kernel(device_session& s, std::chrono::duration<Rep, Period> timeout,
                              cudaStream_t stream = GPUSHARE_CUDA_DEFAULT_STREAM)
      : state_(s.shared_state()), stream_(stream), requested_ns_(gpushare::detail::monotonic_ns()),
        entry_(state_->core().begin_guard(requested_ns_, gpushare::detail::to_ns(timeout))) {
    start_region();
  }
  scoped_kernel(const scoped_kernel&) = delete;
  scoped_kernel& operator=(const scoped_kernel&) = delete;
  ~scoped_kernel() { finish(); }

  /// Ends the region now (the destructor does it otherwise). Idempotent.
  void finish() noexcept {
    if (!state_) return;
    if (counted_) --detail::guards_on_this_thread;
    counted_ = false;
    // A request to give memory back is answered at the exit of a thread's outermost guard, never
    // in a capture (its handler frees device memory, which a capture forbids).
    const bool answer =
        (start_ != nullptr || batch_stop_ != nullptr) && detail::guards_on_this_thread == 0;
    std::uint64_t used = carried_;
    if (batch_stop_) {
      try {
        used += state_->batch_exit(stream_, batch_stop_,
                                   gpushare::detail::monotonic_ns() - entry_.start_ns);
      } catch (...) {
      }
    } else if (start_) {
      cudaEvent_t stop = nullptr;
      bool handed = false;
      try {
        stop = state_->take_event(detail::event_kind::timing);
        if (cudaEventRecord(stop, stream_) == cudaSuccess) {
          handed = true;
          // Only the oldest regions beyond the in-flight allowance are waited for here; the
          // exit drains the rest if, under the table lock, it hands the device over (below).
          used += state_->region_ended(start_, stop, mark_);
          // Work still queued past this guard holds lower classes back until it finished (a
          // mark in the table, cleared by a host function; design.md section 12, rule 2).
          state_->mark_in_flight(stop, gpushare::detail::monotonic_ns() - entry_.start_ns);
          start_ = stop = nullptr; // owned by the state now
        }
      } catch (...) {
      }
      if (!handed) state_->region_abandoned(mark_);
      state_->give_event(start_, detail::event_kind::timing);
      state_->give_event(stop, detail::event_kind::timing);
    }
    // The regions still in flight: drained by the exit if it hands the device over, while this
    // guard still counts as running (guard.hpp, "Draining at the exit").
    const gpushare::detail::session_core::exit_drain in_flight{this, &pending, &drain, &estimate};
    state_->core().end_guard(entry_, used, gpushare::detail::monotonic_ns(), &in_flight);
    if (answer) state_->core().answer_reclaim_quietly();
    state_.reset();
  }
  /// How long the constructor waited for the GPU (including compute-limit pacing).
  std::chrono::nanoseconds waited() const noexcept {
    return std::chrono::nanoseconds(entry_.start_ns - requested_ns_);
  }

private:
  // The exit_drain of finish(); `g` is the scoped_kernel. With GPUSHARE_DRAIN=device there may
  // always be work in flight (on streams no guard covers): a handover always drains then.
  static bool pending(void* g) noexcept {
    try {
      detail::device_state& s = *static_cast<scoped_kernel*>(g)->state_;
      return s.options().drain == drain_scope::device || s.regions_in_flight() > 0;
    } catch (...) {
      return false;
    }
  }
  static std::uint64_t drain(void* g) noexcept {
    try {
      return static_cast<scoped_kernel*>(g)->state_->drain_for_handover();
    } catch (...) {
      return 0; // a CUDA error: what finished is accounted by a later drain
    }
  }
  /// The device time of the regions in flight is not known yet: at least this guard's host
  /// time, or the recent average region, whichever is longer.
  static std::uint64_t estimate(void* g) noexcept {
    auto* k = static_cast<scoped_kernel*>(g);
    try {
      return std::max(gpushare::detail::monotonic_ns() - k->entry_.start_ns,
                      k->state_->average_region_ns());
    } catch (...) {
      return gpushare::detail::monotonic_ns() - k->entry_.start_ns;
    }
  }

  /// After the table let this guard in: records the region's start event on the stream (or
  /// counts a captured guard). On failure, leaves the table the way it entered and rethrows.
  void start_region() {
    try {
      bool capturing = false;
      detail::check(detail::capture_state(stream_, capturing), "cudaStreamIsCapturing");
      if (capturing) { // nothing executes during capture
        state_->count_captured_guard();
        ++detail::guards_on_this_thread;
        counted_ = true;
        return;
      }
      batch_stop_ = state_->batch_enter(stream_, entry_.on_lease, carried_);
      if (batch_stop_) { // timed with others
        ++detail::guards_on_this_thread;
        counted_ = true;
        return;
      }
      start_ = state_->take_event(detail::event_kind::timing);
      detail::check(cudaEventRecord(start_, stream_),
                    "cudaEventRecord (is the stream on the session's device?)");
      mark_ = state_->region_opened();
      ++detail::guards_on_this_thread;
      counted_ = true;
    } catch (...) {
      state_->give_event(start_, detail::event_kind::timing);
      start_ = nullptr;
      state_->core().end_guard(entry_, carried_, gpushare::detail::monotonic_ns());
      throw;
    }
  }

  std::shared_ptr<detail::device_state> state_;
  cudaStream_t stream_;
  std::uint64_t requested_ns_;
  gpushare::detail::session_core::guard_entry entry_; ///< when it got the GPU; on lease or locked
  cudaEvent_t start_ = nullptr;
  std::int64_t mark_ = 0;            // from device_state::region_opened
  std::uint64_t carried_ = 0;        // device time of a batch this guard closed at its entry
  cudaEvent_t batch_stop_ = nullptr; // timed in the session's batch: its stop event
  bool counted_ = false;             // in detail::guards_on_this_thread
};

} // namespace cuda
} // namespace v0
} // namespace gpushare

#include <gpushare/cuda/detail/runtime_names_end.hpp>
