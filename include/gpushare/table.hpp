// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gpushare/detail/table_core.hpp>
#include <gpushare/options.hpp>

namespace gpushare {
inline namespace v0 {

/// Names one session of a table: its slot and the join generation of that slot (a later session
/// in the same slot has another generation, so a stale id never reaches it).
struct session_id {
  std::uint32_t slot = 0;
  std::uint32_t generation = 0;
  friend bool operator==(const session_id&, const session_id&) = default;
};

/// One live session as seen in a snapshot.
struct session_info {
  session_id id;
  std::string name;
  std::int32_t pid = 0; ///< for display: liveness never relies on it
  std::uint64_t start_time_ticks = 0;
  std::uint64_t joined_unix_ns = 0;
  int priority = priority::normal;
  std::uint32_t share = default_share;
  std::uint32_t compute_limit_ppm = 1'000'000;
  std::uint64_t memory_limit = 0;
  std::uint64_t memory_guarantee = 0;
  std::uint64_t reserved = 0; ///< bytes held by reservations
  std::uint64_t external = 0; ///< bytes used outside reservations (e.g. CUDA context)
  std::uint64_t peak = 0;     ///< max of reserved + external
  std::uint64_t reservations_granted = 0;
  std::uint64_t reserve_waits = 0;       ///< reservations that had to wait
  std::uint64_t reserve_wait_ns = 0;     ///< total time spent waiting
  std::uint64_t reserve_wait_max_ns = 0; ///< longest single wait
  std::uint32_t waiting_for_memory = 0;  ///< threads blocked in reserve() right now
  std::uint32_t settings_seq = 0;        ///< bumped by every change of the settings

  // compute arbitration
  std::uint64_t quantum_ns = 0;
  handover_point handover = handover_point::at_guard;
  bool holds_device = false;            ///< it is the table's device holder now
  std::uint32_t active_guards = 0;      ///< its guards inside their region now
  std::uint32_t waiting_for_device = 0; ///< its threads waiting for the device now
  std::uint64_t device_ns = 0;          ///< device time used in guards (wall time or measured)
  std::uint64_t guards = 0;             ///< guards completed
  /// of them, those that entered and exited on the session's lease, without the table lock
  /// (it held the device and nobody else waited; docs/design.md section 11, "The lease")
  std::uint64_t guards_on_lease = 0;
  std::uint64_t device_waits = 0;       ///< guards and yields that had to wait
  std::uint64_t device_wait_ns = 0;     ///< total time waited for the device
  std::uint64_t device_wait_max_ns = 0; ///< longest single wait
  std::uint64_t handovers = 0;          ///< times it gave the device to another session
  std::uint64_t cap_throttle_ns = 0;    ///< time its compute limit held it back
  std::uint64_t vtime = 0;              ///< virtual time (device ns * 1000 / share)
  /// While it has a guard running: how long since its last guard entry or exit (by the clock of
  /// the process that took the snapshot), i.e. how long its current guard has run at least. Far
  /// above its quantum means a holder stopped or hung inside a guard; 0 when no guard runs.
  std::uint64_t in_guard_ns = 0;

  /// "running" (in a guard), "waiting" (for the device or memory) or "idle".
  const char* state() const noexcept {
    if (active_guards > 0) return "running";
    if (waiting_for_device > 0 || waiting_for_memory > 0) return "waiting";
    return "idle";
  }
};

/// A table at one instant (taken under the table lock).
struct table_snapshot {
  std::string object_name; ///< the POSIX shm name, e.g. "/gpushare.default.u1000.GPU-..."
  std::string key;
  std::string domain;
  std::uint32_t access_mode = 0600;
  std::int32_t creator_pid = 0;
  std::uint64_t created_unix_ns = 0;
  std::uint32_t slot_count = 0;
  std::uint64_t capacity = 0;
  std::uint64_t reserved_total = 0;
  std::uint64_t committed_total = 0; ///< reservations + external + unused guarantees
  std::uint64_t available = 0;       ///< capacity - committed_total
  std::uint64_t lock_repairs = 0;
  std::uint64_t sessions_reclaimed = 0;
  std::uint64_t handovers = 0;        ///< times the device went from one session to another
  std::optional<session_id> holder;   ///< the session holding the device, if any
  std::vector<session_info> sessions; ///< live sessions, by slot

  // The device behind the table, as a CUDA-layer session last observed it (cudaMemGetInfo);
  // all zero/empty for a table that only host code uses.
  std::string device_name;
  std::uint64_t device_total = 0; ///< bytes of device memory
  std::uint64_t device_free = 0;  ///< bytes free on the device at the observation
  std::uint64_t device_observed_unix_ns = 0;
  std::int32_t device_observer_pid = 0;
  /// Device memory in use that no session of this table accounts for, at the observation:
  /// (total - free) - sum of (reserved + external) over live sessions, floored at 0. Other
  /// programs, sessions of other domains or users, and allocator rounding show up here.
  std::uint64_t device_untracked = 0;
};

/// Changes to a live session's settings. Unset fields stay as they are.
struct settings_change {
  std::optional<int> priority;
  std::optional<std::uint32_t> share;
  std::optional<std::uint32_t> compute_limit_ppm;
  std::optional<memory_amount> memory_limit;
  std::optional<memory_amount> memory_guarantee;
  std::optional<std::chrono::nanoseconds> quantum;
  std::optional<handover_point> handover;
};

namespace detail {

inline session_info read_session(const slot_record& s, std::uint32_t index) {
  session_info i;
  i.id = {index, s.generation};
  i.name = read_bounded(s.name, name_capacity);
  i.pid = s.pid;
  i.start_time_ticks = s.start_time_ticks;
  i.joined_unix_ns = s.joined_unix_ns;
  i.priority = s.priority;
  i.share = s.share;
  i.compute_limit_ppm = s.compute_limit_ppm;
  i.memory_limit = s.memory_limit;
  i.memory_guarantee = s.memory_guarantee;
  i.reserved = s.reserved;
  i.external = s.external;
  i.peak = s.peak;
  i.reservations_granted = s.reservations_granted;
  i.reserve_waits = s.reserve_waits;
  i.reserve_wait_ns = s.reserve_wait_ns;
  i.reserve_wait_max_ns = s.reserve_wait_max_ns;
  i.waiting_for_memory = s.memory_waiting;
  i.settings_seq = s.settings_seq;
  i.quantum_ns = s.quantum_ns;
  i.handover =
      s.handover_mode == handover_at_yield ? handover_point::at_yield : handover_point::at_guard;
  i.active_guards = busy_guards(s);
  i.waiting_for_device = s.wants_device;
  // Lease guards' time not yet folded into the slot (read, never written: a reader changes
  // nothing).
  i.device_ns = sat_add(s.device_ns, s.lease_used_ns.load(std::memory_order_relaxed));
  i.guards = sat_add(s.guards, s.lease_exits.load(std::memory_order_relaxed));
  i.guards_on_lease = sat_add(s.lease_guards_done, s.lease_exits.load(std::memory_order_relaxed));
  // How long its current guard has run: since it last started one under the lock, or, on its
  // lease, since a lease guard last ended (a lease guard records no start).
  if (busy_guards(s) > 0) {
    const std::uint64_t since =
        std::max(s.last_active_ns, s.lease_guards.load(std::memory_order_relaxed) > 0
                                       ? s.lease_last_exit_ns.load(std::memory_order_relaxed)
                                       : 0);
    if (since != 0) i.in_guard_ns = sat_sub(monotonic_ns(), since);
  }
  i.device_waits = s.device_waits;
  i.device_wait_ns = s.device_wait_ns;
  i.device_wait_max_ns = s.device_wait_max_ns;
  i.handovers = s.handovers;
  i.cap_throttle_ns = s.cap_throttle_ns;
  i.vtime = s.vtime;
  return i;
}

/// Validates a change and applies it to slot `i`. Call under the table lock. Returns the slot to
/// wake after unlocking (its waiting threads re-check under the new settings), or nobody.
inline std::int64_t apply_settings(const table_view& t, std::uint32_t i, const settings_change& c,
                                   const std::string& who, std::uint64_t now = monotonic_ns()) {
  table_header& h = *t.header;
  slot_record& s = t.slots[i];
  if (c.priority && (*c.priority < min_priority || *c.priority > max_priority))
    throw error(errc::invalid_argument, "priority " + std::to_string(*c.priority) +
                                            " is out of range " + std::to_string(min_priority) +
                                            ".." + std::to_string(max_priority));
  if (c.share && (*c.share < min_share || *c.share > max_share))
    throw error(errc::invalid_argument, "share " + std::to_string(*c.share) +
                                            " is out of range 1.." + std::to_string(max_share));
  if (c.compute_limit_ppm && (*c.compute_limit_ppm == 0 || *c.compute_limit_ppm > 1'000'000))
    throw error(errc::invalid_argument, "compute limit must be in (0%, 100%]");
  if (c.quantum && (c.quantum->count() < static_cast<std::int64_t>(min_quantum_ns) ||
                    c.quantum->count() > static_cast<std::int64_t>(max_quantum_ns)))
    throw error(errc::invalid_argument, "quantum must be from 1us to 10s");
  // A fraction of the capacity must be at most 100% (as in session_options): checked here, for
  // every caller (table::configure, session::configure, `gpushare set`), before anything resolves.
  for (const auto& [field, amount] : {std::pair{"memory limit", &c.memory_limit},
                                      std::pair{"memory guarantee", &c.memory_guarantee}})
    if (*amount && (*amount)->kind == memory_amount::unit::fraction && (*amount)->value > 1'000'000)
      throw error(errc::invalid_argument,
                  who + ": " + field + " of " + std::to_string((*amount)->value) + " ppm (" +
                      std::to_string((*amount)->value / 10'000) +
                      "%) of the capacity is out of range; a fraction must be from 0% to 100%");
  const std::uint64_t limit = c.memory_limit ? c.memory_limit->resolve(h.capacity) : s.memory_limit;
  const std::uint64_t guarantee =
      c.memory_guarantee ? c.memory_guarantee->resolve(h.capacity) : s.memory_guarantee;
  if (guarantee > limit)
    throw error(errc::invalid_argument, who + ": memory guarantee " + format_bytes(guarantee) +
                                            " would exceed its memory limit " +
                                            format_bytes(limit));
  if (guarantee != s.memory_guarantee && !guarantee_fits(h, s, guarantee))
    throw error(errc::guarantee_unavailable,
                who + ": a memory guarantee of " + format_bytes(guarantee) +
                    " cannot be promised: the table's capacity is " + format_bytes(h.capacity) +
                    " and " + format_bytes(sat_sub(h.committed_total, commitment(s))) +
                    " is already committed to other sessions");
  // Settings change how its guards are scheduled (a compute limit needs the lock): end a lease.
  const std::int64_t settled = settle_lease(t, i, now);
  if (c.priority) change_class(t, i, *c.priority); // re-based on the new class's clock
  if (c.share) s.share = *c.share;
  if (c.compute_limit_ppm) s.compute_limit_ppm = *c.compute_limit_ppm;
  if (c.quantum) s.quantum_ns = static_cast<std::uint64_t>(c.quantum->count());
  if (c.handover)
    s.handover_mode =
        *c.handover == handover_point::at_yield ? handover_at_yield : handover_at_guard;
  s.memory_limit = limit; // a lower limit does not take back what is reserved; growth stops
  set_usage(h, s, s.reserved, s.external, guarantee);
  ++s.settings_seq;
  if (s.wants_device == 0) return settled;
  s.grant_word.fetch_add(1, std::memory_order_release);
  return i;
}

/// Every live session of `core`, consistent at one instant; dead sessions are reclaimed first.
inline table_snapshot take_snapshot(table_core& core_) {
  core_.reclaim_dead();
  table_core::guard g(core_);
  const table_header& h = core_.header();
  table_snapshot s;
  s.object_name = core_.name();
  s.key = read_bounded(h.key, key_capacity);
  s.domain = read_bounded(h.domain, domain_capacity);
  s.access_mode = h.access_mode;
  s.creator_pid = h.creator_pid;
  s.created_unix_ns = h.created_unix_ns;
  s.slot_count = core_.slot_count();
  s.capacity = h.capacity;
  s.reserved_total = h.reserved_total;
  s.committed_total = h.committed_total;
  s.available = sat_sub(h.capacity, h.committed_total);
  s.lock_repairs = h.lock_repairs;
  s.sessions_reclaimed = h.sessions_reclaimed;
  s.handovers = h.handovers;
  std::int64_t holder = current_holder(core_.view());
  if (holder != nobody) { // idle on its lease (at_guard): the device is free to anyone who asks
    const slot_record& hs = core_.slot(static_cast<std::uint32_t>(holder));
    if (hs.lease.load(std::memory_order_relaxed) == 1 && hs.handover_mode == handover_at_guard &&
        busy_guards(hs) == 0)
      holder = nobody;
  }
  if (holder != nobody)
    s.holder = session_id{static_cast<std::uint32_t>(holder), h.holder_generation};
  std::uint64_t accounted = 0;
  for (std::uint32_t i = 0; i < core_.slot_count(); ++i) {
    const slot_record& slot = core_.slot(i);
    if (slot.state.load(std::memory_order_relaxed) != slot_active) continue;
    s.sessions.push_back(read_session(slot, i));
    s.sessions.back().holds_device = holder == static_cast<std::int64_t>(i);
    accounted = sat_add(accounted, sat_add(slot.reserved, slot.external));
  }
  if (h.device_observed_unix_ns != 0) {
    s.device_name = read_bounded(h.device_name, device_name_capacity);
    s.device_total = h.device_total;
    s.device_free = std::min(h.device_free, h.device_total);
    s.device_observed_unix_ns = h.device_observed_unix_ns;
    s.device_observer_pid = h.device_observer_pid;
    s.device_untracked = sat_sub(sat_sub(s.device_total, s.device_free), accounted);
  }
  return s;
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

/// A handle on a table for observing and administering it (the CLI, tests, monitoring). It holds
/// no session: opening one never appears in a snapshot.
///
///     auto t = gpushare::table::open("GPU-1234");
///     for (const auto& s : t.snapshot().sessions) std::cout << s.name << ' ' << s.reserved;
class table {
public:
  /// Opens the table for `key` (creating it if needed), with domain, access and capacity from
  /// `opts` and the environment.
  static table open(std::string_view key, const session_options& opts = {}) {
    const resolved_options r = resolve_options(opts);
    detail::create_params p;
    p.domain = r.domain;
    p.key = std::string(key);
    p.access = r.access;
    p.capacity = r.capacity;
    p.open_timeout_ns = detail::to_ns(r.open_timeout);
    return table(detail::mapped_table::open_or_create(p));
  }

  /// Opens an existing table by its shm object name ("/gpushare.<domain>.<owner>.<key>").
  static table open_existing(const std::string& object_name,
                             std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    return table(detail::mapped_table::open_existing(object_name, detail::to_ns(timeout)));
  }

  /// Every live session, consistent at one instant. Dead sessions are reclaimed first.
  table_snapshot snapshot() { return detail::take_snapshot(core_); }

  /// Live sessions named `name`.
  std::vector<session_id> find(std::string_view name) {
    std::vector<session_id> ids;
    for (const auto& s : snapshot().sessions)
      if (s.name == name) ids.push_back(s.id);
    return ids;
  }

  /// Changes a live session's settings; it sees them at its next operation. Throws
  /// errc::invalid_argument if that session has left (or its slot holds another session now).
  void configure(session_id id, const settings_change& change) {
    if (id.slot >= core_.slot_count())
      throw error(errc::invalid_argument, "slot " + std::to_string(id.slot) + " does not exist");
    detail::table_core::guard g(core_);
    detail::slot_record& s = core_.slot(id.slot);
    if (s.state.load(std::memory_order_relaxed) != detail::slot_active ||
        s.generation != id.generation)
      throw error(errc::invalid_argument, "no live session " + std::to_string(id.slot) + "." +
                                              std::to_string(id.generation) + " in table '" +
                                              core_.name() + "'");
    const std::int64_t wake = detail::apply_settings(
        core_.view(), id.slot, change,
        "session '" + detail::read_bounded(s.name, detail::name_capacity) + "'");
    core_.unlock_after_release(g, change.memory_guarantee.has_value());
    core_.wake_slot(wake);
  }

  /// Frees the slots of dead sessions now (any operation also does this when it needs to).
  std::uint32_t reclaim_dead_sessions() { return core_.reclaim_dead(); }

  const std::string& object_name() const noexcept { return core_.name(); }
  bool created() noexcept { return core_.mapping().created(); }

private:
  explicit table(detail::mapped_table m) : core_(std::move(m)) {}
  detail::table_core core_;
};

} // namespace v0
} // namespace gpushare
