// SPDX-License-Identifier: Apache-2.0
// The CUDA-side state of a device session, shared (by shared_ptr) between the session, its
// stream guards, memory resources and Thrust allocators, so none of them dangles if another is
// destroyed first. device_state composes one component per job:
//   * event_pool (event_pool.hpp): reusable CUDA events, timing and untimed, all blocking-sync;
//   * accounting_timeline (timeline.hpp): the device time already accounted, so that regions of
//     the session that overlap on the device (guards on several streams) count once, as their
//     union;
//   * in_flight_regions (regions.hpp): guarded regions still in flight on the device (a start
//     and a stop event each), to account their device time once finished and to bound how much
//     work stays queued; the drains that wait for them;
//   * region_batch (batch.hpp): while the session is uncontended, consecutive guards on one
//     stream timed as one region (guard_timing::batched);
//   * side_stream (host_signal.hpp): the stream gpushare's own host functions run on;
//   * gpu_marks (gpu_marks.hpp): the session's work left in flight past a guard, marked in the
//     table so that no lower class is granted the device before it finished;
//   * device_memory (device_memory.hpp): budgeted allocation with retries, composing
//     stream_pool (stream_pool.hpp: the session's own memory pool, stream-ordered frees whose
//     bytes return to the budget once executed and given back, graph memory) and
//     allocation_registry (allocations.hpp: one record per allocation that must be recognised
//     at its free);
//   * the counters (cuda_stats), each kept by the component that counts it.
// It belongs to the process that created it: in a forked child every operation is inert or
// refused (CUDA cannot be used in a child forked after CUDA was initialised), checked here,
// before any component is reached.
//
// Lock order. Each component has its own mutex. Only two are ever held together: the timeline's
// is taken before the regions' (settling a region updates the average region length), never the
// other way round. The batch's (taken before the others, never while one is held, and released
// before any of them is taken, except the timeline's and the event pool's by its opener), the
// event pool's, the stream pool's, the registry's and graph_memory's are
// leaves: nothing else is locked while one of them is held, except that the timeline's mutex may
// be held while the event pool's is taken (settling returns events). No component's mutex is
// held while calling into the session core (the table lock).
#pragma once

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <gpushare/cuda/detail/batch.hpp>
#include <gpushare/cuda/detail/calls.hpp>
#include <gpushare/cuda/detail/device_memory.hpp>
#include <gpushare/cuda/detail/device_options.hpp>
#include <gpushare/cuda/detail/errors.hpp>
#include <gpushare/cuda/detail/event_pool.hpp>
#include <gpushare/cuda/detail/gpu_marks.hpp>
#include <gpushare/cuda/detail/host_signal.hpp>
#include <gpushare/cuda/detail/regions.hpp>
#include <gpushare/cuda/detail/timeline.hpp>
#include <gpushare/cuda/stats.hpp>
#include <gpushare/detail/session_core.hpp>
#include <gpushare/detail/snapshot.hpp>
#include <gpushare/error.hpp>

#include <gpushare/cuda/detail/runtime_names_begin.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

class device_state {
public:
  device_state(std::shared_ptr<gpushare::detail::session_core> core, int ordinal,
               const state_options& options)
      : core_(std::move(core)), ordinal_(ordinal), options_(options), owner_(::getpid()),
        events_(ordinal), timeline_(events_), side_(ordinal),
        regions_(ordinal, options, timeline_, side_), batch_(events_, timeline_, regions_),
        marks_(*core_, side_, options), memory_(*core_, ordinal, options, events_) {}
  device_state(const device_state&) = delete;
  device_state& operator=(const device_state&) = delete;
  ~device_state() {
    if (forked()) return; // the parent's CUDA objects: a forked child must not touch them
    shutdown();
    events_.drop_all();
    timeline_.drop_reference();
    memory_.pool().destroy();
  }

  int ordinal() const noexcept { return ordinal_; }
  gpushare::detail::session_core& core() const noexcept { return *core_; }
  const std::shared_ptr<gpushare::detail::session_core>& shared_core() const noexcept {
    return core_;
  }
  const state_options& options() const noexcept { return options_; }

  /// Whether this is a forked child's copy (CUDA must not be used through it).
  bool forked() const noexcept { return ::getpid() != owner_; }
  void check_not_forked() const {
    if (forked())
      throw error(errc::session_closed,
                  "this CUDA device session belongs to the parent process: CUDA cannot be used "
                  "in a child forked after CUDA was initialised; open sessions in the child "
                  "after exec (or fork before using CUDA)");
  }

  cuda_stats stats() {
    cuda_stats s = regions_.stats();
    s.batched_guards = batch_.batched_guards();
    s.batches = batch_.batches();
    memory_.pool().add_stats(s);
    marks_.add_stats(s);
    return s;
  }

  /// Waits (up to the drain timeout) for everything still in flight, accounts and releases it.
  /// Idempotent; inert in a forked child.
  void shutdown() noexcept {
    if (forked()) return;
    try {
      (void)batch_.close_idle();
      core_->add_device_time(regions_.drain(wait_limit::drain_timeout));
      memory_.pool().release_finished_frees(frees_wait::wait);
      memory_.pool().release_pool_memory(pool_trim::always);
      memory_.pool().trim_graph_memory_at_end();
    } catch (...) {
      // A CUDA error at teardown (e.g. the context is already gone): nothing left to wait for.
    }
  }

  // ---- events and guarded regions (scoped_kernel) -------------------------------------------

  /// An event on this device (see event_pool).
  cudaEvent_t take_event(event_kind kind) { return events_.take(kind); }
  void give_event(cudaEvent_t e, event_kind kind) noexcept { events_.give(e, kind); }

  /// A guard recorded the start event of a region: returns the region's mark, to pass to
  /// region_ended (or region_ended_before_handover), or to region_abandoned if the region is
  /// never handed over.
  std::int64_t region_opened() { return timeline_.open(); }
  /// A region opened but not handed over (its stop event could not be recorded).
  void region_abandoned(std::int64_t mark) noexcept { timeline_.abandon(mark); }

  /// A guarded region whose work lies between events `start` and `stop` (recorded on its
  /// stream) ended on the host; `mark` is what region_opened returned. Waits only for the oldest
  /// regions beyond the in-flight allowance. Returns the device time of the regions now known
  /// to be finished: the caller accounts it. The state owns the events now.
  std::uint64_t region_ended(cudaEvent_t start, cudaEvent_t stop, std::int64_t mark) {
    bool keep_one = false;
    const std::uint64_t bound = in_flight_bound(gpushare::detail::monotonic_ns(), keep_one);
    return regions_.ended({start, stop, mark}, bound, keep_one);
  }
  /// After region_ended (or batch_exit), before the guard's exit: if work of this session is
  /// still in flight, marks it in the table (gpu_marks), `stop` being the event recorded after
  /// the ended guard's work, `guard_ns` the guard's host time and `open_guards` those of a batch
  /// still open.
  void mark_in_flight(cudaEvent_t stop, std::uint64_t guard_ns,
                      std::uint32_t open_guards = 0) noexcept {
    const std::uint64_t n = regions_.guards_in_flight() + open_guards;
    if (n == 0) return;
    const std::uint64_t avg = regions_.average_ns();
    marks_.guard_ended(core_, stop, (n - 1) * avg + std::max(avg, guard_ns));
  }

  /// A guard entered on `stream` (on the session's lease or not): if it is timed in the
  /// session's batch (region_batch), the batch's stop event (the guard records no event of its
  /// own at its entry), else nullptr. `used` gets the device time of an idle batch the guard
  /// closed (to account at its exit).
  cudaEvent_t batch_enter(cudaStream_t stream, bool on_lease, std::uint64_t& used) {
    if (options_.timing != guard_timing::batched) return nullptr;
    const std::uint64_t now = gpushare::detail::monotonic_ns();
    bool keep_one = false;
    const std::uint64_t bound = in_flight_bound(now, keep_one);
    return batch_.enter(stream, on_lease ? batch_limit(now, keep_one) : 0,
                        batch_span_ns(options_.max_in_flight_ns), now, bound, keep_one, used);
  }
  /// A guard timed in the batch ends on `stream`, `guard_ns` after it entered: the batch's stop
  /// event `stop` (from batch_enter) is recorded after its work; the batch closes if the session
  /// is contended now (or it is full). Returns the device time of regions now known to be
  /// finished.
  std::uint64_t batch_exit(cudaStream_t stream, cudaEvent_t stop, std::uint64_t guard_ns) {
    const std::uint64_t now = gpushare::detail::monotonic_ns();
    bool keep_one = false;
    const std::uint64_t bound = in_flight_bound(now, keep_one);
    const std::uint32_t limit = batch_limit(now, keep_one);
    const region_batch::exit_result r = batch_.exit(
        stream, stop, limit != 0, limit, batch_span_ns(options_.max_in_flight_ns), bound, keep_one);
    mark_in_flight(r.stop, guard_ns, r.open_guards);
    return r.used;
  }
  /// region_ended when the device is about to be handed over: waits (up to the drain timeout)
  /// until every guarded region of this session has finished (see drain_for_handover).
  std::uint64_t region_ended_before_handover(cudaEvent_t start, cudaEvent_t stop,
                                             std::int64_t mark) {
    return regions_.ended_before_handover({start, stop, mark});
  }

  /// Waits until every guarded region has finished; returns their device time (to account).
  /// wait_limit::drain_timeout: gives up after the drain timeout, leaves the unfinished regions
  /// in flight and counts a drain timeout. wait_limit::none (synchronize()): waits as long as it
  /// takes.
  /// An idle batch is closed first; one a guard of another thread still runs in is not waited
  /// for (its work is that guard's, not yet ended).
  std::uint64_t drain_regions(wait_limit limit) {
    (void)batch_.close_idle();
    return regions_.drain(limit);
  }
  /// The drain before a handover (yield()): bounded by the drain timeout, and with
  /// drain_scope::device also waits for all other work of this process on the device.
  std::uint64_t drain_for_handover() {
    (void)batch_.close_idle();
    return regions_.drain_for_handover();
  }

  /// Regions recorded but not yet known to be finished, an open batch counting as one.
  std::size_t regions_in_flight() { return regions_.in_flight() + (batch_.is_open() ? 1 : 0); }
  /// The guards whose work those regions time (a batch's guards each).
  std::uint64_t guards_in_flight() { return regions_.guards_in_flight() + batch_.open_guards(); }
  /// The recent average device time of a guarded region (0 before the first one finished).
  std::uint64_t average_region_ns() { return regions_.average_ns(); }
  void count_captured_guard() noexcept { regions_.count_captured_guard(); }

  // ---- budgeted memory (see device_memory) -----------------------------------------------------

  void* allocate(std::size_t bytes) {
    check_not_forked();
    return memory_.allocate(bytes);
  }
  /// Never throws; inert in a forked child.
  void deallocate(void* p, std::size_t bytes) noexcept {
    if (!p || forked()) return;
    memory_.deallocate(p, bytes);
  }
  void* allocate_async(std::size_t bytes, cudaStream_t stream) {
    check_not_forked();
    return memory_.allocate_async(bytes, stream);
  }
  /// Never throws; inert in a forked child.
  void deallocate_async(void* p, std::size_t bytes, cudaStream_t stream) noexcept {
    if (!p || forked()) return;
    memory_.deallocate_async(p, bytes, stream);
  }

  /// Returns to the budget the bytes of stream-ordered frees that have executed (with
  /// frees_wait::wait: waits for all of them). Returns the bytes returned to the budget.
  std::uint64_t release_finished_frees(frees_wait how) {
    if (forked()) return 0;
    return memory_.pool().release_finished_frees(how);
  }
  /// Gives back to the budget what the session's pool has given back to the device, first
  /// asking the pool to release all it does not use with pool_trim::always (or when another
  /// session waits for memory). Returns the bytes returned to the budget.
  std::uint64_t release_pool_memory(pool_trim trim) noexcept {
    if (forked()) return 0;
    return memory_.pool().release_pool_memory(trim);
  }
  /// The application's graphs holding this session's graph memory are gone: trims the device's
  /// graph memory pool and returns to the budget what it no longer reserves.
  std::uint64_t release_graph_memory() {
    check_not_forked();
    return memory_.pool().release_graph_memory();
  }

  // ---- pointers of device_session::malloc/malloc_async (see allocation_registry) -----------

  void remember(void* p, std::size_t bytes, allocation_kind kind) {
    memory_.registry().claim(p, bytes, kind);
  }
  std::size_t forget(void* p, allocation_kind kind) { return memory_.registry().unclaim(p, kind); }

  /// Records the device's free and total memory in the table (for snapshots and the CLI).
  void observe_device(const std::string& name) {
    check_not_forked();
    device_scope on(ordinal_);
    std::size_t free = 0, total = 0;
    check(own_call([&] { return cudaMemGetInfo(&free, &total); }), "cudaMemGetInfo");
    gpushare::detail::record_device_observation(core_->core(), name, total, free, ordinal_);
  }

private:
  /// The in-flight bound that applies now: the lower one while a higher class asked for the
  /// device lately (`keep_one` set then: the newest region stays queued; design.md section 12).
  std::uint64_t in_flight_bound(std::uint64_t now, bool& keep_one) noexcept {
    keep_one = core_->higher_class_active(now);
    return keep_one ? std::min(options_.max_in_flight_ns, options_.max_in_flight_lower_ns)
                    : options_.max_in_flight_ns;
  }
  /// How many guards a batch may hold now: 0 (time each guard) while anybody else waits for the
  /// device or another priority class asked for it lately (region_batch). `higher_active`: what
  /// in_flight_bound found for now (its `keep_one`), not looked up twice.
  std::uint32_t batch_limit(std::uint64_t now, bool higher_active) noexcept {
    if (higher_active || core_->others_waiting() || core_->lower_class_active(now)) return 0;
    return batch_guard_limit(regions_.average_ns(), options_.max_in_flight_ns);
  }

  std::shared_ptr<gpushare::detail::session_core> core_;
  int ordinal_;
  state_options options_;
  pid_t owner_;
  // Declared in the order they depend on each other (each refers to those above it).
  event_pool events_;
  accounting_timeline timeline_;
  side_stream side_;
  in_flight_regions regions_;
  region_batch batch_;
  gpu_marks marks_;
  device_memory memory_;
};

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare

#include <gpushare/cuda/detail/runtime_names_end.hpp>
