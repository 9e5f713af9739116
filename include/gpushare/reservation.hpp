// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>

#include <gpushare/detail/session_core.hpp>

namespace gpushare {
inline namespace v0 {

class session;

/// Bytes of device memory promised to a session by the table: while a reservation holds them, no
/// other session can reserve them. Released on destruction. Movable, not copyable.
///
///     auto r = s.reserve(256 << 20);          // waits until 256 MiB fit the budget
///     void* p; cudaMalloc(&p, r.size());      // the budget already holds room for it
///     r.grow(64 << 20);                       // more, later
///
/// A reservation keeps its session's state alive, but once the session has left (or was moved
/// into a forked child), releasing it is a no-op: leaving already returned every byte.
///
/// A reclaimable reservation (session::reserve_reclaimable(), set_reclaimable()) holds memory
/// its session gives back when a reserve of a higher priority class waits: a cache, KV-cache
/// blocks, a sleeping engine's weights. The session's reclaim handler (session::on_reclaim())
/// releases such reservations when asked (docs/design.md section 15).
class [[nodiscard]] reservation {
public:
  reservation() = default;
  /// Takes over `o`'s bytes; `o` is left empty. Assigning releases this one's bytes first.
  reservation(reservation&& o) noexcept
      : core_(std::move(o.core_)), bytes_(std::exchange(o.bytes_, 0)), kind_(o.kind_) {}
  /// See the move constructor.
  reservation& operator=(reservation&& o) noexcept {
    if (this != &o) {
      release();
      core_ = std::move(o.core_);
      bytes_ = std::exchange(o.bytes_, 0);
      kind_ = o.kind_;
    }
    return *this;
  }
  reservation(const reservation&) = delete;
  reservation& operator=(const reservation&) = delete;
  ~reservation() { release(); }

  /// Bytes held.
  std::uint64_t size() const noexcept { return bytes_; }
  /// Whether it holds any bytes.
  explicit operator bool() const noexcept { return bytes_ > 0; }
  /// Whether its bytes are reclaimable: given back when a higher class's reserve waits.
  bool reclaimable() const noexcept { return kind_ == detail::memory_kind::reclaimable; }

  /// Makes its bytes reclaimable (or fixed again). The table counts the session's reclaimable
  /// bytes; requests never ask a session for more than that, nor below its guarantee. Making
  /// them fixed throws errc::guarantee_unavailable (nothing changes) when some of the session's
  /// reclaimable memory is on loan out of other sessions' idle guarantees and the table has no
  /// room to count it as the session's own (session::watch_reclaim()).
  void set_reclaimable(bool on = true) {
    const auto kind = on ? detail::memory_kind::reclaimable : detail::memory_kind::fixed;
    if (kind == kind_) return;
    if (bytes_ > 0) require_core().mark_reclaimable(bytes_, kind);
    kind_ = kind;
  }

  /// Grows by `bytes`, waiting up to `timeout` for memory. Throws errc::over_limit /
  /// errc::exceeds_capacity at once if it can never fit, errc::timeout when it did not in time.
  template <class Rep, class Period>
  void grow(std::uint64_t bytes, std::chrono::duration<Rep, Period> timeout) {
    require_core().grow(bytes, detail::to_ns(timeout), kind_);
    bytes_ += bytes;
  }
  /// Grows by `bytes`, waiting as long as it takes (dead peers' memory is reclaimed meanwhile).
  void grow(std::uint64_t bytes) {
    require_core().grow(bytes, detail::wait_forever_ns, kind_);
    bytes_ += bytes;
  }
  /// Grows by `bytes` if that fits now; false otherwise (over-limit still throws).
  [[nodiscard]] bool try_grow(std::uint64_t bytes) {
    if (!require_core().try_grow(bytes, kind_)) return false;
    bytes_ += bytes;
    return true;
  }
  /// Gives back `bytes` (at most what it holds).
  void shrink(std::uint64_t bytes) noexcept {
    bytes = bytes < bytes_ ? bytes : bytes_;
    if (core_) core_->shrink(bytes, kind_);
    bytes_ -= bytes;
  }
  /// Gives back everything now. Never leaks: if the table lock cannot be had (a peer stopped
  /// while holding it), the session records the release and applies it at its next lock (or its
  /// end returns the bytes), so size() becoming 0 here always ends with the bytes returned.
  void release() noexcept {
    if (core_ && bytes_ > 0) core_->shrink(bytes_, kind_);
    bytes_ = 0;
  }

private:
  friend class session;
  reservation(std::shared_ptr<detail::session_core> core, std::uint64_t bytes,
              detail::memory_kind kind = detail::memory_kind::fixed) noexcept
      : core_(std::move(core)), bytes_(bytes), kind_(kind) {}
  detail::session_core& require_core() const {
    if (!core_) throw error(errc::session_closed, "empty reservation (moved from or default)");
    return *core_;
  }

  std::shared_ptr<detail::session_core> core_;
  std::uint64_t bytes_ = 0;
  detail::memory_kind kind_ = detail::memory_kind::fixed;
};

} // namespace v0
} // namespace gpushare
