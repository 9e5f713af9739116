// SPDX-License-Identifier: Apache-2.0
// Settings of a live session, changed by the session itself or through the table (validated here,
// for every caller), and the record of an eviction. Called under the table lock.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include <gpushare/detail/budget.hpp>
#include <gpushare/detail/messages.hpp>

#include <gpushare/detail/parse.hpp>
#include <gpushare/detail/parse_pause_hold.hpp>
#include <gpushare/detail/posix.hpp>
#include <gpushare/detail/scheduler.hpp>
#include <gpushare/table_types.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// Throws invalid_argument unless `bound` is unset, 0 (none) or in max_guard_option's range.
inline void check_max_guard(const std::optional<std::chrono::nanoseconds>& bound) {
  if (!bound || bound->count() == 0) return;
  check_duration(max_guard_option,
                 static_cast<std::uint64_t>(std::max<std::int64_t>(bound->count(), 0)),
                 "max_guard (0 for none)");
}

/// Refuses (errc::invalid_argument) a fraction of an unlimited capacity: 20% of 2^63 bytes is a
/// limit in name only. 0% and 100% mean the same whatever the capacity and pass. `who` is
/// "session 'x'", `field` "memory limit" or "memory guarantee", `table` the table's name.
inline void check_fraction_has_capacity(const std::string& who, const char* field,
                                        const std::optional<memory_amount>& m,
                                        std::uint64_t capacity, const std::string& table) {
  if (!m || m->kind != memory_amount::unit::fraction || m->value == 0 || m->value >= 1'000'000 ||
      capacity < max_memory_bytes)
    return;
  const std::string pct = format_ppm_percent(static_cast<std::uint32_t>(m->value));
  throw error(errc::invalid_argument,
              who + ": a " + field + " of " + pct + " is a fraction of the table's capacity, but " +
                  "table '" + table + "' has an unlimited capacity (none was given when it was " +
                  "created), so " + pct + " would be " + format_bytes(m->resolve(capacity)) +
                  ", a " + field + " in name only. Give the " + field +
                  " in bytes (\"8GiB\"), or give the table a capacity: GPUSHARE_CAPACITY=80GiB "
                  "(or session_options::capacity) in the process that creates it, or `gpushare "
                  "set --table-default --capacity 80GiB` on this one (its owner). On a GPU, "
                  "gpushare::cuda::device_session creates its table with the GPU's memory as its "
                  "capacity");
}

/// Writes the settings of change `c` that need no resolving (not the memory limit and guarantee,
/// nor the priority, which moves the slot between class clocks) into `s`.
inline void write_settings(slot_settings& s, const settings_change& c) noexcept {
  if (c.share) s.share = *c.share;
  if (c.compute_limit_ppm) s.compute_limit_ppm = *c.compute_limit_ppm;
  if (c.quantum) s.quantum_ns = static_cast<std::uint64_t>(c.quantum->count());
  if (c.handover)
    s.handover_mode =
        *c.handover == handover_point::at_yield ? handover_at_yield : handover_at_guard;
  if (c.max_guard) s.max_guard_ns = static_cast<std::uint64_t>(c.max_guard->count());
  if (c.compute_guarantee_ppm) s.compute_guarantee_ppm = *c.compute_guarantee_ppm;
  if (c.pause_hold_ppm) s.pause_hold_ppm = *c.pause_hold_ppm;
}

/// Throws invalid_argument for a setting of `c` out of its range (the ranges and the message of
/// detail/parse.hpp, as session_options and GPUSHARE_* get them); `who` is "session 'x'".
inline void check_settings_ranges(const settings_change& c, const std::string& who) {
  const std::string of = who + ": ";
  if (c.priority) check_setting(priority_range, *c.priority, of + "priority");
  if (c.share) check_setting(share_range, *c.share, of + "share");
  if (c.compute_limit_ppm)
    check_setting(compute_limit_range, *c.compute_limit_ppm, of + "compute limit");
  if (c.quantum)
    check_duration(quantum_option,
                   static_cast<std::uint64_t>(std::max<std::int64_t>(c.quantum->count(), 0)),
                   of + "quantum");
  check_max_guard(c.max_guard);
  if (c.compute_guarantee_ppm)
    check_setting(compute_guarantee_range, *c.compute_guarantee_ppm, of + "compute guarantee");
  if (c.pause_hold_ppm) check_setting(pause_hold_range, *c.pause_hold_ppm, of + "pause hold");
  // A fraction of the capacity must be at most 100% (as in session_options): checked here, for
  // every caller (table::configure, session::configure, `gpushare set`), before anything resolves.
  for (const auto& [field, amount] : {std::pair{"memory limit", &c.memory_limit},
                                      std::pair{"memory guarantee", &c.memory_guarantee}})
    if (*amount && (*amount)->kind == memory_amount::unit::fraction)
      check_setting(memory_fraction_range,
                    static_cast<std::int64_t>(std::min<std::uint64_t>((*amount)->value, INT64_MAX)),
                    of + field);
}

/// Validates a change and applies it to slot `i`. Call under the table lock. Returns the slot to
/// wake after unlocking (its waiting threads re-check under the new settings), or nobody.
inline std::int64_t apply_settings(const table_view& t, std::uint32_t i, const settings_change& c,
                                   const std::string& who, const std::string& table,
                                   std::uint64_t now = monotonic_ns()) {
  table_header& h = *t.header;
  slot_record& s = t.slots[i];
  check_settings_ranges(c, who);
  check_fraction_has_capacity(who, "memory limit", c.memory_limit, h.capacity, table);
  check_fraction_has_capacity(who, "memory guarantee", c.memory_guarantee, h.capacity, table);
  const std::uint64_t limit =
      c.memory_limit ? c.memory_limit->resolve(h.capacity) : s.settings.memory_limit;
  const std::uint64_t guarantee =
      c.memory_guarantee ? c.memory_guarantee->resolve(h.capacity) : s.settings.memory_guarantee;
  if (guarantee > limit)
    throw error(
        errc::invalid_argument,
        guarantee_over_limit_text(who + ": ", format_bytes(guarantee), format_capacity(limit)));
  if (guarantee != s.settings.memory_guarantee && !guarantee_fits(h, s, guarantee))
    throw guarantee_unavailable(who, format_bytes(guarantee), table, h.capacity,
                                sat_sub(h.committed_total, commitment(s)));
  if (guarantee != s.settings.memory_guarantee && !group_guarantee_fits(t, i, guarantee))
    throw group_guarantee_unavailable(who + " of group '" + std::string(group_name(s)) + "'",
                                      guarantee, group_committed(t, group_name(s), i),
                                      s.group.memory_limit);
  // Settings change how its guards are scheduled (a compute limit needs the lock): end a lease.
  const std::int64_t settled = settle_lease(t, i, now);
  if (c.priority) change_class(t, i, *c.priority); // re-based on the new class's clock
  write_settings(s.settings, c);
  if (c.quantum) refresh_group_quantum(t, i);
  s.settings.memory_limit = limit; // a lower limit takes nothing back; growth stops
  set_usage(h, s, s.memory.reserved, s.memory.external, guarantee);
  ++s.settings_seq;
  if (s.compute.wants_device == 0) return settled;
  s.grant_word.fetch_add(1, std::memory_order_release);
  return i;
}

/// Records that live session `id` in slot `s` is being evicted by uid `by` (under the lock, just
/// before its session is ended): in the slot, where the session finds it, and in the header.
/// Its waiting threads' words are bumped so they wake and find the session gone.
inline void record_eviction(table_header& h, slot_record& s, session_id id, std::uint32_t by) {
  const std::uint64_t now = realtime_ns();
  s.evicted_unix_ns = now;
  s.evicted_by_uid = by;
  ++h.evictions;
  h.last_eviction_unix_ns = now;
  h.last_eviction_by_uid = by;
  h.last_eviction_pid = s.pid;
  h.last_eviction_slot = id.slot;
  h.last_eviction_generation = id.generation;
  std::memcpy(h.last_eviction_name, s.name, name_capacity);
  h.last_eviction_name[name_capacity - 1] = '\0';
  s.grant_word.fetch_add(1, std::memory_order_release);
}

} // namespace detail
} // namespace v0
} // namespace gpushare
