// SPDX-License-Identifier: Apache-2.0
// Compute arbitration, part 2 of 4 (detail/scheduler.hpp has the policy): virtual time, the
// class clocks and the credit rule. Pure functions of the table state, under the lock.
#pragma once

#include <algorithm>
#include <cstdint>

#include <gpushare/detail/sched_common.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

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
    if (j != except && o.settings.priority == priority && is_active(o))
      lowest = std::min(lowest, o.compute.vtime);
  };
  const std::int64_t holder = current_holder(t);
  if (holder != nobody) consider(static_cast<std::uint32_t>(holder));
  if (t.header->device_waiters.load(std::memory_order_relaxed) == 0) return lowest;
  for_each_waiting(t, [&](std::uint32_t j) {
    if (j != holder && t.slots[j].compute.wants_device > 0) consider(j);
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
    if (is_active(o) && std::clamp(o.settings.priority, 0, 7) == p)
      o.compute.vtime = sat_sub(o.compute.vtime, shift);
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
  std::uint32_t smallest = effective_share(s);
  std::uint64_t widest = quantum_vt(s);
  for (std::uint32_t j = 0; j < t.slot_count; ++j) {
    const slot_record& o = t.slots[j];
    if (o.settings.priority != s.settings.priority || !is_active(o)) continue;
    smallest = std::min(smallest, effective_share(o));
    widest = std::max(widest, quantum_vt(o));
  }
  return sat_add(mul_div(credit_idle_ns, 1000, smallest), mul_div(widest, credit_quanta, 1));
}

/// Slot `i` starts contending (its first thread registers to wait, or it takes a free device):
/// the credit rule. Recently active (within credit_idle_ns): it keeps its vtime, up to
/// credit_limit() behind the clock. Idle for longer, or never active: level with the clock.
inline void place(const table_view& t, std::uint32_t i, std::uint64_t now) noexcept {
  slot_record& s = t.slots[i];
  const std::uint64_t clock = class_clock(t, s.settings.priority, i);
  if (s.compute.vtime >= clock) return;
  const bool recent =
      s.compute.last_active_ns != 0 && sat_sub(now, s.compute.last_active_ns) <= credit_idle_ns;
  s.compute.vtime = std::max(s.compute.vtime, sat_sub(clock, recent ? credit_limit(t, i) : 0));
}

/// Session `i` moves to class `priority`: it takes the new class's clock as its vtime (its old
/// vtime measured progress in another class and means nothing here).
inline void change_class(const table_view& t, std::uint32_t i, int priority) noexcept {
  slot_record& s = t.slots[i];
  if (s.settings.priority == priority) return;
  const std::uint64_t lowest = lowest_contender(t, priority, i);
  s.settings.priority = priority;
  s.compute.vtime = lowest != UINT64_MAX ? lowest : class_floor(*t.header, priority);
}

} // namespace detail
} // namespace v0
} // namespace gpushare
