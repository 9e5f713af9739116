// SPDX-License-Identifier: Apache-2.0
// A region of device work, as the demos' workers and the GPU benchmark's engine run it: with
// gpushare, a scoped_kernel guard (it waits for the worker's turn and accounts the device time);
// without, nothing. The guard of the GPU-free core on the simulated device; on a GPU (or cudasim),
// the CUDA layer's stream guard.
#pragma once

#include <optional>

#include <gpushare/gpushare.hpp>
#ifdef GPUSHARE_HARNESS_CUDA
#include <cuda_runtime_api.h>

#include <gpushare/cuda.hpp>
#endif

namespace demo {

class region {
public:
  /// `host`: the worker's session on the simulated device, or null (no gpushare).
  explicit region(gpushare::session* host) {
    if (host) host_.emplace(*host);
  }
#ifdef GPUSHARE_HARNESS_CUDA
  /// `device`: the worker's session on the GPU, or null (no gpushare); work goes on `stream`.
  region(gpushare::session* host, gpushare::cuda::device_session* device, cudaStream_t stream)
      : region(host) {
    if (device) device_.emplace(*device, stream);
  }
#endif
  region(const region&) = delete;
  region& operator=(const region&) = delete;

private:
  std::optional<gpushare::scoped_kernel> host_;
#ifdef GPUSHARE_HARNESS_CUDA
  std::optional<gpushare::cuda::scoped_kernel> device_;
#endif
};

} // namespace demo
