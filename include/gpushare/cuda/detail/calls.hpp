// SPDX-License-Identifier: Apache-2.0
// How the CUDA layer makes its own runtime calls without disturbing the application's:
//   * own_call: a call that may fail leaves the thread's last error as it found it (it clears
//     only an error it caused, never one the application has pending);
//   * relaxed_capture: gpushare's own queries and waits run in the thread's Relaxed stream
//     capture mode, so they never break (or fail because of) the application's capture;
//   * query_event: polls an event through the driver API, leaving the last error alone;
//   * wait_for_event: a bounded wait that polls with a growing sleep instead of spinning;
//   * capture_state: whether a stream is being captured, the legacy stream included.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

#include <gpushare/detail/posix.hpp>

#include <gpushare/cuda/detail/runtime_names_begin.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

/// Runs `call` (returning cudaError_t). If it fails and the thread had no error pending before,
/// clears the error it left; an error the application had pending stays pending. (A failing call
/// replaces the pending error in CUDA's own bookkeeping; peeking first is how gpushare knows
/// whether clearing is safe. A cudaErrorNotReady, which the runtime does not record (observed on
/// an H200, CUDA 13.0), is "cleared" harmlessly: nothing was pending.)
template <class F> cudaError_t own_call(F&& call) {
  const cudaError_t before = cudaPeekAtLastError();
  const cudaError_t e = call();
  if (e != cudaSuccess && before == cudaSuccess) (void)cudaGetLastError();
  return e;
}

/// Puts the calling thread in the Relaxed stream-capture mode for its lifetime (then restores
/// the previous mode). Inside it, gpushare's event queries and waits are not "potentially unsafe
/// calls" to a capture of the application's (cudaThreadExchangeStreamCaptureMode), so they
/// neither fail nor invalidate the capture.
class relaxed_capture {
public:
  relaxed_capture() noexcept {
    if (cudaThreadExchangeStreamCaptureMode(&mode_) != cudaSuccess) {
      (void)cudaGetLastError();
      restore_ = false;
    }
  }
  relaxed_capture(const relaxed_capture&) = delete;
  relaxed_capture& operator=(const relaxed_capture&) = delete;
  ~relaxed_capture() {
    if (restore_) (void)cudaThreadExchangeStreamCaptureMode(&mode_);
  }

private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
  bool restore_ = true;
};

/// A driver API function by name (cuDeviceGet, cuCtxSetCurrent, ...) for CUDA 12.0's ABI,
/// through the runtime (so gpushare never links libcuda): the function, or nullptr.
inline void* driver_entry_point(const char* name) noexcept {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (own_call([&] {
        return cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found);
      }) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess)
    return nullptr;
  return fn;
}

/// Whether an event has completed: only cudaSuccess says so. NotReady: not yet; any other
/// result (a sticky error, a destroyed context) means its completion cannot be known.
enum class event_state { done, pending, unknown };

/// The driver API's cuEventQuery (CUresult cuEventQuery(CUevent); CUevent and cudaEvent_t are
/// the same handle), resolved once; nullptr where the runtime does not offer it.
using driver_event_query_fn = int (*)(cudaEvent_t);
inline driver_event_query_fn driver_event_query() noexcept {
  static const auto fn =
      reinterpret_cast<driver_event_query_fn>(driver_entry_point("cuEventQuery"));
  return fn;
}

/// Polls `e` without touching the runtime's last error. cudaGetLastError returns "the last error
/// that has been produced by any of the runtime calls" (cuda_runtime_api.h:1119); on an H200
/// (driver 580, CUDA 13.0) cudaEventQuery's cudaErrorNotReady was not recorded, but that is
/// observed, not documented. A driver API call never touches the runtime's last error, so
/// gpushare asks the driver and depends on neither. Only where the driver's answer is unusable
/// in this thread (not initialised, no context) does it fall back to the runtime, clearing what
/// the query may have left when nothing was pending before (that fallback is not taken on a
/// CUDA 12 or 13 runtime, which always has the driver's entry point).
inline event_state query_event(cudaEvent_t e) noexcept {
  constexpr int cu_success = 0, cu_not_initialized = 3, cu_invalid_context = 201,
                cu_not_ready = 600;
  if (const driver_event_query_fn query = driver_event_query()) {
    const int r = query(e);
    if (r == cu_success) return event_state::done;
    if (r == cu_not_ready) return event_state::pending;
    if (r != cu_not_initialized && r != cu_invalid_context) return event_state::unknown;
  }
  const cudaError_t r = own_call([&] { return cudaEventQuery(e); });
  if (r == cudaSuccess) return event_state::done;
  return r == cudaErrorNotReady ? event_state::pending : event_state::unknown;
}

/// Waits until `e` completes or `deadline_ns` (monotonic) passes: sleeps `first_pause_ns` (the
/// work's expected remaining time, mostly), then polls every `pause_ns`. The thread sleeps
/// rather than spins, a bound is possible (cudaEventSynchronize offers none), and a handful of
/// queries suffice. Call inside a relaxed_capture.
inline event_state wait_for_event(cudaEvent_t e, std::uint64_t deadline_ns,
                                  std::uint64_t first_pause_ns, std::uint64_t pause_ns) {
  std::uint64_t pause = first_pause_ns;
  for (;;) {
    const event_state s = query_event(e);
    if (s != event_state::pending) return s;
    const std::uint64_t now = gpushare::detail::monotonic_ns();
    if (now >= deadline_ns) return event_state::pending;
    std::this_thread::sleep_for(std::chrono::nanoseconds(std::min(pause, deadline_ns - now)));
    pause = pause_ns;
  }
}

/// Waits for `e` without a bound: cudaEventSynchronize, which blocks the thread (no spinning)
/// for events created with cudaEventBlockingSync, as all of gpushare's are. Call inside a
/// relaxed_capture.
inline event_state wait_for_event(cudaEvent_t e) noexcept {
  const cudaError_t r = own_call([&] { return cudaEventSynchronize(e); });
  return r == cudaSuccess ? event_state::done : event_state::unknown;
}

/// Whether work enqueued on `stream` now would be captured rather than run. On the legacy
/// stream while a blocking stream of the context captures, CUDA refuses the question
/// (cudaErrorStreamCaptureImplicit) and would refuse work there too: that counts as capturing.
/// Other failures are returned as they are.
inline cudaError_t capture_state(cudaStream_t stream, bool& capturing) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  // Only the legacy stream can give cudaErrorStreamCaptureImplicit, which gpushare then clears:
  // only there is the extra call of own_call needed.
  const bool legacy = stream == nullptr || stream == cudaStreamLegacy;
  const cudaError_t e = legacy ? own_call([&] { return cudaStreamIsCapturing(stream, &status); })
                               : cudaStreamIsCapturing(stream, &status);
  if (e == cudaErrorStreamCaptureImplicit) {
    capturing = true;
    return cudaSuccess;
  }
  capturing = e == cudaSuccess && status != cudaStreamCaptureStatusNone;
  return e;
}

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare

#include <gpushare/cuda/detail/runtime_names_end.hpp>
