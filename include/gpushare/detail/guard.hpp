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

#include <algorithm>
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
  if (joined_.load(std::memory_order_relaxed) && !inherited_)
    note_class_active(table_.header(), priority_.load(std::memory_order_relaxed), requested_ns);
  if (try_enter_on_lease()) return {requested_ns, true};
  return {enter_guard(requested_ns, timeout_ns), false};
}

inline void session_core::end_guard(const guard_entry& e, std::uint64_t used_ns, std::uint64_t now,
                                    const exit_drain* drain) noexcept {
  if (e.on_lease)
    exit_on_lease(used_ns, now, drain);
  else
    exit_guard(e.start_ns, used_ns, now, drain);
}

inline std::uint64_t session_core::enter_guard(std::uint64_t requested_ns,
                                               std::uint64_t timeout_ns) {
  check_usable();
  const std::uint64_t deadline =
      timeout_ns == wait_forever_ns ? wait_forever_ns : sat_add(requested_ns, timeout_ns);
  return acquire_device(device_claim::guard, requested_ns, deadline, timeout_ns);
}

// Draining at the exit. A guard may leave work in flight (the CUDA layer's queued regions). If
// its exit hands the device over, that work must be finished first, or the next holder starts
// behind it. The decision is taken under the lock that makes the exit, not before it: if the
// exit would hand over (handover_due_at_exit) with work still in flight, it changes nothing,
// unlocks, drains while the guard still counts as running (so nobody can be granted the device
// meanwhile), and locks again to exit, deciding afresh. The second look usually finds nothing in
// flight; work that other threads of the session queued meanwhile is drained again, at most
// max_drain_rounds times, then the exit goes ahead. A journaled exit (the lock could not be had)
// does not drain: it is a lost cause's path.
inline constexpr int max_drain_rounds = 3;

inline void session_core::exit_guard(std::uint64_t start_ns, std::uint64_t used_ns,
                                     std::uint64_t now, const exit_drain* drain) noexcept {
  if (!joined_ || inherited_) return;
  for (int round = 0;; ++round) {
    bool must_drain = false;
    locked_or_journaled(
        [&](locked& g, slot_record&) {
          if (drain && round < max_drain_rounds && others_waiting() &&
              handover_due_at_exit(table_.view(), slot_, now,
                                   std::max(used_ns, drain->estimate(drain->context))) &&
              drain->pending(drain->context)) {
            must_drain = true; // nothing changed: the guard still runs
            return;
          }
          const std::int64_t wake = exit_step(table_.view(), slot_, start_ns, used_ns, now);
          crash_point("guard.exit");
          g.wake_after(wake);
        },
        [&](table_header& h, slot_record& s) { journal_guard_exit(h, s, start_ns, used_ns, now); });
    if (!must_drain) return;
    crash_point("guard.exit.drain");
    used_ns = sat_add(used_ns, drain->drain(drain->context));
    now = monotonic_ns();
  }
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

inline void session_core::exit_on_lease(std::uint64_t used_ns, std::uint64_t now,
                                        const exit_drain* drain) noexcept {
  const lease_operation op(*this);
  if (!op.joined()) return; // left: nothing is ours
  crash_point("lease.exit.checked");
  slot_record& s = own();
  // A waiter settled the lease: this exit may be the one that hands the device over (the
  // locked part below). Drain first, while this guard still counts in lease_guards, so that
  // nobody is granted the device with the work queued. (A settle between this load and the
  // decrement below is the residual window, a few instructions wide: docs/design.md section 12.)
  bool drained = false;
  if (drain && s.lease.load(std::memory_order_seq_cst) != 1 && drain->pending(drain->context)) {
    crash_point("lease.exit.drain");
    used_ns = sat_add(used_ns, drain->drain(drain->context));
    now = monotonic_ns();
    drained = true;
  }
  s.lease_used_ns.fetch_add(used_ns, std::memory_order_relaxed);
  s.lease_exits.fetch_add(1, std::memory_order_relaxed);
  s.lease_last_exit_ns.store(now, std::memory_order_relaxed);
  leave_lease_guard(s); // (publishes the two adds above)
  if (s.lease.load(std::memory_order_seq_cst) == 1) return;
  if (drain && !drained && drain->pending(drain->context)) { // settled in the residual window
    s.lease_used_ns.fetch_add(drain->drain(drain->context), std::memory_order_relaxed);
    now = monotonic_ns();
  }
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

// Work left on the GPU past a guard's end (sched_gpu.hpp). The slot is this session's own while
// it is joined; a host function that runs after the session left finds a mark of another
// generation (or none) and changes nothing.

inline bool session_core::higher_class_active(std::uint64_t now) noexcept {
  if (!joined_.load(std::memory_order_relaxed) || inherited_) return false;
  return classes_active(table_.header(), priority_.load(std::memory_order_relaxed) + 1, 7, now);
}

inline bool session_core::lower_class_active(std::uint64_t now) noexcept {
  if (!joined_.load(std::memory_order_relaxed) || inherited_) return false;
  return classes_active(table_.header(), 0, priority_.load(std::memory_order_relaxed) - 1, now);
}

inline std::uint64_t session_core::mark_gpu_work(std::uint64_t until_ns) noexcept {
  if (!joined_.load(std::memory_order_relaxed) || inherited_) return 0;
  const std::uint32_t n = gpu_marks_.fetch_add(1, std::memory_order_relaxed) + 1;
  const std::uint64_t mark = gpu_mark_word(generation_, n);
  detail::mark_gpu_work(own(), mark, until_ns);
  return mark;
}

inline void session_core::linger(std::uint64_t ns) noexcept {
  if (!joined_.load(std::memory_order_relaxed) || inherited_) return;
  own().linger_until_ns.store(ns == 0 ? 0 : sat_add(monotonic_ns(), std::min(ns, max_linger_ns)),
                              std::memory_order_relaxed);
}

inline void session_core::gpu_work_finished(std::uint64_t mark) noexcept {
  if (mark == 0) return;
  const std::uint32_t w = clear_gpu_mark(own(), mark);
  if (w != 0 && w <= table_.slot_count()) {
    table_.slot(w - 1).grant_word.fetch_add(1, std::memory_order_release);
    table_.wake_slot(w - 1);
  }
}

} // namespace detail
} // namespace v0
} // namespace gpushare
