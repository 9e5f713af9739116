// SPDX-License-Identifier: Apache-2.0
// Compute arbitration decisions: pure functions of the table state, called under the table lock.
// They decide who holds the device, who waits and who watches; the mechanics (the lock, futex
// waits and wakes, clocks) live in session_core, which calls the three *_step() functions below
// in a fixed order. The unit tests drive the same functions directly, and a discrete-event
// simulation (tests/unit-scheduler-sim.cpp) drives them in session_core's order.
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

#include <algorithm>
#include <bit>
#include <climits>
#include <cstdint>

#include <gpushare/detail/budget.hpp>
#include <gpushare/detail/layout.hpp>
#include <gpushare/options.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

// default_quantum_ns (5 ms), min_quantum_ns (1 us), max_quantum_ns (10 s): detail/parse.hpp.
/// How much idle time (between its guards, while others wait) a holder may keep per quantum.
inline constexpr std::uint64_t idle_grace_at_guard_ns = 200'000;    // 200 us
inline constexpr std::uint64_t idle_grace_at_yield_ns = 50'000'000; // 50 ms
/// How long a session just granted the device has to wake up and start before a peer may take
/// the device back. Longer than the idle grace: on a loaded machine a woken process may wait
/// milliseconds for a CPU, and taking the device back then would undo the fair choice.
inline constexpr std::uint64_t start_grace_ns = 10'000'000; // 10 ms
/// How much idle time a capped session may bank as burst (limits overshoot to ~1% of a second).
inline constexpr std::uint64_t cap_burst_ns = 10'000'000; // 10 ms
/// A waiter watching a holder that runs guards re-checks it this often, so a gap that begins
/// while nobody is woken goes unnoticed at most this long (instead of a wake-up per guard).
inline constexpr std::uint64_t watch_period_ns = 1'000'000; // 1 ms
/// A session that was busy in its turn, is more than a turn behind, and lost the device only
/// because the CPU descheduled it between two guards has the device kept for it this long (measured
/// from its last activity) before a session ahead of it may take it: otherwise a CPU scheduler that
/// balances CPU time would also balance device time, whatever the shares.
inline constexpr std::uint64_t reserve_ns = 10'000'000; // 10 ms
/// ... and only for a session whose threads spent at least this share of their recent time
/// runnable but waiting for a CPU (slot_record::cpu_wait_ppm, detail/cpu_wait.hpp): 10%.
inline constexpr std::uint32_t reserve_cpu_wait_ppm = 100'000;
/// Credit: a session that used the device less than this long ago keeps its virtual time when it
/// contends again (it was descheduled, not idle); one idle for longer starts at its class clock.
/// Longer than what a CPU scheduler makes a runnable process wait on a loaded machine.
inline constexpr std::uint64_t credit_idle_ns = 100'000'000; // 100 ms
/// The credit kept is bounded: what the class clock can advance in credit_idle_ns (the device
/// used all that time by the class's smallest share), plus this many of the widest quanta. So a
/// session back from a short absence keeps all it is owed, and an intermittent session cannot
/// bank more than about credit_idle_ns of device time for a later burst.
inline constexpr std::uint64_t credit_quanta = 2;
/// A handover_at_yield holder that does not yield hands over at guard boundaries (to an
/// equal-class waiter that is due) once it has held the device for this many quanta, device plus
/// idle time, and at least yield_backstop_min_ns, at most yield_backstop_max_ns (but never less
/// than one quantum: a 10 s quantum is kept whole).
inline constexpr std::uint64_t yield_backstop_quanta = 16;
inline constexpr std::uint64_t yield_backstop_min_ns = 100'000'000;   // 100 ms
inline constexpr std::uint64_t yield_backstop_max_ns = 1'000'000'000; // 1 s
inline constexpr std::int64_t nobody = -1;
/// Virtual time never saturates (2^64 - 1 would make every session equal, whatever its share):
///   * a session's vtime is never more than vtime_max_lead ahead of its class floor: accounting
///     raises the floor to trail it (a session further behind than that is far beyond any credit,
///     and place() would raise it anyway);
///   * when a class floor passes vtime_renormalise_at, the floor and every vtime of the class are
///     lowered together by the same amount (the floor lands on vtime_renormalise_to), under the
///     table lock. Only differences of vtimes within a class mean anything, so no decision
///     changes; values more than vtime_renormalise_to below the floor clamp at 0.
/// So vtimes stay below 2^63 (vtime_renormalise_at + vtime_max_lead, plus one accounting). A
/// class's floor reaches 2^62 after about 53 days of device time at share 1: renormalising (one
/// walk over the slots) is rare.
inline constexpr std::uint64_t vtime_renormalise_at = std::uint64_t{1} << 62;
inline constexpr std::uint64_t vtime_renormalise_to = std::uint64_t{1} << 61;
inline constexpr std::uint64_t vtime_max_lead = std::uint64_t{1} << 61;

/// The virtual-time floor of a priority class (bounds-checked: priorities come from shm).
inline std::uint64_t& class_floor(table_header& h, int priority) noexcept {
  return h.min_vtime[std::clamp(priority, 0, 7)];
}

/// a * b / c without overflow (saturating at 2^64 - 1); c > 0.
inline std::uint64_t mul_div(std::uint64_t a, std::uint64_t b, std::uint64_t c) noexcept {
  if (b == 0 || a <= UINT64_MAX / b) return a * b / c; // the common case: no 128-bit division
  __extension__ using u128 = unsigned __int128;
  const u128 r = static_cast<u128>(a) * b / c;
  return r > UINT64_MAX ? UINT64_MAX : static_cast<std::uint64_t>(r);
}

inline bool is_active(const slot_record& s) noexcept {
  return s.state.load(std::memory_order_relaxed) == slot_active;
}

/// Whether session `s` must pause before its next guard (its compute limit).
inline bool paced(const slot_record& s, std::uint64_t now) noexcept {
  return s.compute_limit_ppm != 0 && s.compute_limit_ppm < 1'000'000 && s.cap_vclock_ns > now;
}

/// Records a sample of the share of time session `s`'s threads waited for a CPU (runnable, not
/// running) since the previous sample: a moving average, 1/4 weight to the new sample.
inline void note_cpu_wait(slot_record& s, std::uint32_t sample_ppm) noexcept {
  const std::uint64_t avg =
      (std::uint64_t{s.cpu_wait_ppm} * 3 + std::min(sample_ppm, 1'000'000u)) / 4;
  s.cpu_wait_ppm = static_cast<std::uint32_t>(avg);
}

/// Virtual time that `used_ns` of device time costs session `s`.
inline std::uint64_t virtual_ns(const slot_record& s, std::uint64_t used_ns) noexcept {
  return mul_div(used_ns, 1000, std::max<std::uint32_t>(s.share, 1));
}

// ---------------------------------------------------------------------------------------------
// Waiters: wants_device per slot, the header's count of waiting threads and the waiting mask are
// changed together, only here.
// ---------------------------------------------------------------------------------------------

inline std::uint32_t mask_words(const table_view& t) noexcept {
  return std::min<std::uint32_t>((t.slot_count + 63) / 64, max_slot_count / 64);
}

inline void set_waiting_bit(table_header& h, std::uint32_t i, bool on) noexcept {
  if (i >= max_slot_count) return;
  const std::uint64_t bit = std::uint64_t{1} << (i % 64);
  if (on)
    h.waiting_mask[i / 64] |= bit;
  else
    h.waiting_mask[i / 64] &= ~bit;
}

/// Calls f(index) for every slot whose waiting bit is set (indices checked against slot_count:
/// the mask is shared memory).
template <class F> void for_each_waiting(const table_view& t, F&& f) {
  const std::uint32_t words = mask_words(t);
  for (std::uint32_t w = 0; w < words; ++w) {
    for (std::uint64_t bits = t.header->waiting_mask[w]; bits != 0; bits &= bits - 1) {
      const std::uint32_t i = w * 64 + static_cast<std::uint32_t>(std::countr_zero(bits));
      if (i >= t.slot_count) return;
      f(i);
    }
  }
}

/// One more thread of slot `i` waits for the device, from `now`.
inline void add_waiter(const table_view& t, std::uint32_t i, std::uint64_t now) noexcept {
  slot_record& s = t.slots[i];
  if (s.wants_device++ == 0) {
    s.wait_since_ns = now;
    set_waiting_bit(*t.header, i, true);
  }
  t.header->device_waiters.fetch_add(1, std::memory_order_relaxed);
}

/// `threads` threads of slot `i` stop waiting (all of them: UINT32_MAX).
inline void remove_waiters(const table_view& t, std::uint32_t i,
                           std::uint32_t threads = 1) noexcept {
  slot_record& s = t.slots[i];
  const std::uint32_t n = std::min(threads, s.wants_device);
  s.wants_device -= n;
  if (s.wants_device == 0) {
    set_waiting_bit(*t.header, i, false);
    if (t.header->watcher == i + 1) { // nobody of it watches any more: the watch is off
      t.header->watcher = 0;
      t.header->watch_until_ns = 0;
    }
  }
  std::atomic<std::uint32_t>& all = t.header->device_waiters;
  all.fetch_sub(std::min(n, all.load(std::memory_order_relaxed)), std::memory_order_relaxed);
}

/// Virtual time of one quantum of session `s`: how far one turn moves it.
inline std::uint64_t quantum_vt(const slot_record& s) noexcept {
  return virtual_ns(s, s.quantum_ns);
}

/// The session with the best claim to the device among the waiting slots (except `except`) and,
/// if given, slot `also` (a caller about to contend, waiting from `now` if it does not wait yet):
///   1. the highest priority class;
///   2. within it, only the *eligible*: those whose vtime is at most one of their own quanta
///      ahead of the class's smallest (a session further ahead has had more than its share);
///   3. among those, the longest wait (so n equal sessions take turns: each waits at most one
///      turn of each other); then the smaller vtime; then the lower slot index.
/// A waiting session its compute limit holds back at `now` (paced) is no candidate: granted the
/// device, it could not start a guard, and the device would sit unused (issue 23, case 7).
/// Visits only the waiting slots, and nothing at all when nobody waits and `also` is nobody.
inline std::int64_t best_claim(const table_view& t, std::int64_t except, std::int64_t also,
                               std::uint64_t now) noexcept {
  if (t.header->device_waiters.load(std::memory_order_relaxed) == 0) // the common case: no walk
    return also == except ? nobody : also;
  auto for_each_candidate = [&](auto&& f) {
    for_each_waiting(t, [&](std::uint32_t i) {
      const slot_record& s = t.slots[i];
      if (i != except && i != also && s.wants_device > 0 && is_active(s) && !paced(s, now)) f(i);
    });
    if (also != nobody && also != except) f(static_cast<std::uint32_t>(also));
  };
  int top = INT32_MIN;
  std::uint64_t lowest = UINT64_MAX;
  for_each_candidate([&](std::uint32_t i) {
    const slot_record& s = t.slots[i];
    if (s.priority > top) {
      top = s.priority;
      lowest = s.vtime;
    } else if (s.priority == top) {
      lowest = std::min(lowest, s.vtime);
    }
  });
  std::int64_t best = nobody;
  std::uint64_t best_since = 0;
  for_each_candidate([&](std::uint32_t i) {
    const slot_record& s = t.slots[i];
    if (s.priority != top || s.vtime > sat_add(lowest, quantum_vt(s))) return;
    const std::uint64_t since = s.wants_device > 0 ? s.wait_since_ns : now;
    if (best != nobody) {
      const slot_record& b = t.slots[best];
      if (since != best_since  ? since > best_since
          : s.vtime != b.vtime ? s.vtime > b.vtime
                               : i > best)
        return;
    }
    best = i;
    best_since = since;
  });
  return best;
}

/// The waiting session with the best claim (excluding `except`) at `now`, or nobody. Without a
/// time, pacing is not looked at.
inline std::int64_t best_waiter(const table_view& t, std::int64_t except = nobody,
                                std::uint64_t now = UINT64_MAX) noexcept {
  return best_claim(t, except, nobody, now);
}

/// Wakes a waiting session that its compute limit holds back at `now`, other than `except`, and
/// returns it (nobody if none): called as the device is released to nobody, so that it sleeps
/// out its pause and comes back on time instead of at its next re-check. Bumps its grant word
/// under the lock (the caller wakes it after unlocking), as a grant does.
inline std::int64_t wake_paced_waiter(const table_view& t, std::int64_t except,
                                      std::uint64_t now) noexcept {
  if (t.header->device_waiters.load(std::memory_order_relaxed) == 0) return nobody;
  std::int64_t found = nobody;
  for_each_waiting(t, [&](std::uint32_t i) {
    const slot_record& s = t.slots[i];
    if (found == nobody && i != except && s.wants_device > 0 && is_active(s) && paced(s, now))
      found = i;
  });
  if (found != nobody) t.slots[found].grant_word.fetch_add(1, std::memory_order_release);
  return found;
}

/// The slot named by `slot_plus_one` (0: none) if it holds a live session of `generation`, else
/// nobody (bounds-checked: both come from shared memory).
inline std::int64_t live_session(const table_view& t, std::uint32_t slot_plus_one,
                                 std::uint32_t generation) noexcept {
  if (slot_plus_one == 0 || slot_plus_one > t.slot_count) return nobody;
  const slot_record& s = t.slots[slot_plus_one - 1];
  if (!is_active(s) || s.generation != generation) return nobody;
  return slot_plus_one - 1;
}

/// The holder's slot index, if the recorded holder is a live session of the right generation.
inline std::int64_t current_holder(const table_view& t) noexcept {
  return live_session(t, t.header->holder, t.header->holder_generation);
}

// ---------------------------------------------------------------------------------------------
// Virtual time: the class clock and the credit rule
// ---------------------------------------------------------------------------------------------

/// The smallest vtime among the sessions of class `priority` that contend now (the holder and
/// the waiters), except `except`; UINT64_MAX when none does.
inline std::uint64_t lowest_contender(const table_view& t, int priority,
                                      std::int64_t except) noexcept {
  std::uint64_t lowest = UINT64_MAX;
  auto consider = [&](std::uint32_t j) {
    const slot_record& o = t.slots[j];
    if (j != except && o.priority == priority && is_active(o)) lowest = std::min(lowest, o.vtime);
  };
  const std::int64_t holder = current_holder(t);
  if (holder != nobody) consider(static_cast<std::uint32_t>(holder));
  if (t.header->device_waiters.load(std::memory_order_relaxed) == 0) return lowest;
  for_each_waiting(t, [&](std::uint32_t j) {
    if (j != holder && t.slots[j].wants_device > 0) consider(j);
  });
  return lowest;
}

/// Lowers the floor of class `priority` to vtime_renormalise_to, and every vtime of the class's
/// sessions by the same amount (clamped at 0), if the floor is above vtime_renormalise_at.
inline void renormalise_class(const table_view& t, int priority) noexcept {
  std::uint64_t& floor = class_floor(*t.header, priority);
  if (floor <= vtime_renormalise_at) return;
  const std::uint64_t shift = floor - vtime_renormalise_to;
  const int p = std::clamp(priority, 0, 7);
  for (std::uint32_t j = 0; j < t.slot_count; ++j) {
    slot_record& o = t.slots[j];
    if (is_active(o) && std::clamp(o.priority, 0, 7) == p) o.vtime = sat_sub(o.vtime, shift);
  }
  floor = vtime_renormalise_to;
}

/// The clock of class `priority`: the floor raised to the smallest vtime of the sessions that
/// contend now (except `except`). Monotone between renormalisations (renormalise_class()), which
/// lower the floor and every vtime of the class together.
inline std::uint64_t class_clock(const table_view& t, int priority, std::int64_t except) noexcept {
  const std::uint64_t lowest = lowest_contender(t, priority, except);
  std::uint64_t& floor = class_floor(*t.header, priority);
  if (lowest != UINT64_MAX) floor = std::max(floor, lowest);
  renormalise_class(t, priority);
  return floor;
}

/// Raises the floor of class `priority` to the smallest vtime of its contenders, the holder
/// included: called as device time is accounted, so the floor follows a session that runs alone
/// (on its lease, say) and a newcomer placed at the floor is at most one guard behind it, never
/// seconds (issue 23, case 1: the floor rose only from sessions contending at a placement, so a
/// session alone for seconds left it at 0, and a newcomer took 96% of the next 500 ms).
inline void raise_floor(const table_view& t, int priority) noexcept {
  (void)class_clock(t, priority, nobody);
}

/// The most credit (virtual time behind its class clock) recently active session `i` keeps: how
/// far the clock can move in credit_idle_ns (the device used all that time by the class's
/// smallest share), plus credit_quanta of the class's widest quanta. Visits every slot, but runs
/// only when a session starts contending (about once per turn), never per guard.
inline std::uint64_t credit_limit(const table_view& t, std::uint32_t i) noexcept {
  const slot_record& s = t.slots[i];
  std::uint32_t smallest = std::max<std::uint32_t>(s.share, 1);
  std::uint64_t widest = quantum_vt(s);
  for (std::uint32_t j = 0; j < t.slot_count; ++j) {
    const slot_record& o = t.slots[j];
    if (o.priority != s.priority || !is_active(o)) continue;
    smallest = std::min(smallest, std::max<std::uint32_t>(o.share, 1));
    widest = std::max(widest, quantum_vt(o));
  }
  return sat_add(mul_div(credit_idle_ns, 1000, smallest), mul_div(widest, credit_quanta, 1));
}

/// Slot `i` starts contending (its first thread registers to wait, or it takes a free device):
/// the credit rule. Recently active (within credit_idle_ns): it keeps its vtime, up to
/// credit_limit() behind the clock. Idle for longer, or never active: level with the clock.
inline void place(const table_view& t, std::uint32_t i, std::uint64_t now) noexcept {
  slot_record& s = t.slots[i];
  const std::uint64_t clock = class_clock(t, s.priority, i);
  if (s.vtime >= clock) return;
  const bool recent = s.last_active_ns != 0 && sat_sub(now, s.last_active_ns) <= credit_idle_ns;
  s.vtime = std::max(s.vtime, sat_sub(clock, recent ? credit_limit(t, i) : 0));
}

/// Session `i` moves to class `priority`: it takes the new class's clock as its vtime (its old
/// vtime measured progress in another class and means nothing here).
inline void change_class(const table_view& t, std::uint32_t i, int priority) noexcept {
  slot_record& s = t.slots[i];
  if (s.priority == priority) return;
  const std::uint64_t lowest = lowest_contender(t, priority, i);
  s.priority = priority;
  s.vtime = lowest != UINT64_MAX ? lowest : class_floor(*t.header, priority);
}

// ---------------------------------------------------------------------------------------------
// Who holds the device
// ---------------------------------------------------------------------------------------------

/// Where a decision is taken: the holder enters or leaves a guard, yields, or a waiter looks at
/// a holder that is between guards (would the holder hand over at its next boundary anyway?).
enum class boundary { guard_enter, guard_exit, yield, takeover };

inline std::uint64_t idle_grace(const slot_record& holder) noexcept {
  return holder.handover_mode == handover_at_yield ? idle_grace_at_yield_ns
                                                   : idle_grace_at_guard_ns;
}

/// How long a handover_at_yield holder keeps the device without yielding while others are due:
/// 16 quanta, from 100 ms to 1 s, and never less than one quantum.
inline std::uint64_t yield_backstop(const slot_record& hs) noexcept {
  const std::uint64_t quanta = mul_div(hs.quantum_ns, yield_backstop_quanta, 1);
  return std::max(hs.quantum_ns, std::clamp(quanta, yield_backstop_min_ns, yield_backstop_max_ns));
}

/// Whether holder `hs`, with a gap of `gap_ns` in progress, has left the device idle long enough
/// that a lower class may take its gaps: its idle debt (idle time kept from waiters, drained by
/// 1/8 of its device time) reached the idle grace of an at_guard holder. A leaky bucket, not a
/// budget renewed per quantum: a renewed budget was never spent by a holder whose quantum ends
/// before its gaps add up to the grace (a 100 us quantum, or the 50 ms grace of at_yield), and
/// the lower class got 0% of a device 75-80% idle (issue 23, case 3). The at_yield grace is for
/// equal-class waiters only: a lower class takes gaps, it does not end iterations.
inline bool lower_class_may_take(const slot_record& hs, std::uint64_t gap_ns) noexcept {
  return sat_add(hs.idle_debt_ns, gap_ns) >= idle_grace_at_guard_ns;
}

/// At a boundary of holder `hs`, should waiter `ws` get the device?
inline bool should_hand_over(const table_header& h, const slot_record& hs, const slot_record& ws,
                             boundary at) noexcept {
  if (ws.priority > hs.priority) return true;
  // A lower class gets the gaps of a holder whose idle debt is spent: the next gap is the lower
  // class's (handed over as the gap begins), but never when the holder starts a guard.
  if (ws.priority < hs.priority) return at != boundary::guard_enter && lower_class_may_take(hs, 0);
  if (at == boundary::takeover && !h.holder_started) return false; // its start grace
  const bool idle_spent = h.holder_idle_ns >= idle_grace(hs); // it has left the device idle long
  if (idle_spent) return true; // an equal waiter: the holder wasted its turn on idle gaps
  // An at_guard holder whose gaps keep the device idle (its idle debt spent: idle beyond 1/8 of
  // its device time) hands each gap to an equal waiter as it begins, and gets the device back at
  // the waiter's next boundary by the catch-up below while it is behind. Holding through its
  // gaps until its idle budget ran out, then waiting a whole turn, a session with pauses as long
  // as its guards ran 2-4% of the time against its 37-50% (issue 23, case 4).
  if ((at == boundary::guard_exit || at == boundary::takeover) &&
      hs.handover_mode == handover_at_guard && lower_class_may_take(hs, 0))
    return true;
  if (hs.handover_mode == handover_at_yield && at != boundary::yield &&
      h.quantum_used_ns < yield_backstop(hs))
    return false;
  // Quantum used: the waiter goes next unless it is more than one of its own turns ahead (then the
  // holder, behind, keeps going). Equal sessions therefore alternate turn by turn, and a waiter
  // waits at most one turn of each other session.
  if (h.quantum_used_ns >= hs.quantum_ns && ws.vtime <= sat_add(hs.vtime, quantum_vt(ws)))
    return true;
  // Catch-up: a waiter behind the holder by more than one turn, and busy in its last turn, gets
  // the device back at once: it was descheduled between two guards, or handed its gaps over (the
  // holder took the idle or free device meanwhile), and the holder has had more than its share.
  // "One turn" is the holder's quantum, or the waiter's own last turn if that was shorter: a
  // session whose turns are a guard long (it hands each gap over) is owed its next guard as soon
  // as it is behind by one. A waiter that idled through its last turn does not catch up: it
  // would leave the device idle again.
  const std::uint64_t turn = std::min(quantum_vt(hs), virtual_ns(ws, ws.last_turn_ns));
  return ws.last_turn_busy != 0 && sat_add(ws.vtime, turn) < hs.vtime;
}

/// Guards of session `s` inside their region now: those entered under the lock and those entered
/// on its lease (see "The lease" below).
inline std::uint32_t busy_guards(const slot_record& s) noexcept {
  const std::uint64_t n =
      std::uint64_t{s.active_guards} + s.lease_guards.load(std::memory_order_seq_cst);
  return n > UINT32_MAX ? UINT32_MAX : static_cast<std::uint32_t>(n);
}

/// How much longer holder `hs`, between guards now, may leave the device idle while waiter `ws`
/// waits: the start grace until it has started; then, for an equal waiter, what is left of its
/// idle budget, and for a lower class, what is left before its idle debt reaches the grace.
inline std::uint64_t idle_left(const table_header& h, const slot_record& hs, const slot_record& ws,
                               std::uint64_t now) noexcept {
  if (!h.holder_started)
    return sat_sub(sat_add(h.holder_since_ns, std::max(idle_grace(hs), start_grace_ns)), now);
  const std::uint64_t gap = sat_sub(now, h.holder_idle_since_ns);
  if (ws.priority < hs.priority)
    return sat_sub(idle_grace_at_guard_ns, sat_add(hs.idle_debt_ns, gap));
  return sat_sub(idle_grace(hs), sat_add(h.holder_idle_ns, gap));
}

/// Records how the holder's turn went as it ends: busy if idle gaps took less than half of it.
inline void end_turn(const table_header& h, slot_record& holder) noexcept {
  holder.last_turn_busy = sat_add(h.holder_idle_ns, h.holder_idle_ns) < h.quantum_used_ns ? 1 : 0;
  holder.last_turn_ns = std::min(h.quantum_used_ns, holder.quantum_ns);
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
      p.idle_debt_ns = sat_add(p.idle_debt_ns, sat_sub(now, h.holder_idle_since_ns));
    ++p.handovers;
    ++h.handovers;
    end_turn(h, p);
    // Turns end at guard boundaries, so one may overrun its quantum by up to a guard: the
    // overrun is taken off the next turn, and turns average one quantum (as in deficit round
    // robin), whatever the guard lengths.
    p.quantum_debt_ns = std::min(sat_sub(h.quantum_used_ns, p.quantum_ns), p.quantum_ns);
  }
  h.holder = i + 1;
  h.holder_generation = s.generation;
  h.holder_since_ns = now;
  h.holder_idle_since_ns = now;
  h.quantum_start_ns = now;
  h.quantum_used_ns = prev == i ? 0 : s.quantum_debt_ns; // its turn starts short by its debt
  s.quantum_debt_ns = 0;
  h.holder_idle_ns = 0;
  h.holder_started = 0;
  h.watch_until_ns = 0; // a new holder: nobody watches it yet
  h.watcher = 0;
  s.last_active_ns = now;
  // Its sleeping threads are woken by this bump. With none registered, none can be asleep or
  // about to sleep on the word (a waiter registers under the lock before it reads the word), so
  // the locked read-modify-write is skipped.
  if (s.wants_device > 0) s.grant_word.fetch_add(1, std::memory_order_release);
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

/// A waiting thread of session `me` is about to sleep while holder `hs` runs or idles: how long
/// it sleeps, and whether it becomes the watcher (the one waiter that re-checks the holder on
/// its own; the holder's guard exits wake a waiter only while nobody watches).
inline std::uint64_t watch(const table_view& t, const slot_record& hs, std::uint32_t me,
                           std::uint64_t now, std::uint64_t liveness_recheck_ns) noexcept {
  table_header& h = *t.header;
  std::uint64_t until = 0;
  if (busy_guards(hs) == 0) { // a gap: re-check when it would exhaust the holder's idle budget
    const std::uint64_t left = idle_left(h, hs, t.slots[me], now);
    until = sat_add(now, left > 0 ? left : watch_period_ns); // spent, yet kept: poll
  } else if (h.watch_exits != h.holder_exits) {              // its guards end and start: poll
    until = sat_add(now, watch_period_ns);
  } // else: one long guard since the last watch; its exit will wake a waiter
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
  if (p.priority != s.priority || sat_add(p.vtime, quantum_vt(s)) >= s.vtime) return 0;
  if (p.cpu_wait_ppm < reserve_cpu_wait_ppm || paced(p, now)) return 0; // (paced: it cannot run)
  const bool busy = holding ? sat_add(h.holder_idle_ns, h.holder_idle_ns) < h.quantum_used_ns
                            : p.last_turn_busy != 0;
  if (!busy) return 0;
  return sat_sub(sat_add(p.last_active_ns, reserve_ns), now);
}

/// The session that last freed the device, if it is still the same live session.
inline std::int64_t last_holder(const table_view& t) noexcept {
  return live_session(t, t.header->last_holder, t.header->last_holder_generation);
}

/// A turn is bounded in wall time too: a holder whose quantum has lasted more than this many
/// quanta of wall time while others wait has the wall time it did not account charged to its
/// quantum and its virtual time. Guards that account little device time (set_device_time(0), a
/// stream capture) otherwise kept the device for as long as they ran: at 10% of their wall time
/// an equal peer waited 50 ms and ran 9% of the time, at 0% never (issue 23, case 8). Two
/// quanta, not one, so that a session whose accounted time trails its wall time moderately (the
/// CUDA layer's event times, host work inside guards) keeps its turns as they were.
inline constexpr std::uint64_t wall_bound_quanta = 2;

/// Charges holder `s` (in `h`) the wall time of its quantum it did not account, once the quantum
/// has lasted wall_bound_quanta quanta of wall time. Call at a boundary while others wait.
inline void charge_wall(table_header& h, slot_record& s, std::uint64_t now) noexcept {
  const std::uint64_t wall = sat_sub(now, h.quantum_start_ns);
  if (wall <= mul_div(s.quantum_ns, wall_bound_quanta, 1) || h.quantum_used_ns >= wall) return;
  s.vtime = sat_add(s.vtime, virtual_ns(s, wall - h.quantum_used_ns));
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
    // and adds to its idle debt.
    const std::uint64_t gap = sat_sub(now, h.holder_idle_since_ns);
    h.quantum_used_ns = sat_add(h.quantum_used_ns, gap);
    h.holder_idle_ns = sat_add(h.holder_idle_ns, gap);
    s.idle_debt_ns = sat_add(s.idle_debt_ns, gap);
    h.holder_idle_since_ns = now;
  }
  h.holder_started = 1;
  if (w != nobody) charge_wall(h, s, now);
  if (w != nobody && should_hand_over(h, s, t.slots[w], boundary::guard_enter)) {
    if (busy_guards(s) > 0) return {false, nobody, liveness_recheck_ns}; // drain first
    return {false, grant(t, static_cast<std::uint32_t>(w), now), liveness_recheck_ns};
  }
  // Quantum used and nobody should take over, even at a yield: a new quantum, and a new idle
  // budget (the budget is per quantum: the inevitable gaps between guards of a busy holder,
  // microseconds each, must not add up over a long run to a lost turn). An at_yield holder
  // keeps a used quantum until its next yield() hands over, or its backstop.
  if (h.quantum_used_ns >= s.quantum_ns &&
      (w == nobody || !should_hand_over(h, s, t.slots[w], boundary::yield))) {
    h.quantum_used_ns = std::min(h.quantum_used_ns - s.quantum_ns, s.quantum_ns); // the overrun
    h.holder_idle_ns = 0;
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
    if (b != i) return {false, grant(t, static_cast<std::uint32_t>(b), now), liveness_recheck_ns};
    const std::int64_t p = last_holder(t);
    if (p != nobody && p != i && t.slots[p].wants_device == 0)
      if (const std::uint64_t left = reserved_for(h, t.slots[p], false, s, now); left > 0)
        return {false, nobody, left};
    grant(t, i, now);
    h.holder_started = 1;
    return {true};
  }
  const slot_record& hs = t.slots[holder];
  if (busy_guards(hs) > 0) return {false, nobody, watch(t, hs, i, now, liveness_recheck_ns)};
  // The holder is between guards. Its own threads registered to start guards (woken, not yet
  // running: a wake-up can take a millisecond on a busy machine) come before a lower class: a
  // lower guard started then made them wait (issue 23, case 5).
  if (s.priority < hs.priority && hs.wants_device > 0)
    return {false, nobody, watch(t, hs, i, now, liveness_recheck_ns)};
  // A higher class takes over at once; anyone once the holder's idle budget (a lower class: its
  // idle debt) is spent, or when the holder would hand over to it at its next boundary anyway.
  bool takeover = s.priority > hs.priority || should_hand_over(h, hs, s, boundary::takeover);
  std::uint64_t recheck = 0;
  if (!takeover && idle_left(h, hs, s, now) == 0) {
    // Descheduled, not idle: keep it a while (an equal-class holder only).
    recheck = s.priority == hs.priority ? reserved_for(h, hs, true, s, now) : 0;
    takeover = recheck == 0;
  }
  if (!takeover)
    return {false, nobody, recheck ? recheck : watch(t, hs, i, now, liveness_recheck_ns)};
  const std::int64_t b = best_claim(t, holder, i, now);
  if (b != i) return {false, grant(t, static_cast<std::uint32_t>(b), now), liveness_recheck_ns};
  grant(t, i, now);
  h.holder_started = 1;
  return {true};
}

/// Accounts `used_ns` of device time to session `s` (its share, its holder quantum, its pacing
/// clock when capped). `start_ns`: when the work began (bounds the burst a capped session keeps).
inline void account_device_time(table_header& h, slot_record& s, std::uint64_t used_ns, bool holder,
                                std::uint64_t start_ns) noexcept {
  s.device_ns = sat_add(s.device_ns, used_ns);
  s.vtime = sat_add(s.vtime, virtual_ns(s, used_ns));
  // The floor trails the vtime by at most vtime_max_lead (see vtime_renormalise_at): a session
  // that runs alone for months, or is charged a huge time at once, brings its floor along, and the
  // next exit_step() or class_clock() renormalises the class.
  if (std::uint64_t& floor = class_floor(h, s.priority); s.vtime > sat_add(floor, vtime_max_lead))
    floor = s.vtime - vtime_max_lead;
  if (holder) h.quantum_used_ns = sat_add(h.quantum_used_ns, used_ns);
  s.idle_debt_ns = sat_sub(s.idle_debt_ns, used_ns / 16); // device time drains the idle debt
  const std::uint32_t limit = s.compute_limit_ppm == 0 ? 1'000'000 : s.compute_limit_ppm;
  if (limit < 1'000'000) {
    const std::uint64_t earned = mul_div(used_ns, 1'000'000, limit); // wall time it costs
    s.cap_vclock_ns = sat_add(std::max(s.cap_vclock_ns, sat_sub(start_ns, cap_burst_ns)), earned);
  }
}

/// Accounts a finished guard of session `s` that used `used_ns` of device time.
inline void account_guard(table_header& h, slot_record& s, std::uint64_t used_ns, bool holder,
                          std::uint64_t start_ns) noexcept {
  ++s.guards;
  account_device_time(h, s, used_ns, holder, start_ns);
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
  if (w != nobody) charge_wall(h, s, now);
  bool hand =
      w != nobody && (must_pause || should_hand_over(h, s, t.slots[w], boundary::guard_exit));
  // Its own threads wait to start guards: a lower class does not get the device before them (a
  // holder that had spent its idle debt handed over to the lower class first: issue 23, case 5).
  if (hand && !must_pause && s.wants_device > 0 && t.slots[w].priority < s.priority) hand = false;
  if (hand) return grant(t, static_cast<std::uint32_t>(w), now);
  if (w == nobody && (must_pause || s.handover_mode == handover_at_guard)) {
    end_turn(h, s);
    h.holder = 0; // nobody else waits: the device is simply free
    h.last_holder = i + 1;
    h.last_holder_generation = s.generation;
    // A waiter its compute limit holds back is woken to sleep out its pause.
    if (s.wants_device == 0) return wake_paced_waiter(t, i, now);
  }
  if (s.wants_device > 0) { // its own threads wait for the running guards to drain
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
  if (s.wants_device > 0 && ws.priority < s.priority) return false; // its own threads first
  if (should_hand_over(h, s, ws, boundary::guard_exit)) return true;
  // With the pending time, or past the wall bound (charge_wall), the quantum may be over.
  const std::uint64_t used =
      std::max(sat_add(h.quantum_used_ns, pending_ns),
               sat_sub(now, h.quantum_start_ns) > mul_div(s.quantum_ns, wall_bound_quanta, 1)
                   ? sat_sub(now, h.quantum_start_ns)
                   : 0);
  return used >= s.quantum_ns && ws.priority >= s.priority &&
         !(s.handover_mode == handover_at_yield && used < yield_backstop(s));
}

/// yield() by holder `i` between guards: hand over to a waiter that should run now.
inline std::int64_t hand_over_at_yield(const table_view& t, std::uint32_t i,
                                       std::uint64_t now) noexcept {
  const std::int64_t w = best_waiter(t, i, now);
  if (w == nobody) return nobody;
  charge_wall(*t.header, t.slots[i], now);
  if (!should_hand_over(*t.header, t.slots[i], t.slots[w], boundary::yield)) return nobody;
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

// ---------------------------------------------------------------------------------------------
// The lease: the guards of an uncontended holder, without the table lock
// ---------------------------------------------------------------------------------------------
// When the last guard of the holder ends and nobody else waits, the locked path would free the
// device (or keep it idle, at_yield) and the next guard would take it again: two table locks a
// guard. Instead the holder keeps the device on a *lease*. While its slot's `lease` is 1, its
// guards enter by incrementing `lease_guards` and exit by adding their device time to
// `lease_used_ns` and decrementing it again, without the lock (session_core::enter_guard and
// exit_guard). Before any decision that involves that session, whoever holds the lock ends the
// lease (settle_lease): a waiter of another session arriving (acquire_step), a settings change,
// leaving, reclaiming, a yield. Settling folds the lease guards' time into the books and, if no
// lease guard runs, releases the device exactly as the last guard's exit would have, at that
// exit's time; if some run, the holder is busy and their exits take the locked path
// (lease_exit_step). A lease is granted only without a compute limit (pacing needs the lock).
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
  s.guards = sat_add(s.guards, exits);
  s.lease_guards_done = sat_add(s.lease_guards_done, exits);
  account_device_time(*t.header, s, used, charge_quantum, last);
  raise_floor(t, s.priority); // renormalises too
  s.last_active_ns = std::max(s.last_active_ns, last);
}

/// At the exit of the last guard of holder `i`, with nobody waiting: grants it the lease if
/// nothing needs the lock for its guards. Returns whether it did.
inline bool grant_lease(const table_view& t, std::uint32_t i, std::uint64_t now) noexcept {
  table_header& h = *t.header;
  slot_record& s = t.slots[i];
  if (h.device_waiters.load(std::memory_order_relaxed) != 0 || s.wants_device != 0) return false;
  if (s.compute_limit_ppm != 0 && s.compute_limit_ppm < 1'000'000) return false;
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
  if (running == 0 && s.active_guards == 0)  // idle on the lease: release as its last exit would
    return release_at_guard_exit(t, i, s.lease_last_exit_ns.load(std::memory_order_relaxed));
  table_header& h = *t.header; // busy: a turn starts now, and its guards' exits end it
  h.holder_since_ns = now;
  h.quantum_start_ns = now;
  h.quantum_used_ns = 0;
  h.holder_idle_ns = 0;
  h.holder_started = 1;
  s.last_active_ns = now;
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
  s.last_active_ns = now;
  return release_at_guard_exit(t, i, now);
}

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
    return {acquire_result::pause, nobody, s.cap_vclock_ns - now};
  }
  // Another session holds the device on its lease: end the lease before deciding. (Nobody else
  // waits while a lease lasts, so this wakes nobody in practice; merged below all the same.)
  const std::int64_t settled = settle_holder_lease(t, i, now);
  if (!st.registered && s.wants_device == 0 && current_holder(t) != i) place(t, i, now);
  take_result r = try_take(t, i, now, liveness_recheck_ns);
  if (r.wake == nobody) r.wake = settled;
  if (r.granted) {
    if (as_guard) ++s.active_guards;
    if (st.registered) remove_waiters(t, i);
    st.registered = false;
    s.last_active_ns = now;
    // Other threads of this session that wait may run too now: wake them (a grant this thread
    // took for its session bumped their word, but nobody else sends the wake).
    const bool others = s.wants_device > 0 && r.wake == nobody;
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
  s.guards = sat_add(s.guards, exits);
  account_device_time(*t.header, s, used_ns, holder, start_ns);
  raise_floor(t, s.priority);    // and renormalises (once in ~53 days of device time)
  if (exits == 0) return nobody; // time only (a partly folded journal): no boundary yet
  s.active_guards = sat_sub32(s.active_guards, exits);
  s.last_active_ns = std::max(s.last_active_ns, now);
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
  s.active_guards = 0;
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
      s.wants_device = 0;
      s.active_guards = 0;
      s.lease.store(0, std::memory_order_relaxed);
      s.lease_guards.store(0, std::memory_order_relaxed);
      continue;
    }
    // The exact count: the sum must agree with what remove_waiters() will take off as the
    // threads stop waiting (a cap here, say at 1024 a slot, would let the total reach 0 while
    // threads still wait, and the fast paths would then ignore them). A scribbled count can
    // only make the sum larger: saturate, never wrap.
    waiters += s.wants_device;
    set_waiting_bit(h, i, s.wants_device > 0);
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
