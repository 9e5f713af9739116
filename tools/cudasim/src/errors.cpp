// SPDX-License-Identifier: Apache-2.0
// cudaGetErrorName and cudaGetErrorString. Names are the enumerators of driver_types.h; the
// descriptions are cudasim's own words (the most common ones), else the name.
#include <cuda_runtime_api.h>

#include "runtime.hpp"

using namespace cudasim;

namespace {

const char* name_of(cudaError_t e) {
  switch (e) {
#define CUDASIM_ERROR(name)                                                                        \
  case name:                                                                                       \
    return #name;
#include "error_names.inc"
#undef CUDASIM_ERROR
  default: return nullptr;
  }
}

const char* text_of(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "no error";
  case cudaErrorInvalidValue: return "invalid argument";
  case cudaErrorMemoryAllocation: return "out of memory";
  case cudaErrorInitializationError: return "initialization error";
  case cudaErrorInsufficientDriver:
    return "CUDA driver version is insufficient for CUDA runtime version";
  case cudaErrorNoDevice: return "no CUDA-capable device is detected";
  case cudaErrorInvalidDevice: return "invalid device ordinal";
  case cudaErrorInvalidConfiguration: return "invalid configuration argument";
  case cudaErrorInvalidDeviceFunction: return "invalid device function";
  case cudaErrorInvalidResourceHandle: return "invalid resource handle";
  case cudaErrorNotReady: return "device not ready";
  case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
  case cudaErrorLaunchFailure: return "unspecified launch failure";
  case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
  case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
  case cudaErrorStreamCaptureInvalidated:
    return "operation failed due to a previous error during capture";
  case cudaErrorStreamCaptureImplicit:
    return "operation would make the legacy stream depend on a capturing blocking stream";
  case cudaErrorCapturedEvent:
    return "operation not permitted on an event last recorded in a capturing stream";
  case cudaErrorStreamCaptureWrongThread:
    return "attempt to terminate a thread-local capture sequence from another thread";
  default: return name_of(e);
  }
}

} // namespace

extern "C" {

const char* cudaGetErrorName(cudaError_t e) {
  (void)enter("cudaGetErrorName", false);
  const char* n = name_of(e);
  return n ? n : "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t e) {
  (void)enter("cudaGetErrorString", false);
  const char* t = text_of(e);
  return t ? t : "unrecognized error code";
}

} // extern "C"
