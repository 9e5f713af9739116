// SPDX-License-Identifier: Apache-2.0
// Compute arbitration, part 1 of 4 (detail/scheduler.hpp has the policy and the steps): the
// constants, and the waiters, whose counts and mask are changed only here, and who among
// them has the best claim to the device. Pure functions of the table state, under the lock.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <climits>
#include <cstdint>

#include <gpushare/detail/budget.hpp>
#include <gpushare/detail/group.hpp>
#include <gpushare/detail/layout.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

// default_quantum_ns (5 ms), min_quantum_ns (1 us), max_quantum_ns (10 s): detail/parse.hpp.
/// How much idle time (between its guards, while others wait) a holder may keep per quantum.
inline constexpr std::uint64_t idle_grace_at_guard_ns = 200'000;    // 200 us
inline constexpr std::uint64_t idle_grace_at_yield_ns = 50'000'000; // 50 ms
/// Pause hold (issue 40, C8): a holder below its share keeps the device through its pauses
/// while equal waiters wait, as long as the idle it kept that way, less its pause_hold ratio of
/// its device time (hold_debt_ns), stays below this: the longest single pause it holds through.
inline constexpr std::uint64_t pause_hold_burst_ns = idle_grace_at_guard_ns; // 200 us
// default_pause_hold_ppm (twice its device time): detail/parse.hpp.
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
  return s.settings.compute_limit_ppm != 0 && s.settings.compute_limit_ppm < 1'000'000 &&
         s.compute.cap_vclock_ns > now;
}

/// A session with a compute guarantee that has used less than its guarantee is owed: its clock
/// advances by used / guarantee (the wall time that device time covers) and starts each time no
/// earlier than this long ago, so a session back from idling claims at most this window's worth.
inline constexpr std::uint64_t guarantee_window_ns = 100'000'000; // 100 ms

/// A `now` that stands for "time not known": pacing and compute guarantees are not looked at.
inline constexpr std::uint64_t no_time = UINT64_MAX;

/// Whether session `s` is owed device time by its compute guarantee at `now`.
inline bool owed_guarantee(const slot_record& s, std::uint64_t now) noexcept {
  return s.settings.compute_guarantee_ppm != 0 && now != no_time &&
         s.compute.guarantee_vclock_ns < now;
}

/// The class session `s` competes in as a waiter at `now`: its priority, or, while its compute
/// guarantee is owed, above every class (a holder counts at its own priority once it has run a
/// guard of its turn, so a higher class takes the device back at its next boundary: a guarantee
/// costs the higher class at most one guard of the guaranteed session each time).
inline int claim_priority(const slot_record& s, std::uint64_t now) noexcept {
  // Owed sessions rank above every class, and among themselves by their own classes (8 + class:
  // priorities are 0..7, clamped here since they come from shared memory).
  return owed_guarantee(s, now) ? 8 + std::clamp(s.settings.priority, 0, 7) : s.settings.priority;
}

/// Records a sample of the share of time session `s`'s threads waited for a CPU (runnable, not
/// running) since the previous sample: a moving average, 1/4 weight to the new sample.
inline void note_cpu_wait(slot_record& s, std::uint32_t sample_ppm) noexcept {
  const std::uint64_t avg =
      (std::uint64_t{s.compute.cpu_wait_ppm} * 3 + std::min(sample_ppm, 1'000'000u)) / 4;
  s.compute.cpu_wait_ppm = static_cast<std::uint32_t>(avg);
}

/// Virtual time that `used_ns` of device time costs session `s` (at its group's share when it
/// belongs to one: detail/group.hpp).
inline std::uint64_t virtual_ns(const slot_record& s, std::uint64_t used_ns) noexcept {
  return mul_div(used_ns, 1000, effective_share(s));
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
/// What device_wait_ended() is given for a thread that got the device without waiting.
inline constexpr std::uint64_t no_wait = UINT64_MAX;

/// A thread of slot `s` got the device: `waited_ns` after it asked (no_wait: at once), and its
/// compute limit held it back `throttled_ns` meanwhile. Counted in the slot's statistics.
inline void device_wait_ended(slot_record& s, std::uint64_t waited_ns,
                              std::uint64_t throttled_ns) noexcept {
  if (waited_ns != no_wait) {
    ++s.stats.device_waits;
    s.stats.device_wait_ns = sat_add(s.stats.device_wait_ns, waited_ns);
    s.stats.device_wait_max_ns = std::max(s.stats.device_wait_max_ns, waited_ns);
  }
  s.stats.cap_throttle_ns = sat_add(s.stats.cap_throttle_ns, throttled_ns);
}

inline void add_waiter(const table_view& t, std::uint32_t i, std::uint64_t now) noexcept {
  slot_record& s = t.slots[i];
  if (s.compute.wants_device++ == 0) {
    s.compute.wait_since_ns = now;
    set_waiting_bit(*t.header, i, true);
  }
  t.header->device_waiters.fetch_add(1, std::memory_order_relaxed);
}

/// `threads` threads of slot `i` stop waiting (all of them: UINT32_MAX).
inline void remove_waiters(const table_view& t, std::uint32_t i,
                           std::uint32_t threads = 1) noexcept {
  slot_record& s = t.slots[i];
  const std::uint32_t n = std::min(threads, s.compute.wants_device);
  s.compute.wants_device -= n;
  if (s.compute.wants_device == 0) {
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
  return virtual_ns(s, s.settings.quantum_ns);
}

/// How far ahead of the smallest virtual time of its class session `s` may be and still claim
/// the device: one of its quanta, or for a group's member one of the group's widest quantum
/// (all members share one virtual time; with their own quanta, a member of a shorter quantum
/// never came within its window before one of a longer quantum did, and never ran).
inline std::uint64_t claim_window_vt(const slot_record& s) noexcept {
  return has_group(s) ? virtual_ns(s, std::max(s.settings.quantum_ns, s.group.quantum_ns))
                      : quantum_vt(s);
}

/// The session with the best claim to the device among the waiting slots (except `except`) and,
/// if given, slot `also` (a caller about to contend, waiting from `now` if it does not wait yet):
///   1. the highest priority class;
///   2. within it, only the *eligible*: those whose vtime is at most one of their own quanta
///      (claim_window_vt()) ahead of the class's smallest (a session further ahead has had more
///      than its share);
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
      if (i != except && i != also && s.compute.wants_device > 0 && is_active(s) && !paced(s, now))
        f(i);
    });
    if (also != nobody && also != except) f(static_cast<std::uint32_t>(also));
  };
  int top = INT32_MIN;
  std::uint64_t lowest = UINT64_MAX;
  for_each_candidate([&](std::uint32_t i) {
    const slot_record& s = t.slots[i];
    const int c = claim_priority(s, now);
    if (c > top) {
      top = c;
      lowest = s.compute.vtime;
    } else if (c == top) {
      lowest = std::min(lowest, s.compute.vtime);
    }
  });
  std::int64_t best = nobody;
  std::uint64_t best_since = 0;
  for_each_candidate([&](std::uint32_t i) {
    const slot_record& s = t.slots[i];
    if (claim_priority(s, now) != top || s.compute.vtime > sat_add(lowest, claim_window_vt(s)))
      return;
    const std::uint64_t since = s.compute.wants_device > 0 ? s.compute.wait_since_ns : now;
    if (best != nobody) {
      const slot_record& b = t.slots[best];
      if (since != best_since                  ? since > best_since
          : s.compute.vtime != b.compute.vtime ? s.compute.vtime > b.compute.vtime
                                               : i > best)
        return;
    }
    best = i;
    best_since = since;
  });
  return best;
}

/// The waiting session with the best claim (excluding `except`) at `now`, or nobody. Without a
/// time, neither pacing nor compute guarantees are looked at.
inline std::int64_t best_waiter(const table_view& t, std::int64_t except = nobody,
                                std::uint64_t now = no_time) noexcept {
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
    if (found == nobody && i != except && s.compute.wants_device > 0 && is_active(s) &&
        paced(s, now))
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

} // namespace detail
} // namespace v0
} // namespace gpushare
