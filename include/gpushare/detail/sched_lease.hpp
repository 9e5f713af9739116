// SPDX-License-Identifier: Apache-2.0
// Compute arbitration, part 4 of 4 (detail/scheduler.hpp has the policy): the lease, on which an
// uncontended holder's guards enter and exit without the table lock.
#pragma once

#include <atomic>
#include <cstdint>

#include <gpushare/detail/sched_turns.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

// ---------------------------------------------------------------------------------------------
// The lease: the guards of an uncontended holder, without the table lock
// ---------------------------------------------------------------------------------------------
// When the last guard of the holder ends and nobody else waits, the locked path would free the
// device (or keep it idle, at_yield) and the next guard would take it again: two table locks a
// guard. Instead the holder keeps the device on a *lease*. While its slot's `lease` is 1, its
// guards enter by incrementing `lease_guards` and exit by adding their device time to
// `lease_used_ns` and decrementing it again, without the lock (session_core::try_enter_on_lease
// and exit_on_lease; enter_guard and exit_guard are the locked way). Before any decision that
// involves that session, whoever holds the lock ends the lease (settle_lease): a waiter of another
// session arriving (acquire_step), a settings change, leaving, reclaiming, a yield. Settling folds
// the lease guards' time into the books and, if no lease guard runs, releases the device exactly as
// the last guard's exit would have, at that exit's time; if some run, the holder is busy and their
// exits take the locked path (lease_exit_step). A lease is granted only without a compute limit
// (pacing needs the lock).
//
// The race between a lease guard entering and a settler is Dekker's: the guard increments
// lease_guards then reads lease; the settler clears lease then reads lease_guards; all four
// seq_cst, so at least one sees the other: either the settler counts the guard as running, or
// the guard sees the lease gone, takes its increment back and goes the locked way (after a
// lease_exit_step, in case the settler counted it and now waits for its exit). The same holds
// for an exiting guard (decrement, then read lease).

/// Accounts the lease guards of slot `i` that have exited. `charge_quantum`: count their time in
/// the holder's quantum (after the lease ended, when others wait).
inline void fold_lease(const table_view& t, std::uint32_t i, bool charge_quantum) noexcept {
  slot_record& s = t.slots[i];
  const std::uint64_t exits = s.lease_exits.exchange(0, std::memory_order_acq_rel);
  const std::uint64_t used = s.lease_used_ns.exchange(0, std::memory_order_acq_rel);
  if (exits == 0 && used == 0) return;
  const std::uint64_t last = s.lease_last_exit_ns.load(std::memory_order_relaxed);
  s.stats.guards = sat_add(s.stats.guards, exits);
  s.stats.guards_on_lease = sat_add(s.stats.guards_on_lease, exits);
  account_device_time(t, s, used, charge_quantum, last);
  raise_floor(t, s.settings.priority); // renormalises too
  s.compute.last_active_ns = std::max(s.compute.last_active_ns, last);
}

/// At the exit of the last guard of holder `i`, with nobody waiting: grants it the lease if
/// nothing needs the lock for its guards. Returns whether it did.
inline bool grant_lease(const table_view& t, std::uint32_t i, std::uint64_t now) noexcept {
  table_header& h = *t.header;
  slot_record& s = t.slots[i];
  if (h.device_waiters.load(std::memory_order_relaxed) != 0 || s.compute.wants_device != 0)
    return false;
  if (s.settings.compute_limit_ppm != 0 && s.settings.compute_limit_ppm < 1'000'000) return false;
  // As release_at_guard_exit() with nobody waiting: the turn ends; one starts when someone waits.
  h.holder_idle_since_ns = now;
  ++h.holder_exits;
  end_turn(h, s);
  h.holder_since_ns = now;
  h.quantum_start_ns = now;
  h.quantum_used_ns = 0;
  h.holder_idle_ns = 0;
  s.lease_last_exit_ns.store(now, std::memory_order_relaxed);
  s.lease.store(1, std::memory_order_release);
  return true;
}

/// Ends the lease of slot `i`, if it has one, before a decision that involves it (under the lock).
/// Returns the slot to wake, or nobody.
inline std::int64_t settle_lease(const table_view& t, std::uint32_t i, std::uint64_t now) noexcept {
  slot_record& s = t.slots[i];
  if (s.lease.load(std::memory_order_relaxed) == 0) return nobody;
  s.lease.store(0, std::memory_order_seq_cst);
  const std::uint32_t running = s.lease_guards.load(std::memory_order_seq_cst);
  fold_lease(t, i, false);
  if (current_holder(t) != i) return nobody; // (a lease holder is the holder; defensive)
  if (running == 0 &&
      s.compute.active_guards == 0) // idle on the lease: release as its last exit would
    return release_at_guard_exit(t, i, s.lease_last_exit_ns.load(std::memory_order_relaxed));
  table_header& h = *t.header; // busy: a turn starts now, and its guards' exits end it
  h.holder_since_ns = now;
  h.quantum_start_ns = now;
  h.quantum_used_ns = 0;
  h.holder_idle_ns = 0;
  h.holder_started = 1;
  s.compute.last_active_ns = now;
  return nobody;
}

/// Settles the lease of the holder, if it is not slot `i` (under the lock).
inline std::int64_t settle_holder_lease(const table_view& t, std::int64_t i,
                                        std::uint64_t now) noexcept {
  const std::int64_t holder = current_holder(t);
  if (holder == nobody || holder == i) return nobody;
  return settle_lease(t, static_cast<std::uint32_t>(holder), now);
}

/// A lease guard of slot `i` exited (or took back its entry) and found the lease ended: the
/// locked part of its exit. Returns the slot to wake, or nobody.
inline std::int64_t lease_exit_step(const table_view& t, std::uint32_t i,
                                    std::uint64_t now) noexcept {
  slot_record& s = t.slots[i];
  const bool holder = current_holder(t) == i;
  fold_lease(t, i, holder);
  if (s.lease.load(std::memory_order_relaxed) != 0) return nobody; // leased again meanwhile
  if (!holder || busy_guards(s) > 0) return nobody;
  s.compute.last_active_ns = now;
  return release_at_guard_exit(t, i, now);
}

} // namespace detail
} // namespace v0
} // namespace gpushare
