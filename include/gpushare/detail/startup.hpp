// SPDX-License-Identifier: Apache-2.0
// The start-up lock of a table (docs/design.md, "The start-up lock"): one session at a time
// starts its engine (profiles free memory, loads weights, sizes its KV cache), so engines started
// together do not all measure the same free memory and claim it twice. Pure functions of the
// table; the wait (gpushare/startup.hpp) locks, sleeps on header.startup_wake and wakes.
//
// The invariant: `startup_owner` names at most one session, and only a live one. It is taken by
// compare-and-swap from 0 under the table lock; it goes back to 0 by ready() (a compare-and-swap
// that needs no table lock, so a stopped peer holding the table lock cannot keep it), and when
// its holder's slot ends (leave, evict, reclaim after death: end_slot, or a lock repair:
// repair_slots). Every release bumps startup_wake; the table guard wakes that word at its
// unlock when it changed under it.
#pragma once

#include <atomic>
#include <cstdint>

#include <gpushare/detail/layout.hpp>
#include <gpushare/detail/sched_common.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// The value of header.startup_owner that names session (`slot`, `generation`); never 0.
inline constexpr std::uint64_t startup_word(std::uint32_t slot, std::uint32_t generation) noexcept {
  return (static_cast<std::uint64_t>(slot) + 1) << 32 | generation;
}

/// The slot the owner word `w` names, or nobody (0: free; a slot out of range: nobody).
inline std::int64_t startup_word_slot(const table_view& t, std::uint64_t w) noexcept {
  const std::uint64_t slot_plus_one = w >> 32;
  if (slot_plus_one == 0 || slot_plus_one > t.slot_count) return nobody;
  return static_cast<std::int64_t>(slot_plus_one - 1);
}

/// Frees the start-up lock if it is still held by owner word `w`, and bumps the wake word.
/// Needs no table lock. Returns whether it freed it (the caller then wakes startup_wake).
inline bool release_startup(table_header& h, std::uint64_t w) noexcept {
  if (w == 0 || !h.startup_owner.compare_exchange_strong(w, 0, std::memory_order_acq_rel))
    return false;
  h.startup_wake.fetch_add(1, std::memory_order_release);
  return true;
}

/// The session holding the start-up lock, or nobody. An owner word that names no active session
/// (its slot ended without releasing: a lock repair) is freed here. Under the table lock.
inline std::int64_t startup_holder(const table_view& t) noexcept {
  const std::uint64_t w = t.header->startup_owner.load(std::memory_order_acquire);
  if (w == 0) return nobody;
  const std::int64_t i = startup_word_slot(t, w);
  if (i != nobody) {
    const slot_record& s = t.slots[static_cast<std::uint32_t>(i)];
    if (s.state.load(std::memory_order_relaxed) == slot_active &&
        s.generation == static_cast<std::uint32_t>(w))
      return i;
  }
  release_startup(*t.header, w);
  return nobody;
}

/// Slot `i` ends (end_slot, under the table lock): if it holds the start-up lock, the lock is
/// free. Its waiting count goes with the slot.
inline void end_startup_of(const table_view& t, std::uint32_t i) noexcept {
  release_startup(*t.header, startup_word(i, t.slots[i].generation));
  t.slots[i].startup_waiting = 0;
}

/// Session `i` takes the start-up lock if nobody holds it (a stale owner is freed first).
/// Under the table lock; `now_ns` monotonic, `unix_ns` wall clock. Returns whether it took it
/// (false while anyone holds it, `i` included: one hold per session).
inline bool try_take_startup(const table_view& t, std::uint32_t i, std::uint64_t now_ns,
                             std::uint64_t unix_ns) noexcept {
  table_header& h = *t.header;
  const std::uint64_t me = startup_word(i, t.slots[i].generation);
  if (startup_holder(t) != nobody) return false;
  std::uint64_t expected = 0;
  if (!h.startup_owner.compare_exchange_strong(expected, me, std::memory_order_acq_rel))
    return false;
  h.startup_since_ns.store(now_ns, std::memory_order_relaxed);
  h.startup_since_unix_ns.store(unix_ns, std::memory_order_relaxed);
  ++h.startup_takes;
  return true;
}

/// Threads of live sessions waiting for the start-up lock.
inline std::uint32_t startup_waiters(const table_view& t) noexcept {
  std::uint32_t n = 0;
  for (std::uint32_t i = 0; i < t.slot_count; ++i)
    if (t.slots[i].state.load(std::memory_order_relaxed) == slot_active)
      n += t.slots[i].startup_waiting;
  return n;
}

} // namespace detail
} // namespace v0
} // namespace gpushare
