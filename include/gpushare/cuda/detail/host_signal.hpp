// SPDX-License-Identifier: Apache-2.0
// Host functions of gpushare's own, on a side stream (docs/design.md section 12, "Waiting"):
//   * side_stream: a non-blocking stream of the session's, created on first use. gpushare makes
//     it wait for the events it follows (cudaStreamWaitEvent) and enqueues its host functions
//     there, so that no application stream ever waits for one of them;
//   * host_signal: raised by a host function once every event it follows has executed. A wait
//     for GPU work blocks on it, with a deadline, and wakes as the work finishes: no sleep
//     polling, and a bound that cudaEventSynchronize cannot give.
// Part of device_state (state.hpp): leaves of its lock order (nothing else is locked while one
// of their mutexes is held).
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <gpushare/cuda/detail/calls.hpp>
#include <gpushare/cuda/detail/errors.hpp>
#include <gpushare/detail/posix.hpp>

#include <gpushare/cuda/detail/runtime_names_begin.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

class side_stream {
public:
  explicit side_stream(int ordinal) noexcept : ordinal_(ordinal) {}
  side_stream(const side_stream&) = delete;
  side_stream& operator=(const side_stream&) = delete;
  ~side_stream() {
    if (s_) (void)own_call([&] { return cudaStreamDestroy(s_); }); // its work still runs out
  }

  /// The stream (created now if needed). Throws errc::cuda_error if it cannot be created.
  cudaStream_t get() {
    std::lock_guard lock(m_);
    if (!s_) {
      device_scope on(ordinal_);
      check(own_call([&] { return cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking); }),
            "cudaStreamCreateWithFlags");
    }
    return s_;
  }

  /// Makes the stream wait for `events`, then enqueues `fn(arg)` on it. Returns whether the host
  /// function was enqueued (if not, the caller still owns `arg`). Call inside a relaxed_capture.
  bool after(const std::vector<cudaEvent_t>& events, cudaHostFn_t fn, void* arg) {
    const cudaStream_t s = get();
    for (cudaEvent_t e : events)
      if (own_call([&] { return cudaStreamWaitEvent(s, e, 0); }) != cudaSuccess) return false;
    return own_call([&] { return cudaLaunchHostFunc(s, fn, arg); }) == cudaSuccess;
  }

private:
  int ordinal_;
  std::mutex m_;
  cudaStream_t s_ = nullptr;
};

/// A one-shot flag a host function raises.
class host_signal {
public:
  /// Waits until the signal is raised or `deadline_ns` (monotonic) passes; returns whether it
  /// was raised.
  bool wait_until(std::uint64_t deadline_ns) {
    std::unique_lock lock(m_);
    while (!raised_) {
      const std::uint64_t now = gpushare::detail::monotonic_ns();
      if (now >= deadline_ns) return false;
      cv_.wait_for(lock, std::chrono::nanoseconds(deadline_ns - now));
    }
    return true;
  }

  /// Arms a signal raised once every event of `events` has executed (a host function on
  /// `side`). Returns nullptr if it could not be armed (the caller then polls).
  static std::shared_ptr<host_signal> after(side_stream& side,
                                            const std::vector<cudaEvent_t>& events) noexcept {
    try {
      auto sig = std::make_shared<host_signal>();
      auto arg = std::make_unique<std::shared_ptr<host_signal>>(sig);
      if (!side.after(events, &raise, arg.get())) return nullptr;
      (void)arg.release(); // the host function owns it now
      return sig;
    } catch (...) {
      return nullptr;
    }
  }

private:
  /// The host function: on the CUDA driver's thread, no CUDA call.
  static void CUDART_CB raise(void* p) noexcept {
    const std::unique_ptr<std::shared_ptr<host_signal>> arg(
        static_cast<std::shared_ptr<host_signal>*>(p));
    host_signal& s = **arg;
    {
      std::lock_guard lock(s.m_);
      s.raised_ = true;
    }
    s.cv_.notify_all();
  }

  std::mutex m_;
  std::condition_variable cv_;
  bool raised_ = false;
};

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare

#include <gpushare/cuda/detail/runtime_names_end.hpp>
