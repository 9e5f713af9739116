// SPDX-License-Identifier: Apache-2.0
// Compute arbitration, part 3 of 4 (detail/scheduler.hpp has the policy): who holds the device,
// turns, idle budgets and debts, the watch, the reservation, accounting and the decisions at
// a holder's boundaries. Pure functions of the table state, under the lock.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include <gpushare/detail/sched_gpu.hpp>
#include <gpushare/detail/sched_vtime.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

// ---------------------------------------------------------------------------------------------
// Who holds the device
// ---------------------------------------------------------------------------------------------

/// Where a decision is taken: the holder enters or leaves a guard, yields, or a waiter looks at
/// a holder that is between guards (would the holder hand over at its next boundary anyway?).
enum class boundary { guard_enter, guard_exit, yield, takeover };

inline std::uint64_t idle_grace(const slot_record& holder) noexcept {
  return holder.settings.handover_mode == handover_at_yield ? idle_grace_at_yield_ns
                                                            : idle_grace_at_guard_ns;
}

/// How long a handover_at_yield holder keeps the device without yielding while others are due:
/// 16 quanta, from 100 ms to 1 s, and never less than one quantum.
inline std::uint64_t yield_backstop(const slot_record& hs) noexcept {
  const std::uint64_t quanta = mul_div(hs.settings.quantum_ns, yield_backstop_quanta, 1);
  return std::max(hs.settings.quantum_ns,
                  std::clamp(quanta, yield_backstop_min_ns, yield_backstop_max_ns));
}

/// Whether holder `hs`, with a gap of `gap_ns` in progress, has left the device idle long enough
/// that a lower class may take its gaps: its lower-class debt (idle time kept from waiters,
/// drained by 1/4 of its device time) reached the idle grace of an at_guard holder: it idles
/// more than a quarter of its device time, so a higher class that does ordinary host work
/// between its guards (an inference request's pre- and post-processing) keeps its gaps. A
/// leaky bucket, not a
/// budget renewed per quantum: a renewed budget was never spent by a holder whose quantum ends
/// before its gaps add up to the grace (a 100 us quantum, or the 50 ms grace of at_yield), and
/// the lower class got 0% of a device 75-80% idle (issue 23, case 3). The at_yield grace is for
/// equal-class waiters only: a lower class takes gaps, it does not end iterations.
inline bool lower_class_may_take(const slot_record& hs, std::uint64_t gap_ns) noexcept {
  return sat_add(hs.compute.lower_debt_ns, gap_ns) >= idle_grace_at_guard_ns;
}

/// Whether holder `hs` keeps the device idle through its gaps beyond 1/16 of its device time
/// (its idle debt reached the idle grace): then it hands each gap to an equal waiter as the gap
/// begins (see should_hand_over). Not a session whose threads measurably wait for a CPU: its
/// gaps are deschedules, which the reservation (below) is for, not host work; handing them over
/// let a CPU scheduler balance device time again (3:1 on one CPU next to two CPU hogs came out
/// 55-60 / 40-45).
inline bool hands_gaps_over(const slot_record& hs) noexcept {
  return hs.compute.idle_debt_ns >= idle_grace_at_guard_ns &&
         hs.compute.cpu_wait_ppm < reserve_cpu_wait_ppm;
}

/// Adds a gap that holder `s` kept idle while others waited to its idle debts and its hold debt.
inline void add_idle_debt(slot_record& s, std::uint64_t gap_ns) noexcept {
  s.compute.idle_debt_ns = sat_add(s.compute.idle_debt_ns, gap_ns);
  s.compute.lower_debt_ns = sat_add(s.compute.lower_debt_ns, gap_ns);
  s.hold_debt_ns = sat_add(s.hold_debt_ns, gap_ns);
}

/// Pause hold (docs/design.md): whether holder `hs`, between guards for `gap_ns`, keeps the device
/// from `ws`, a waiter of its class: it has a hold and hands over at guards, is a quantum behind
/// every waiter of its class in virtual time (only `ws` without `t`), one of them has guards
/// longer than the longest pause held, and its hold debt with the gap is below the burst.
inline bool holds_through(const slot_record& hs, const slot_record& ws, std::uint64_t gap_ns,
                          const table_view* t = nullptr) noexcept {
  const int c = hs.settings.priority;
  const std::uint64_t ahead = sat_add(hs.compute.vtime, quantum_vt(hs)); // behind by a quantum
  if (hs.settings.pause_hold_ppm == 0 || hs.settings.handover_mode != handover_at_guard ||
      ws.settings.priority != c || ahead >= ws.compute.vtime ||
      sat_add(hs.hold_debt_ns, gap_ns) >= pause_hold_burst_ns)
    return false;
  const auto mean_guard = [](const slot_record& o) {
    return o.stats.device_ns / std::max<std::uint64_t>(o.stats.guards, 1);
  };
  if (t == nullptr) return mean_guard(ws) > pause_hold_burst_ns;
  bool behind_all = true, long_guards = false;
  for_each_waiting(*t, [&](std::uint32_t j) {
    const slot_record& o = t->slots[j];
    if (&o == &hs || o.compute.wants_device == 0 || o.settings.priority != c) return;
    behind_all = behind_all && ahead < o.compute.vtime;
    long_guards = long_guards || mean_guard(o) > pause_hold_burst_ns;
  });
  return behind_all && long_guards;
}

/// Catch-up: a waiter `ws` behind holder `hs` by more than one turn, and busy in its last turn,
/// gets the device back at once: it was descheduled between two guards, or handed its gaps over
/// (the holder took the idle or free device meanwhile), and the holder has had more than its
/// share. "One turn" is the holder's quantum, or the waiter's own last turn if that was shorter:
/// a session whose turns are a guard long (it hands each gap over) is owed its next guard as soon
/// as it is behind by one. A waiter that idled through its last turn does not catch up: it would
/// leave the device idle again. (Never both ways: a waiter granted the device by it is behind.)
inline bool catches_up(const slot_record& hs, const slot_record& ws) noexcept {
  const std::uint64_t turn = std::min(quantum_vt(hs), virtual_ns(ws, ws.compute.last_turn_ns));
  return ws.compute.last_turn_busy != 0 && sat_add(ws.compute.vtime, turn) < hs.compute.vtime;
}

/// The class holder `hs` counts in at boundary `at`: its own priority, except before it has run
/// a guard of the turn its compute guarantee won it (as it enters a guard, or not started yet):
/// then its claim. Else a guaranteed holder would hand the device back before running anything,
/// and two sessions would pass it to each other for ever.
inline int holder_claim(const table_header& h, const slot_record& hs, boundary at,
                        std::uint64_t now) noexcept {
  const bool first = at == boundary::guard_enter || (at == boundary::takeover && !h.holder_started);
  return first ? claim_priority(hs, now) : hs.settings.priority;
}

/// At a boundary of holder `hs`, should waiter `ws` get the device? (`now`: for the waiter's
/// compute guarantee; no_time: not looked at.)
inline bool should_hand_over(const table_header& h, const slot_record& hs, const slot_record& ws,
                             boundary at, std::uint64_t now = no_time,
                             const table_view* t = nullptr) noexcept {
  const int wc = claim_priority(ws, now);
  const int hc = holder_claim(h, hs, at, now);
  if (wc > hc) return true;
  if (at == boundary::takeover && !h.holder_started) return false; // its start grace
  // A lower class gets the gaps of a holder whose idle debt is spent: the next gap is the lower
  // class's (handed over as the gap begins), but never when the holder starts a guard.
  if (wc < hc) // (unless it lingers: session::linger)
    return at != boundary::guard_enter && lower_class_may_take(hs, 0) && !linger_left(h, hs, now);
  // Below its share, it keeps the device through a short pause (its pause hold; the gap so far
  // at a takeover, none yet at its exit): neither idle rule below hands it over.
  const std::uint64_t gap =
      at == boundary::takeover && now != no_time ? sat_sub(now, h.holder_idle_since_ns) : 0;
  const bool hold = at != boundary::yield && holds_through(hs, ws, gap, t);
  const bool idle_spent = h.holder_idle_ns >= idle_grace(hs); // it has left the device idle long
  if (idle_spent && !hold) return true; // an equal waiter: the holder wasted its turn on idle gaps
  // An at_guard holder whose gaps keep the device idle (idle beyond 1/16 of its device time)
  // hands each gap to an equal waiter as it begins, and gets the device back at the waiter's
  // next boundary by the catch-up below while it is behind. Holding through its gaps until its
  // idle budget ran out, then waiting a whole turn, a session with pauses as long as its guards
  // ran 2-4% of the time against its 37-50% (issue 23, case 4).
  if ((at == boundary::guard_exit || at == boundary::takeover) &&
      hs.settings.handover_mode == handover_at_guard && hands_gaps_over(hs) && !hold)
    return true;
  if (hs.settings.handover_mode == handover_at_yield && at != boundary::yield &&
      h.quantum_used_ns < yield_backstop(hs))
    return false;
  // Quantum used: the waiter goes next unless it is more than one of its own turns ahead (then the
  // holder, behind, keeps going). Equal sessions therefore alternate turn by turn, and a waiter
  // waits at most one turn of each other session.
  if (h.quantum_used_ns >= hs.settings.quantum_ns &&
      ws.compute.vtime <= sat_add(hs.compute.vtime, claim_window_vt(ws)))
    return true;
  return catches_up(hs, ws);
}

/// Guards of session `s` inside their region now: those entered under the lock and those entered
/// on its lease (see "The lease" below).
inline std::uint32_t busy_guards(const slot_record& s) noexcept {
  const std::uint64_t n =
      std::uint64_t{s.compute.active_guards} + s.lease_guards.load(std::memory_order_seq_cst);
  return n > UINT32_MAX ? UINT32_MAX : static_cast<std::uint32_t>(n);
}

/// How much longer holder `hs`, between guards now, may leave the device idle while waiter `ws`
/// waits: the start grace until it has started; then, for an equal waiter, what is left of its
/// idle budget, and for a lower class, what is left before its idle debt reaches the grace.
inline std::uint64_t idle_left(const table_header& h, const slot_record& hs, const slot_record& ws,
                               std::uint64_t now, const table_view* t = nullptr) noexcept {
  if (!h.holder_started)
    return sat_sub(sat_add(h.holder_since_ns, std::max(idle_grace(hs), start_grace_ns)), now);
  const std::uint64_t gap = sat_sub(now, h.holder_idle_since_ns);
  if (claim_priority(ws, now) < hs.settings.priority)
    return std::max(sat_sub(idle_grace_at_guard_ns, sat_add(hs.compute.lower_debt_ns, gap)),
                    linger_left(h, hs, now));
  const std::uint64_t left = sat_sub(idle_grace(hs), sat_add(h.holder_idle_ns, gap));
  if (claim_priority(ws, now) == hs.settings.priority && holds_through(hs, ws, gap, t))
    return std::max(left, pause_hold_burst_ns - sat_add(hs.hold_debt_ns, gap)); // its pause hold
  return left;
}

/// Records how the holder's turn went as it ends: busy if idle gaps took less than half of it.
/// The pauses it held through count in neither: a held turn counted whole was too long for the
/// catch-up, and past its bound a session got less than with no hold (docs/design.md).
inline void end_turn(const table_header& h, slot_record& holder) noexcept {
  const std::uint64_t used = sat_sub(h.quantum_used_ns, holder.hold_turn_ns);
  holder.hold_turn_ns = 0;
  holder.compute.last_turn_busy = sat_add(h.holder_idle_ns, h.holder_idle_ns) < used ? 1 : 0;
  holder.compute.last_turn_ns = std::min(used, holder.settings.quantum_ns);
}

/// Makes slot `i` the holder. Returns `i` (the slot whose waiters to wake after unlocking).
inline std::int64_t grant(const table_view& t, std::uint32_t i, std::uint64_t now) noexcept {
  table_header& h = *t.header;
  slot_record& s = t.slots[i];
  const std::int64_t prev = current_holder(t);
  if (prev != nobody && prev != i) {
    slot_record& p = t.slots[prev];
    // Taken over during a gap (its idle budget or debt spent): the gap so far was kept idle.
    if (h.holder_started && busy_guards(p) == 0)
      add_idle_debt(p, sat_sub(now, h.holder_idle_since_ns));
    ++p.stats.handovers;
    ++h.handovers;
    end_turn(h, p);
    // Turns end at guard boundaries, so one may overrun its quantum by up to a guard: the
    // overrun is taken off the next turn, and turns average one quantum (as in deficit round
    // robin), whatever the guard lengths.
    p.compute.quantum_debt_ns =
        std::min(sat_sub(h.quantum_used_ns, p.settings.quantum_ns), p.settings.quantum_ns);
  }
  h.holder = i + 1;
  h.holder_generation = s.generation;
  h.holder_since_ns = now;
  h.holder_idle_since_ns = now;
  h.quantum_start_ns = now;
  h.quantum_used_ns =
      prev == i ? 0 : s.compute.quantum_debt_ns; // its turn starts short by its debt
  s.compute.quantum_debt_ns = 0;
  s.hold_turn_ns = 0;
  h.holder_idle_ns = 0;
  h.holder_started = 0;
  h.watch_until_ns = 0; // a new holder: nobody watches it yet
  h.watcher = 0;
  s.compute.last_active_ns = now;
  // Its sleeping threads are woken by this bump. With none registered, none can be asleep or
  // about to sleep on the word (a waiter registers under the lock before it reads the word), so
  // the locked read-modify-write is skipped.
  if (s.compute.wants_device > 0) s.grant_word.fetch_add(1, std::memory_order_release);
  return i;
}

/// The device is free: give it to the best waiter, if any (else wake a paced waiter, so it
/// sleeps out its pause). Returns the slot to wake or nobody.
inline std::int64_t grant_next(const table_view& t, std::uint64_t now) noexcept {
  t.header->holder = 0;
  const std::int64_t w = best_waiter(t, nobody, now);
  if (w == nobody) return wake_paced_waiter(t, nobody, now);
  return grant(t, static_cast<std::uint32_t>(w), now);
}

struct take_result {
  bool granted = false;
  std::int64_t wake = nobody;   ///< a slot granted the device that must be woken
  std::uint64_t recheck_ns = 0; ///< when not granted: sleep at most this long, then retry
};

/// The guard bound of holder `hs`: its own max_guard, else the table's default (0: none).
inline std::uint64_t max_guard_of(const table_header& h, const slot_record& hs) noexcept {
  return hs.settings.max_guard_ns != 0 ? hs.settings.max_guard_ns : h.default_max_guard_ns;
}

/// When holder `hs`, busy in its guards, is overdue at its bound (no_time: it has none). Counted
/// from its last guard entry or exit (last_active_ns; a lease is always settled before a waiter
/// decides, which counts as one): a holder whose threads keep entering and leaving guards is not
/// stuck, whatever one of its guards does.
inline std::uint64_t guard_deadline(const table_header& h, const slot_record& hs) noexcept {
  const std::uint64_t bound = max_guard_of(h, hs);
  return bound == 0 ? no_time : sat_add(hs.compute.last_active_ns, bound);
}

/// Whether holder `hs`, inside its guards now, has gone past its guard bound at `now`.
inline bool guard_overdue(const table_header& h, const slot_record& hs,
                          std::uint64_t now) noexcept {
  return busy_guards(hs) > 0 && guard_deadline(h, hs) <= now;
}

/// Revokes the hold of holder `i`, whose guard has run past its bound (stopped or hung): the
/// device is free for others while that guard still runs. Its guards stay counted in
/// active_guards and lease_guards, and each one's time is accounted when it ends (exit_step as a
/// non-holder); the session learns it from its revocations counter. Call with its lease settled.
inline void revoke_holder(const table_view& t, std::uint32_t i) noexcept {
  table_header& h = *t.header;
  slot_record& s = t.slots[i];
  ++s.stats.revocations;
  ++h.revocations;
  ++s.stats.handovers;
  ++h.handovers;
  end_turn(h, s);
  h.holder = 0;
  h.watch_until_ns = 0;
  h.watcher = 0;
}

/// A waiting thread of session `me` is about to sleep while holder `hs` runs or idles: how long
/// it sleeps, and whether it becomes the watcher (the one waiter that re-checks the holder on
/// its own; the holder's guard exits wake a waiter only while nobody watches).
inline std::uint64_t watch(const table_view& t, const slot_record& hs, std::uint32_t me,
                           std::uint64_t now, std::uint64_t liveness_recheck_ns) noexcept {
  table_header& h = *t.header;
  std::uint64_t until = 0;
  if (busy_guards(hs) == 0) { // a gap: re-check when it would exhaust the holder's idle budget
    const std::uint64_t left = idle_left(h, hs, t.slots[me], now, &t);
    until = sat_add(now, left > 0 ? left : watch_period_ns); // spent, yet kept: poll
  } else if (h.watch_exits != h.holder_exits) {              // its guards end and start: poll
    until = sat_add(now, watch_period_ns);
  } // else: one long guard since the last watch; its exit will wake a waiter
  if (const std::uint64_t d = guard_deadline(h, hs); busy_guards(hs) > 0 && d != no_time) {
    const std::uint64_t at = std::max(d, sat_add(now, 1)); // re-check at its guard bound
    until = until == 0 ? at : std::min(until, at);
  }
  // A thread of another session re-checks soon enough: sleep until woken or the liveness
  // re-check. A watch armed by this session (this very thread, woken early by a signal or a
  // settings change, or a sibling) is armed again instead: a watcher that took its own watch for
  // another's slept 100 ms, and the holder's exits woke nobody since a watch seemed armed, so a
  // gap went unnoticed for up to 15 ms (issue 23, case 6).
  if (h.watcher != me + 1 && h.watch_until_ns > now && (until == 0 || h.watch_until_ns <= until))
    return liveness_recheck_ns;
  h.watch_until_ns = until;
  h.watch_exits = h.holder_exits;
  h.watcher = until != 0 ? me + 1 : 0;
  return until ? std::min(until - now, liveness_recheck_ns) : liveness_recheck_ns;
}

/// Should session `s` leave the device to `p`, a session of its class that holds it between
/// guards (or freed it at its last guard exit), for now? Yes while `p` was busy, is more than one
/// of `s`'s turns behind `s`, was last active less than reserve_ns ago, *and its threads wait for
/// a CPU* (cpu_wait_ppm at least reserve_cpu_wait_ppm): it was descheduled between two guards,
/// not doing host work. Returns how long the reservation lasts (0: none). Without the CPU test,
/// a session owed time (one whose demand is below its share is owed forever) had the device
/// kept idle for it through its ordinary host work, and a busy peer ran 55% of the time
/// (issue 23, case 2); the table cannot tell a deschedule from host work, the session's own
/// run-queue wait can (detail/cpu_wait.hpp).
inline std::uint64_t reserved_for(const table_header& h, const slot_record& p, bool holding,
                                  const slot_record& s, std::uint64_t now) noexcept {
  if (p.settings.priority != s.settings.priority ||
      sat_add(p.compute.vtime, quantum_vt(s)) >= s.compute.vtime)
    return 0;
  if (p.compute.cpu_wait_ppm < reserve_cpu_wait_ppm || paced(p, now))
    return 0; // (paced: it cannot run)
  // (Holding: the pauses it held through are idle too.)
  const std::uint64_t idle = sat_add(h.holder_idle_ns, p.hold_turn_ns);
  const bool busy =
      holding ? sat_add(idle, idle) < h.quantum_used_ns : p.compute.last_turn_busy != 0;
  if (!busy) return 0;
  return sat_sub(sat_add(p.compute.last_active_ns, reserve_ns), now);
}

/// The session that last freed the device, if it is still the same live session.
inline std::int64_t last_holder(const table_view& t) noexcept {
  return live_session(t, t.header->last_holder, t.header->last_holder_generation);
}

/// A turn is bounded in wall time too: a holder whose quantum has lasted more than this many
/// quanta of wall time while others wait has the wall time it did not account charged to its
/// quantum and its virtual time (else guards accounting 10% of their wall time made an equal
/// peer wait 50 ms: issue 23, case 8). Two, so that a session whose accounted time trails its
/// wall time moderately (CUDA event times) keeps its turns; one below half (issue 40, C10: its
/// peers waited 11 ms, not a quantum and a guard, behind guards accounting 0-10%).
inline constexpr std::uint64_t wall_bound_quanta = 2;

/// Charges holder `s` (in `h`) the wall time of its quantum it did not account, once the quantum
/// has lasted wall_bound_quanta quanta of wall time (one, below half). Call at a boundary while
/// others wait.
inline void charge_wall(const table_view& t, slot_record& s, std::uint64_t now) noexcept {
  table_header& h = *t.header;
  const std::uint64_t wall = sat_sub(now, h.quantum_start_ns);
  const bool little = sat_add(h.quantum_used_ns, h.quantum_used_ns) < wall; // below half
  if (wall <= mul_div(s.settings.quantum_ns, little ? 1 : wall_bound_quanta, 1) ||
      h.quantum_used_ns >= wall)
    return;
  charge_vtime(t, index_of(t, s), virtual_ns(s, wall - h.quantum_used_ns));
  h.quantum_used_ns = wall;
}

/// Thread of session `i` wants to enter a guard (or to get the device back after a yield), and
/// holds the device already.
inline take_result take_own(const table_view& t, std::uint32_t i, std::uint64_t now,
                            std::uint64_t liveness_recheck_ns) noexcept {
  table_header& h = *t.header;
  slot_record& s = t.slots[i];
  const std::int64_t w = best_waiter(t, i, now);
  if (h.holder_started && busy_guards(s) == 0 && w != nobody) {
    // The gap since its last guard kept the device from waiters: it costs quantum and budget,
    // and adds to its idle debts. One its pause hold held is no idle of its turn (end_turn).
    const std::uint64_t gap = sat_sub(now, h.holder_idle_since_ns);
    h.quantum_used_ns = sat_add(h.quantum_used_ns, gap);
    std::uint64_t& idle = holds_through(s, t.slots[w], 0, &t) ? s.hold_turn_ns : h.holder_idle_ns;
    idle = sat_add(idle, gap); // (held from its start: its debt and vtime are as then)
    add_idle_debt(s, gap);
    h.holder_idle_since_ns = now;
  }
  // The first guard of a turn runs unless a waiter of a higher class (or claim) came meanwhile,
  // or one that catches up: a turn that starts with its quantum already used (the overrun
  // carried over from its last turn, a whole quantum when the quantum is shorter than a guard)
  // was handed back at its first guard entry, and two sessions passed the device to each other
  // paying a wake-up each time without running anything (1 us quanta, 2 us guards, 20 us
  // wake-ups: the device 15% busy, waits of 0.4-0.8 ms for guards of 2 us). Nor does the wait
  // for its wake-up count as idle time it kept, or as wall time of its turn (charge_wall): it had
  // not started. The first guard of a turn its compute guarantee won always runs (else a
  // guaranteed session of a low class was granted the device again and again and ran nothing:
  // 0.7% against 6%).
  const bool first = !h.holder_started;
  if (first) h.quantum_start_ns = now;
  if (w != nobody) charge_wall(t, s, now);
  if (w != nobody && !(first && owed_guarantee(s, now))) {
    const slot_record& ws = t.slots[w];
    const int wc = claim_priority(ws, now);
    const int hc = holder_claim(h, s, boundary::guard_enter, now);
    const bool hand = first ? wc > hc || (wc == hc && catches_up(s, ws))
                            : should_hand_over(h, s, ws, boundary::guard_enter, now, &t);
    if (hand) {
      if (busy_guards(s) > 0) { // drain first
        h.holder_started = 1;
        return {false, nobody, liveness_recheck_ns};
      }
      return {false, grant(t, static_cast<std::uint32_t>(w), now), liveness_recheck_ns};
    }
  }
  h.holder_started = 1;
  // Quantum used and nobody should take over, even at a yield: a new quantum, and a new idle
  // budget (the budget is per quantum: the inevitable gaps between guards of a busy holder,
  // microseconds each, must not add up over a long run to a lost turn). An at_yield holder
  // keeps a used quantum until its next yield() hands over, or its backstop.
  if (h.quantum_used_ns >= s.settings.quantum_ns &&
      (w == nobody || !should_hand_over(h, s, t.slots[w], boundary::yield, now, &t))) {
    h.quantum_used_ns =
        std::min(h.quantum_used_ns - s.settings.quantum_ns, s.settings.quantum_ns); // the overrun
    h.holder_idle_ns = 0;
    s.hold_turn_ns = 0;
    h.quantum_start_ns = now;
  }
  return {true};
}

/// Thread of session `i` wants to enter a guard (or to get the device back after a yield).
inline take_result try_take(const table_view& t, std::uint32_t i, std::uint64_t now,
                            std::uint64_t liveness_recheck_ns) noexcept {
  table_header& h = *t.header;
  slot_record& s = t.slots[i];
  const std::int64_t holder = current_holder(t);
  if (holder == i) return take_own(t, i, now, liveness_recheck_ns);
  if (holder == nobody) {
    const std::int64_t b = best_claim(t, nobody, i, now);
    if (const std::uint64_t left = free_device_wait(t, b, last_holder(t), now); left > 0)
      return {false, nobody, left};
    if (b != i) return {false, grant(t, static_cast<std::uint32_t>(b), now), liveness_recheck_ns};
    const std::int64_t p = last_holder(t);
    if (p != nobody && p != i && t.slots[p].compute.wants_device == 0)
      if (const std::uint64_t left = reserved_for(h, t.slots[p], false, s, now); left > 0)
        return {false, nobody, left};
    grant(t, i, now);
    h.holder_started = 1;
    return {true};
  }
  slot_record& hs = t.slots[holder];
  if (busy_guards(hs) > 0) {
    if (!guard_overdue(h, hs, now))
      return {false, nobody, watch(t, hs, i, now, liveness_recheck_ns)};
    revoke_holder(t, static_cast<std::uint32_t>(holder)); // stopped or hung in a guard
    return try_take(t, i, now, liveness_recheck_ns);      // the device is free now
  }
  const int claim = claim_priority(s, now);
  // The holder is between guards. Its own threads registered to start guards (woken, not yet
  // running: a wake-up can take a millisecond on a busy machine) come before a lower class: a
  // lower guard started then made them wait (issue 23, case 5).
  if (claim < hs.settings.priority && hs.compute.wants_device > 0)
    return {false, nobody, watch(t, hs, i, now, liveness_recheck_ns)};
  // A higher class takes over at once; anyone once the holder's idle budget (a lower class: its
  // idle debt) is spent, or when the holder would hand over to it at its next boundary anyway.
  bool takeover = claim > holder_claim(h, hs, boundary::takeover, now) ||
                  should_hand_over(h, hs, s, boundary::takeover, now, &t);
  std::uint64_t recheck = 0;
  if (!takeover && idle_left(h, hs, s, now, &t) == 0) {
    // Descheduled, not idle: keep it a while (an equal-class holder only). Not a gap its pause
    // hold began (host work, and the hold has run out): reserved, a 6 ms pause was kept whole.
    recheck = s.settings.priority == hs.settings.priority && !holds_through(hs, s, 0, &t)
                  ? reserved_for(h, hs, true, s, now)
                  : 0;
    takeover = recheck == 0;
  }
  if (!takeover)
    return {false, nobody, recheck ? recheck : watch(t, hs, i, now, liveness_recheck_ns)};
  const std::int64_t b = best_claim(t, holder, i, now);
  if (const std::uint64_t left = gpu_work_left(t, b, now); left > 0) return {false, nobody, left};
  if (b != i) return {false, grant(t, static_cast<std::uint32_t>(b), now), liveness_recheck_ns};
  grant(t, i, now);
  h.holder_started = 1;
  return {true};
}

/// Accounts `used_ns` of device time to session `s` (its share, its holder quantum, its pacing
/// clock when capped). `start_ns`: when the work began (bounds the burst a capped session keeps).
inline void account_device_time(const table_view& t, slot_record& s, std::uint64_t used_ns,
                                bool holder, std::uint64_t start_ns) noexcept {
  table_header& h = *t.header;
  s.stats.device_ns = sat_add(s.stats.device_ns, used_ns);
  charge_vtime(t, index_of(t, s), virtual_ns(s, used_ns)); // and its group's members
  // The floor trails the vtime by at most vtime_max_lead (see vtime_renormalise_at): a session
  // that runs alone for months, or is charged a huge time at once, brings its floor along, and the
  // next exit_step() or class_clock() renormalises the class.
  if (std::uint64_t& floor = class_floor(h, s.settings.priority);
      s.compute.vtime > sat_add(floor, vtime_max_lead))
    floor = s.compute.vtime - vtime_max_lead;
  if (holder) h.quantum_used_ns = sat_add(h.quantum_used_ns, used_ns);
  s.compute.idle_debt_ns =
      sat_sub(s.compute.idle_debt_ns, used_ns / 16); // device time drains the idle debts
  s.compute.lower_debt_ns = sat_sub(s.compute.lower_debt_ns, used_ns / 4);
  s.hold_debt_ns = sat_sub(s.hold_debt_ns, mul_div(used_ns, s.settings.pause_hold_ppm, 1'000'000));
  if (s.settings.compute_guarantee_ppm !=
      0) { // the wall time this device time covers at its guarantee
    const std::uint64_t covered = mul_div(used_ns, 1'000'000, s.settings.compute_guarantee_ppm);
    s.compute.guarantee_vclock_ns = sat_add(
        std::max(s.compute.guarantee_vclock_ns, sat_sub(start_ns, guarantee_window_ns)), covered);
  }
  const std::uint32_t limit =
      s.settings.compute_limit_ppm == 0 ? 1'000'000 : s.settings.compute_limit_ppm;
  if (limit < 1'000'000) {
    const std::uint64_t earned = mul_div(used_ns, 1'000'000, limit); // wall time it costs
    s.compute.cap_vclock_ns =
        sat_add(std::max(s.compute.cap_vclock_ns, sat_sub(start_ns, cap_burst_ns)), earned);
  }
}

/// Accounts a finished guard of session `s` that used `used_ns` of device time.
inline void account_guard(const table_view& t, slot_record& s, std::uint64_t used_ns, bool holder,
                          std::uint64_t start_ns) noexcept {
  ++s.stats.guards;
  account_device_time(t, s, used_ns, holder, start_ns);
}

/// The last active guard of holder `i` ended. Returns the slot to wake (a new holder, this
/// session's own threads waiting to start a guard, or a waiter to watch the holder), or nobody.
inline std::int64_t release_at_guard_exit(const table_view& t, std::uint32_t i,
                                          std::uint64_t now) noexcept {
  table_header& h = *t.header;
  slot_record& s = t.slots[i];
  h.holder_idle_since_ns = now;
  ++h.holder_exits;
  const bool must_pause = paced(s, now); // its compute limit makes it pause: let go
  const std::int64_t w = best_waiter(t, i, now);
  if (w != nobody) charge_wall(t, s, now);
  bool hand = w != nobody &&
              (must_pause || should_hand_over(h, s, t.slots[w], boundary::guard_exit, now, &t));
  // Its own threads wait to start guards: a lower class does not get the device before them (a
  // holder that had spent its idle debt handed over to the lower class first: issue 23, case 5).
  if (hand && !must_pause && s.compute.wants_device > 0 &&
      claim_priority(t.slots[w], now) < s.settings.priority)
    hand = false;
  if (hand && gpu_work_left(t, w, now, i) > 0) hand = false; // a higher class's work still runs
  if (hand) return grant(t, static_cast<std::uint32_t>(w), now);
  if (w == nobody && (must_pause || s.settings.handover_mode == handover_at_guard)) {
    end_turn(h, s);
    h.holder = 0; // nobody else waits: the device is simply free
    h.last_holder = i + 1;
    h.last_holder_generation = s.generation;
    // A waiter its compute limit holds back is woken to sleep out its pause.
    if (s.compute.wants_device == 0) return wake_paced_waiter(t, i, now);
  }
  if (s.compute.wants_device > 0) { // its own threads wait for the running guards to drain
    s.grant_word.fetch_add(1, std::memory_order_release);
    return i;
  }
  if (w == nobody) return nobody; // handover_at_yield: keep it until yield() or the grace ends
  // Others wait and it keeps the device: someone must notice if this gap lasts. A watcher that
  // re-checks soon enough covers it; otherwise wake the best waiter to watch.
  const std::uint64_t soon = sat_add(now, std::max(idle_grace(s), watch_period_ns));
  if (h.watch_until_ns > now && h.watch_until_ns <= soon) return nobody;
  t.slots[w].grant_word.fetch_add(1, std::memory_order_release); // it arms a watch when it runs
  return w;
}

/// Whether the guard of session `i` that is about to end would hand the device over at its exit
/// (release_at_guard_exit's decision, taken without changing anything). The CUDA layer drains
/// its in-flight work before the exit only then: a drain costs a CPU-GPU round trip, wasted
/// inside the quantum or when the holder hands over only at yield(). `pending_ns` estimates the
/// device time of the region(s) not accounted yet (the exit accounts them before it decides):
/// with them the quantum may be over, and an equal or higher waiter then takes the device.
inline bool handover_due_at_exit(const table_view& t, std::uint32_t i, std::uint64_t now,
                                 std::uint64_t pending_ns) noexcept {
  const slot_record& s = t.slots[i];
  if (current_holder(t) != i) return false;
  if (s.lease.load(std::memory_order_relaxed) != 0) return true; // settled by the exit: be safe
  if (busy_guards(s) > 1) return false; // other guards of its own stay open: no handover now
  const table_header& h = *t.header;
  const std::int64_t w = best_waiter(t, i, now);
  if (w == nobody) return false;
  const slot_record& ws = t.slots[w];
  if (paced(s, now)) return true;
  const int wc = claim_priority(ws, now);
  if (s.compute.wants_device > 0 && wc < s.settings.priority) return false; // its own threads first
  if (should_hand_over(h, s, ws, boundary::guard_exit, now, &t)) return true;
  // With the pending time, or past the wall bound (charge_wall), the quantum may be over.
  const std::uint64_t used = std::max(sat_add(h.quantum_used_ns, pending_ns),
                                      sat_sub(now, h.quantum_start_ns) >
                                              mul_div(s.settings.quantum_ns, wall_bound_quanta, 1)
                                          ? sat_sub(now, h.quantum_start_ns)
                                          : 0);
  return used >= s.settings.quantum_ns && wc >= s.settings.priority &&
         !(s.settings.handover_mode == handover_at_yield && used < yield_backstop(s));
}

} // namespace detail
} // namespace v0
} // namespace gpushare
