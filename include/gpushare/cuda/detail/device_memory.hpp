// SPDX-License-Identifier: Apache-2.0
// Budgeted device memory of one device session: every allocation is charged to the session's
// budget first (waiting for memory as the session's options say), then made on the device with
// retries, and rolled back if it fails; every free returns its bytes once the memory is free.
// Plain allocations use cudaMalloc/cudaFree; stream-ordered ones go through the session's pool
// (stream_pool.hpp), and the pointer registry (allocations.hpp) says which is which. Part of
// device_state (state.hpp), which keeps a forked child away from all of it.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>

#include <gpushare/cuda/detail/allocations.hpp>
#include <gpushare/cuda/detail/calls.hpp>
#include <gpushare/cuda/detail/device_options.hpp>
#include <gpushare/cuda/detail/errors.hpp>
#include <gpushare/cuda/detail/event_pool.hpp>
#include <gpushare/cuda/detail/stream_pool.hpp>
#include <gpushare/detail/parse.hpp>
#include <gpushare/detail/session_core.hpp>

#include <gpushare/cuda/detail/runtime_names_begin.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

/// Guards (scoped_kernel) open on the calling thread: an allocation inside one does not wait
/// for memory (see device_memory::charge).
inline thread_local int guards_on_this_thread = 0;

class device_memory {
public:
  device_memory(gpushare::detail::session_core& core, int ordinal, const state_options& options,
                event_pool& events) noexcept
      : core_(core), ordinal_(ordinal), options_(options), events_(events),
        pool_(core, ordinal, events) {}
  device_memory(const device_memory&) = delete;
  device_memory& operator=(const device_memory&) = delete;

  stream_pool& pool() noexcept { return pool_; }
  allocation_registry& registry() noexcept { return registry_; }

  /// Charges `bytes` to the budget, waiting up to the allocation timeout. Frees of this session
  /// still in flight are waited for first when the bytes do not fit: they may be what is missing.
  /// Inside a guard (on this thread) it does not wait for other sessions: errc::timeout at once.
  void charge(std::uint64_t bytes) {
    pool_.release_finished_frees(frees_wait::poll);
    if (core_.try_grow(bytes)) return;
    if ((pool_.release_finished_frees(frees_wait::wait) > 0 ||
         pool_.release_pool_memory(pool_trim::always) > 0) &&
        core_.try_grow(bytes))
      return;
    if (guards_on_this_thread > 0)
      throw error(errc::timeout,
                  "session '" + core_.name() + "': " + gpushare::detail::format_bytes(bytes) +
                      " do not fit in the budget now, and this thread is inside a scoped_kernel, "
                      "where an allocation does not wait for memory: it would hold the GPU while "
                      "it waits, and the session that would free the memory may need the GPU "
                      "first. Allocate before the guard (or reserve() ahead)");
    const std::uint64_t t = options_.allocation_timeout_ns;
    core_.grow(bytes, t == no_timeout ? gpushare::detail::wait_forever_ns : t);
  }

  void uncharge(std::uint64_t bytes) noexcept { core_.shrink(bytes); }

  /// Budgeted cudaMalloc: reserve, allocate, roll the reservation back if the allocation fails.
  void* allocate(std::size_t bytes) {
    return charged_allocation(bytes, "cudaMalloc", [&](void** p) { return cudaMalloc(p, bytes); });
  }

  /// Frees memory of this session: cudaFree (which waits for the device, so the memory is free
  /// when it returns), then the bytes go back to the budget. A pointer from allocate_async is
  /// freed the stream-ordered way instead, on the stream it was allocated on. A failed cudaFree
  /// keeps the bytes charged. Never throws.
  void deallocate(void* p, std::size_t bytes) noexcept {
    cudaStream_t stream = nullptr;
    if (registry_.stream_ordered(p, stream)) {
      deallocate_async(p, bytes, stream);
      return;
    }
    try {
      device_scope on(ordinal_);
      if (own_call([&] { return cudaFree(p); }) != cudaSuccess) {
        pool_.kept_charged();
        return;
      }
    } catch (...) {
      pool_.kept_charged();
      return;
    }
    uncharge(bytes);
  }

  /// Budgeted stream-ordered allocation on `stream`, from the session's own memory pool (so
  /// that trimming it never touches the application's pools). During a stream capture the
  /// allocation becomes a graph node: its bytes are graph memory, charged from the capture on
  /// until release_graph_memory() (a free of it, captured or not, does not return them).
  void* allocate_async(std::size_t bytes, cudaStream_t stream) {
    if (bytes == 0) return nullptr;
    bool capturing = false;
    {
      device_scope on(ordinal_);
      check(capture_state(stream, capturing), "cudaStreamIsCapturing");
    }
    cudaMemPool_t pool = pool_.own();
    void* p = charged_allocation(bytes, "cudaMallocFromPoolAsync", [&](void** out) {
      return cudaMallocFromPoolAsync(out, bytes, pool, stream);
    });
    try {
      registry_.add_stream_ordered(p, bytes, stream, capturing);
    } catch (...) {
      (void)own_call([&] { return cudaFreeAsync(p, stream); });
      uncharge(bytes);
      throw;
    }
    pool_.allocated(bytes, capturing);
    return p;
  }

  /// cudaFreeAsync on `stream`; the bytes return to the budget once the free has executed on the
  /// device and the pool has given the memory back to the device (checked at the next
  /// allocation, free or synchronize(), and whenever a session waits for memory). A free of graph
  /// memory (allocated during a capture) returns nothing: the graph memory pool keeps it. Never
  /// throws (Thrust calls it where an exception would terminate): if the free cannot be issued
  /// or confirmed, the bytes stay charged (cuda_stats::frees_kept_charged).
  void deallocate_async(void* p, std::size_t bytes, cudaStream_t stream) noexcept {
    allocation rec{bytes, allocation_kind::stream_ordered, stream, false};
    bool known = false;
    try {
      if (const auto found = registry_.take_stream_ordered(p)) {
        rec = *found;
        known = true;
      }
    } catch (...) {
    }
    try {
      device_scope on(ordinal_);
      bool capturing = false;
      if (capture_state(stream, capturing) != cudaSuccess) return pool_.kept_charged();
      if (own_call([&] { return cudaFreeAsync(p, stream); }) != cudaSuccess)
        return pool_.kept_charged();
      // Graph memory stays charged (release_graph_memory). A pool allocation freed inside a
      // capture is returned when the graph runs: keep it charged.
      if (rec.captured) return;
      if (capturing) return pool_.kept_charged();
      // Allocated by allocate_async outside a capture: from the session's pool.
      free_issued(rec.bytes, stream, known ? freed_from::own_pool : freed_from::elsewhere);
    } catch (...) {
      pool_.kept_charged();
    }
  }

private:
  /// A stream-ordered free of `bytes` was issued on `stream`: records an event after it to learn
  /// when it ran, or, without one, waits for the stream here.
  void free_issued(std::uint64_t bytes, cudaStream_t stream, freed_from from) {
    cudaEvent_t done = nullptr;
    try {
      done = events_.take(event_kind::untimed);
    } catch (...) {
    }
    if (!done || own_call([&] { return cudaEventRecord(done, stream); }) != cudaSuccess) {
      // No event: wait for the stream here instead.
      relaxed_capture relaxed;
      if (own_call([&] { return cudaStreamSynchronize(stream); }) != cudaSuccess) {
        event_pool::drop(done);
        return pool_.kept_charged();
      }
      events_.give(done, event_kind::untimed);
      pool_.freed(bytes, from);
      pool_.release_pool_memory(pool_trim::when_memory_wanted);
      return;
    }
    pool_.free_issued(done, bytes, from);
    pool_.release_finished_frees(frees_wait::poll);
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
    cudaError_t e = own_call(allocate_once);
    for (int attempt = 0; e == cudaErrorMemoryAllocation && attempt < 5; ++attempt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10 << attempt));
      e = own_call(allocate_once);
    }
    return e;
  }

  [[noreturn]] void throw_allocation_failure(cudaError_t e, const char* call, std::size_t bytes) {
    std::size_t free = 0, total = 0;
    std::string device_view;
    try {
      device_scope on(ordinal_); // the session's device, not the thread's current one
      if (own_call([&] { return cudaMemGetInfo(&free, &total); }) == cudaSuccess)
        device_view = "; the device has " + gpushare::detail::format_bytes(free) + " free of " +
                      gpushare::detail::format_bytes(total);
    } catch (...) {
    }
    if (e == cudaErrorMemoryAllocation)
      throw error(errc::cuda_error,
                  std::string(call) + " of " + gpushare::detail::format_bytes(bytes) +
                      " for session '" + core_.name() + "' failed although its budget allowed it" +
                      device_view +
                      ": memory is used outside gpushare's accounting (another program, or a "
                      "library's workspace); raise GPUSHARE_DEVICE_HEADROOM or record such use "
                      "with set_external_usage()");
    throw_cuda(e, call);
  }

  gpushare::detail::session_core& core_;
  int ordinal_;
  state_options options_;
  event_pool& events_;
  stream_pool pool_;
  allocation_registry registry_;
};

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare

#include <gpushare/cuda/detail/runtime_names_end.hpp>
