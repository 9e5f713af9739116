// SPDX-License-Identifier: Apache-2.0
// Session groups (issue 28, section 4): the sessions of one table that name the same group (a
// pod's containers, a job's ranks) share one memory limit and one compute share. Pure functions
// of the table state, called under the table lock. Nothing about a group is stored outside its
// members' slots (slot_record::group, written at join), so there is nothing to repair when a
// member dies: its slot stops counting the moment it is freed.
//
// Memory: the sum of the members' commitments (max(reserved + external, guarantee), as for the
// table) stays within the group's limit, checked before any member's reservation grows; so every
// member can still grow to its guarantee, as the table promises.
// Compute: device time that any member uses advances the virtual time of every member of its
// priority class at the group's share (charge_vtime()), so the scheduler, which serves the
// smallest virtual time, gives the group as a whole what one session of that share gets, however
// many members it has and whichever of them are busy.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>

#include <gpushare/detail/budget.hpp>
#include <gpushare/detail/layout.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// slot_group::memory_limit of a group whose members gave none.
inline constexpr std::uint64_t unlimited_group_memory = UINT64_MAX;

/// The index of slot `s`, a slot of `t`.
inline std::uint32_t index_of(const table_view& t, const slot_record& s) noexcept {
  return static_cast<std::uint32_t>(&s - t.slots);
}

/// Does session `s` belong to a group?
inline bool has_group(const slot_record& s) noexcept { return s.group.name[0] != '\0'; }

/// The group name of `s` (bounded: the bytes come from shared memory).
inline std::string_view group_name(const slot_record& s) noexcept {
  return {s.group.name, ::strnlen(s.group.name, group_capacity)};
}

/// Is `o` an active session of the group named `name`?
inline bool member_of(const slot_record& o, std::string_view name) noexcept {
  return !name.empty() && o.state.load(std::memory_order_relaxed) == slot_active &&
         group_name(o) == name;
}

/// The share that virtual time divides device time by: the group's for a member, else its own.
inline std::uint32_t effective_share(const slot_record& s) noexcept {
  return std::max<std::uint32_t>(has_group(s) ? s.group.share : s.settings.share, 1);
}

/// The first active member of the group `name` in `t` other than slot `except`, or -1.
inline std::int64_t find_group_member(const table_view& t, std::string_view name,
                                      std::int64_t except = -1) noexcept {
  for (std::uint32_t j = 0; j < t.slot_count; ++j)
    if (j != except && member_of(t.slots[j], name)) return j;
  return -1;
}

/// The sum of the commitments of the active members of the group `name`, except slot `except`.
inline std::uint64_t group_committed(const table_view& t, std::string_view name,
                                     std::int64_t except = -1) noexcept {
  std::uint64_t sum = 0;
  for (std::uint32_t j = 0; j < t.slot_count; ++j)
    if (j != except && member_of(t.slots[j], name)) sum = sat_add(sum, commitment(t.slots[j]));
  return sum;
}

/// May session `i` grow its reservations by `bytes` as far as its group is concerned? granted
/// (no group, or it fits), over_group_limit (its own commitment alone would exceed the group's
/// limit: waiting cannot help) or not_now (the other members' commitments leave too little).
inline budget_verdict check_group_grow(const table_view& t, std::uint32_t i,
                                       std::uint64_t bytes) noexcept {
  const slot_record& s = t.slots[i];
  if (!has_group(s)) return budget_verdict::granted;
  const std::uint64_t mine = commitment(s, sat_add(s.memory.reserved, bytes), s.memory.external,
                                        s.settings.memory_guarantee);
  if (mine > s.group.memory_limit) return budget_verdict::over_group_limit;
  return sat_add(group_committed(t, group_name(s), i), mine) <= s.group.memory_limit
             ? budget_verdict::granted
             : budget_verdict::not_now;
}

/// check_grow() for the table and the session, then check_group_grow(): the first refusal that
/// waiting cannot cure wins, then not_now.
inline budget_verdict check_grow_in(const table_view& t, std::uint32_t i,
                                    std::uint64_t bytes) noexcept {
  const budget_verdict own = check_grow(*t.header, t.slots[i], bytes);
  if (own == budget_verdict::exceeds_capacity || own == budget_verdict::over_limit) return own;
  const budget_verdict group = check_group_grow(t, i, bytes);
  return group == budget_verdict::granted ? own : group;
}

/// Can a session of group `name` (limit `limit`) joining with guarantee `guarantee` be promised
/// it within the group? Joining with no guarantee is never refused because of what others use.
inline bool group_join_fits(const table_view& t, std::string_view name, std::uint64_t limit,
                            std::uint64_t guarantee) noexcept {
  return guarantee == 0 || sat_add(group_committed(t, name), guarantee) <= limit;
}

/// Can session `i`'s guarantee become `guarantee` within its group?
inline bool group_guarantee_fits(const table_view& t, std::uint32_t i,
                                 std::uint64_t guarantee) noexcept {
  const slot_record& s = t.slots[i];
  if (!has_group(s)) return true;
  const std::uint64_t before = commitment(s);
  const std::uint64_t after = commitment(s, s.memory.reserved, s.memory.external, guarantee);
  if (after <= before) return true;
  return sat_add(group_committed(t, group_name(s), i), after) <= s.group.memory_limit;
}

/// Adds `dv` of virtual time to session `i`, and to every other active member of its group in
/// its priority class: the group advances as one session at its share.
inline void charge_vtime(const table_view& t, std::uint32_t i, std::uint64_t dv) noexcept {
  slot_record& s = t.slots[i];
  s.compute.vtime = sat_add(s.compute.vtime, dv);
  if (!has_group(s)) return;
  const std::string_view name = group_name(s);
  for (std::uint32_t j = 0; j < t.slot_count; ++j) {
    slot_record& o = t.slots[j];
    if (j != i && o.settings.priority == s.settings.priority && member_of(o, name))
      o.compute.vtime = sat_add(o.compute.vtime, dv);
  }
}

/// Sets every active member of session `i`'s group to the widest quantum among them (slot_group::
/// quantum_ns); `i` itself counts whether or not it is active yet (a joiner).
inline void refresh_group_quantum(const table_view& t, std::uint32_t i) noexcept {
  slot_record& s = t.slots[i];
  if (!has_group(s)) return;
  const std::string_view name = group_name(s);
  std::uint64_t widest = s.settings.quantum_ns;
  for (std::uint32_t j = 0; j < t.slot_count; ++j)
    if (j != i && member_of(t.slots[j], name))
      widest = std::max(widest, t.slots[j].settings.quantum_ns);
  s.group.quantum_ns = widest;
  for (std::uint32_t j = 0; j < t.slot_count; ++j)
    if (j != i && member_of(t.slots[j], name)) t.slots[j].group.quantum_ns = widest;
}

/// The virtual time a session of group `g` joining class `priority` starts at: the furthest
/// member of its class, so that joining a group never brings credit the group has used.
inline std::uint64_t group_join_vtime(const table_view& t, std::uint32_t i, const slot_group& g,
                                      int priority, std::uint64_t floor) noexcept {
  const std::string_view name{g.name, ::strnlen(g.name, group_capacity)};
  std::uint64_t v = floor;
  for (std::uint32_t j = 0; j < t.slot_count; ++j) {
    const slot_record& o = t.slots[j];
    if (j != i && o.settings.priority == priority && member_of(o, name))
      v = std::max(v, o.compute.vtime);
  }
  return v;
}

} // namespace detail
} // namespace v0
} // namespace gpushare
