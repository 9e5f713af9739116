// SPDX-License-Identifier: Apache-2.0
// Stream-ordered memory of one device session, as the budget sees it. Allocations come from a
// memory pool of the session's own; their frees execute later, on their streams, and return
// their bytes to the budget only once executed (an event recorded after each) and once the pool
// has given the memory back to the device. Allocations made during a stream capture are graph
// memory (graph_memory.hpp), charged until release_graph_memory(). Part of device_state
// (state.hpp); its mutex is a leaf: nothing else is locked while it is held.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

#include <gpushare/cuda/detail/calls.hpp>
#include <gpushare/cuda/detail/errors.hpp>
#include <gpushare/cuda/detail/event_pool.hpp>
#include <gpushare/cuda/detail/graph_memory.hpp>
#include <gpushare/cuda/stats.hpp>
#include <gpushare/detail/budget.hpp>
#include <gpushare/detail/session_core.hpp>

#include <gpushare/cuda/detail/runtime_names_begin.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

/// Whether release_finished_frees waits for the frees still executing.
enum class frees_wait { poll, wait };
/// Whether release_pool_memory asks the pool to give back all it does not use (cudaMemPoolTrimTo)
/// always, or only when another session waits for memory.
enum class pool_trim { when_memory_wanted, always };
/// Where freed memory came from: the session's pool keeps it (charged) until it gives it back.
enum class freed_from { elsewhere, own_pool };

class stream_pool {
public:
  stream_pool(gpushare::detail::session_core& core, int ordinal, event_pool& events) noexcept
      : core_(core), ordinal_(ordinal), events_(events) {}
  stream_pool(const stream_pool&) = delete;
  stream_pool& operator=(const stream_pool&) = delete;

  /// This session's memory pool on its device, created at first use. Release threshold 0: it
  /// gives unused memory back to the device at each synchronisation. cudaMemPoolCreate is a
  /// "potentially unsafe" call to a stream capture: in the thread's Global mode it fails with
  /// cudaErrorStreamCaptureUnsupported while any thread captures in Global mode, or this thread
  /// captures (seen on an H200, CUDA 13.0), and invalidates the capture. The first
  /// allocation may come during the application's capture, so it is created in Relaxed mode,
  /// which permits such calls (cudaThreadExchangeStreamCaptureMode) and leaves the capture
  /// alone: the pool is no part of what is captured.
  cudaMemPool_t own() {
    std::lock_guard lock(m_);
    if (pool_) return pool_;
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = ordinal_;
    relaxed_capture relaxed;
    check(own_call([&] { return cudaMemPoolCreate(&pool_, &props); }), "cudaMemPoolCreate");
    return pool_;
  }

  /// `bytes` (charged) were allocated from the pool, or, during a capture, as graph memory.
  void allocated(std::uint64_t bytes, bool captured) noexcept {
    if (captured) {
      graph_.add(bytes);
      return;
    }
    std::lock_guard lock(m_);
    pool_outstanding_ = gpushare::detail::sat_add(pool_outstanding_, bytes);
    pool_charged_ = gpushare::detail::sat_add(pool_charged_, bytes);
  }

  /// A free of `bytes` was issued; untimed event `done`, recorded after it, says when it ran.
  void free_issued(cudaEvent_t done, std::uint64_t bytes, freed_from from) {
    std::lock_guard lock(m_);
    deferred_.push_back({done, bytes, from});
  }

  /// A free of `bytes` has executed: pool bytes stay charged until the pool gives them back.
  void freed(std::uint64_t bytes, freed_from from) noexcept {
    if (from == freed_from::elsewhere) {
      core_.shrink(bytes);
      return;
    }
    std::lock_guard lock(m_);
    pool_outstanding_ -= std::min(pool_outstanding_, bytes);
  }

  /// Returns to the budget the bytes of stream-ordered frees that have executed (with
  /// frees_wait::wait: waits for all of them). Returns the bytes returned to the budget.
  std::uint64_t release_finished_frees(frees_wait how) {
    std::vector<deferred_free> candidates;
    {
      std::lock_guard lock(m_);
      candidates.swap(deferred_);
    }
    if (candidates.empty()) return release_pool_memory(pool_trim::when_memory_wanted);
    std::vector<deferred_free> still;
    std::uint64_t plain = 0, pooled = 0;
    {
      relaxed_capture relaxed;
      for (const deferred_free& d : candidates) {
        const event_state s =
            how == frees_wait::wait ? wait_for_event(d.done) : query_event(d.done);
        // A pool free seen complete by a query is not yet "observed on the host": until a
        // synchronisation observes it, the pool cannot give its memory back (cudaMemPoolTrimTo's
        // note; seen on an H200, CUDA 13.0). Synchronising the completed event (at once) does.
        // The free ran either way: if that fails, the pool keeps the bytes, and so the budget.
        if (s == event_state::done && how == frees_wait::poll && d.from == freed_from::own_pool)
          (void)wait_for_event(d.done);
        if (s == event_state::pending) {
          still.push_back(d);
          continue;
        }
        if (s == event_state::done) {
          events_.give(d.done, event_kind::untimed);
          (d.from == freed_from::own_pool ? pooled : plain) += d.bytes;
        } else {
          event_pool::drop(d.done);
          kept_charged();
        }
      }
    }
    {
      std::lock_guard lock(m_);
      deferred_.insert(deferred_.begin(), still.begin(), still.end());
      pool_outstanding_ -= std::min(pool_outstanding_, pooled);
    }
    if (plain) core_.shrink(plain);
    return plain + release_pool_memory(pool_trim::when_memory_wanted);
  }

  /// Gives back to the budget what the pool has given back to the device. Returns the bytes
  /// returned to the budget.
  std::uint64_t release_pool_memory(pool_trim trim) noexcept {
    std::uint64_t releasable = 0;
    cudaMemPool_t pool = nullptr;
    {
      std::lock_guard lock(m_);
      pool = pool_;
      releasable = pool_charged_ > pool_outstanding_ ? pool_charged_ - pool_outstanding_ : 0;
    }
    if (!pool || releasable == 0) return 0;
    std::uint64_t reserved = 0;
    {
      // In the Relaxed capture mode, as every call of gpushare's own: on an H200 (driver 580,
      // CUDA 13.0) a synchronize() that released a pool free invalidated an application's Global
      // capture on another thread (test: cuda-layer "synchronize() with a pool free pending ...").
      relaxed_capture relaxed;
      if (trim == pool_trim::always || core_.memory_waiters())
        (void)own_call([&] { return cudaMemPoolTrimTo(pool, 0); });
      if (own_call([&] {
            return cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved);
          }) != cudaSuccess)
        return 0;
    }
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
    if (give_back) core_.shrink(give_back);
    return give_back;
  }

  /// The application's graphs holding this session's graph memory are gone: trims the device's
  /// graph memory pool and returns to the budget what it no longer reserves.
  std::uint64_t release_graph_memory() {
    const std::uint64_t give_back = graph_.release(ordinal_);
    if (give_back) core_.shrink(give_back);
    return give_back;
  }

  /// A free whose completion could not be issued or confirmed: its bytes stay charged.
  void kept_charged() noexcept {
    try {
      std::lock_guard lock(m_);
      ++frees_kept_charged_;
    } catch (...) {
    }
  }

  /// Fills in the counters kept here.
  void add_stats(cuda_stats& s) {
    {
      std::lock_guard lock(m_);
      s.frees_kept_charged = frees_kept_charged_;
      s.pool_bytes_held = pool_charged_ > pool_outstanding_ ? pool_charged_ - pool_outstanding_ : 0;
    }
    s.graph_bytes_held = graph_.held();
  }

  /// At the session's end: what no graph uses leaves the device's graph memory pool too.
  void trim_graph_memory_at_end() noexcept { graph_.trim_at_end(ordinal_); }

  /// Destroys the pool, at the session's end.
  void destroy() noexcept {
    if (pool_) (void)own_call([&] { return cudaMemPoolDestroy(pool_); });
    pool_ = nullptr;
  }

private:
  struct deferred_free {
    cudaEvent_t done;
    std::uint64_t bytes;
    freed_from from;
  };

  gpushare::detail::session_core& core_;
  int ordinal_;
  event_pool& events_;
  std::mutex m_;
  cudaMemPool_t pool_ = nullptr;
  std::vector<deferred_free> deferred_;
  std::uint64_t pool_outstanding_ = 0; // bytes allocated from pool_ and not yet freed
  std::uint64_t pool_charged_ = 0;     // bytes charged to the budget for pool_
  std::uint64_t frees_kept_charged_ = 0;
  graph_memory graph_;
};

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare

#include <gpushare/cuda/detail/runtime_names_end.hpp>
