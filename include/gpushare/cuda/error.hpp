// SPDX-License-Identifier: Apache-2.0
// Turning CUDA runtime errors into gpushare::error with a message that says what to do.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

#include <gpushare/cuda/detail/no_device.hpp>
#include <gpushare/error.hpp>

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
/// usable GPU, else errc::cuda_error. Clears the runtime's last (non-sticky) error first.
[[noreturn]] inline void throw_cuda(cudaError_t e, std::string_view what) {
  (void)cudaGetLastError();
  if (means_no_device(e)) throw no_device_error(e, what);
  throw error(errc::cuda_error, std::string(what) + " failed: " + describe(e));
}

inline void check(cudaError_t e, std::string_view what) {
  if (e != cudaSuccess) throw_cuda(e, what);
}

/// Makes `ordinal` the calling thread's current device for a scope, then restores the previous
/// one (CUDA calls that allocate or record events act on the current device).
class device_scope {
public:
  explicit device_scope(int ordinal) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != ordinal)
      check(cudaSetDevice(ordinal), "cudaSetDevice");
    else
      previous_ = -1;
  }
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;
  ~device_scope() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }

private:
  int previous_ = -1;
};

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare
