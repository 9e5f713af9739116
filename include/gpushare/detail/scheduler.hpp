// SPDX-License-Identifier: Apache-2.0
// Compute arbitration decisions: pure functions of the table state, called under the table lock.
// They decide who holds the device; the mechanics (lock, futex waits and wakes) live in
// session_core. Unit-testable without processes (tests/unit-scheduler.cpp).
//
// The policy (docs/design.md, "Compute arbitration"):
//   * at most one session holds the device (`holder`); a session's guards run only while it does;
//   * among waiters, the highest priority class wins; within a class the smallest virtual time
//     (device time / share), then the longest wait;
//   * a waiter of a higher class gets the device at the holder's next guard boundary;
//   * a waiter of the same class gets it when the holder's quantum of device time is used (at a
//     guard boundary, or only at yield() for handover_at_yield sessions) and the waiter's virtual
//     time is not ahead of the holder's;
//   * a holder between guards keeps the device only for a short grace when others wait, so an
//     idle holder never blocks anyone for long (work conservation);
//   * a session that starts contending gets vtime = max(its vtime, min_vtime of its class): no
//     banked credit (the floor is per class: a busy higher class must not push a lower one's);
//   * a capped session is paced: after a guard of u ns it may start its next guard only once its
//     pacing clock (advanced by u / limit) has caught up with real time.
#pragma once

#include <algorithm>
#include <cstdint>

#include <gpushare/detail/budget.hpp>
#include <gpushare/detail/layout.hpp>
#include <gpushare/options.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

// default_quantum_ns (5 ms), min_quantum_ns (1 us), max_quantum_ns (10 s): detail/parse.hpp.
/// How long a holder between guards keeps the device while others wait.
inline constexpr std::uint64_t idle_grace_at_guard_ns = 200'000;    // 200 us
inline constexpr std::uint64_t idle_grace_at_yield_ns = 50'000'000; // 50 ms
/// How long a session just granted the device has to wake up and start before a peer may take
/// the device back. Longer than the idle grace: on a loaded machine a woken process may wait
/// milliseconds for a CPU, and taking the device back then would undo the fair choice.
inline constexpr std::uint64_t start_grace_ns = 10'000'000; // 10 ms
/// How much idle time a capped session may bank as burst (limits overshoot to ~1% of a second).
inline constexpr std::uint64_t cap_burst_ns = 10'000'000; // 10 ms
inline constexpr std::int64_t nobody = -1;

/// The virtual-time floor of a priority class (bounds-checked: priorities come from shm).
inline std::uint64_t& class_floor(table_header& h, int priority) noexcept {
  return h.min_vtime[std::clamp(priority, 0, 7)];
}

/// a * b / c without overflow (saturating at 2^64 - 1); c > 0.
inline std::uint64_t mul_div(std::uint64_t a, std::uint64_t b, std::uint64_t c) noexcept {
  __extension__ using u128 = unsigned __int128;
  const u128 r = static_cast<u128>(a) * b / c;
  return r > UINT64_MAX ? UINT64_MAX : static_cast<std::uint64_t>(r);
}

inline bool is_active(const slot_record& s) noexcept {
  return s.state.load(std::memory_order_relaxed) == slot_active;
}

/// Does `a` have a better claim to the device than `b`?
inline bool better_claim(const slot_record& a, std::uint32_t ia, const slot_record& b,
                         std::uint32_t ib) noexcept {
  if (a.priority != b.priority) return a.priority > b.priority;
  if (a.vtime != b.vtime) return a.vtime < b.vtime;
  if (a.wait_since_ns != b.wait_since_ns) return a.wait_since_ns < b.wait_since_ns;
  return ia < ib;
}

/// The waiting session with the best claim (excluding `except`), or nobody.
inline std::int64_t best_waiter(const table_view& t, std::int64_t except = nobody) noexcept {
  // The common case, nobody waiting, must not scan 256 slots on every guard entry and exit.
  // (If a rogue writer zeroed the count, waiters are only found late: at their 100 ms re-check.)
  if (t.header->device_waiters.load(std::memory_order_relaxed) == 0) return nobody;
  std::int64_t best = nobody;
  for (std::uint32_t i = 0; i < t.slot_count; ++i) {
    const slot_record& s = t.slots[i];
    if (i == except || s.wants_device == 0 || !is_active(s)) continue;
    if (best == nobody || better_claim(s, i, t.slots[best], static_cast<std::uint32_t>(best)))
      best = i;
  }
  return best;
}

/// The holder's slot index, if the recorded holder is a live session of the right generation.
inline std::int64_t current_holder(const table_view& t) noexcept {
  const table_header& h = *t.header;
  if (h.holder == 0 || h.holder > t.slot_count) return nobody;
  const slot_record& s = t.slots[h.holder - 1];
  if (!is_active(s) || s.generation != h.holder_generation) return nobody;
  return h.holder - 1;
}

enum class boundary { guard_enter, guard_exit, yield };

/// At a boundary of holder `hs`, should waiter `ws` get the device?
inline bool should_hand_over(const table_header& h, const slot_record& hs, const slot_record& ws,
                             boundary at) noexcept {
  if (ws.priority != hs.priority) return ws.priority > hs.priority;
  if (hs.handover_mode == handover_at_yield && at != boundary::yield) return false;
  if (h.quantum_used_ns < hs.quantum_ns) return false;
  return ws.vtime <= hs.vtime;
}

inline std::uint64_t idle_grace(const slot_record& holder) noexcept {
  return holder.handover_mode == handover_at_yield ? idle_grace_at_yield_ns
                                                   : idle_grace_at_guard_ns;
}

/// How long a holder between guards keeps the device from an equal or lower class waiter.
inline std::uint64_t takeover_grace(const table_header& h, const slot_record& holder) noexcept {
  return h.holder_started ? idle_grace(holder) : std::max(idle_grace(holder), start_grace_ns);
}

/// Makes slot `i` the holder. Returns `i` (the slot whose waiters to wake after unlocking).
inline std::int64_t grant(const table_view& t, std::uint32_t i, std::uint64_t now) noexcept {
  table_header& h = *t.header;
  slot_record& s = t.slots[i];
  const std::int64_t prev = current_holder(t);
  if (prev != nobody && prev != i) {
    ++t.slots[prev].handovers;
    ++h.handovers;
  }
  h.holder = i + 1;
  h.holder_generation = s.generation;
  h.holder_since_ns = now;
  h.holder_idle_since_ns = now;
  h.quantum_used_ns = 0;
  h.holder_started = 0;
  class_floor(h, s.priority) = std::max(class_floor(h, s.priority), s.vtime);
  s.grant_word.fetch_add(1, std::memory_order_release);
  return i;
}

/// The device is free: give it to the best waiter, if any. Returns the slot to wake or nobody.
inline std::int64_t grant_next(const table_view& t, std::uint64_t now) noexcept {
  t.header->holder = 0;
  const std::int64_t w = best_waiter(t);
  return w == nobody ? nobody : grant(t, static_cast<std::uint32_t>(w), now);
}

/// Slot `i` starts contending (registers a waiting thread, or takes a free device): it gets no
/// credit for the time it was idle.
inline void start_contending(table_header& h, slot_record& s) noexcept {
  s.vtime = std::max(s.vtime, class_floor(h, s.priority));
}

struct take_result {
  bool granted = false;
  std::int64_t wake = nobody;   ///< a slot granted the device that must be woken
  std::uint64_t recheck_ns = 0; ///< when not granted: sleep at most this long, then retry
};

/// Thread of session `i` wants to enter a guard (or to get the device back after a yield).
inline take_result try_take(const table_view& t, std::uint32_t i, std::uint64_t now,
                            std::uint64_t liveness_recheck_ns) noexcept {
  table_header& h = *t.header;
  slot_record& s = t.slots[i];
  const std::int64_t holder = current_holder(t);
  const std::int64_t w = best_waiter(t, i);
  if (holder == i) {
    h.holder_started = 1;
    if (s.active_guards > 0) return {true}; // another thread of this session is inside a guard
    if (w != nobody && should_hand_over(h, s, t.slots[w], boundary::guard_enter))
      return {false, grant(t, static_cast<std::uint32_t>(w), now), liveness_recheck_ns};
    // Quantum used and nobody should take over, even at a yield: a new quantum. (An at_yield
    // holder keeps a used quantum until its next yield() hands over.)
    if (h.quantum_used_ns >= s.quantum_ns &&
        (w == nobody || !should_hand_over(h, s, t.slots[w], boundary::yield))) {
      h.quantum_used_ns = 0;
      const bool same_class = w != nobody && t.slots[w].priority == s.priority;
      std::uint64_t& floor = class_floor(h, s.priority);
      floor = std::max(floor, std::min(s.vtime, same_class ? t.slots[w].vtime : s.vtime));
    }
    return {true};
  }
  if (holder == nobody) {
    if (w != nobody && better_claim(t.slots[w], static_cast<std::uint32_t>(w), s, i))
      return {false, grant(t, static_cast<std::uint32_t>(w), now), liveness_recheck_ns};
    grant(t, i, now);
    h.holder_started = 1;
    return {true};
  }
  const slot_record& hs = t.slots[holder];
  if (hs.active_guards > 0) return {false, nobody, liveness_recheck_ns};
  // The holder is between guards: a higher class takes over at once; anyone else after the
  // holder's idle grace (or once its quantum is used, when it would have handed over anyway).
  const std::uint64_t idle_for = sat_sub(now, h.holder_idle_since_ns);
  const std::uint64_t grace = takeover_grace(h, hs);
  const bool takeover = s.priority > hs.priority || idle_for >= grace ||
                        should_hand_over(h, hs, s, boundary::guard_exit);
  if (!takeover) return {false, nobody, grace - idle_for};
  if (w != nobody && better_claim(t.slots[w], static_cast<std::uint32_t>(w), s, i))
    return {false, grant(t, static_cast<std::uint32_t>(w), now), liveness_recheck_ns};
  grant(t, i, now);
  h.holder_started = 1;
  return {true};
}

/// Accounts `used_ns` of device time to session `s` (its share, its holder quantum, its pacing
/// clock when capped). `start_ns`: when the work began (bounds the burst a capped session keeps).
inline void account_device_time(table_header& h, slot_record& s, std::uint64_t used_ns, bool holder,
                                std::uint64_t start_ns) noexcept {
  s.device_ns = sat_add(s.device_ns, used_ns);
  const std::uint32_t share = std::max<std::uint32_t>(s.share, 1);
  s.vtime = sat_add(s.vtime, mul_div(used_ns, 1000, share));
  if (holder) h.quantum_used_ns = sat_add(h.quantum_used_ns, used_ns);
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

/// The last active guard of holder `i` ended. Returns the slot to wake (a new holder, or a waiter
/// that should watch for the holder's idle grace to run out), or nobody.
inline std::int64_t release_at_guard_exit(const table_view& t, std::uint32_t i,
                                          std::uint64_t now) noexcept {
  table_header& h = *t.header;
  slot_record& s = t.slots[i];
  h.holder_idle_since_ns = now;
  const bool paced = s.cap_vclock_ns > now; // its compute limit makes it pause: let go
  const std::int64_t w = best_waiter(t, i);
  if (w != nobody && (paced || should_hand_over(h, s, t.slots[w], boundary::guard_exit)))
    return grant(t, static_cast<std::uint32_t>(w), now);
  if (w == nobody && (paced || s.handover_mode == handover_at_guard)) {
    h.holder = 0; // nobody waits: the device is simply free
    return nobody;
  }
  if (w == nobody) return nobody; // handover_at_yield: keep it until yield() or the grace ends
  t.slots[w].grant_word.fetch_add(1, std::memory_order_release); // wake it to watch the grace
  return w;
}

/// yield() by holder `i` between guards: hand over to a waiter that should run now.
inline std::int64_t hand_over_at_yield(const table_view& t, std::uint32_t i,
                                       std::uint64_t now) noexcept {
  const std::int64_t w = best_waiter(t, i);
  if (w == nobody || !should_hand_over(*t.header, t.slots[i], t.slots[w], boundary::yield))
    return nobody;
  return grant(t, static_cast<std::uint32_t>(w), now);
}

/// Slot `i` is being cleared (its session left or died): drop its scheduling state; if it held
/// the device, give the device to the next waiter. Returns the slot to wake, or nobody.
inline std::int64_t forget_slot(const table_view& t, std::uint32_t i, std::uint64_t now) noexcept {
  table_header& h = *t.header;
  slot_record& s = t.slots[i];
  const bool was_holder = current_holder(t) == i;
  h.device_waiters.fetch_sub(std::min(s.wants_device, h.device_waiters.load()),
                             std::memory_order_relaxed);
  s.wants_device = 0;
  s.active_guards = 0;
  if (!was_holder) return nobody;
  return grant_next(t, now); // it no longer wants the device, so it cannot be picked
}

/// After a lock owner died: recount the waiters and make sure a live session holds the device if
/// anyone waits. Returns the slot to wake, or nobody.
inline std::int64_t repair_scheduler(const table_view& t, std::uint64_t now) noexcept {
  std::uint32_t waiters = 0;
  for (std::uint32_t i = 0; i < t.slot_count; ++i) {
    slot_record& s = t.slots[i];
    if (!is_active(s)) {
      s.wants_device = 0;
      s.active_guards = 0;
      continue;
    }
    waiters += std::min(s.wants_device, 1024u);
  }
  t.header->device_waiters.store(waiters, std::memory_order_relaxed);
  if (current_holder(t) != nobody) return nobody;
  return grant_next(t, now);
}

} // namespace detail
} // namespace v0
} // namespace gpushare
