// SPDX-License-Identifier: Apache-2.0
// The CUDA-side state of a device session, shared (by shared_ptr) between the session, its
// stream guards, memory resources and Thrust allocators, so none of them dangles if another is
// destroyed first. It keeps:
//   * guarded regions still in flight on the device (a start and a stop event each), to account
//     their device time once finished and to bound how much work stays queued;
//   * stream-ordered frees whose bytes return to the budget once they have executed;
//   * the sizes of allocations made through device_session::malloc, so free(p) knows them;
//   * a pool of reusable CUDA events.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <gpushare/cuda/error.hpp>
#include <gpushare/cuda/options.hpp>
#include <gpushare/detail/parse.hpp>
#include <gpushare/detail/session_core.hpp>
#include <gpushare/table.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

class device_state {
public:
  device_state(std::shared_ptr<gpushare::detail::session_core> core, int ordinal,
               const resolved_device_options& options)
      : core_(std::move(core)), ordinal_(ordinal), options_(options) {}
  device_state(const device_state&) = delete;
  device_state& operator=(const device_state&) = delete;
  ~device_state() {
    shutdown();
    for (cudaEvent_t e : pool_) (void)cudaEventDestroy(e);
  }

  int ordinal() const noexcept { return ordinal_; }
  gpushare::detail::session_core& core() const noexcept { return *core_; }
  const std::shared_ptr<gpushare::detail::session_core>& shared_core() const noexcept {
    return core_;
  }
  const resolved_device_options& options() const noexcept { return options_; }

  /// Waits for everything still in flight, accounts and releases it. Idempotent.
  void shutdown() noexcept {
    try {
      core_->add_device_time(drain_regions());
      release_finished_frees(true);
    } catch (...) {
      // A CUDA error at teardown (e.g. the context is already gone): nothing left to wait for.
    }
  }

  // ---- events ------------------------------------------------------------------------------

  /// A timing event on this device, from the pool or new.
  cudaEvent_t take_event() {
    {
      std::lock_guard lock(m_);
      if (!pool_.empty()) {
        cudaEvent_t e = pool_.back();
        pool_.pop_back();
        return e;
      }
    }
    device_scope on(ordinal_);
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "cudaEventCreate");
    return e;
  }

  void give_event(cudaEvent_t e) noexcept {
    if (!e) return;
    try {
      std::lock_guard lock(m_);
      if (pool_.size() < 4 * max_in_flight_regions) {
        pool_.push_back(e);
        return;
      }
    } catch (...) {
    }
    (void)cudaEventDestroy(e);
  }

  // ---- guarded regions ---------------------------------------------------------------------

  /// A guarded region whose work lies between events `start` and `stop` (recorded on its
  /// stream) ended on the host. With `drain`, waits until every region of this session has
  /// finished on the device; otherwise waits only for the oldest ones beyond the in-flight
  /// allowance. Returns the device time of the regions now known to be finished: the caller
  /// accounts it.
  std::uint64_t region_ended(cudaEvent_t start, cudaEvent_t stop, bool drain) {
    std::vector<region> finished, to_wait;
    {
      std::lock_guard lock(m_);
      pending_.push_back({start, stop});
      if (drain) {
        to_wait.assign(pending_.begin(), pending_.end());
        pending_.clear();
      } else {
        while (!pending_.empty() && cudaEventQuery(pending_.front().stop) != cudaErrorNotReady) {
          finished.push_back(pending_.front());
          pending_.pop_front();
        }
        const std::uint32_t allowed =
            in_flight_allowance(avg_region_ns_, options_.max_in_flight_ns);
        while (pending_.size() > allowed) {
          to_wait.push_back(pending_.front());
          pending_.pop_front();
        }
      }
    }
    for (const region& r : to_wait) (void)cudaEventSynchronize(r.stop);
    finished.insert(finished.end(), to_wait.begin(), to_wait.end());
    return settle(finished);
  }

  /// Waits until every guarded region has finished; returns their device time (to account).
  std::uint64_t drain_regions() {
    std::vector<region> all;
    {
      std::lock_guard lock(m_);
      all.assign(pending_.begin(), pending_.end());
      pending_.clear();
    }
    for (const region& r : all) (void)cudaEventSynchronize(r.stop);
    return settle(all);
  }

  /// Regions recorded but not yet known to be finished.
  std::size_t regions_in_flight() {
    std::lock_guard lock(m_);
    return pending_.size();
  }

  /// The recent average device time of a guarded region (0 before the first one finished).
  std::uint64_t average_region_ns() {
    std::lock_guard lock(m_);
    return avg_region_ns_;
  }

  // ---- budgeted memory ---------------------------------------------------------------------

  /// Charges `bytes` to the budget, waiting up to the allocation timeout. Frees of this session
  /// still in flight are waited for first when the bytes do not fit: they may be what is missing.
  void charge(std::uint64_t bytes) {
    release_finished_frees(false);
    if (core_->grow(bytes, 0, false)) return;
    if (release_finished_frees(true) > 0 && core_->grow(bytes, 0, false)) return;
    const std::uint64_t t = options_.allocation_timeout_ns;
    core_->grow(bytes, t == no_timeout ? gpushare::detail::wait_forever_ns : t, true);
  }

  void uncharge(std::uint64_t bytes) noexcept { core_->shrink(bytes); }

  /// Budgeted cudaMalloc: reserve, allocate, roll the reservation back if the allocation fails.
  void* allocate(std::size_t bytes) {
    return charged_allocation(bytes, "cudaMalloc", [&](void** p) { return cudaMalloc(p, bytes); });
  }

  /// cudaFree, then the bytes go back to the budget (cudaFree waits for the device, so the
  /// memory is free when it returns). A failed cudaFree keeps the bytes charged.
  void deallocate(void* p, std::size_t bytes) noexcept {
    if (!p) return;
    try {
      device_scope on(ordinal_);
      if (cudaFree(p) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
      }
    } catch (...) {
      return;
    }
    uncharge(bytes);
  }

  /// Budgeted cudaMallocAsync on `stream`.
  void* allocate_async(std::size_t bytes, cudaStream_t stream) {
    return charged_allocation(bytes, "cudaMallocAsync",
                              [&](void** p) { return cudaMallocAsync(p, bytes, stream); });
  }

  /// cudaFreeAsync on `stream`; the bytes return to the budget once the free has executed on the
  /// device and the memory pool gave the memory back (checked at the next allocation, free,
  /// synchronize(), or when a reservation would otherwise wait).
  void deallocate_async(void* p, std::size_t bytes, cudaStream_t stream) {
    if (!p) return;
    device_scope on(ordinal_);
    check(cudaFreeAsync(p, stream), "cudaFreeAsync");
    cudaEvent_t done = nullptr;
    try {
      done = take_event();
      check(cudaEventRecord(done, stream), "cudaEventRecord");
    } catch (...) {
      give_event(done);
      (void)cudaStreamSynchronize(stream); // no event: wait here instead
      trim_pool();
      uncharge(bytes);
      release_finished_frees(false);
      return;
    }
    {
      std::lock_guard lock(m_);
      deferred_.push_back({done, bytes});
    }
    release_finished_frees(false);
  }

  /// Returns to the budget the bytes of stream-ordered frees that have executed (with `wait`:
  /// waits for all of them). Returns the bytes released.
  std::uint64_t release_finished_frees(bool wait) {
    std::vector<deferred_free> done;
    {
      std::lock_guard lock(m_);
      if (deferred_.empty()) return 0;
      for (auto it = deferred_.begin(); it != deferred_.end();) {
        if (wait || cudaEventQuery(it->done) != cudaErrorNotReady) {
          done.push_back(*it);
          it = deferred_.erase(it);
        } else {
          ++it;
        }
      }
    }
    if (done.empty()) return 0;
    std::uint64_t bytes = 0;
    for (const deferred_free& d : done) {
      (void)cudaEventSynchronize(d.done);
      give_event(d.done);
      bytes = gpushare::detail::sat_add(bytes, d.bytes);
    }
    trim_pool();
    uncharge(bytes);
    return bytes;
  }

  // ---- sizes of malloc()ed pointers --------------------------------------------------------

  void remember(void* p, std::size_t bytes) {
    std::lock_guard lock(m_);
    sizes_[p] = bytes;
  }

  /// The size recorded for `p`, forgetting it. Throws errc::invalid_argument for a pointer this
  /// session did not allocate (or freed already).
  std::size_t forget(void* p) {
    std::lock_guard lock(m_);
    const auto it = sizes_.find(p);
    if (it == sizes_.end())
      throw error(errc::invalid_argument,
                  "free(): the pointer was not allocated by this device session's malloc() or "
                  "malloc_async(), or was freed already");
    const std::size_t bytes = it->second;
    sizes_.erase(it);
    return bytes;
  }

  /// Records the device's free and total memory in the table (for snapshots and the CLI).
  void observe_device(const std::string& name) {
    device_scope on(ordinal_);
    std::size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    gpushare::detail::record_device_observation(core_->core(), name, total, free, ordinal_);
  }

private:
  struct region {
    cudaEvent_t start, stop;
  };
  struct deferred_free {
    cudaEvent_t done;
    std::uint64_t bytes;
  };

  /// Device time of finished regions; returns their events to the pool.
  std::uint64_t settle(const std::vector<region>& rs) {
    std::uint64_t sum = 0;
    for (const region& r : rs) {
      float ms = 0;
      std::uint64_t ns = 0;
      if (cudaEventElapsedTime(&ms, r.start, r.stop) == cudaSuccess && ms > 0)
        ns = static_cast<std::uint64_t>(static_cast<double>(ms) * 1e6);
      else
        (void)cudaGetLastError();
      sum = gpushare::detail::sat_add(sum, ns);
      {
        std::lock_guard lock(m_);
        avg_region_ns_ = update_average(avg_region_ns_, ns);
      }
      give_event(r.start);
      give_event(r.stop);
    }
    return sum;
  }

  /// Charges `bytes`, then runs `allocate_once` (a CUDA allocation call named `call`) on this
  /// device with retries; rolls the charge back if it fails.
  template <class F>
  void* charged_allocation(std::size_t bytes, const char* call, F&& allocate_once) {
    if (bytes == 0) return nullptr;
    charge(bytes);
    void* p = nullptr;
    cudaError_t e = cudaSuccess;
    try {
      device_scope on(ordinal_);
      e = with_retries([&] { return allocate_once(&p); });
    } catch (...) {
      uncharge(bytes);
      throw;
    }
    if (e != cudaSuccess) {
      uncharge(bytes);
      throw_allocation_failure(e, call, bytes);
    }
    return p;
  }

  /// Runs an allocation; if the device is out of memory although the budget allowed it, tries
  /// again a few times over about 300 ms. Memory of a process that just died is released by the
  /// driver while its process is torn down, which can finish after its table slot (an OFD lock,
  /// released when its files close) was already reclaimed and handed to us.
  template <class F> static cudaError_t with_retries(F&& allocate_once) {
    cudaError_t e = allocate_once();
    for (int attempt = 0; e == cudaErrorMemoryAllocation && attempt < 5; ++attempt) {
      (void)cudaGetLastError();
      std::this_thread::sleep_for(std::chrono::milliseconds(10 << attempt));
      e = allocate_once();
    }
    return e;
  }

  /// Makes the device's current memory pool give unused memory back, so bytes released from the
  /// budget are really free for other processes.
  void trim_pool() noexcept {
    cudaMemPool_t pool = nullptr;
    if (cudaDeviceGetMemPool(&pool, ordinal_) == cudaSuccess && pool)
      (void)cudaMemPoolTrimTo(pool, 0);
    (void)cudaGetLastError();
  }

  [[noreturn]] void throw_allocation_failure(cudaError_t e, const char* call, std::size_t bytes) {
    (void)cudaGetLastError();
    std::size_t free = 0, total = 0;
    std::string device_view;
    try {
      device_scope on(ordinal_); // the session's device, not the thread's current one
      if (cudaMemGetInfo(&free, &total) == cudaSuccess)
        device_view = "; the device has " + gpushare::detail::format_bytes(free) + " free of " +
                      gpushare::detail::format_bytes(total);
    } catch (...) {
    }
    (void)cudaGetLastError();
    if (e == cudaErrorMemoryAllocation)
      throw error(errc::cuda_error,
                  std::string(call) + " of " + gpushare::detail::format_bytes(bytes) +
                      " for session '" + core_->name() + "' failed although its budget allowed it" +
                      device_view +
                      ": memory is used outside gpushare's accounting (another program, or a "
                      "library's workspace); raise GPUSHARE_DEVICE_HEADROOM or record such use "
                      "with set_external_usage()");
    throw_cuda(e, call);
  }

  std::shared_ptr<gpushare::detail::session_core> core_;
  int ordinal_;
  resolved_device_options options_;
  std::mutex m_;
  std::deque<region> pending_;
  std::vector<cudaEvent_t> pool_;
  std::vector<deferred_free> deferred_;
  std::unordered_map<void*, std::size_t> sizes_;
  std::uint64_t avg_region_ns_ = 0;
};

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare
