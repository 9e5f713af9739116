// SPDX-License-Identifier: Apache-2.0
// The device as a worker process sees it, with or without gpushare, on the GPU or simulated:
//
//                    without gpushare               with gpushare
//   GPU              plain launches, cudaMalloc     cuda::device_session, cuda::scoped_kernel
//   simulated        sim_device directly            gpushare::session, gpushare::scoped_kernel
//
// so that each scenario is written once. Create it in the worker (after fork), never in the
// parent.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include <gpushare/gpushare.hpp>
#ifdef GPUSHARE_HARNESS_CUDA
#include <gpushare/cuda.hpp>
#endif

#include "context.hpp"
#include "gpu.hpp"
#include "region.hpp"

namespace demo {

/// An allocation failed because the device's memory is used up (cudaErrorMemoryAllocation, or
/// the simulated device's equivalent).
struct out_of_memory : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Device memory held by a worker; freed (and its budget released) on destruction.
class buffer {
public:
  buffer() = default;
  explicit buffer(std::function<void()> free) : free_(std::move(free)) {}
  buffer(buffer&& o) noexcept : free_(std::exchange(o.free_, nullptr)) {}
  buffer& operator=(buffer&&) = delete;
  ~buffer() {
    if (free_) free_();
  }

private:
  std::function<void()> free_;
};

/// Takes `bytes` of the simulated device's memory. With a session (`budget_from`), the bytes are
/// first reserved in its shared budget, waiting up to 60 s for other sessions to release memory;
/// without, a full device fails at once with out_of_memory.
inline buffer allocate_simulated(sim_device* sim, std::uint64_t bytes,
                                 gpushare::session* budget_from) {
  std::shared_ptr<gpushare::reservation> budget;
  if (budget_from)
    budget = std::make_shared<gpushare::reservation>(
        budget_from->reserve(bytes, std::chrono::seconds(60)));
  if (!sim->try_allocate(bytes))
    throw out_of_memory("out of memory allocating " + gpushare::format_bytes(bytes) + " (" +
                        gpushare::format_bytes(sim->memory_used.load()) + " of " +
                        gpushare::format_bytes(sim->memory_capacity) + " in use)");
  return buffer([sim, bytes, budget] {
    sim->free(bytes);
    if (budget) budget->release();
  });
}

class worker_device {
public:
  /// `with_gpushare`: the options of this worker's session; nullopt uses the device directly.
  worker_device(const run_context& run,
                const std::optional<gpushare::session_options>& with_gpushare)
      : run_(run) {
    if (!run.gpu()) {
      if (with_gpushare) host_.emplace(run.key(), *with_gpushare);
      return;
    }
#ifdef GPUSHARE_HARNESS_CUDA
    // The session first: it measures this process's context overhead only if it creates the
    // context itself.
    if (with_gpushare) device_.emplace(0, *with_gpushare);
    gpu::check(cudaSetDevice(0), "cudaSetDevice");
    gpu::check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
#endif
  }
  ~worker_device() {
#ifdef GPUSHARE_HARNESS_CUDA
    if (stream_) {
      cudaStreamSynchronize(stream_);
      device_.reset();
      cudaStreamDestroy(stream_);
    }
#endif
  }
  worker_device(const worker_device&) = delete;
  worker_device& operator=(const worker_device&) = delete;

  bool with_gpushare() const {
#ifdef GPUSHARE_HARNESS_CUDA
    if (device_) return true;
#endif
    return host_.has_value();
  }

  /// Puts one kernel of `ns` device time on the device. Simulated kernels run to completion
  /// here; GPU kernels are queued on the worker's stream (see sync()).
  void kernel(std::uint64_t ns) {
    if (!run_.gpu()) {
      run_.sim()->run_kernel(ns);
      return;
    }
#ifdef GPUSHARE_HARNESS_CUDA
    run_.mode().rate.launch(stream_, ns);
#endif
  }

  /// Waits until the kernels put on the device so far have finished.
  void sync() {
#ifdef GPUSHARE_HARNESS_CUDA
    if (stream_) gpu::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
#endif
  }

  /// A region of device work (region.hpp): the guard of this worker's session, if it has one.
  region guard() {
    gpushare::session* host = host_ ? &*host_ : nullptr;
#ifdef GPUSHARE_HARNESS_CUDA
    return region(host, device_ ? &*device_ : nullptr, stream_);
#else
    return region(host);
#endif
  }

  /// An iteration boundary: with gpushare, a moment to give way to a waiting peer.
  void yield() {
    if (host_) host_->yield();
#ifdef GPUSHARE_HARNESS_CUDA
    if (device_) device_->yield();
#endif
  }

  /// How many of this worker's reservations had to wait for memory that another session held
  /// (the table's count; 0 without gpushare).
  std::uint64_t reserve_waits() {
    if (host_) return host_->info().reserve_waits;
#ifdef GPUSHARE_HARNESS_CUDA
    if (device_) return device_->info().reserve_waits;
#endif
    return 0;
  }

  /// Allocates `bytes` of device memory. Without gpushare it fails at once with out_of_memory
  /// when the device is full; with gpushare it first reserves the bytes in the shared budget,
  /// waiting up to 60 s for other sessions to release memory.
  buffer allocate(std::uint64_t bytes) {
    if (!run_.gpu()) return allocate_simulated(run_.sim(), bytes, host_ ? &*host_ : nullptr);
#ifdef GPUSHARE_HARNESS_CUDA
    const std::string what = gpushare::format_bytes(bytes);
    if (device_) {
      void* p = device_->malloc(bytes); // reserves, then cudaMalloc
      return buffer([d = &*device_, p] { d->free(p); });
    }
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw out_of_memory("cudaMalloc of " + what + " failed: cudaErrorMemoryAllocation");
    }
    gpu::check(e, "cudaMalloc");
    return buffer([p] { cudaFree(p); });
#else
    throw std::logic_error("GPU mode without CUDA support");
#endif
  }

private:
  const run_context& run_;
  std::optional<gpushare::session> host_; ///< simulated device, with gpushare
#ifdef GPUSHARE_HARNESS_CUDA
  cudaStream_t stream_ = nullptr;
  std::optional<gpushare::cuda::device_session> device_; ///< GPU, with gpushare
#endif
};

} // namespace demo
