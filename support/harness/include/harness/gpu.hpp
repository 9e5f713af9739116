// SPDX-License-Identifier: Apache-2.0
// Host-side GPU helpers for the demos (built only with GPUSHARE_HARNESS_CUDA): checking CUDA calls,
// turning a wanted kernel duration into work for the busy kernel, and the probe that a forked
// child runs to find out whether a usable GPU is here.
#pragma once

#ifdef GPUSHARE_HARNESS_CUDA

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#include <gpushare/cuda.hpp>

#include "kernels.hpp"
#include "no_gpu.hpp"
#include "simulated_runtime.hpp"

namespace demo::gpu {

inline void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorName(e));
}

/// How to give the busy kernel a duration on this GPU: its grid, and how many iterations per
/// microsecond it runs on the otherwise idle GPU (measured by calibrate()).
struct busy_kernel_rate {
  unsigned blocks = 0;
  double iterations_per_us = 0;

  /// Enqueues a busy kernel that runs about `ns` on an idle GPU.
  void launch(cudaStream_t stream, std::uint64_t ns) const {
    const double iterations = iterations_per_us * static_cast<double>(ns) / 1000.0;
    check(launch_busy(stream, iterations < 1 ? 1 : static_cast<std::uint64_t>(iterations), blocks),
          "launching the busy kernel");
  }
};

/// Times busy kernels on `device` with CUDA events: four blocks per multiprocessor, sized up
/// until one takes about 20 ms.
inline busy_kernel_rate calibrate(int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
        "cudaDeviceGetAttribute");
  busy_kernel_rate rate;
  rate.blocks = 4 * static_cast<unsigned>(sms > 0 ? sms : 1);
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  const auto time_us = [&](std::uint64_t iterations) {
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    check(launch_busy(stream, iterations, rate.blocks), "launching the busy kernel");
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    return 1000.0 * static_cast<double>(ms);
  };
  time_us(1000); // warm-up: module loading, clocks
  std::uint64_t iterations = 1000;
  double us = time_us(iterations);
  while (us < 2000 && iterations < (1ull << 36)) us = time_us(iterations *= 4);
  iterations = static_cast<std::uint64_t>(static_cast<double>(iterations) * 20000.0 / us);
  rate.iterations_per_us = static_cast<double>(iterations) / time_us(iterations);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  return rate;
}

/// What the probe child found, sent to the parent through a pipe (plain bytes): the demos and the
/// GPU benchmark read the same report.
struct probe_report {
  int usable = 0;
  char reason[240] = {};    ///< why the GPU cannot be used
  char name[100] = {};      ///< e.g. "NVIDIA H100 80GB HBM3"
  char uuid[64] = {};       ///< the device's table key
  char driver[32] = {};     ///< the NVIDIA driver's version (NVML), "" when unavailable
  char simulator[64] = {};  ///< "cudasim <version>" on the simulated CUDA runtime, else ""
  std::uint64_t memory = 0; ///< bytes
  int cuda_driver = 0, cuda_runtime = 0, multiprocessors = 0, major = 0, minor = 0;
  busy_kernel_rate rate; ///< when probe() was asked to calibrate the busy kernel
};

/// Looks for device 0, describes it and, if `calibrate_busy_kernel`, calibrates the busy kernel
/// on it. Runs in a forked child: it creates a CUDA context, which must never exist in the
/// parent of the workers.
inline probe_report probe(bool calibrate_busy_kernel) {
  probe_report r;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count <= 0) {
    const char* name = e != cudaSuccess ? cudaGetErrorName(e) : "";
    std::snprintf(r.reason, sizeof r.reason, "%s",
                  no_gpu_reason(name ? name : "cudaError", find_nvidia_driver()).c_str());
    return r;
  }
  try {
    const gpushare::cuda::device_info info = gpushare::cuda::describe_device(0);
    std::snprintf(r.name, sizeof r.name, "%s", info.name.c_str());
    std::snprintf(r.uuid, sizeof r.uuid, "%s", info.uuid.c_str());
    std::snprintf(r.simulator, sizeof r.simulator, "%s", simulated_runtime().c_str());
    std::snprintf(r.driver, sizeof r.driver, "%s", nvidia_driver_version().c_str());
    r.memory = info.total_memory;
    r.major = info.compute_major;
    r.minor = info.compute_minor;
    (void)cudaDeviceGetAttribute(&r.multiprocessors, cudaDevAttrMultiProcessorCount, 0);
    (void)cudaDriverGetVersion(&r.cuda_driver);
    (void)cudaRuntimeGetVersion(&r.cuda_runtime);
    if (calibrate_busy_kernel) r.rate = calibrate(0);
    r.usable = 1;
  } catch (const std::exception& ex) {
    std::snprintf(r.reason, sizeof r.reason, "a CUDA device is here but unusable: %s", ex.what());
  }
  return r;
}

} // namespace demo::gpu

#endif // GPUSHARE_HARNESS_CUDA
