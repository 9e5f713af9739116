// SPDX-License-Identifier: Apache-2.0
// A memory resource whose allocations are charged to a device session's budget.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>

#include <gpushare/cuda/device_session.hpp>

// CCCL's cuda::mr concepts are experimental in CCCL 3.0 (the toolkit's version here) and changed
// shape in 3.1+. When the application opts in to them (it defines
// LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE) and the CCCL major.minor is 3.0, the resource
// also takes cuda::stream_ref and declares the device_accessible property, so it satisfies
// cuda::mr::async_resource_with<memory_resource, cuda::mr::device_accessible>. Otherwise it is
// a plain class with the same member functions on cudaStream_t.
#if defined(LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE) && __has_include(<cuda/memory_resource>)
#include <cuda/memory_resource>
#include <cuda/stream_ref>
#if defined(CCCL_MAJOR_VERSION) && CCCL_MAJOR_VERSION == 3 && CCCL_MINOR_VERSION == 0
#define GPUSHARE_CUDA_MR 1
#endif
#endif
#ifndef GPUSHARE_CUDA_MR
#define GPUSHARE_CUDA_MR 0
#endif

namespace gpushare {
inline namespace v0 {
namespace cuda {

/// Allocates device memory charged to a device session's budget: allocate() reserves, then
/// cudaMalloc()s (rolling the reservation back if that fails); deallocate() cudaFree()s, then
/// releases. The stream-ordered pair uses cudaMallocAsync/cudaFreeAsync; the bytes of a
/// stream-ordered free return to the budget once the free has executed on the device.
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

  explicit memory_resource(const device_session& s) : state_(s.shared_state()) {}

  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
    check_alignment(alignment);
    return state_->allocate(bytes);
  }
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
    (void)alignment;
    state_->deallocate(p, bytes);
  }

  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment,
                                     cudaStream_t stream) {
    check_alignment(alignment);
    return state_->allocate_async(bytes, stream);
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment, cudaStream_t stream) {
    (void)alignment;
    state_->deallocate_async(p, bytes, stream);
  }

#if GPUSHARE_CUDA_MR
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment,
                                     ::cuda::stream_ref stream) {
    return allocate_async(bytes, alignment, stream.get());
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment,
                        ::cuda::stream_ref stream) {
    deallocate_async(p, bytes, alignment, stream.get());
  }
  friend void get_property(const memory_resource&, ::cuda::mr::device_accessible) noexcept {}
#endif

  /// The device session's state this resource charges (shared with the session).
  const std::shared_ptr<detail::device_state>& state() const noexcept { return state_; }

  friend bool operator==(const memory_resource& a, const memory_resource& b) noexcept {
    return a.state_ == b.state_;
  }
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
