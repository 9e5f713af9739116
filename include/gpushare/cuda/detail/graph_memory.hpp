// SPDX-License-Identifier: Apache-2.0
// The graph memory of a device session: what it allocated during stream captures (graph
// allocation nodes). CUDA maps such memory when a graph is launched, and keeps it in the
// device's graph memory pool after the graph's free node ran, for the next launch, until
// cudaDeviceGraphMemTrim (CUDA Programming Guide, "Graph Memory Nodes"). gpushare cannot see
// the application's graphs being launched or destroyed, so the bytes stay charged to the budget
// from the capture on, whatever frees them, until the application says the graphs are gone
// (device_session::release_graph_memory) or the session ends.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <mutex>

#include <gpushare/cuda/detail/calls.hpp>
#include <gpushare/cuda/detail/errors.hpp>
#include <gpushare/detail/budget.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

class graph_memory {
public:
  /// An allocation of `bytes` became a graph allocation node (already charged by the caller).
  void add(std::uint64_t bytes) noexcept {
    std::lock_guard lock(m_);
    held_ = gpushare::detail::sat_add(held_, bytes);
  }

  /// Bytes charged for graph memory.
  std::uint64_t held() noexcept {
    std::lock_guard lock(m_);
    return held_;
  }

  /// The graphs holding this memory are gone: trims the graph memory pool of device `ordinal`
  /// (cudaDeviceGraphMemTrim frees what no graph executing or scheduled uses), then stops
  /// holding what the pool no longer reserves (cudaGraphMemAttrReservedMemCurrent). The pool is
  /// the process's, so graphs the application allocated in itself can keep more held than this
  /// session's own; never less than the pool reserves. Returns the bytes to uncharge.
  std::uint64_t release(int ordinal) {
    const std::uint64_t before = held();
    if (before == 0) return 0;
    std::uint64_t reserved = 0;
    {
      relaxed_capture relaxed; // never an unsafe call for an application's capture
      check(own_call([&] { return cudaDeviceGraphMemTrim(ordinal); }), "cudaDeviceGraphMemTrim");
      check(own_call([&] {
              return cudaDeviceGetGraphMemAttribute(ordinal, cudaGraphMemAttrReservedMemCurrent,
                                                    &reserved);
            }),
            "cudaDeviceGetGraphMemAttribute");
    }
    const std::uint64_t give_back = before - std::min(before, reserved);
    std::lock_guard lock(m_);
    held_ -= std::min(held_, give_back); // allocations captured meanwhile stay held
    return give_back;
  }

  /// At the session's end the budget stops covering the memory: release what no graph uses
  /// from the device too. Best effort; never throws.
  void trim_at_end(int ordinal) noexcept {
    if (held() == 0) return;
    relaxed_capture relaxed;
    (void)own_call([&] { return cudaDeviceGraphMemTrim(ordinal); });
  }

private:
  std::mutex m_;
  std::uint64_t held_ = 0;
};

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare
