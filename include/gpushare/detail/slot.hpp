// SPDX-License-Identifier: Apache-2.0
// A slot's lifecycle, in one place: a session joins a free slot (join_slot), ends (end_slot: it
// left, was evicted, or a peer reclaimed it after its process died), and, after a lock owner died
// mid-update, every dead session's slot is freed and the totals are rebuilt (repair_slots). Pure
// functions of the table, called under the table lock; the callers (session_core, table_core,
// the tests' fake tables) only lock, wait and wake.
//
// A slot is reused by whichever session claims it next, so everything the previous session left
// there (scheduler state, statistics, lease and journal counters, spare bytes) must be gone
// before the new session is activated: a hand-written list of fields once forgot two of them, and
// a new session inherited its predecessor's quantum debt and busy-turn mark (issue 23, item 3).
// Zeroing the whole record cannot forget a field; the settings are then one assignment.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include <gpushare/detail/budget.hpp>
#include <gpushare/detail/crash_point.hpp>
#include <gpushare/detail/layout.hpp>
#include <gpushare/detail/reclaim.hpp>
#include <gpushare/detail/scheduler.hpp>
#include <gpushare/detail/startup.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// Resets slot `s` to the all-zero state a freshly created table has (every struct of the layout
/// is valid all-zero: fallocate creates tables that way), keeping only what must stay monotone
/// across the sessions that use the slot: its generation (so a stale (slot, generation) never
/// names the new session), its settings sequence, and its grant word (a futex word: a thread of a
/// reclaimed session that still sleeps on it must see a change, never the same value again).
/// Call under the table lock, on a slot that is not active (state stays slot_free).
inline void reset_slot_for_join(slot_record& s) noexcept {
  const std::uint32_t generation = s.generation;
  const std::uint32_t settings_seq = s.settings_seq;
  const std::uint32_t word = s.grant_word.load(std::memory_order_relaxed);
  // The atomics in the record are lock-free integers (static_asserts in layout.hpp): their
  // object representation is their value, so zero bytes are the value 0, as in a new table.
  std::memset(static_cast<void*>(&s), 0, sizeof s);
  s.generation = generation;
  s.settings_seq = settings_seq;
  s.grant_word.store(word, std::memory_order_relaxed);
}

/// Who a joining session is: shown by snapshots, never trusted for liveness.
struct slot_identity {
  std::int32_t pid = 0;
  std::uint64_t start_time_ticks = 0; ///< /proc/self/stat starttime
  std::uint64_t joined_unix_ns = 0;
  std::string_view name;
  const platform_identity* platform = nullptr; ///< who it belongs to; nullptr: not known
};

/// Copies `v` into the zeroed `dst` of `capacity` bytes, keeping the terminating NUL.
inline void copy_bounded(char* dst, std::size_t capacity, std::string_view v) noexcept {
  const std::size_t n = std::min(v.size(), capacity - 1);
  if (n > 0) std::memcpy(dst, v.data(), n);
}

/// Writes `id` into the zeroed `p` (a joining slot's, reset by reset_slot_for_join()).
inline void write_platform(slot_platform& p, const platform_identity& id) noexcept {
  copy_bounded(p.pod, pod_capacity, id.pod);
  copy_bounded(p.pod_namespace, k8s_label_capacity, id.pod_namespace);
  copy_bounded(p.container, k8s_label_capacity, id.container);
  const auto put = [&](const std::optional<std::uint32_t>& v, std::uint32_t bit,
                       std::uint32_t& field) {
    if (!v) return;
    p.present |= bit;
    field = *v;
  };
  put(id.slurm_job_id, platform_has_job, p.slurm_job_id);
  put(id.slurm_step_id, platform_has_step, p.slurm_step_id);
  put(id.slurm_array_job_id, platform_has_array_job, p.slurm_array_job_id);
  put(id.slurm_array_task_id, platform_has_array_task, p.slurm_array_task_id);
}

/// The settings of a session that joins with the resolved options `r`, its memory limit and
/// guarantee already resolved against the table's capacity.
inline slot_settings join_settings(const resolved_options& r, std::uint64_t memory_limit,
                                   std::uint64_t memory_guarantee) noexcept {
  slot_settings s{};
  s.priority = r.priority;
  s.share = r.share;
  s.compute_limit_ppm = r.compute_limit_ppm;
  s.compute_guarantee_ppm = r.compute_guarantee_ppm;
  s.pause_hold_ppm = r.pause_hold_ppm;
  s.handover_mode = r.handover == handover_point::at_yield ? handover_at_yield : handover_at_guard;
  s.memory_limit = memory_limit;
  s.memory_guarantee = memory_guarantee;
  s.quantum_ns = r.quantum_ns;
  s.max_guard_ns = r.max_guard_ns;
  return s;
}

/// Makes free slot `i` of `t` the session `who` with `settings` in `group` (a group record
/// whose name is empty: none), and returns its generation. The
/// slot must count nowhere (free) and its guarantee must fit (guarantee_fits()); the guarantee is
/// the only total that changes, besides the number of live sessions. The slot is published
/// (state slot_active, release) last, so a lock-free reader that sees it active sees it whole.
inline std::uint32_t join_slot(const table_view& t, std::uint32_t i, const slot_identity& who,
                               const slot_settings& settings,
                               const slot_group& group = {}) noexcept {
  table_header& h = *t.header;
  slot_record& s = t.slots[i];
  reset_slot_for_join(s);
  s.generation += 1;
  s.pid = who.pid;
  s.start_time_ticks = who.start_time_ticks;
  s.joined_unix_ns = who.joined_unix_ns;
  copy_bounded(s.name, name_capacity, who.name); // the rest is zero: reset above
  if (who.platform != nullptr) write_platform(s.platform, *who.platform);
  s.settings = settings;
  s.settings.memory_guarantee = 0; // counts nowhere yet: set_usage() adds it to the totals
  ++s.settings_seq;
  // Level with its class (see place()), or with the furthest of its group's members there:
  // joining a group brings no credit the group has used (detail/group.hpp).
  s.compute.vtime =
      group_join_vtime(t, i, group, settings.priority, class_floor(h, settings.priority));
  s.group = group;
  refresh_group_quantum(t, i); // its quantum may widen its group's window
  set_usage(h, s, 0, 0, settings.memory_guarantee);
  ++h.live_sessions;
  crash_point("join.locked");
  s.state.store(slot_active, std::memory_order_release);
  return s.generation;
}

/// Ends the session in slot `i` of `t`: its device hold passes on, its start-up lock is free (the
/// table guard wakes its waiters), its waiters stop counting, its memory returns to the table, and
/// the slot is free (and, if nobody waits for memory now, no request to give memory back stands).
/// Returns the slot to wake (a new device holder) or nobody.
inline std::int64_t end_slot(const table_view& t, std::uint32_t i, std::uint64_t now) noexcept {
  end_startup_of(t, i);
  const std::int64_t wake = forget_slot(t, i, now);
  clear_slot(*t.header, t.slots[i]);
  if (t.header->memory_waiters == 0) withdraw_reclaim(t); // its waiters were the last
  return wake;
}

/// Ends the session in slot `i` of `t` whose process died without leaving (a peer found its
/// liveness lock free): as end_slot(), and counted in the table's sessions_reclaimed.
inline std::int64_t reclaim_slot(const table_view& t, std::uint32_t i, std::uint64_t now) noexcept {
  ++t.header->sessions_reclaimed;
  return end_slot(t, i, now);
}

/// After the table lock's owner died mid-update: frees the slot of every session `alive(i)` says
/// is dead (but `own`, the caller's), rebuilds every total from the slots that remain and makes
/// sure a live session holds the device if anyone waits. Returns the slot to wake, or nobody. The
/// caller bumps memory_wake and wakes the memory waiters: memory may have come back.
template <class Alive>
std::int64_t repair_slots(const table_view& t, std::int64_t own, Alive&& alive,
                          std::uint64_t now) noexcept {
  table_header& h = *t.header;
  for (std::uint32_t i = 0; i < t.slot_count; ++i) {
    slot_record& s = t.slots[i];
    if (i == own || s.state.load(std::memory_order_relaxed) != slot_active) continue;
    if (!alive(i)) {
      s.state.store(slot_free, std::memory_order_relaxed); // the totals are rebuilt below
      remove_memory_waiters(h, s, UINT32_MAX); // the header's count is rebuilt below too
      ++h.sessions_reclaimed;
    }
  }
  recompute_totals(t);
  if (h.memory_waiters == 0) withdraw_reclaim(t);
  (void)startup_holder(t); // frees the start-up lock if a freed slot held it
  return repair_scheduler(t, now);
}

} // namespace detail
} // namespace v0
} // namespace gpushare
