// SPDX-License-Identifier: Apache-2.0
// A guard's entry and exit, for session_core (declared in session_core.hpp). Two ways:
//   - locked: enter_guard() waits for the device under the table lock (waits.hpp), and
//     exit_guard() accounts the guard and hands the device on, or journals the exit when the
//     lock cannot be had;
//   - on the lease (scheduler.hpp, "The lease"): while this session holds the device and nobody
//     else waits, try_enter_on_lease() and exit_on_lease() take no lock at all; a guard whose
//     lease ended while it ran does the locked part of its exit (lease_exit_locked());
//   - around them: handover_due() (would an exit now hand the device on?) and yield() (hand
//     the device on if that is due, then wait to get it back).
// Both guards, gpushare::scoped_kernel and cuda::scoped_kernel, enter with begin_guard() (the
// lease first, the locked way if it cannot be used) and leave with end_guard(), the same way.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include <gpushare/detail/session_core.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

inline session_core::guard_entry session_core::begin_guard(std::uint64_t requested_ns,
                                                           std::uint64_t timeout_ns) {
  if (try_enter_on_lease()) return {requested_ns, true};
  return {enter_guard(requested_ns, timeout_ns), false};
}

inline void session_core::end_guard(const guard_entry& e, std::uint64_t used_ns,
                                    std::uint64_t now) noexcept {
  if (e.on_lease)
    exit_on_lease(used_ns, now);
  else
    exit_guard(e.start_ns, used_ns, now);
}

inline std::uint64_t session_core::enter_guard(std::uint64_t requested_ns,
                                               std::uint64_t timeout_ns) {
  check_usable();
  const std::uint64_t deadline =
      timeout_ns == wait_forever_ns ? wait_forever_ns : sat_add(requested_ns, timeout_ns);
  return acquire_device(device_claim::guard, requested_ns, deadline, timeout_ns);
}

inline void session_core::exit_guard(std::uint64_t start_ns, std::uint64_t used_ns,
                                     std::uint64_t now) noexcept {
  if (!joined_ || inherited_) return;
  locked_or_journaled(
      [&](locked& g, slot_record&) {
        const std::int64_t wake = exit_step(table_.view(), slot_, start_ns, used_ns, now);
        crash_point("guard.exit");
        g.wake_after(wake);
      },
      [&](table_header& h, slot_record& s) { journal_guard_exit(h, s, start_ns, used_ns, now); });
}

/// A joined session's slot is its own (only its leaving or its death frees it), so the slot is
/// read without the lock.
inline bool session_core::try_enter_on_lease() noexcept {
  // (A journal cannot hold a locked guard's exit while the lease lasts: the lease is granted
  // only under the lock, which folds every journal first, and only with no guard running.)
  const lease_operation op(*this);
  if (!op.joined()) return false;
  crash_point("lease.enter.checked");
  slot_record& s = own();
  if (s.lease.load(std::memory_order_acquire) != 1) return false;
  s.lease_guards.fetch_add(1, std::memory_order_seq_cst);
  if (s.lease.load(std::memory_order_seq_cst) == 1) return true;
  // A settler ended the lease meanwhile and may have counted this entry as a running guard:
  // take it back, and do the locked part of an exit in case the settler waits for it.
  leave_lease_guard(s);
  lease_exit_locked(monotonic_ns());
  return false;
}

inline void session_core::exit_on_lease(std::uint64_t used_ns, std::uint64_t now) noexcept {
  const lease_operation op(*this);
  if (!op.joined()) return; // left: nothing is ours
  crash_point("lease.exit.checked");
  slot_record& s = own();
  s.lease_used_ns.fetch_add(used_ns, std::memory_order_relaxed);
  s.lease_exits.fetch_add(1, std::memory_order_relaxed);
  s.lease_last_exit_ns.store(now, std::memory_order_relaxed);
  leave_lease_guard(s); // (publishes the two adds above)
  if (s.lease.load(std::memory_order_seq_cst) == 1) return;
  lease_exit_locked(now);
}

inline bool session_core::handover_due(std::uint64_t pending_ns) noexcept {
  if (!joined_ || inherited_) return false;
  try {
    locked g(*this);
    return handover_due_at_exit(table_.view(), slot_, monotonic_ns(), pending_ns);
  } catch (...) {
    return true;
  }
}

inline void session_core::yield() {
  if (!joined_ || inherited_) return;
  (void)answer_reclaim(); // one relaxed load unless another session's reserve asks
  if (table_.header().device_waiters.load(std::memory_order_relaxed) == 0) return;
  {
    locked g(*this);
    own_checked();
    const std::int64_t wake = yield_step(table_.view(), slot_, monotonic_ns());
    if (wake == nobody) return;
    crash_point("yield.handed_over");
    g.wake_after(wake);
  } // unlocks, then wakes the new holder
  acquire_device(device_claim::after_yield, monotonic_ns(), wait_forever_ns, wait_forever_ns);
}

/// Returns once no lease operation is in flight; joined_ is already false, so none starts that
/// could touch the slot (each checks joined_ after it is counted). An operation runs a few
/// atomic updates, and at most one locked exit (lease_exit_locked: bounded by the lock timeout).
inline void session_core::wait_for_lease_operations() const noexcept {
  for (unsigned spins = 0; lease_ops_.load(std::memory_order_seq_cst) != 0; ++spins) {
    if (spins < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

/// Takes one guard off the slot's lease count, never below 0: a leave() by another thread
/// (which zeroes the count) may have come between this guard's entry and its exit.
inline void session_core::leave_lease_guard(slot_record& s) noexcept {
  std::uint32_t cur = s.lease_guards.load(std::memory_order_relaxed);
  while (cur > 0 && !s.lease_guards.compare_exchange_weak(cur, cur - 1, std::memory_order_seq_cst,
                                                          std::memory_order_relaxed)) {
  }
}

/// The locked part of a lease guard's exit once the lease has ended: account it, and release
/// the device (or hand it over) if it was the last guard running. If the lock is stuck (a
/// stopped peer holds it), the guard's time stays in the slot's lease counters, and the locked
/// part of its exit (a release, a handover) goes into the journal, which the next locker applies.
inline void session_core::lease_exit_locked(std::uint64_t now) noexcept {
  locked_or_journaled(
      [&](locked& g, slot_record&) { g.wake_after(lease_exit_step(table_.view(), slot_, now)); },
      [](table_header& h, slot_record& s) { journal_lease_exit(h, s); });
}

} // namespace detail
} // namespace v0
} // namespace gpushare
