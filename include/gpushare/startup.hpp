// SPDX-License-Identifier: Apache-2.0
// The start-up lock (docs/design.md, "The start-up lock"): inference engines started together on
// one GPU each measure free memory and size their caches from it; one at a time, each sees what
// the others already took.
//
//     gpushare::session s("GPU-8f1e...", o);
//     gpushare::startup_hold h = gpushare::hold_startup(s, std::chrono::minutes(10));
//     start_engine();  // profile free memory, load weights, allocate the KV cache
//     h.ready();       // the engine is ready: the next one may start
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <gpushare/detail/session_core.hpp>
#include <gpushare/detail/startup.hpp>
#include <gpushare/detail/startup_wait.hpp>
#include <gpushare/session.hpp>

namespace gpushare {
inline namespace v0 {

/// A session's hold on its table's start-up lock: move-only, released by ready() or the
/// destructor, and by the session's end (leave, eviction, or its process's death: a peer's
/// reclaim). An empty hold (default-constructed, moved from, after ready()) holds nothing.
class startup_hold {
public:
  startup_hold() = default;
  /// Takes over `o`'s hold; `o` is left empty. Assigning releases this one's hold first.
  startup_hold(startup_hold&& o) noexcept
      : core_(std::move(o.core_)), word_(std::exchange(o.word_, 0)) {}
  /// See the move constructor.
  startup_hold& operator=(startup_hold&& o) noexcept {
    if (this != &o) {
      ready();
      core_ = std::move(o.core_);
      word_ = std::exchange(o.word_, 0);
    }
    return *this;
  }
  startup_hold(const startup_hold&) = delete;
  startup_hold& operator=(const startup_hold&) = delete;
  ~startup_hold() { ready(); }

  /// The engine is ready: releases the lock now and wakes the sessions waiting for it. Does
  /// nothing on an empty hold, or if the session's end already released it. Needs no table lock.
  void ready() noexcept {
    if (word_ == 0) return;
    detail::table_header& h = core_->core().header();
    if (detail::release_startup(h, std::exchange(word_, 0))) detail::futex_wake(&h.startup_wake);
    core_.reset();
  }

  /// Whether this hold still names the lock's holder (false once released, by ready() or by the
  /// session's end).
  bool held() const noexcept {
    return word_ != 0 &&
           core_->core().header().startup_owner.load(std::memory_order_acquire) == word_;
  }

  /// Waits up to `timeout_ns` (detail::wait_forever_ns: no bound) for session `s` to hold the
  /// start-up lock of its table. hold_startup() is the usual way to call it.
  static startup_hold take(session& s, std::uint64_t timeout_ns);

private:
  startup_hold(std::shared_ptr<detail::session_core> c, std::uint64_t w)
      : core_(std::move(c)), word_(w) {}
  std::shared_ptr<detail::session_core> core_;
  std::uint64_t word_ = 0; ///< detail::startup_word() of the session; 0: empty
};

/// Waits until session `s` holds its table's start-up lock, at most `timeout`. Throws
/// errc::timeout naming the holder (its name, pid, slot and how long it has held it) and what to
/// do; errc::invalid_argument if `s` already holds it (one hold per session);
/// errc::session_closed if `s` has left or was evicted. Waiting re-checks liveness every 100 ms,
/// so a holder that died is reclaimed and the lock passes on.
[[nodiscard]] inline startup_hold hold_startup(session& s, std::chrono::nanoseconds timeout) {
  return startup_hold::take(s, timeout.count() < 0 ? 0 : detail::to_ns(timeout));
}
/// As hold_startup(s, timeout), waiting without end.
[[nodiscard]] inline startup_hold hold_startup(session& s) {
  return startup_hold::take(s, detail::wait_forever_ns);
}
/// As hold_startup(s, timeout), but nullopt instead of errc::timeout (other errors still
/// throw); a zero timeout only tries. For bindings that wait in slices between checks for
/// signals (Python's Ctrl-C).
[[nodiscard]] inline std::optional<startup_hold>
try_hold_startup(session& s, std::chrono::nanoseconds timeout) {
  try {
    return hold_startup(s, timeout);
  } catch (const error& e) {
    if (e.code() != errc::timeout) throw;
    return std::nullopt;
  }
}

inline startup_hold startup_hold::take(session& s, std::uint64_t timeout_ns) {
  std::shared_ptr<detail::session_core> c = s.shared_core();
  detail::table_core& t = c->core();
  const session_id id = c->id();
  bool waiting = false;
  try {
    return startup_hold(c, detail::wait_startup(*c, timeout_ns, waiting));
  } catch (...) {
    if (waiting) { // a lock timeout or a signal's exception: stop counting this waiter
      try {
        detail::table_core::guard g(t);
        detail::slot_record& r = t.slot(id.slot);
        if (r.generation == id.generation && r.startup_waiting > 0) --r.startup_waiting;
      } catch (...) { // the lock could not be had: the count stays until the session ends
      }
    }
    throw;
  }
}

} // namespace v0
} // namespace gpushare
