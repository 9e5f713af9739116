// SPDX-License-Identifier: Apache-2.0
// Reusable CUDA events of one device session: a pool of timing events (the start and stop of
// guarded regions) and one of untimed events (the completion of stream-ordered frees), all
// blocking-sync, so that a wait for one sleeps rather than spins. Part of device_state
// (state.hpp); its mutex is a leaf: nothing else is locked while it is held.
#pragma once

#include <cuda_runtime_api.h>

#include <mutex>
#include <vector>

#include <gpushare/cuda/detail/calls.hpp>
#include <gpushare/cuda/detail/device_options.hpp>
#include <gpushare/cuda/detail/errors.hpp>

#include <gpushare/cuda/detail/runtime_names_begin.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

/// Which pool an event belongs to.
enum class event_kind {
  timing,  ///< measures elapsed time (cudaEventElapsedTime): guarded regions
  untimed, ///< cudaEventDisableTiming, cheaper to record: completion only
};

class event_pool {
public:
  explicit event_pool(int ordinal) noexcept : ordinal_(ordinal) {}
  event_pool(const event_pool&) = delete;
  event_pool& operator=(const event_pool&) = delete;

  /// An event on this device, from the pool or new.
  cudaEvent_t take(event_kind kind) {
    {
      std::lock_guard lock(m_);
      auto& pool = pool_of(kind);
      if (!pool.empty()) {
        cudaEvent_t e = pool.back();
        pool.pop_back();
        return e;
      }
    }
    device_scope on(ordinal_);
    cudaEvent_t e = nullptr;
    const unsigned flags =
        cudaEventBlockingSync | (kind == event_kind::timing ? 0u : cudaEventDisableTiming);
    check(own_call([&] { return cudaEventCreateWithFlags(&e, flags); }),
          "cudaEventCreateWithFlags");
    return e;
  }

  /// Returns a completed (or never recorded) event to its pool.
  void give(cudaEvent_t e, event_kind kind) noexcept {
    if (!e) return;
    try {
      std::lock_guard lock(m_);
      auto& pool = pool_of(kind);
      if (pool.size() < 4 * max_in_flight_regions) {
        pool.push_back(e);
        return;
      }
    } catch (...) {
    }
    drop(e);
  }

  /// Destroys an event, also one whose work may not have completed (CUDA releases it then).
  static void drop(cudaEvent_t e) noexcept {
    if (e) (void)own_call([&] { return cudaEventDestroy(e); });
  }

  /// Destroys the pooled events (timing ones first), at the session's end.
  void drop_all() noexcept {
    for (cudaEvent_t e : timing_) drop(e);
    for (cudaEvent_t e : untimed_) drop(e);
    timing_.clear();
    untimed_.clear();
  }

private:
  std::vector<cudaEvent_t>& pool_of(event_kind kind) noexcept {
    return kind == event_kind::timing ? timing_ : untimed_;
  }

  int ordinal_;
  std::mutex m_;
  std::vector<cudaEvent_t> timing_, untimed_;
};

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare

#include <gpushare/cuda/detail/runtime_names_end.hpp>
