// SPDX-License-Identifier: Apache-2.0
// Compute arbitration decisions: pure functions of the table state, called under the table lock,
// in five headers: sched_common (constants, waiters, best claim), sched_vtime (virtual time),
// sched_turns (who holds the device), sched_lease (the lease) and this one (the policy, and the
// steps).
// They decide who holds the device, who waits and who watches; the mechanics (the lock, futex
// waits and wakes, clocks) live in session_core, which calls the *_step() functions below
// (acquire_step, exit_step, yield_step, and lease_exit_step in sched_lease.hpp) in a fixed
// order. The unit tests drive the same functions directly, and a discrete-event simulation
// (tests/sim/scheduler_sim.hpp) drives them in session_core's order.
//
// The policy (docs/design.md, "Compute arbitration"):
//   * at most one session holds the device (`holder`); a session's guards run only while it does;
//   * among waiters, the highest priority class wins; within a class, among the sessions not more
//     than one quantum ahead in virtual time (device time / share), the longest wait;
//   * a waiter of a higher class gets the device at the holder's next guard boundary; a new guard
//     of the holder waits while its running guards drain;
//   * a waiter of the same class gets it when the holder's quantum is used (device time plus the
//     idle time it kept from waiters) unless the waiter is more than one of its quanta ahead in
//     virtual time; handover_at_yield holders hand over
//     only in yield(), until they have held for yield_backstop_quanta quanta;
//   * a holder may leave the device idle between guards, while others wait, for at most its idle
//     grace per quantum (all its gaps together); then an equal waiter gets it at the holder's
//     next boundary, a lower class at its next exit, and a waiter takes it during a gap;
//   * credit: a session that contends again after using the device within credit_idle_ns keeps
//     its virtual time (at most what its class's clock can advance in credit_idle_ns, plus
//     credit_quanta quanta, behind the clock); a session idle for longer, or new, starts level
//     with the clock (no banked credit);
//   * a capped session is paced: after a guard of u ns it may start its next guard only once its
//     pacing clock (advanced by u / limit) has caught up with real time.
#pragma once

#include <cstdint>

#include <gpushare/detail/sched_lease.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// yield() by holder `i` between guards: hand over to a waiter that should run now.
inline std::int64_t hand_over_at_yield(const table_view& t, std::uint32_t i,
                                       std::uint64_t now) noexcept {
  const std::int64_t w = best_waiter(t, i, now);
  if (w == nobody) return nobody;
  charge_wall(t, t.slots[i], now);
  if (!should_hand_over(*t.header, t.slots[i], t.slots[w], boundary::yield, now, &t)) return nobody;
  return grant(t, static_cast<std::uint32_t>(w), now);
}

// ---------------------------------------------------------------------------------------------
// The steps session_core takes under the table lock (and the simulation takes in its order)
// ---------------------------------------------------------------------------------------------

/// A thread's progress through one acquisition (kept by the thread, across its retries).
struct acquire_state {
  bool registered = false;      ///< counted in wants_device / device_waiters now
  bool waited = false;          ///< it had to wait for the device at least once
  std::uint64_t wait_start = 0; ///< when it first had to wait
};

struct acquire_result {
  enum outcome { granted, wait, pause } what = wait;
  std::int64_t wake = nobody; ///< slot to wake after unlocking
  std::uint64_t sleep_ns = 0; ///< wait: the futex timeout; pause: how long to sleep (its cap)
};

/// A thread of session `i` asks for the device, for a guard (`as_guard`) or to get it back after
/// yield(). Granted: a guard is counted active. Wait: it is registered as a waiter and sleeps on
/// its slot's grant_word. Pause: its compute limit holds it back (re-checked here, under the
/// lock, so a guard never starts early); it is not registered while it pauses.
inline acquire_result acquire_step(const table_view& t, std::uint32_t i, std::uint64_t now,
                                   bool as_guard, acquire_state& st,
                                   std::uint64_t liveness_recheck_ns) noexcept {
  slot_record& s = t.slots[i];
  if (as_guard && paced(s, now)) {
    if (st.registered) remove_waiters(t, i);
    st.registered = false;
    return {acquire_result::pause, nobody, s.compute.cap_vclock_ns - now};
  }
  // Another session holds the device on its lease: end the lease before deciding. (Nobody else
  // waits while a lease lasts, so this wakes nobody in practice; merged below all the same.)
  const std::int64_t settled = settle_holder_lease(t, i, now);
  if (!st.registered && s.compute.wants_device == 0 && current_holder(t) != i) place(t, i, now);
  take_result r = try_take(t, i, now, liveness_recheck_ns);
  if (r.wake == nobody) r.wake = settled;
  if (r.granted) {
    if (as_guard) ++s.compute.active_guards;
    if (st.registered) remove_waiters(t, i);
    st.registered = false;
    s.compute.last_active_ns = now;
    // Other threads of this session that wait may run too now: wake them (a grant this thread
    // took for its session bumped their word, but nobody else sends the wake).
    const bool others = s.compute.wants_device > 0 && r.wake == nobody;
    if (others) s.grant_word.fetch_add(1, std::memory_order_release);
    return {acquire_result::granted, others ? std::int64_t{i} : r.wake, 0};
  }
  if (!st.registered) add_waiter(t, i, now);
  st.registered = true;
  if (!st.waited) st.wait_start = now;
  st.waited = true;
  return {acquire_result::wait, r.wake, r.recheck_ns};
}

/// `exits` guards of session `i` (the first started at `start_ns`) end, the last at `now`, having
/// used `used_ns` of device time together. Returns the slot to wake after unlocking, or nobody.
/// Several at once only when a journal is folded (journal.hpp); otherwise exit_step().
inline std::int64_t exits_step(const table_view& t, std::uint32_t i, std::uint32_t exits,
                               std::uint64_t start_ns, std::uint64_t used_ns,
                               std::uint64_t now) noexcept {
  slot_record& s = t.slots[i];
  const bool holder = current_holder(t) == i;
  s.stats.guards = sat_add(s.stats.guards, exits);
  account_device_time(t, s, used_ns, holder, start_ns);
  raise_floor(t, s.settings.priority); // and renormalises (once in ~53 days of device time)
  if (exits == 0) return nobody;       // time only (a partly folded journal): no boundary yet
  s.compute.active_guards = sat_sub32(s.compute.active_guards, exits);
  s.compute.last_active_ns = std::max(s.compute.last_active_ns, now);
  if (!holder || busy_guards(s) > 0) return nobody;
  if (grant_lease(t, i, now)) return nobody;
  return release_at_guard_exit(t, i, now);
}

/// A guard of session `i` that started at `start_ns` ends at `now`, having used `used_ns` of
/// device time. Returns the slot to wake after unlocking, or nobody.
inline std::int64_t exit_step(const table_view& t, std::uint32_t i, std::uint64_t start_ns,
                              std::uint64_t used_ns, std::uint64_t now) noexcept {
  return exits_step(t, i, 1, start_ns, used_ns, now);
}

/// yield() by session `i`: if it holds the device between guards and a waiter should run now,
/// hand over. Returns the slot to wake; when not nobody, the caller must acquire the device again
/// (acquire_step with as_guard = false) before it returns.
inline std::int64_t yield_step(const table_view& t, std::uint32_t i, std::uint64_t now) noexcept {
  if (current_holder(t) != i) return nobody;
  if (const std::int64_t w = settle_lease(t, i, now); w != nobody) return w; // released it
  if (current_holder(t) != i || busy_guards(t.slots[i]) > 0) return nobody;
  return hand_over_at_yield(t, i, now);
}

// ---------------------------------------------------------------------------------------------
// Sessions that leave or die
// ---------------------------------------------------------------------------------------------

/// Slot `i` is being cleared (its session left or died): drop its scheduling state; if it held
/// the device, give the device to the next waiter. Returns the slot to wake, or nobody.
inline std::int64_t forget_slot(const table_view& t, std::uint32_t i, std::uint64_t now) noexcept {
  slot_record& s = t.slots[i];
  fold_lease(t, i, false); // its last guards' time still counts in its statistics
  s.lease.store(0, std::memory_order_seq_cst);
  s.lease_guards.store(0, std::memory_order_relaxed);
  const bool was_holder = current_holder(t) == i;
  remove_waiters(t, i, UINT32_MAX);
  set_waiting_bit(*t.header, i, false);
  s.compute.active_guards = 0;
  if (!was_holder) return nobody;
  return grant_next(t, now); // it no longer wants the device, so it cannot be picked
}

/// After a lock owner died: recount the waiters and the waiting mask from the slots, and make
/// sure a live session holds the device if anyone waits. Returns the slot to wake, or nobody.
inline std::int64_t repair_scheduler(const table_view& t, std::uint64_t now) noexcept {
  table_header& h = *t.header;
  std::uint64_t waiters = 0; // 256 slots of 32-bit counts: no overflow in 64 bits
  std::fill(std::begin(h.waiting_mask), std::end(h.waiting_mask), std::uint64_t{0});
  for (std::uint32_t i = 0; i < t.slot_count; ++i) {
    slot_record& s = t.slots[i];
    if (!is_active(s)) {
      s.compute.wants_device = 0;
      s.compute.active_guards = 0;
      s.lease.store(0, std::memory_order_relaxed);
      s.lease_guards.store(0, std::memory_order_relaxed);
      continue;
    }
    // The exact count: the sum must agree with what remove_waiters() will take off as the
    // threads stop waiting (a cap here, say at 1024 a slot, would let the total reach 0 while
    // threads still wait, and the fast paths would then ignore them). A scribbled count can
    // only make the sum larger: saturate, never wrap.
    waiters += s.compute.wants_device;
    set_waiting_bit(h, i, s.compute.wants_device > 0);
  }
  h.device_waiters.store(static_cast<std::uint32_t>(std::min<std::uint64_t>(waiters, UINT32_MAX)),
                         std::memory_order_relaxed);
  h.watch_until_ns = 0;
  if (current_holder(t) != nobody) return nobody;
  return grant_next(t, now);
}

} // namespace detail
} // namespace v0
} // namespace gpushare
