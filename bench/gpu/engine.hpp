// SPDX-License-Identifier: Apache-2.0
// The device as one benchmark worker process sees it: the workloads it can run, with or without
// gpushare, on the GPU or on the simulated one, so that each scenario is written once.
//
//                 without gpushare                 with gpushare
//   GPU           cuBLAS + kernels, cudaMalloc     cuda::device_session, cuda::scoped_kernel
//   simulated     demo::sim_device directly        gpushare::session, gpushare::scoped_kernel
//
// Workloads (GPU; the simulated ones are kernels of the configured durations):
//   train_step()   one training step: a train_size^3 bf16 GEMM (cuBLAS, fp32 accumulation) and
//                  the activation over its output. An iteration is 3 x train_layers steps.
//                  Every GEMM reads the random input x (never its own output: a chain of
//                  layers with random weights decays to zeros within ~100 steps, or blows up,
//                  and a GPU runs a GEMM on zeros faster than on real data) and writes y.
//   infer_layer()  one inference layer: (hidden x hidden) x (hidden x batch) GEMM + activation.
//   small_kernel() the activation over small_elements values: a launch-bound kernel.
//   large_kernel() a train_size^3 GEMM alone.
//   stamp(i)       a one-thread kernel that records when it started (the GPU's global timer,
//                  converted to this host's monotonic clock by calibrate_clock()).
// Create an engine in the worker (after fork), never in the benchmark's parent.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <gpushare/gpushare.hpp>
#include <harness/context.hpp>
#include <harness/region.hpp>
#include <harness/sim_device.hpp>
#include <harness/worker.hpp>
#ifdef GPUSHARE_HARNESS_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <gpushare/cuda.hpp>

#include "kernels.hpp"
#endif

#include "config.hpp"

namespace bench {

using demo::now_ns;
using demo::sleep_until_ns;

using demo::buffer;        // device memory, freed (and its budget released) on destruction
using demo::out_of_memory; // the device's memory is used up (cudaErrorMemoryAllocation, or
                           // the simulated equivalent)

/// Which workloads an engine prepares buffers for.
enum uses : unsigned { training = 1, inference = 2, small = 4, large = 8 };

#ifdef GPUSHARE_HARNESS_CUDA
namespace gpu {

inline void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorName(e) + " (" +
                           cudaGetErrorString(e) + ")");
}

inline void check(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(std::string(what) + " failed: " + cublasGetStatusName(s) + " (" +
                           cublasGetStatusString(s) + ")");
}

} // namespace gpu
#endif

class engine {
public:
  /// `with_gpushare`: this worker's session options; nullopt uses the device directly.
  /// `max_stamps`: how many request stamps the worker records.
  engine(const demo::run_context& run, const config& cfg,
         const std::optional<gpushare::session_options>& with_gpushare, unsigned workloads,
         std::size_t max_stamps = 0)
      : run_(run), cfg_(cfg), stamps_(max_stamps, 0) {
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
    if (workloads & (training | inference | large)) {
      gpu::check(cublasCreate(&blas_), "cublasCreate");
      gpu::check(cublasSetStream(blas_, stream_), "cublasSetStream");
    }
    const std::size_t s = static_cast<std::size_t>(cfg.train_size);
    const std::size_t h = static_cast<std::size_t>(cfg.infer_hidden);
    const std::size_t b = static_cast<std::size_t>(cfg.infer_batch);
    std::uint32_t seed = 1;
    const auto matrix = [&](std::size_t elements) {
      void* p = raw_allocate(elements * 2);
      gpu::check(gpu::launch_fill_random(stream_, p, elements, seed++), "filling a matrix");
      return p;
    };
    if (workloads & (training | large)) {
      train_.x = matrix(s * s);
      train_.y = matrix(s * s);
      train_.w[0] = matrix(s * s);
      train_.w[1] = matrix(s * s);
    }
    if (workloads & inference) {
      infer_.x = matrix(h * b);
      infer_.y = matrix(h * b);
      infer_.w[0] = matrix(h * h);
      infer_.w[1] = matrix(h * h);
    }
    if (workloads & small) small_ = matrix(static_cast<std::size_t>(cfg.small_elements));
    if (max_stamps > 0) {
      // Pinned host memory the GPU writes into (unified addressing): read after a sync.
      gpu::check(cudaHostAlloc(reinterpret_cast<void**>(&gpu_stamps_),
                               (max_stamps + 1) * sizeof(std::uint64_t), cudaHostAllocMapped),
                 "cudaHostAlloc");
      std::fill(gpu_stamps_, gpu_stamps_ + max_stamps + 1, 0);
      gpu::check(
          cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_stamps_), gpu_stamps_, 0),
          "cudaHostGetDevicePointer");
    }
    sync();
    // Correct before timed: one step of each workload, checked against a CPU reference. Not on
    // the simulated CUDA runtime (cudasim): its GEMMs compute nothing, so there is nothing to
    // check (the benchmark says so on its first lines and in the JSON).
    const bool check = !demo::on_simulated_runtime(run.mode());
    if (check && (workloads & training)) {
      const void* w = train_.w[parity_];
      train_step();
      check_layer("training", cfg.train_size, cfg.train_size, cfg.train_size, w, train_.x,
                  train_.y);
    }
    if (check && (workloads & inference)) {
      const void* w = infer_.w[parity_];
      infer_layer();
      check_layer("inference", cfg.infer_hidden, cfg.infer_batch, cfg.infer_hidden, w, infer_.x,
                  infer_.y);
    }
#else
    (void)workloads;
    throw std::logic_error("GPU mode in a benchmark built without CUDA");
#endif
  }

  ~engine() {
#ifdef GPUSHARE_HARNESS_CUDA
    if (!stream_) return;
    (void)cudaStreamSynchronize(stream_);
    for (void* p : allocated_) {
      if (device_)
        device_->free(p);
      else
        (void)cudaFree(p);
    }
    if (gpu_stamps_) (void)cudaFreeHost(gpu_stamps_);
    if (blas_) (void)cublasDestroy(blas_);
    device_.reset();
    (void)cudaStreamDestroy(stream_);
#endif
  }
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  bool with_gpushare() const {
#ifdef GPUSHARE_HARNESS_CUDA
    if (device_) return true;
#endif
    return host_.has_value();
  }

  /// This worker's gpushare session (host sessions, or the device session's host()).
  gpushare::session& session() {
#ifdef GPUSHARE_HARNESS_CUDA
    if (device_) return device_->host();
#endif
    if (!host_) throw std::logic_error("this benchmark worker has no gpushare session");
    return *host_;
  }

  void train_step() {
    if (!run_.gpu()) {
      sim_kernel(cfg_.sim_gemm_us);
      sim_kernel(cfg_.sim_act_us);
      return;
    }
#ifdef GPUSHARE_HARNESS_CUDA
    layer(cfg_.train_size, cfg_.train_size, cfg_.train_size, train_);
#endif
  }

  void infer_layer() {
    if (!run_.gpu()) return sim_kernel(cfg_.sim_infer_us);
#ifdef GPUSHARE_HARNESS_CUDA
    layer(cfg_.infer_hidden, cfg_.infer_batch, cfg_.infer_hidden, infer_);
#endif
  }

  void small_kernel() {
    if (!run_.gpu()) return sim_kernel(cfg_.sim_small_us);
#ifdef GPUSHARE_HARNESS_CUDA
    gpu::check(
        gpu::launch_activation(stream_, small_, static_cast<std::size_t>(cfg_.small_elements)),
        "launching the small kernel");
#endif
  }

  void large_kernel() {
    if (!run_.gpu()) return sim_kernel(cfg_.sim_large_us);
#ifdef GPUSHARE_HARNESS_CUDA
    const int s = cfg_.train_size;
    gemm(s, s, s, train_.w[parity_], train_.x, train_.y);
    parity_ ^= 1;
#endif
  }

  /// Records when the kernel enqueued now starts, as stamp `slot`.
  void stamp(std::size_t slot) {
    if (slot >= stamps_.size()) throw std::out_of_range("benchmark stamp slot out of range");
    if (!run_.gpu()) {
      stamps_[slot] = run_.sim()->run_kernel(static_cast<std::uint64_t>(cfg_.sim_stamp_us * 1e3));
      return;
    }
#ifdef GPUSHARE_HARNESS_CUDA
    gpu::check(gpu::launch_stamp(stream_, device_stamps_ + slot), "launching the stamp kernel");
#endif
  }

  /// Measures the offset between the GPU's global timer and this host's monotonic clock (a
  /// no-op when simulated). Call it before the first stamp and after the last: stamps are
  /// converted with the offset interpolated between the two, which absorbs the clocks' drift.
  /// Each measurement takes the best of 25 round trips; its uncertainty is half that round
  /// trip (see clock_uncertainty_ns()).
  void calibrate_clock() {
#ifdef GPUSHARE_HARNESS_CUDA
    if (!run_.gpu() || !gpu_stamps_) return;
    std::uint64_t best_rtt = std::numeric_limits<std::uint64_t>::max();
    std::int64_t best_offset = 0;
    std::uint64_t best_at = 0;
    const volatile std::uint64_t* read = gpu_stamps_ + stamps_.size();
    for (int i = 0; i < 25; ++i) {
      const std::uint64_t t0 = now_ns();
      gpu::check(gpu::launch_stamp(stream_, device_stamps_ + stamps_.size()),
                 "launching the stamp kernel");
      gpu::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      const std::uint64_t t1 = now_ns();
      if (t1 - t0 < best_rtt) {
        best_rtt = t1 - t0;
        best_at = t0 + (t1 - t0) / 2;
        // In integers: the timer reads ~1.7e18 ns, where a double's step is 256 ns.
        best_offset = static_cast<std::int64_t>(*read) - static_cast<std::int64_t>(best_at);
      }
    }
    clock_points_.push_back({best_at, best_offset});
    clock_uncertainty_ns_ = std::max(clock_uncertainty_ns_, best_rtt / 2);
#endif
  }

  /// Half the best calibration round trip: how far a converted stamp may be off (GPU only).
  std::uint64_t clock_uncertainty_ns() const { return clock_uncertainty_ns_; }

  /// Stamps [0, n), on this host's monotonic clock. Call after sync().
  std::vector<std::uint64_t> stamps(std::size_t n) const {
    n = std::min(n, stamps_.size());
    if (!run_.gpu()) return {stamps_.begin(), stamps_.begin() + static_cast<std::ptrdiff_t>(n)};
    std::vector<std::uint64_t> out(n, 0);
#ifdef GPUSHARE_HARNESS_CUDA
    if (n == 0) return out;
    if (clock_points_.empty()) throw std::logic_error("calibrate_clock() was never called");
    const clock_point& a = clock_points_.front();
    const clock_point& b = clock_points_.back();
    for (std::size_t i = 0; i < n; ++i) {
      const auto g = static_cast<std::int64_t>(gpu_stamps_[i]);
      if (g == 0) continue; // never ran
      std::int64_t offset = a.offset;
      if (b.at > a.at) { // the offset at the stamp's time, between the two calibrations
        const std::int64_t host_guess = g - a.offset;
        const double f = static_cast<double>(host_guess - static_cast<std::int64_t>(a.at)) /
                         static_cast<double>(b.at - a.at);
        offset += std::llround(f * static_cast<double>(b.offset - a.offset));
      }
      out[i] = static_cast<std::uint64_t>(g - offset);
    }
#endif
    return out;
  }

  /// Waits for this worker's guarded work still in flight and accounts it, so the session's
  /// device time (session().info().device_ns) is complete. Without gpushare, sync().
  void settle() {
#ifdef GPUSHARE_HARNESS_CUDA
    if (device_) return device_->synchronize();
#endif
    sync();
  }

  /// Waits until the work put on the device so far has finished.
  void sync() {
#ifdef GPUSHARE_HARNESS_CUDA
    if (stream_) gpu::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
#endif
  }

  /// An iteration boundary: with gpushare, a moment to give way to a waiting peer.
  void yield() {
    if (host_) host_->yield();
#ifdef GPUSHARE_HARNESS_CUDA
    if (device_) device_->yield();
#endif
  }

  /// Allocates `bytes` and writes to all of them (not on cudasim: see below). Without gpushare a
  /// full device fails at once with out_of_memory; with gpushare the bytes are first reserved in
  /// the shared budget (waiting for other sessions to release memory, up to 60 s), so a failure
  /// there is a gpushare::error (errc::timeout, or errc::cuda_error when memory outside the budget
  /// is short).
  buffer allocate(std::uint64_t bytes) {
    if (!run_.gpu()) return demo::allocate_simulated(run_.sim(), bytes, host_ ? &*host_ : nullptr);
#ifdef GPUSHARE_HARNESS_CUDA
    void* p = nullptr;
    if (device_) {
      p = device_->malloc(bytes); // reserves, then cudaMalloc
    } else {
      const cudaError_t e = cudaMalloc(&p, bytes);
      if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        throw out_of_memory("cudaMalloc of " + gpushare::format_bytes(bytes) +
                            " failed: cudaErrorMemoryAllocation");
      }
      gpu::check(e, "cudaMalloc");
    }
    buffer owned =
        device_ ? buffer([d = &*device_, p] { d->free(p); }) : buffer([p] { (void)cudaFree(p); });
    // Written, so a GPU really holds the memory; on the simulated CUDA runtime (cudasim) the
    // allocation is charged already, and writing it would fill host memory of the same size.
    if (!demo::on_simulated_runtime(run_.mode())) {
      gpu::check(cudaMemsetAsync(p, 0x3c, bytes, stream_), "cudaMemsetAsync");
      sync();
    }
    return owned;
#else
    throw std::logic_error("GPU mode in a benchmark built without CUDA");
#endif
  }

  /// A region of device work (harness/region.hpp): the guard of this engine's session, if any.
  demo::region guard() {
    gpushare::session* host = host_ ? &*host_ : nullptr;
#ifdef GPUSHARE_HARNESS_CUDA
    return demo::region(host, device_ ? &*device_ : nullptr, stream_);
#else
    return demo::region(host);
#endif
  }

private:
  void sim_kernel(double us) { run_.sim()->run_kernel(static_cast<std::uint64_t>(us * 1e3)); }

#ifdef GPUSHARE_HARNESS_CUDA
  /// C (m x n) = A (m x k) B (k x n), column-major bf16, fp32 accumulation; alpha = 1/sqrt(k)
  /// keeps the values of a chain of layers near their starting scale.
  void gemm(int m, int n, int k, const void* a, const void* b, void* c) {
    const float alpha = 1.0f / std::sqrt(static_cast<float>(k)), beta = 0.0f;
    gpu::check(cublasGemmEx(blas_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a, CUDA_R_16BF, m, b,
                            CUDA_R_16BF, k, &beta, c, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
  }

  struct matrices;

  /// One layer: y = activation(alpha W x), with the two weight matrices taken in turn.
  void layer(int m, int n, int k, const matrices& mx) {
    gemm(m, n, k, mx.w[parity_], mx.x, mx.y);
    gpu::check(gpu::launch_activation(stream_, mx.y,
                                      static_cast<std::size_t>(m) * static_cast<std::size_t>(n)),
               "launching the activation");
    parity_ ^= 1;
  }

  /// Checks 64 entries of y = activation(alpha W x) (column-major: W m x k, x k x n, y m x n,
  /// bf16) against a double-precision reference computed here from the same inputs. Throws if
  /// an entry is off by more than 0.02 + 2% (bf16 keeps 8 bits; the values are about 0.3), is
  /// not finite, or if all are zero: then the timed work would not be the work described.
  void check_layer(const char* what, int m, int n, int k, const void* w, const void* x,
                   const void* y) {
    sync();
    const auto bf16 = [](std::uint16_t bits) {
      const std::uint32_t f = static_cast<std::uint32_t>(bits) << 16;
      float v;
      std::memcpy(&v, &f, sizeof v);
      return static_cast<double>(v);
    };
    const auto fetch = [](const void* base, std::size_t index) {
      std::uint16_t bits = 0;
      gpu::check(cudaMemcpy(&bits, static_cast<const std::uint16_t*>(base) + index, sizeof bits,
                            cudaMemcpyDeviceToHost),
                 "cudaMemcpy (workload check)");
      return bits;
    };
    const auto sk = static_cast<std::size_t>(k), sm = static_cast<std::size_t>(m);
    std::vector<std::uint16_t> row(sk), column(sk);
    const double alpha = 1.0 / std::sqrt(static_cast<double>(k));
    bool any_nonzero = false;
    for (int t = 0; t < 64; ++t) {
      const std::size_t i = (static_cast<std::size_t>(t) * 7919u) % sm;
      const std::size_t j = (static_cast<std::size_t>(t) * 104729u) % static_cast<std::size_t>(n);
      // Row i of W (stride m) and column j of x (contiguous).
      gpu::check(cudaMemcpy2D(row.data(), sizeof(std::uint16_t),
                              static_cast<const std::uint16_t*>(w) + i, sm * sizeof(std::uint16_t),
                              sizeof(std::uint16_t), sk, cudaMemcpyDeviceToHost),
                 "cudaMemcpy2D (workload check)");
      gpu::check(cudaMemcpy(column.data(), static_cast<const std::uint16_t*>(x) + j * sk,
                            sk * sizeof(std::uint16_t), cudaMemcpyDeviceToHost),
                 "cudaMemcpy (workload check)");
      double dot = 0;
      for (std::size_t l = 0; l < sk; ++l) dot += bf16(row[l]) * bf16(column[l]);
      dot *= alpha;
      const double want = dot > 0 ? dot : 0.01 * dot;
      const double got = bf16(fetch(y, i + j * sm));
      if (!std::isfinite(got) || std::fabs(got - want) > 0.02 + 0.02 * std::fabs(want))
        throw std::runtime_error(std::string("the ") + what + " workload computed a wrong " +
                                 "result: y(" + std::to_string(i) + "," + std::to_string(j) +
                                 ") = " + std::to_string(got) + ", expected " +
                                 std::to_string(want));
      any_nonzero = any_nonzero || got != 0;
    }
    if (!any_nonzero)
      throw std::runtime_error(std::string("the ") + what + " workload produced only zeros");
  }

  /// Workload buffers: through the session's budget with gpushare, else cudaMalloc.
  void* raw_allocate(std::size_t bytes) {
    void* p = nullptr;
    if (device_)
      p = device_->malloc(bytes);
    else
      gpu::check(cudaMalloc(&p, bytes), "cudaMalloc of a workload buffer");
    allocated_.push_back(p);
    return p;
  }

  struct matrices {
    void* x = nullptr;
    void* y = nullptr;
    void* w[2] = {nullptr, nullptr};
  };
  struct clock_point {
    std::uint64_t at = 0;    ///< host monotonic ns
    std::int64_t offset = 0; ///< GPU global timer minus host monotonic, ns
  };

  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  matrices train_, infer_;
  void* small_ = nullptr;
  std::uint64_t* gpu_stamps_ = nullptr;    ///< max_stamps slots + one for calibration (host)
  std::uint64_t* device_stamps_ = nullptr; ///< the same memory, as the GPU addresses it
  std::vector<void*> allocated_;
  std::vector<clock_point> clock_points_;
  int parity_ = 0;
  std::optional<gpushare::cuda::device_session> device_;
#endif

  const demo::run_context& run_;
  const config& cfg_;
  std::optional<gpushare::session> host_;
  std::vector<std::uint64_t> stamps_; ///< simulated stamps (host clock)
  std::uint64_t clock_uncertainty_ns_ = 0;
};

} // namespace bench
