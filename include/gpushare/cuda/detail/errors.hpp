// SPDX-License-Identifier: Apache-2.0
// Turning CUDA runtime errors into gpushare::error with a message that says what to do, and the
// scope that makes a device current (device_scope). The public header is <gpushare/cuda/error.hpp>.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

#include <gpushare/cuda/detail/calls.hpp>
#include <gpushare/cuda/detail/no_device.hpp>
#include <gpushare/error.hpp>

#include <gpushare/cuda/detail/runtime_names_begin.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

/// Errors that mean "there is no usable GPU here" rather than "this call went wrong": no device,
/// no driver or a driver too old for this runtime, a stub library, devices hidden or busy.
inline bool means_no_device(cudaError_t e) noexcept {
  switch (e) {
  case cudaErrorNoDevice:
  case cudaErrorInsufficientDriver:
  case cudaErrorStubLibrary:
  case cudaErrorCallRequiresNewerDriver:
  case cudaErrorDevicesUnavailable:
  case cudaErrorSystemNotReady:
  case cudaErrorSystemDriverMismatch:
  case cudaErrorCompatNotSupportedOnDevice:
  case cudaErrorInitializationError: return true;
  default: return false;
  }
}

/// "cudaErrorNoDevice (no CUDA-capable device is detected)".
inline std::string describe(cudaError_t e) {
  const char* name = cudaGetErrorName(e);
  const char* text = cudaGetErrorString(e);
  return std::string(name ? name : "cudaError") + " (" + (text ? text : "unknown error") + ")";
}

/// The errc::no_device error for `e`, from the CUDA call `what` (see no_device_message(): "no
/// NVIDIA driver or GPU found (...)" on a machine without the NVIDIA driver, "the NVIDIA driver
/// ... is too old ..." when it is, else "no CUDA device available: <CUDA's error> ...").
inline error no_device_error(cudaError_t e, std::string_view what) {
  const char* name = cudaGetErrorName(e);
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  return error(errc::no_device, no_device_message(name ? name : "cudaError", describe(e), what,
                                                  find_nvidia_driver(), runtime));
}

/// Throws for a failed CUDA call `what`: errc::no_device when the error means there is no
/// usable GPU, else errc::cuda_error. The thread's last error is left alone: calls whose
/// failure gpushare reports are made through own_call(), which clears only its own error.
[[noreturn]] inline void throw_cuda(cudaError_t e, std::string_view what) {
  if (means_no_device(e)) throw no_device_error(e, what);
  throw error(errc::cuda_error, std::string(what) + " failed: " + describe(e));
}

inline void check(cudaError_t e, std::string_view what) {
  if (e != cudaSuccess) throw_cuda(e, what);
}

/// The driver's cuCtxGetCurrent and cuCtxSetCurrent, reached through
/// cudaGetDriverEntryPointByVersion (so gpushare never links libcuda), looked up once per
/// process; both null when the runtime cannot provide them. Driver signatures: CUresult
/// (*)(CUcontext*) and CUresult (*)(CUcontext), CUresult 0 being CUDA_SUCCESS.
struct driver_context_api {
  int (*get_current)(void**) = nullptr;
  int (*set_current)(void*) = nullptr;
  bool usable() const noexcept { return get_current != nullptr && set_current != nullptr; }
};

inline const driver_context_api& driver_contexts() noexcept {
  static const driver_context_api api = [] {
    driver_context_api a;
    void* get = driver_entry_point("cuCtxGetCurrent");
    void* set = get ? driver_entry_point("cuCtxSetCurrent") : nullptr;
    if (get && set) {
      a.get_current = reinterpret_cast<int (*)(void**)>(get);
      a.set_current = reinterpret_cast<int (*)(void*)>(set);
    }
    return a;
  }();
  return api;
}

/// Makes `ordinal` the calling thread's current device for a scope, then restores what was
/// current before (CUDA calls that allocate or record events act on the current device).
///
/// The restore creates no context. Since CUDA 12, cudaSetDevice initialises the device's primary
/// context at once (its documentation), so restoring with cudaSetDevice(previous) would leave a
/// context of several hundred MiB, which nobody accounts, on a device this thread never used
/// (device 0 for a thread that never chose one). Instead the scope saves the thread's driver
/// context (cuCtxGetCurrent; "CUDA Runtime API calls operate on the CUDA Driver API CUcontext
/// which is current to the calling host thread", Runtime API, "Interactions with the CUDA Driver
/// API") and puts it back with cuCtxSetCurrent: the previous primary context, a context the
/// application created with the driver API, or none at all. When none was current, the scope
/// then checks that cudaGetDevice reports the previous device again: NVIDIA documents no rule for
/// which device the runtime selects for a thread without a current context, and if it does not
/// report the previous one, later runtime calls of this thread would silently go to the
/// session's device, so the scope falls back to cudaSetDevice(previous) (correct device, at the
/// price of that context). Without the driver entry points, it restores with cudaSetDevice too.
/// (Skipping the restore when the previous device has no active primary context, as some
/// frameworks do, would leave cudaGetDevice reporting the session's device: not chosen.)
class device_scope {
public:
  explicit device_scope(int ordinal) {
    check(own_call([&] { return cudaGetDevice(&previous_); }), "cudaGetDevice");
    if (previous_ == ordinal) return; // nothing to change, nothing to restore
    const driver_context_api& drv = driver_contexts();
    if (drv.usable()) {
      const int r = drv.get_current(&previous_context_);
      // CUDA_ERROR_NOT_INITIALIZED (3): the driver is not initialised, so no context is current.
      if (r == 3) previous_context_ = nullptr;
      saved_context_ = r == 0 || r == 3;
    }
    check(own_call([&] { return cudaSetDevice(ordinal); }), "cudaSetDevice");
    restore_ = true;
  }
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;
  ~device_scope() {
    if (restore_) restore();
  }

private:
  void restore() noexcept {
    if (saved_context_) {
      const driver_context_api& drv = driver_contexts();
      if (drv.set_current(previous_context_) == 0) {
        if (previous_context_ != nullptr) return;
        int now = -1;
        if (own_call([&] { return cudaGetDevice(&now); }) == cudaSuccess && now == previous_)
          return;
      }
    }
    (void)own_call([&] { return cudaSetDevice(previous_); });
  }

  int previous_ = -1;
  void* previous_context_ = nullptr;
  bool saved_context_ = false;
  bool restore_ = false;
};

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare

#include <gpushare/cuda/detail/runtime_names_end.hpp>
