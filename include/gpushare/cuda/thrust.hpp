// SPDX-License-Identifier: Apache-2.0
// Thrust integration: an allocator for thrust::device_vector and an execution policy whose
// temporary allocations are charged to a device session's budget. The only gpushare header that
// includes Thrust; compile the code that includes it with nvcc (or add the toolkit's CCCL to a
// host compiler's include path).
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <new>
#include <string>

#include <thrust/device_malloc_allocator.h>
#include <thrust/device_ptr.h>
#include <thrust/execution_policy.h>

#include <gpushare/cuda/device_session.hpp>
#include <gpushare/error.hpp>

#include <gpushare/cuda/detail/runtime_names_begin.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {

/// Thrown by the Thrust allocators when the budget refuses an allocation (or cudaMalloc fails):
/// a std::bad_alloc, which is what Thrust and its callers expect, carrying gpushare's code and
/// message ("session 'x': reserving 2 GiB would exceed its memory limit of 1 GiB ...").
class out_of_budget : public std::bad_alloc {
public:
  /// Carries `e`'s code and message.
  explicit out_of_budget(const error& e) : code_(e.code()), message_(e.what()) {}
  /// gpushare's message.
  const char* what() const noexcept override { return message_.c_str(); }
  /// gpushare's code.
  errc code() const noexcept { return code_; }

private:
  errc code_;
  std::string message_;
};

namespace detail {
/// Runs an allocation; gpushare's errors become out_of_budget (a std::bad_alloc).
template <class F> auto as_bad_alloc(F&& f) {
  try {
    return f();
  } catch (const error& e) {
    throw out_of_budget(e);
  }
}
} // namespace detail

/// An allocator for thrust::device_vector whose memory is charged to a device session:
///
///     gpushare::cuda::thrust_allocator<float> alloc(session);
///     thrust::device_vector<float, gpushare::cuda::thrust_allocator<float>> v(n, alloc);
///
/// Over budget: throws out_of_budget (a std::bad_alloc). Memory is allocated with cudaMalloc and
/// freed with cudaFree (synchronous, as Thrust's default allocator).
template <class T> class thrust_allocator : public thrust::device_malloc_allocator<T> {
public:
  /// The allocator interface Thrust expects.
  ///@{
  using base = thrust::device_malloc_allocator<T>;
  using value_type = T;
  using pointer = thrust::device_ptr<T>;
  using size_type = std::size_t;
  ///@}
  /// The same allocator for elements of type `U`.
  template <class U> struct rebind {
    using other = thrust_allocator<U>; ///< this allocator for `U`
  };

  /// Charges `s`'s budget.
  explicit thrust_allocator(const device_session& s) : state_(s.shared_state()) {}
  /// Charges the same session as `other`.
  template <class U>
  thrust_allocator(const thrust_allocator<U>& other) noexcept : state_(other.state()) {}

  /// Room for `n` elements; throws out_of_budget when the budget refuses.
  pointer allocate(size_type n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_alloc();
    void* p = detail::as_bad_alloc([&] { return state_->allocate(n * sizeof(T)); });
    return pointer(static_cast<T*>(p));
  }
  /// Frees `p` (`n` elements) and releases its bytes.
  void deallocate(pointer p, size_type n) noexcept {
    state_->deallocate(static_cast<void*>(p.get()), n * sizeof(T));
  }

  /// The device session's state this allocator charges.
  const std::shared_ptr<detail::device_state>& state() const noexcept { return state_; }

  /// Whether both charge the same session state.
  template <class U> bool operator==(const thrust_allocator<U>& o) const noexcept {
    return state_ == o.state();
  }
  /// Negation of ==.
  template <class U> bool operator!=(const thrust_allocator<U>& o) const noexcept {
    return state_ != o.state();
  }

private:
  std::shared_ptr<detail::device_state> state_;
};

/// The allocator Thrust uses for an algorithm's temporary storage (sort buffers, scan
/// partials): stream-ordered allocation on the policy's stream, charged to the session.
class thrust_temporary_allocator {
public:
  using value_type = char; ///< Thrust's temporary storage is bytes

  /// Charges `s`'s budget; allocates and frees in order on `stream`.
  thrust_temporary_allocator(const device_session& s, cudaStream_t stream)
      : state_(s.shared_state()), stream_(stream) {}

  /// `n` bytes, stream-ordered; throws out_of_budget when the budget refuses.
  char* allocate(std::ptrdiff_t n) {
    if (n < 0) throw std::bad_alloc();
    return static_cast<char*>(detail::as_bad_alloc(
        [&] { return state_->allocate_async(static_cast<std::size_t>(n), stream_); }));
  }
  /// Thrust calls this where an exception would end the program (a noexcept path), so it never
  /// throws: a free that cannot be issued keeps its bytes charged (cuda_stats::frees_kept_charged).
  void deallocate(char* p, std::size_t n) noexcept { state_->deallocate_async(p, n, stream_); }

  /// The stream it allocates on.
  cudaStream_t stream() const noexcept { return stream_; }

private:
  std::shared_ptr<detail::device_state> state_;
  cudaStream_t stream_;
};

/// A Thrust execution policy on `stream` whose temporary allocations are charged to `s`:
///
///     thrust::sort(gpushare::cuda::thrust_policy(session, stream), v.begin(), v.end());
///
/// Put the call inside a scoped_kernel on the same stream to have its GPU time arbitrated too.
inline auto thrust_policy(const device_session& s, cudaStream_t stream) {
  return thrust::cuda::par(thrust_temporary_allocator(s, stream)).on(stream);
}

} // namespace cuda
} // namespace v0
} // namespace gpushare

#include <gpushare/cuda/detail/runtime_names_end.hpp>
