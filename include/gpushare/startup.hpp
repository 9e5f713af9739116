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

#include <gpushare/detail/futex.hpp>
#include <gpushare/detail/interrupt.hpp>
#include <gpushare/detail/parse.hpp>
#include <gpushare/detail/session_core.hpp>
#include <gpushare/detail/startup.hpp>
#include <gpushare/session.hpp>

namespace gpushare {
inline namespace v0 {

/// A session's hold on its table's start-up lock: move-only, released by ready() or the
/// destructor, and by the session's end (leave, eviction, or its process's death: a peer's
/// reclaim). An empty hold (default-constructed, moved from, after ready()) holds nothing.
class startup_hold {
public:
  startup_hold() = default;
  startup_hold(startup_hold&& o) noexcept
      : core_(std::move(o.core_)), word_(std::exchange(o.word_, 0)) {}
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

namespace detail {

/// The errc::timeout of a wait for the start-up lock, naming its holder (under the table lock).
inline error startup_timeout(const table_view& t, const std::string& table, const std::string& me,
                             std::uint64_t waited_ns, std::uint64_t now) {
  std::string m = "session '" + me + "': the start-up lock of table '" + table + "' was not free";
  m.append(" within ").append(format_duration(waited_ns));
  const std::int64_t i = startup_holder(t);
  if (i == nobody) return error(errc::timeout, m + "; it is free now: try again");
  const slot_record& s = t.slots[static_cast<std::uint32_t>(i)];
  const std::uint64_t since = t.header->startup_since_ns.load(std::memory_order_relaxed);
  m.append(": session '")
      .append(read_bounded(s.name, name_capacity))
      .append("' (pid ")
      .append(std::to_string(s.pid))
      .append(", slot ")
      .append(std::to_string(i))
      .append(") has held it for ")
      .append(format_duration(now > since ? now - since : 0))
      .append(" and is still starting (it releases it when its engine is ready). Wait longer, or, "
              "if that process is stopped or hung, `gpushare evict ")
      .append(std::to_string(i))
      .append(" --table ")
      .append(table)
      .append("` releases it");
  return error(errc::timeout, m);
}

/// The loop of startup_hold::take(): one try under the table lock, a look for dead sessions the
/// first time it fails, then sleeps on startup_wake, counted in the slot's startup_waiting.
inline std::uint64_t wait_startup(session_core& c, std::uint64_t timeout_ns, bool& waiting) {
  table_core& t = c.core();
  const session_id id = c.id();
  const std::uint64_t start = monotonic_ns();
  const std::uint64_t deadline =
      timeout_ns == wait_forever_ns ? wait_forever_ns : sat_add(start, timeout_ns);
  std::uint64_t next_check = 0;
  for (bool reclaimed = false;;) {
    table_core::guard g(t);
    slot_record& s = t.slot(id.slot);
    if (s.state.load(std::memory_order_relaxed) != slot_active || s.generation != id.generation)
      throw error(errc::session_closed, "session '" + c.name() + "' has left table '" + t.name() +
                                            "' (or was evicted): join again");
    const std::uint64_t me = startup_word(id.slot, id.generation);
    if (t.header().startup_owner.load(std::memory_order_acquire) == me) {
      if (waiting) --s.startup_waiting;
      waiting = false;
      throw error(errc::invalid_argument, "session '" + c.name() +
                                              "' already holds the start-up lock of table '" +
                                              t.name() + "': call ready() on that hold first");
    }
    const std::uint64_t now = monotonic_ns();
    if (try_take_startup(t.view(), id.slot, now, realtime_ns())) {
      if (waiting) --s.startup_waiting;
      waiting = false;
      return me;
    }
    if (!reclaimed) { // a dead holder never releases: reclaim, then try again at once
      g.unlock();
      reclaimed = true;
      t.reclaim_dead();
      next_check = sat_add(monotonic_ns(), liveness_recheck_ns);
      continue;
    }
    if (now >= deadline) {
      if (waiting) --s.startup_waiting;
      waiting = false;
      throw startup_timeout(t.view(), t.name(), c.name(), now - start, now);
    }
    if (!waiting) ++s.startup_waiting;
    waiting = true;
    const std::uint32_t seq = t.header().startup_wake.load(std::memory_order_acquire);
    g.unlock();
    const std::uint64_t until = std::min(deadline, next_check);
    if (until > now) futex_wait(&t.header().startup_wake, seq, interruptible_sleep_ns(until - now));
    interruption_point(); // may throw (a wait_interrupt's check): take() uncounts this waiter
    if (const std::uint64_t after = monotonic_ns(); after >= next_check) {
      t.reclaim_dead();
      next_check = sat_add(after, liveness_recheck_ns);
    }
  }
}

} // namespace detail

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
