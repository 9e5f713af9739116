// SPDX-License-Identifier: Apache-2.0
// A guard's work still running on the GPU after the guard ended, told to the table
// (gpushare/detail/sched_gpu.hpp; docs/design.md section 12, "Guards on streams", rule 2): as a
// guard of a session above the lowest class ends with work queued, its slot is marked with a
// deadline, and, while a lower class is active, a host function that clears the mark runs on the
// session's side stream (host_signal.hpp) once the guard's stop event has executed. Part of
// device_state (state.hpp).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <new>

#include <gpushare/cuda/detail/calls.hpp>
#include <gpushare/cuda/detail/device_options.hpp>
#include <gpushare/cuda/detail/errors.hpp>
#include <gpushare/cuda/detail/host_signal.hpp>
#include <gpushare/cuda/stats.hpp>
#include <gpushare/detail/posix.hpp>
#include <gpushare/detail/session_core.hpp>

#include <gpushare/cuda/detail/runtime_names_begin.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

/// What a host function needs: the session (kept alive until it ran) and the mark to clear.
struct gpu_mark_ticket {
  std::shared_ptr<gpushare::detail::session_core> core;
  std::uint64_t mark = 0;
};

/// Runs on the CUDA driver's host-function thread: no CUDA call, no lock.
inline void CUDART_CB gpu_work_done(void* p) noexcept {
  std::unique_ptr<gpu_mark_ticket> t(static_cast<gpu_mark_ticket*>(p));
  t->core->gpu_work_finished(t->mark);
}

/// How long after a guard's end its queued work may hold a lower class back. With a host
/// function to clear the mark, the longest any mark lasts (1 s; the drain timeout if shorter):
/// the host function ends it at the real end, which no estimate knows (one long kernel after
/// many short ones). Without one, the estimate itself: a lower class that became active after
/// the guard ended may then start before a longer-than-usual region finished.
inline std::uint64_t gpu_mark_span(std::uint64_t estimate_ns, bool cleared_by_host_function,
                                   std::uint64_t drain_timeout_ns) noexcept {
  const std::uint64_t span =
      cleared_by_host_function ? gpushare::detail::max_gpu_mark_ns : estimate_ns;
  return std::min({span, drain_timeout_ns, gpushare::detail::max_gpu_mark_ns});
}

class gpu_marks {
public:
  gpu_marks(gpushare::detail::session_core& core, side_stream& side,
            const state_options& options) noexcept
      : core_(core), side_(side), options_(options) {}
  gpu_marks(const gpu_marks&) = delete;
  gpu_marks& operator=(const gpu_marks&) = delete;

  /// A guard ended with `stop` recorded on its stream, leaving about `estimate_ns` of work in
  /// flight: marks it in the table (see the file comment). `core` keeps the session alive for
  /// the host function. Never throws: on any CUDA error the mark ends at its deadline.
  void guard_ended(const std::shared_ptr<gpushare::detail::session_core>& core, cudaEvent_t stop,
                   std::uint64_t estimate_ns) noexcept {
    const std::uint64_t now = gpushare::detail::monotonic_ns();
    const bool lower = core_.lower_class_active(now);
    const std::uint64_t until = gpushare::detail::sat_add(
        now, gpu_mark_span(estimate_ns, lower, options_.drain_timeout_ns));
    const std::uint64_t mark = core_.mark_gpu_work(until);
    if (mark == 0) return;
    marked_.fetch_add(1, std::memory_order_relaxed);
    if (!lower) return;
    try {
      relaxed_capture relaxed;
      auto t = std::make_unique<gpu_mark_ticket>(gpu_mark_ticket{core, mark});
      if (side_.after({stop}, &gpu_work_done, t.get())) {
        (void)t.release(); // the host function owns it now
        host_functions_.fetch_add(1, std::memory_order_relaxed);
      }
    } catch (...) {
      // no side stream, no memory: the mark ends at its deadline
    }
  }

  /// Adds marked_exits and mark_host_functions to `s`.
  void add_stats(cuda_stats& s) const noexcept {
    s.marked_exits += marked_.load(std::memory_order_relaxed);
    s.mark_host_functions += host_functions_.load(std::memory_order_relaxed);
  }

private:
  gpushare::detail::session_core& core_;
  side_stream& side_;
  state_options options_;
  std::atomic<std::uint64_t> marked_{0};
  std::atomic<std::uint64_t> host_functions_{0};
};

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare

#include <gpushare/cuda/detail/runtime_names_end.hpp>
