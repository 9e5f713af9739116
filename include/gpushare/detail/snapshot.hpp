// SPDX-License-Identifier: Apache-2.0
// Snapshots of a table: a session's figures read from its slot, a whole table built from a mapping
// (under the lock) or from a private copy (lock-free, for display), and the device observation a
// CUDA-layer session records.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <thread>

#include <gpushare/detail/crash_point.hpp>
#include <gpushare/detail/group.hpp>
#include <gpushare/detail/table_core.hpp>
#include <gpushare/table_types.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// A session's settings as session_info shows them.
inline void read_settings(const slot_settings& s, session_info& i) {
  i.priority = s.priority;
  i.share = s.share;
  i.compute_limit_ppm = s.compute_limit_ppm;
  i.compute_guarantee_ppm = s.compute_guarantee_ppm;
  i.pause_hold_ppm = s.pause_hold_ppm;
  i.memory_limit = s.memory_limit;
  i.memory_guarantee = s.memory_guarantee;
  i.quantum_ns = s.quantum_ns;
  i.max_guard_ns = s.max_guard_ns;
  i.handover =
      s.handover_mode == handover_at_yield ? handover_point::at_yield : handover_point::at_guard;
}

/// Who a session belongs to, as its slot records it.
inline platform_identity read_platform(const slot_platform& p) {
  platform_identity id;
  id.pod = read_bounded(p.pod, pod_capacity);
  id.pod_namespace = read_bounded(p.pod_namespace, k8s_label_capacity);
  id.container = read_bounded(p.container, k8s_label_capacity);
  const auto get = [&](std::uint32_t bit, std::uint32_t v) {
    return (p.present & bit) != 0 ? std::optional<std::uint32_t>(v) : std::nullopt;
  };
  id.slurm_job_id = get(platform_has_job, p.slurm_job_id);
  id.slurm_step_id = get(platform_has_step, p.slurm_step_id);
  id.slurm_array_job_id = get(platform_has_array_job, p.slurm_array_job_id);
  id.slurm_array_task_id = get(platform_has_array_task, p.slurm_array_task_id);
  return id;
}

/// A session's reclaim figures (reclaim.hpp), as session_info shows them.
inline void read_reclaim(const slot_record& s, session_info::reclaim_figures& r) {
  const slot_reclaim& c = s.reclaim;
  r.reclaimable = sat_sub(std::min(c.reclaimable, s.memory.reserved),
                          c.journal_bytes.load(std::memory_order_relaxed));
  r.asked = c.asked.load(std::memory_order_relaxed);
  const std::uint64_t now = monotonic_ns();
  if (r.asked != 0) r.deadline_in_ns = sat_sub(c.deadline_ns, now);
  if (r.asked != 0 && c.asked_by != 0) r.asked_by_slot = c.asked_by - 1;
  r.wanted = c.wanted;
  r.skipped_now = c.skip_until_ns > now;
  r.borrowed = std::min(s.loan.borrowed, r.reclaimable);
  r.loans = s.loan.loans;
  r.write_offs = s.loan.write_offs;
  r.loan_call = r.asked != 0 && s.loan.call != 0;
  r.requests = c.requests;
  r.answered = c.answered;
  r.skipped = c.skipped;
  r.given = c.given;
}

inline session_info read_session(const slot_record& s, std::uint32_t index) {
  session_info i;
  // The counters, then what the journal and the lease hold that no lock holder has folded into
  // them yet (detail/journal.hpp, sched_lease.hpp): a lock-free reader sees those updates as
  // applied before the next locker folds them (a locked snapshot folds them first). Reading
  // changes nothing.
  static_cast<session_statistics&>(i) = s.stats;
  i.device_ns = sat_add(sat_add(s.stats.device_ns, s.lease_used_ns.load(std::memory_order_relaxed)),
                        sat_add(s.journal_used_ns.load(std::memory_order_relaxed),
                                s.journal_device_ns.load(std::memory_order_relaxed)));
  i.guards = sat_add(sat_add(s.stats.guards, s.lease_exits.load(std::memory_order_relaxed)),
                     s.journal_exits.load(std::memory_order_relaxed));
  i.guards_on_lease =
      sat_add(s.stats.guards_on_lease, s.lease_exits.load(std::memory_order_relaxed));
  i.id = {index, s.generation};
  i.name = read_bounded(s.name, name_capacity);
  i.pid = s.pid;
  i.start_time_ticks = s.start_time_ticks;
  i.joined_unix_ns = s.joined_unix_ns;
  i.identity = read_platform(s.platform);
  i.group = std::string(group_name(s));
  if (!i.group.empty()) {
    i.group_memory_limit = s.group.memory_limit;
    i.group_share = std::max<std::uint32_t>(s.group.share, 1);
  }
  i.settings_seq = s.settings_seq;
  read_settings(s.settings, i);
  i.reserved = sat_sub(s.memory.reserved, s.journal_shrink_bytes.load(std::memory_order_relaxed));
  i.external = s.memory.external;
  i.peak = s.memory.peak;
  i.waiting_for_memory =
      sat_sub32(s.memory.waiting, s.journal_memory_waiters.load(std::memory_order_relaxed));
  i.waiting_for_startup = s.startup_waiting;
  i.active_guards = sat_sub32(busy_guards(s), s.journal_exits.load(std::memory_order_relaxed));
  i.waiting_for_device =
      sat_sub32(s.compute.wants_device, s.journal_device_waiters.load(std::memory_order_relaxed));
  i.vtime = s.compute.vtime;
  read_reclaim(s, i.reclaim);
  // How long its current guard has run: since it last started one under the lock, or, on its
  // lease, since a lease guard last ended (a lease guard records no start).
  if (i.active_guards > 0) {
    const std::uint64_t since = std::max(s.compute.last_active_ns,
                                         s.lease_guards.load(std::memory_order_relaxed) > 0
                                             ? s.lease_last_exit_ns.load(std::memory_order_relaxed)
                                             : 0);
    if (since != 0) i.in_guard_ns = sat_sub(monotonic_ns(), since);
  }
  return i;
}

/// Adds the sessions of the active slots of `v` to `s` (the live ones, and the dead ones that
/// `alive` finds), and the device figures that depend on what they account.
template <class Alive>
void add_sessions(const table_view& v, table_snapshot& s, std::int64_t holder, Alive& alive) {
  const table_header& h = *v.header;
  std::uint64_t accounted = 0, dead = 0;
  for (std::uint32_t i = 0; i < v.slot_count; ++i) {
    const slot_record& slot = v.slots[i];
    if (slot.state.load(std::memory_order_relaxed) != slot_active) continue;
    if (!alive(i)) {
      s.dead_sessions.push_back(read_session(slot, i));
      dead = sat_add(dead, sat_add(slot.memory.reserved, slot.memory.external));
      continue;
    }
    s.sessions.push_back(read_session(slot, i));
    s.sessions.back().holds_device = holder == static_cast<std::int64_t>(i);
    accounted = sat_add(accounted, sat_add(slot.memory.reserved, slot.memory.external));
  }
  if (h.device_observed_unix_ns != 0) {
    s.device_name = read_bounded(h.device_name, device_name_capacity);
    s.device_total = h.device_total;
    s.device_free = std::min(h.device_free, h.device_total);
    s.device_observed_unix_ns = h.device_observed_unix_ns;
    s.device_observer_pid = h.device_observer_pid;
    const std::uint64_t untracked = sat_sub(sat_sub(s.device_total, s.device_free), accounted);
    s.device_releasing = std::min(untracked, dead);
    s.device_untracked = untracked - s.device_releasing;
  }
}

/// A snapshot of the table `v` (mapped, or a private copy of it) named `name`. Reads only.
/// `alive(i)` says whether the session in active slot i still lives (a dead one goes to
/// dead_sessions).
/// The start-up lock's holder and waiters (detail/startup.hpp), read without changing anything
/// (a lock-free reader's copy may name a slot that has ended: then nobody holds it).
inline void add_startup(const table_view& v, table_snapshot& s) {
  const table_header& h = *v.header;
  s.startup_takes = h.startup_takes;
  for (const session_info& i : s.sessions) s.startup_waiters += i.waiting_for_startup;
  const std::uint64_t w = h.startup_owner.load(std::memory_order_acquire);
  for (session_info& i : s.sessions) {
    if (w == 0 || startup_word(i.id.slot, i.id.generation) != w) continue;
    i.holds_startup = true;
    const std::uint64_t since = h.startup_since_ns.load(std::memory_order_relaxed);
    const std::uint64_t now = monotonic_ns();
    s.startup = table_snapshot::startup_holder{
        i.id, i.name, i.pid, h.startup_since_unix_ns.load(std::memory_order_relaxed),
        now > since ? now - since : 0};
  }
}

template <class Alive>
table_snapshot build_snapshot(const table_view& v, const std::string& name, Alive&& alive) {
  const table_header& h = *v.header;
  table_snapshot s;
  s.object_name = name;
  s.key = read_bounded(h.key, key_capacity);
  s.domain = read_bounded(h.domain, domain_capacity);
  s.access_mode = h.access_mode;
  s.creator_pid = h.creator_pid;
  s.created_unix_ns = h.created_unix_ns;
  s.slot_count = v.slot_count;
  s.capacity = h.capacity;
  s.reserved_total = h.reserved_total;
  s.committed_total = h.committed_total;
  s.available = h.capacity >= max_memory_bytes ? max_memory_bytes
                                               : sat_sub(h.capacity, h.committed_total);
  s.lock_repairs = h.lock_repairs;
  s.sessions_reclaimed = h.sessions_reclaimed;
  s.handovers = h.handovers;
  s.queue_holds = h.queue_holds;
  s.default_max_guard_ns = h.default_max_guard_ns;
  s.revocations = h.revocations;
  s.evictions = h.evictions;
  s.reclaim = {h.reclaim_requests, h.reclaim_answered, h.reclaim_skipped,  h.reclaim_withdrawn,
               h.reclaim_given,    h.reclaim_grants,   h.reclaim_grant_ns, h.reclaim_grant_max_ns};
  // Idle guarantees: what is committed beyond what sessions hold as their own.
  const std::uint64_t own = sat_sub(h.held_total, h.lent_total);
  s.loans = {sat_sub(h.committed_total, own),
             h.lent_total,
             h.held_total,
             h.loans,
             h.loan_calls,
             h.loan_write_offs,
             h.loan_written_off};
  if (h.last_eviction_unix_ns != 0) {
    table_snapshot::eviction e;
    e.id = {h.last_eviction_slot, h.last_eviction_generation};
    e.name = read_bounded(h.last_eviction_name, name_capacity);
    e.pid = h.last_eviction_pid;
    e.by_uid = h.last_eviction_by_uid;
    e.unix_ns = h.last_eviction_unix_ns;
    s.last_eviction = e;
  }
  std::int64_t holder = current_holder(v);
  if (holder != nobody) { // idle on its lease (at_guard): the device is free to anyone who asks
    const slot_record& hs = v.slots[static_cast<std::uint32_t>(holder)];
    if (hs.lease.load(std::memory_order_relaxed) == 1 &&
        hs.settings.handover_mode == handover_at_guard && busy_guards(hs) == 0)
      holder = nobody;
  }
  if (holder != nobody)
    s.holder = session_id{static_cast<std::uint32_t>(holder), h.holder_generation};
  add_sessions(v, s, holder, alive);
  add_startup(v, s);
  return s;
}

/// Every live session of `core`, consistent at one instant; dead sessions are reclaimed first.
inline table_snapshot take_snapshot(table_core& core_) {
  core_.reclaim_dead();
  table_core::guard g(core_);
  return build_snapshot(core_.view(), core_.name(), [](std::uint32_t) { return true; });
}

/// A private, 64-byte aligned buffer holding a copy of a table's bytes.
struct table_copy_deleter {
  void operator()(std::byte* p) const noexcept { ::operator delete[](p, std::align_val_t{64}); }
};

/// Reads the table `name` without its lock and without writing anything to it: the object is
/// opened read-only, copied with pread into private memory, the copy is validated (magic, layout,
/// structure sizes, slot count, total size; strings are read bounded) and the snapshot is built
/// from the copy. Sessions whose owners are dead (their slot lock is free) are left out, but not
/// reclaimed. Nothing holds the copy consistent: a snapshot taken while sessions work may be
/// torn (totals that do not add up, a session half updated); it is meant for display.
/// Throws errc::no_such_table if there is no such table or it is an unfinished creation whose
/// creator is gone, errc::table_busy if its creator still initialises it after `timeout_ns`,
/// errc::permission_denied, errc::table_corrupt or errc::table_incompatible.
inline table_snapshot copy_snapshot(const std::string& name, std::uint64_t timeout_ns) {
  const std::uint64_t deadline = monotonic_ns() + timeout_ns;
  auto fail = [&](errc code, const std::string& why) {
    throw error(code, "table '" + name + "' " + why);
  };
  for (;;) {
    crash_point("snapshot.open"); // a name listed as a regular file may be another file by now
    const unique_fd fd = detail::open_table_object(name, O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0)
      throw system_failure(errc::system_error, "cannot stat table '" + name + "'", errno);
    if (!S_ISREG(st.st_mode)) fail(errc::table_corrupt, "is not a regular file");
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (size > table_size(max_slot_count))
      fail(errc::table_corrupt, "has size " + std::to_string(size) +
                                    ", larger than any gpushare table (" +
                                    std::to_string(table_size(max_slot_count)) + ")");
    std::unique_ptr<std::byte[], table_copy_deleter> buf(static_cast<std::byte*>(
        ::operator new[](std::max<std::size_t>(size, sizeof(table_header)), std::align_val_t{64})));
    std::memset(buf.get(), 0, std::max<std::size_t>(size, sizeof(table_header)));
    const ssize_t n = pread_full(fd.get(), buf.get(), size, 0); // short if it shrank: below
    if (n < 0) throw system_failure(errc::system_error, "cannot read table '" + name + "'", errno);
    const auto got = static_cast<std::size_t>(n);
    const auto* h = reinterpret_cast<const table_header*>(buf.get());
    const table_prefix& pre = h->prefix;
    const bool ready = got >= sizeof(table_prefix) && pre.magic == table_magic &&
                       pre.init_state.load(std::memory_order_relaxed) == init_state_ready;
    if (!ready && (got < sizeof(table_prefix) || pre.magic == table_magic)) {
      // An unfinished creation: wait while a creator is at work (judge_creation), else leave it.
      if (judge_creation(false, probe_byte(fd.get(), init_lock_byte)) == creation::creator_gone)
        throw error(errc::no_such_table,
                    "table '" + name + "' is a creation abandoned by its creator");
      if (monotonic_ns() > deadline)
        throw error(errc::table_busy, "table '" + name + "' is still being initialised");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    validate_table_header(*h, got, name, "");
    table_view v;
    v.header = reinterpret_cast<table_header*>(buf.get());
    v.slots = reinterpret_cast<slot_record*>(buf.get() + sizeof(table_header));
    v.slot_count = pre.slot_count;
    return build_snapshot(v, name, [&](std::uint32_t i) { return slot_owner_alive(fd.get(), i); });
  }
}

/// Records what a CUDA-layer session saw of the device (name, total and free bytes) in the
/// table, for snapshots and the CLI.
inline void record_device_observation(table_core& core_, std::string_view name, std::uint64_t total,
                                      std::uint64_t free, int ordinal) {
  table_core::guard g(core_);
  table_header& h = core_.header();
  copy_name_to(h.device_name, device_name_capacity, name);
  h.device_total = total;
  h.device_free = free;
  h.device_observed_unix_ns = realtime_ns();
  h.device_observer_pid = ::getpid();
  h.device_ordinal_hint = ordinal;
}

} // namespace detail
} // namespace v0
} // namespace gpushare
