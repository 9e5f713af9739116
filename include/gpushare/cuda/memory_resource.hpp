// SPDX-License-Identifier: Apache-2.0
// A memory resource whose allocations are charged to a device session's budget.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>

#include <gpushare/cuda/device_session.hpp>

#include <gpushare/cuda/detail/runtime_names_begin.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {

/// Allocates device memory charged to a device session's budget: allocate() reserves, then
/// cudaMalloc()s (rolling the reservation back if that fails); deallocate() cudaFree()s, then
/// releases. The stream-ordered pair allocates from the session's own pool and frees with
/// cudaFreeAsync; the bytes of a stream-ordered free return to the budget once the free has
/// executed and the pool has given them back. deallocate() of a stream-ordered allocation frees
/// it in order on the stream it was allocated on (cudaFree would not wait for that stream).
///
/// One definition whatever the including code defines; the CCCL cuda::mr adapter is
/// cccl_memory_resource (<gpushare/cuda/cccl_memory_resource.hpp>).
///
/// Copies share the session's state and compare equal (memory from one may be returned through
/// another). It may outlive its device_session: allocating then throws errc::session_closed.
///
///     gpushare::cuda::memory_resource mr(session);
///     void* p = mr.allocate(1 << 20);
///     mr.deallocate(p, 1 << 20);
class memory_resource {
public:
  /// cudaMalloc's guaranteed alignment; larger alignments are refused (errc::invalid_argument).
  static constexpr std::size_t default_alignment = 256;

  /// Charges `s`'s budget.
  explicit memory_resource(const device_session& s) : state_(s.shared_state()) {}

  /// Reserves `bytes`, then cudaMalloc()s them (see the class comment).
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
    check_alignment(alignment);
    return state_->allocate(bytes);
  }
  /// Frees `p` (`bytes` as allocated), then releases its bytes.
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
    (void)alignment;
    state_->deallocate(p, bytes);
  }

  /// Stream-ordered allocate() from the session's pool, on `stream`.
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment,
                                     cudaStream_t stream) {
    check_alignment(alignment);
    return state_->allocate_async(bytes, stream);
  }
  /// Stream-ordered free on `stream`; its bytes return to the budget once the pool gave them back.
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment,
                        cudaStream_t stream) noexcept {
    (void)alignment;
    state_->deallocate_async(p, bytes, stream);
  }

  /// The device session's state this resource charges (shared with the session).
  const std::shared_ptr<detail::device_state>& state() const noexcept { return state_; }

  /// Whether both charge the same session state.
  friend bool operator==(const memory_resource& a, const memory_resource& b) noexcept {
    return a.state_ == b.state_;
  }
  /// Negation of ==.
  friend bool operator!=(const memory_resource& a, const memory_resource& b) noexcept {
    return !(a == b);
  }

private:
  static void check_alignment(std::size_t alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > default_alignment)
      throw error(errc::invalid_argument,
                  "alignment " + std::to_string(alignment) +
                      " is not supported: give a power of two up to 256 (cudaMalloc's alignment)");
  }

  std::shared_ptr<detail::device_state> state_;
};

} // namespace cuda
} // namespace v0
} // namespace gpushare

#include <gpushare/cuda/detail/runtime_names_end.hpp>
