// SPDX-License-Identifier: Apache-2.0
// The pointer registry of one device session: one record per live allocation that must be
// recognised later. A stream-ordered allocation (device_state::allocate_async, from any front
// end) is recorded with its stream, so that it is freed the stream-ordered way, on that stream;
// an allocation of device_session::malloc/malloc_async is marked as the session's, so that
// free()/free_async() find its size and refuse a pointer freed the wrong way. Part of
// device_state (state.hpp); its mutex is a leaf: nothing else is locked while it is held.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

#include <gpushare/error.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

/// How an allocation of device_session was made, so that it is freed the same way.
enum class allocation_kind { plain, stream_ordered };

/// What the registry knows of one allocation.
struct allocation {
  std::size_t bytes = 0;
  allocation_kind kind = allocation_kind::plain;
  cudaStream_t stream = nullptr; // stream_ordered: the stream it was allocated on
  bool captured = false;         // stream_ordered: allocated during a stream capture (graph memory)
  bool session_owned = false;    // made by device_session::malloc/malloc_async, not yet freed there
};

class allocation_registry {
public:
  /// A stream-ordered allocation of `bytes` on `stream` (during a capture when `captured`).
  void add_stream_ordered(void* p, std::size_t bytes, cudaStream_t stream, bool captured) {
    std::lock_guard lock(m_);
    live_[p] = {bytes, allocation_kind::stream_ordered, stream, captured, false};
  }

  /// Marks `p` as device_session's (malloc with allocation_kind::plain, malloc_async with
  /// stream_ordered, which add_stream_ordered recorded already).
  void claim(void* p, std::size_t bytes, allocation_kind kind) {
    std::lock_guard lock(m_);
    const auto [it, added] = live_.try_emplace(p, allocation{bytes, kind, nullptr, false, true});
    if (added) return;
    if (kind == allocation_kind::plain)
      it->second = {bytes, kind, nullptr, false, true}; // a stale record of a reused address
    else
      it->second.session_owned = true;
  }

  /// The size recorded for a pointer of device_session, which gives it up (a stream-ordered
  /// record stays, for the free to find its stream). Throws errc::invalid_argument for a pointer
  /// this session did not allocate (or freed already), or one allocated the other way (malloc vs
  /// malloc_async): each must be freed by its own counterpart.
  std::size_t unclaim(void* p, allocation_kind kind) {
    std::lock_guard lock(m_);
    const auto it = live_.find(p);
    if (it == live_.end() || !it->second.session_owned)
      throw error(errc::invalid_argument,
                  "free(): the pointer was not allocated by this device session's malloc() or "
                  "malloc_async(), or was freed already");
    if (it->second.kind != kind)
      throw error(errc::invalid_argument,
                  kind == allocation_kind::plain
                      ? "free(): the pointer comes from malloc_async(); free it with "
                        "free_async(p, stream), in stream order"
                      : "free_async(): the pointer comes from malloc(); free it with free(p)");
    const std::size_t bytes = it->second.bytes;
    if (kind == allocation_kind::plain)
      live_.erase(it);
    else
      it->second.session_owned = false;
    return bytes;
  }

  /// The record of a stream-ordered allocation, removed (it is being freed); none for another
  /// pointer.
  std::optional<allocation> take_stream_ordered(void* p) {
    std::lock_guard lock(m_);
    const auto it = live_.find(p);
    if (it == live_.end() || it->second.kind != allocation_kind::stream_ordered)
      return std::nullopt;
    const allocation a = it->second;
    live_.erase(it);
    return a;
  }

  /// Whether `p` is a stream-ordered allocation (and on which stream).
  bool stream_ordered(void* p, cudaStream_t& stream) noexcept {
    std::lock_guard lock(m_);
    const auto it = live_.find(p);
    if (it == live_.end() || it->second.kind != allocation_kind::stream_ordered) return false;
    stream = it->second.stream;
    return true;
  }

private:
  std::mutex m_;
  std::unordered_map<void*, allocation> live_;
};

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare
