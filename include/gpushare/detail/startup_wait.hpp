// SPDX-License-Identifier: Apache-2.0
// The wait for a table's start-up lock (<gpushare/startup.hpp>, startup_hold::take): one try
// under the table lock, a look for dead sessions, then sleeps on header.startup_wake, counted in
// the slot's startup_waiting, interruptible like every wait of a session (detail/interrupt.hpp).
// The lock's state and its pure rules are in detail/startup.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include <gpushare/detail/elapsed.hpp>
#include <gpushare/detail/futex.hpp>
#include <gpushare/detail/interrupt.hpp>
#include <gpushare/detail/parse.hpp>
#include <gpushare/detail/session_core.hpp>
#include <gpushare/detail/startup.hpp>
#include <gpushare/error.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// The errc::timeout of a wait for the start-up lock, naming its holder (under the table lock).
inline error startup_timeout(const table_view& t, const std::string& table, const std::string& me,
                             std::uint64_t waited_ns, std::uint64_t now) {
  std::string m = "session '" + me + "': the start-up lock of table '" + table + "' was not free";
  m.append(" within ").append(format_elapsed(waited_ns));
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
      .append(format_elapsed(now > since ? now - since : 0))
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

} // namespace v0
} // namespace gpushare
