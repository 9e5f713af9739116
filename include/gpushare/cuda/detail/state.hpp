// SPDX-License-Identifier: Apache-2.0
// The CUDA-side state of a device session, shared (by shared_ptr) between the session, its
// stream guards, memory resources and Thrust allocators, so none of them dangles if another is
// destroyed first. It keeps:
//   * guarded regions still in flight on the device (a start and a stop event each), to account
//     their device time once finished and to bound how much work stays queued;
//   * stream-ordered allocations, made from a memory pool of the session's own, and their frees,
//     whose bytes return to the budget once executed and given back by the pool;
//   * graph memory: allocations made during stream captures, charged until the application's
//     graphs are gone (graph_memory.hpp);
//   * the sizes and kinds of allocations made through device_session::malloc/malloc_async;
//   * pools of reusable CUDA events (timing and untimed, all blocking-sync);
//   * a timeline of the device time already accounted, so that regions of the session that
//     overlap on the device (guards on several streams) are accounted once, as their union;
//   * counters (cuda_stats).
// It belongs to the process that created it: in a forked child every operation is inert or
// refused (CUDA cannot be used in a child forked after CUDA was initialised).
#pragma once

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <gpushare/cuda/detail/calls.hpp>
#include <gpushare/cuda/detail/graph_memory.hpp>
#include <gpushare/cuda/detail/intervals.hpp>
#include <gpushare/cuda/error.hpp>
#include <gpushare/cuda/options.hpp>
#include <gpushare/cuda/stats.hpp>
#include <gpushare/detail/parse.hpp>
#include <gpushare/detail/session_core.hpp>
#include <gpushare/table.hpp>

#include <gpushare/cuda/detail/runtime_names_begin.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

/// How an allocation of device_session was made, so that it is freed the same way.
enum class allocation_kind { plain, stream_ordered };

/// Guards (scoped_kernel) open on the calling thread: an allocation inside one does not wait
/// for memory (see device_state::charge).
inline thread_local int guards_on_this_thread = 0;

class device_state {
public:
  device_state(std::shared_ptr<gpushare::detail::session_core> core, int ordinal,
               const resolved_device_options& options)
      : core_(std::move(core)), ordinal_(ordinal), options_(options), owner_(::getpid()) {}
  device_state(const device_state&) = delete;
  device_state& operator=(const device_state&) = delete;
  ~device_state() {
    if (forked()) return; // the parent's CUDA objects: a forked child must not touch them
    shutdown();
    for (cudaEvent_t e : timing_events_) drop_event(e);
    for (cudaEvent_t e : untimed_events_) drop_event(e);
    drop_event(ref_);
    if (pool_) (void)own_call([&] { return cudaMemPoolDestroy(pool_); });
  }

  int ordinal() const noexcept { return ordinal_; }
  gpushare::detail::session_core& core() const noexcept { return *core_; }
  const std::shared_ptr<gpushare::detail::session_core>& shared_core() const noexcept {
    return core_;
  }
  const resolved_device_options& options() const noexcept { return options_; }

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
    std::lock_guard lock(m_);
    cuda_stats s = stats_;
    s.pool_bytes_held = pool_charged_ > pool_outstanding_ ? pool_charged_ - pool_outstanding_ : 0;
    s.graph_bytes_held = graph_.held();
    return s;
  }

  /// Waits (up to the drain timeout) for everything still in flight, accounts and releases it.
  /// Idempotent; inert in a forked child.
  void shutdown() noexcept {
    if (forked()) return;
    try {
      core_->add_device_time(drain_regions(true));
      release_finished_frees(true);
      release_pool_memory(true);
      graph_.trim_at_end(ordinal_);
    } catch (...) {
      // A CUDA error at teardown (e.g. the context is already gone): nothing left to wait for.
    }
  }

  // ---- events ------------------------------------------------------------------------------

  /// An event on this device, from the pool or new: blocking-sync (a wait for it sleeps rather
  /// than spins) and, unless `timing`, without timing (cheaper to record).
  cudaEvent_t take_event(bool timing) {
    {
      std::lock_guard lock(m_);
      auto& pool = timing ? timing_events_ : untimed_events_;
      if (!pool.empty()) {
        cudaEvent_t e = pool.back();
        pool.pop_back();
        return e;
      }
    }
    device_scope on(ordinal_);
    cudaEvent_t e = nullptr;
    const unsigned flags = cudaEventBlockingSync | (timing ? 0u : cudaEventDisableTiming);
    check(own_call([&] { return cudaEventCreateWithFlags(&e, flags); }),
          "cudaEventCreateWithFlags");
    return e;
  }

  /// Returns a completed (or never recorded) event to its pool.
  void give_event(cudaEvent_t e, bool timing) noexcept {
    if (!e) return;
    try {
      std::lock_guard lock(m_);
      auto& pool = timing ? timing_events_ : untimed_events_;
      if (pool.size() < 4 * max_in_flight_regions) {
        pool.push_back(e);
        return;
      }
    } catch (...) {
    }
    drop_event(e);
  }

  /// Destroys an event, also one whose work may not have completed (CUDA releases it then).
  static void drop_event(cudaEvent_t e) noexcept {
    if (e) (void)own_call([&] { return cudaEventDestroy(e); });
  }

  // ---- guarded regions ---------------------------------------------------------------------

  /// A guard recorded the start event of a region: returns the region's mark (a point of the
  /// accounting timeline its work cannot start before), to pass to region_ended, or to
  /// region_abandoned if the region is never handed over.
  std::int64_t region_opened() {
    std::lock_guard lock(tl_m_);
    if (!marks_.empty() && marks_.back().first == watermark_)
      ++marks_.back().second;
    else
      marks_.emplace_back(watermark_, 1);
    return watermark_;
  }

  /// A region opened but not handed over (its stop event could not be recorded).
  void region_abandoned(std::int64_t mark) noexcept {
    std::lock_guard lock(tl_m_);
    forget_mark(mark);
  }

  /// A guarded region whose work lies between events `start` and `stop` (recorded on its
  /// stream) ended on the host; `mark` is what region_opened returned. With `drain`, waits (up to
  /// the drain timeout) until every region of this session has finished on the device; otherwise
  /// waits only for the oldest ones beyond the in-flight allowance. Returns the device time of the
  /// regions now known to be finished: the caller accounts it.
  std::uint64_t region_ended(cudaEvent_t start, cudaEvent_t stop, std::int64_t mark, bool drain) {
    {
      std::lock_guard lock(m_);
      pending_.push_back({start, stop, mark});
    }
    if (drain) return drain_regions(true, true);
    relaxed_capture relaxed;
    std::vector<region> finished, unknown, to_wait;
    {
      std::lock_guard lock(m_);
      while (!pending_.empty()) {
        const event_state s = query_event(pending_.front().stop);
        if (s == event_state::pending) break;
        (s == event_state::done ? finished : unknown).push_back(pending_.front());
        pending_.pop_front();
      }
      const std::uint32_t allowed = in_flight_allowance(avg_region_ns_, options_.max_in_flight_ns);
      while (pending_.size() > allowed) {
        to_wait.push_back(pending_.front());
        pending_.pop_front();
      }
    }
    wait_all(to_wait, finished, unknown, true);
    drop_unknown(unknown);
    return settle(finished);
  }

  /// Waits until every guarded region has finished; returns their device time (to account).
  /// `bounded`: gives up after the drain timeout, leaves the unfinished regions in flight and
  /// counts a drain timeout. Unbounded (synchronize()): waits as long as it takes. `handover`
  /// (the device is about to be handed over): with drain_scope::device, then also waits for all
  /// other work of this process on the device.
  std::uint64_t drain_regions(bool bounded, bool handover = false) {
    std::vector<region> all, finished, unknown;
    {
      std::lock_guard lock(m_);
      all.assign(pending_.begin(), pending_.end());
      pending_.clear();
      ++stats_.drains;
    }
    relaxed_capture relaxed;
    wait_all(all, finished, unknown, bounded);
    drop_unknown(unknown);
    const std::uint64_t used = settle(finished);
    if (handover && options_.drain == drain_scope::device) drain_device();
    return used;
  }

  /// Regions recorded but not yet known to be finished.
  std::size_t regions_in_flight() {
    std::lock_guard lock(m_);
    return pending_.size();
  }

  /// The recent average device time of a guarded region (0 before the first one finished).
  std::uint64_t average_region_ns() {
    std::lock_guard lock(m_);
    return avg_region_ns_;
  }

  void count_captured_guard() noexcept {
    std::lock_guard lock(m_);
    ++stats_.captured_guards;
  }

  // ---- budgeted memory ---------------------------------------------------------------------

  /// Charges `bytes` to the budget, waiting up to the allocation timeout. Frees of this session
  /// still in flight are waited for first when the bytes do not fit: they may be what is missing.
  /// Inside a guard (on this thread) it does not wait for other sessions: errc::timeout at once.
  void charge(std::uint64_t bytes) {
    check_not_forked();
    release_finished_frees(false);
    if (core_->grow(bytes, 0, false)) return;
    if ((release_finished_frees(true) > 0 || release_pool_memory(true) > 0) &&
        core_->grow(bytes, 0, false))
      return;
    if (guards_on_this_thread > 0)
      throw error(errc::timeout,
                  "session '" + core_->name() + "': " + gpushare::detail::format_bytes(bytes) +
                      " do not fit in the budget now, and this thread is inside a scoped_kernel, "
                      "where an allocation does not wait for memory: it would hold the GPU while "
                      "it waits, and the session that would free the memory may need the GPU "
                      "first. Allocate before the guard (or reserve() ahead)");
    const std::uint64_t t = options_.allocation_timeout_ns;
    core_->grow(bytes, t == no_timeout ? gpushare::detail::wait_forever_ns : t, true);
  }

  void uncharge(std::uint64_t bytes) noexcept { core_->shrink(bytes); }

  /// Budgeted cudaMalloc: reserve, allocate, roll the reservation back if the allocation fails.
  void* allocate(std::size_t bytes) {
    check_not_forked();
    return charged_allocation(bytes, "cudaMalloc", [&](void** p) { return cudaMalloc(p, bytes); });
  }

  /// Frees memory of this session: cudaFree (which waits for the device, so the memory is free
  /// when it returns), then the bytes go back to the budget. A pointer from allocate_async is
  /// freed the stream-ordered way instead, on the stream it was allocated on. A failed cudaFree
  /// keeps the bytes charged. Never throws; inert in a forked child.
  void deallocate(void* p, std::size_t bytes) noexcept {
    if (!p || forked()) return;
    cudaStream_t stream = nullptr;
    if (stream_ordered(p, stream)) {
      deallocate_async(p, bytes, stream);
      return;
    }
    try {
      device_scope on(ordinal_);
      if (own_call([&] { return cudaFree(p); }) != cudaSuccess) {
        kept_charged();
        return;
      }
    } catch (...) {
      kept_charged();
      return;
    }
    uncharge(bytes);
  }

  /// Budgeted stream-ordered allocation on `stream`, from this session's own memory pool (so
  /// that trimming it never touches the application's pools). During a stream capture the
  /// allocation becomes a graph node: its bytes are graph memory, charged from the capture on
  /// until release_graph_memory() (a free of it, captured or not, does not return them).
  void* allocate_async(std::size_t bytes, cudaStream_t stream) {
    check_not_forked();
    if (bytes == 0) return nullptr;
    bool capturing = false;
    {
      device_scope on(ordinal_);
      check(capture_state(stream, capturing), "cudaStreamIsCapturing");
    }
    cudaMemPool_t pool = own_pool();
    void* p = charged_allocation(bytes, "cudaMallocFromPoolAsync", [&](void** out) {
      return cudaMallocFromPoolAsync(out, bytes, pool, stream);
    });
    try {
      std::lock_guard lock(m_);
      async_[p] = {bytes, stream, capturing};
      if (capturing) {
        graph_.add(bytes);
      } else {
        pool_outstanding_ = gpushare::detail::sat_add(pool_outstanding_, bytes);
        pool_charged_ = gpushare::detail::sat_add(pool_charged_, bytes);
      }
    } catch (...) {
      (void)own_call([&] { return cudaFreeAsync(p, stream); });
      uncharge(bytes);
      throw;
    }
    return p;
  }

  /// cudaFreeAsync on `stream`; the bytes return to the budget once the free has executed on the
  /// device and the pool has given the memory back to the device (checked at the next
  /// allocation, free or synchronize(), and whenever a session waits for memory). A free of graph
  /// memory (allocated during a capture) returns nothing: the graph memory pool keeps it. Never
  /// throws (Thrust calls it where an exception would terminate): if the free cannot be issued
  /// or confirmed, the bytes stay charged (cuda_stats::frees_kept_charged). Inert in a forked
  /// child.
  void deallocate_async(void* p, std::size_t bytes, cudaStream_t stream) noexcept {
    if (!p || forked()) return;
    async_record rec{bytes, stream, false};
    bool known = false;
    try {
      std::lock_guard lock(m_);
      if (const auto it = async_.find(p); it != async_.end()) {
        rec = it->second;
        known = true;
        async_.erase(it);
      }
    } catch (...) {
    }
    try {
      device_scope on(ordinal_);
      bool capturing = false;
      if (capture_state(stream, capturing) != cudaSuccess) return kept_charged();
      if (own_call([&] { return cudaFreeAsync(p, stream); }) != cudaSuccess) return kept_charged();
      // Graph memory stays charged (release_graph_memory). A pool allocation freed inside a
      // capture is returned when the graph runs: keep it charged.
      if (rec.captured) return;
      if (capturing) return kept_charged();
      const bool pooled = known; // allocated by allocate_async outside a capture
      cudaEvent_t done = nullptr;
      try {
        done = take_event(false);
      } catch (...) {
      }
      if (!done || own_call([&] { return cudaEventRecord(done, stream); }) != cudaSuccess) {
        // No event: wait for the stream here instead.
        relaxed_capture relaxed;
        if (own_call([&] { return cudaStreamSynchronize(stream); }) != cudaSuccess) {
          drop_event(done);
          return kept_charged();
        }
        give_event(done, false);
        freed(rec.bytes, pooled);
        release_pool_memory(false);
        return;
      }
      {
        std::lock_guard lock(m_);
        deferred_.push_back({done, rec.bytes, pooled});
      }
      release_finished_frees(false);
    } catch (...) {
      kept_charged();
    }
  }

  /// Returns to the budget the bytes of stream-ordered frees that have executed (with `wait`:
  /// waits for all of them). Returns the bytes returned to the budget.
  std::uint64_t release_finished_frees(bool wait) {
    if (forked()) return 0;
    std::vector<deferred_free> candidates;
    {
      std::lock_guard lock(m_);
      candidates.swap(deferred_);
    }
    if (candidates.empty()) return release_pool_memory(false);
    std::vector<deferred_free> still;
    std::uint64_t plain = 0, pooled = 0;
    {
      relaxed_capture relaxed;
      for (const deferred_free& d : candidates) {
        const event_state s = wait ? wait_for_event(d.done) : query_event(d.done);
        if (s == event_state::pending) {
          still.push_back(d);
          continue;
        }
        if (s == event_state::done) {
          give_event(d.done, false);
          (d.pooled ? pooled : plain) += d.bytes;
        } else {
          drop_event(d.done);
          kept_charged();
        }
      }
    }
    {
      std::lock_guard lock(m_);
      deferred_.insert(deferred_.begin(), still.begin(), still.end());
      pool_outstanding_ -= std::min(pool_outstanding_, pooled);
    }
    if (plain) uncharge(plain);
    return plain + release_pool_memory(false);
  }

  /// The application's graphs holding this session's graph memory are gone: trims the device's
  /// graph memory pool and returns to the budget what it no longer reserves.
  std::uint64_t release_graph_memory() {
    check_not_forked();
    const std::uint64_t give_back = graph_.release(ordinal_);
    if (give_back) uncharge(give_back);
    return give_back;
  }

  /// Gives back to the budget what the session's pool has given back to the device. With
  /// `trim` (or when another session waits for memory) first asks the pool to release all it
  /// does not use. Returns the bytes returned to the budget.
  std::uint64_t release_pool_memory(bool trim) noexcept {
    if (forked()) return 0;
    std::uint64_t releasable = 0;
    cudaMemPool_t pool = nullptr;
    {
      std::lock_guard lock(m_);
      pool = pool_;
      releasable = pool_charged_ > pool_outstanding_ ? pool_charged_ - pool_outstanding_ : 0;
    }
    if (!pool || releasable == 0) return 0;
    if (trim || core_->memory_waiters()) (void)own_call([&] { return cudaMemPoolTrimTo(pool, 0); });
    std::uint64_t reserved = 0;
    if (own_call([&] {
          return cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved);
        }) != cudaSuccess)
      return 0;
    std::uint64_t give_back = 0;
    {
      std::lock_guard lock(m_);
      // The pool holds `reserved` bytes of device memory; the budget must cover at least that,
      // and what is still allocated from it.
      const std::uint64_t keep = std::max(pool_outstanding_, std::min(pool_charged_, reserved));
      if (pool_charged_ > keep) {
        give_back = pool_charged_ - keep;
        pool_charged_ = keep;
      }
    }
    if (give_back) uncharge(give_back);
    return give_back;
  }

  // ---- sizes of malloc()ed pointers --------------------------------------------------------

  void remember(void* p, std::size_t bytes, allocation_kind kind) {
    std::lock_guard lock(m_);
    sizes_[p] = {bytes, kind};
  }

  /// The size recorded for `p`, forgetting it. Throws errc::invalid_argument for a pointer this
  /// session did not allocate (or freed already), or one allocated the other way (malloc vs
  /// malloc_async): each must be freed by its own counterpart.
  std::size_t forget(void* p, allocation_kind kind) {
    std::lock_guard lock(m_);
    const auto it = sizes_.find(p);
    if (it == sizes_.end())
      throw error(errc::invalid_argument,
                  "free(): the pointer was not allocated by this device session's malloc() or "
                  "malloc_async(), or was freed already");
    if (it->second.kind != kind)
      throw error(errc::invalid_argument,
                  kind == allocation_kind::plain
                      ? "free(): the pointer comes from malloc_async(); free it with "
                        "free_async(p, stream), in stream order"
                      : "free_async(): the pointer comes from malloc(); free it with free(p)");
    const std::size_t bytes = it->second.bytes;
    sizes_.erase(it);
    return bytes;
  }

  /// Records the device's free and total memory in the table (for snapshots and the CLI).
  void observe_device(const std::string& name) {
    check_not_forked();
    device_scope on(ordinal_);
    std::size_t free = 0, total = 0;
    check(own_call([&] { return cudaMemGetInfo(&free, &total); }), "cudaMemGetInfo");
    gpushare::detail::record_device_observation(core_->core(), name, total, free, ordinal_);
  }

private:
  struct region {
    cudaEvent_t start, stop;
    std::int64_t mark; // from region_opened
  };
  struct deferred_free {
    cudaEvent_t done;
    std::uint64_t bytes;
    bool pooled; // from the session's pool: returned to the budget as the pool gives it back
  };
  struct async_record {
    std::uint64_t bytes;
    cudaStream_t stream;
    bool captured; // allocated during a stream capture (a graph memory node)
  };
  struct sized {
    std::size_t bytes;
    allocation_kind kind;
  };

  /// Waits for each region's stop event, sorting them into finished, unknown (CUDA cannot say)
  /// and, when `bounded` and the drain timeout passes, back into pending_ (oldest first).
  void wait_all(const std::vector<region>& rs, std::vector<region>& finished,
                std::vector<region>& unknown, bool bounded) {
    const std::uint64_t limit = options_.drain_timeout_ns;
    const bool forever = !bounded || limit == no_timeout;
    const std::uint64_t deadline =
        forever ? 0 : gpushare::detail::sat_add(gpushare::detail::monotonic_ns(), limit);
    std::uint64_t avg = 0;
    {
      std::lock_guard lock(m_);
      avg = avg_region_ns_;
    }
    // Sleep most of a region's expected length first, then poll every 1/32 of it (10 us to
    // 1 ms): completion is seen within ~3% of a region, with a few queries.
    const std::uint64_t pause = std::clamp<std::uint64_t>(avg / 32, 10'000, 1'000'000);
    std::uint64_t first = std::max<std::uint64_t>(avg / 8 * 7, pause);
    std::vector<region> late;
    for (const region& r : rs) {
      const event_state s =
          forever ? wait_for_event(r.stop) : wait_for_event(r.stop, deadline, first, pause);
      first = pause; // the next regions ran meanwhile, mostly
      if (s == event_state::done)
        finished.push_back(r);
      else if (s == event_state::unknown)
        unknown.push_back(r);
      else
        late.push_back(r);
    }
    if (late.empty()) return;
    std::lock_guard lock(m_);
    ++stats_.drain_timeouts;
    pending_.insert(pending_.begin(), late.begin(), late.end());
  }

  /// Regions whose completion CUDA cannot report: not accounted, events dropped (they may
  /// still be in use, so not reused).
  void drop_unknown(const std::vector<region>& rs) noexcept {
    if (rs.empty()) return;
    for (const region& r : rs) {
      drop_event(r.start);
      drop_event(r.stop);
    }
    {
      std::lock_guard lock(tl_m_);
      for (const region& r : rs) forget_mark(r.mark);
      tidy_timeline();
    }
    std::lock_guard lock(m_);
    stats_.unknown_regions += rs.size();
  }

  /// Device time of finished regions not accounted yet: each region is placed on the
  /// accounting timeline (its start's time since the reference event), and only the part of it
  /// that no region accounted before covers counts. Regions on one stream never overlap; guards
  /// of the session on several streams do, and then the session held the device once, not
  /// twice. Returns the events to the pool.
  std::uint64_t settle(const std::vector<region>& rs) {
    if (rs.empty()) return 0;
    std::uint64_t sum = 0;
    std::lock_guard tl(tl_m_);
    for (const region& r : rs) {
      float ms = 0;
      std::uint64_t ns = 0;
      if (cudaEventElapsedTime(&ms, r.start, r.stop) == cudaSuccess && ms > 0)
        ns = static_cast<std::uint64_t>(static_cast<double>(ms) * 1e6);
      sum = gpushare::detail::sat_add(sum, ns > 0 ? uncovered(r.start, ns) : 0);
      {
        std::lock_guard lock(m_);
        avg_region_ns_ = update_average(avg_region_ns_, ns);
      }
      forget_mark(r.mark);
      if (r.start != ref_) give_event(r.start, true);
      give_event(r.stop, true);
    }
    tidy_timeline();
    return sum;
  }

  /// The part of a finished region of `ns` starting at event `start` that the accounted
  /// timeline does not cover yet (adding it). The reference event is the start of an earlier
  /// region; it moves to a newer one once a second from it, so that the float milliseconds of
  /// cudaEventElapsedTime keep sub-microsecond precision. Call with tl_m_ held.
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
        give_event(ref_, true);
        ref_ = start;
        base_ = at;
      }
    }
    const std::uint64_t fresh = covered_.add(at, at + len);
    watermark_ = std::max(watermark_, at + len);
    return fresh;
  }

  /// Forgets accounted time that no region still open or in flight can overlap: they started
  /// after their mark. Call with tl_m_ held.
  void tidy_timeline() noexcept {
    covered_.drop_before(marks_.empty() ? watermark_ : marks_.front().first);
    covered_.keep_newest(1024);
  }

  /// Removes one region's mark. Call with tl_m_ held.
  void forget_mark(std::int64_t mark) noexcept {
    const auto it = std::lower_bound(marks_.begin(), marks_.end(), mark,
                                     [](const std::pair<std::int64_t, std::uint32_t>& m,
                                        std::int64_t v) { return m.first < v; });
    if (it == marks_.end() || it->first != mark) return;
    if (--it->second == 0) marks_.erase(it);
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

  void kept_charged() noexcept {
    try {
      std::lock_guard lock(m_);
      ++stats_.frees_kept_charged;
    } catch (...) {
    }
  }

  /// A free of `bytes` has executed: pooled bytes stay charged until the pool gives them back.
  void freed(std::uint64_t bytes, bool pooled) noexcept {
    if (!pooled) {
      uncharge(bytes);
      return;
    }
    std::lock_guard lock(m_);
    pool_outstanding_ -= std::min(pool_outstanding_, bytes);
  }

  /// Whether `p` came from allocate_async (and on which stream).
  bool stream_ordered(void* p, cudaStream_t& stream) noexcept {
    std::lock_guard lock(m_);
    const auto it = async_.find(p);
    if (it == async_.end()) return false;
    stream = it->second.stream;
    return true;
  }

  /// This session's memory pool on its device, created at first use. Release threshold 0: it
  /// gives unused memory back to the device at each synchronisation.
  cudaMemPool_t own_pool() {
    std::lock_guard lock(m_);
    if (pool_) return pool_;
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = ordinal_;
    check(own_call([&] { return cudaMemPoolCreate(&pool_, &props); }), "cudaMemPoolCreate");
    return pool_;
  }

  /// Charges `bytes`, then runs `allocate_once` (a CUDA allocation call named `call`) on this
  /// device with retries; rolls the charge back if it fails.
  template <class F>
  void* charged_allocation(std::size_t bytes, const char* call, F&& allocate_once) {
    if (bytes == 0) return nullptr;
    charge(bytes);
    void* p = nullptr;
    cudaError_t e = cudaSuccess;
    try {
      device_scope on(ordinal_);
      e = with_retries([&] { return allocate_once(&p); });
    } catch (...) {
      uncharge(bytes);
      throw;
    }
    if (e != cudaSuccess) {
      uncharge(bytes);
      throw_allocation_failure(e, call, bytes);
    }
    return p;
  }

  /// Runs an allocation; if the device is out of memory although the budget allowed it, tries
  /// again a few times over about 300 ms. Memory of a process that just died is released by the
  /// driver while its process is torn down, which can finish after its table slot (an OFD lock,
  /// released when its files close) was already reclaimed and handed to us.
  template <class F> static cudaError_t with_retries(F&& allocate_once) {
    cudaError_t e = own_call(allocate_once);
    for (int attempt = 0; e == cudaErrorMemoryAllocation && attempt < 5; ++attempt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10 << attempt));
      e = own_call(allocate_once);
    }
    return e;
  }

  [[noreturn]] void throw_allocation_failure(cudaError_t e, const char* call, std::size_t bytes) {
    std::size_t free = 0, total = 0;
    std::string device_view;
    try {
      device_scope on(ordinal_); // the session's device, not the thread's current one
      if (own_call([&] { return cudaMemGetInfo(&free, &total); }) == cudaSuccess)
        device_view = "; the device has " + gpushare::detail::format_bytes(free) + " free of " +
                      gpushare::detail::format_bytes(total);
    } catch (...) {
    }
    if (e == cudaErrorMemoryAllocation)
      throw error(errc::cuda_error,
                  std::string(call) + " of " + gpushare::detail::format_bytes(bytes) +
                      " for session '" + core_->name() + "' failed although its budget allowed it" +
                      device_view +
                      ": memory is used outside gpushare's accounting (another program, or a "
                      "library's workspace); raise GPUSHARE_DEVICE_HEADROOM or record such use "
                      "with set_external_usage()");
    throw_cuda(e, call);
  }

  std::shared_ptr<gpushare::detail::session_core> core_;
  int ordinal_;
  resolved_device_options options_;
  pid_t owner_;
  std::mutex m_;
  std::deque<region> pending_;
  std::vector<cudaEvent_t> timing_events_, untimed_events_;
  std::vector<deferred_free> deferred_;
  std::unordered_map<void*, sized> sizes_;
  std::unordered_map<void*, async_record> async_;
  cudaMemPool_t pool_ = nullptr;
  graph_memory graph_;
  std::uint64_t pool_outstanding_ = 0; // bytes allocated from pool_ and not yet freed
  std::uint64_t pool_charged_ = 0;     // bytes charged to the budget for pool_
  std::uint64_t avg_region_ns_ = 0;
  cuda_stats stats_;
  // The accounting timeline (ns; guarded by tl_m_, taken before m_ when both are): the
  // reference event and its place on the timeline, the time accounted lately, the latest end
  // accounted, and the marks of the regions open or in flight (ascending, with counts).
  std::mutex tl_m_;
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
