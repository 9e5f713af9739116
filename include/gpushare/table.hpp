// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <gpushare/detail/table_core.hpp>
#include <gpushare/options.hpp>
#include <gpushare/removal.hpp>

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
  /// Its own guard bound (0: the table's default applies, table_snapshot::default_max_guard_ns).
  std::uint64_t max_guard_ns = 0;
  /// Times its hold on the device was revoked: one of its guards ran past its guard bound with no
  /// guard entry or exit, and peers were let in while it still ran (docs/design.md section 11).
  std::uint64_t revocations = 0;
  /// The share of wall time it keeps on the device while it wants it, whatever the priority
  /// classes above it want (ppm; 0: none, strict priority).
  std::uint32_t compute_guarantee_ppm = 0;
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

/// A table at one instant (taken under the table lock by table::snapshot(); read lock-free, and
/// possibly torn, by table::read_unlocked()).
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
  std::uint64_t handovers = 0;      ///< times the device went from one session to another
  std::optional<session_id> holder; ///< the session holding the device, if any
  /// The guard bound of sessions that set none (0: none; table::configure_defaults).
  std::uint64_t default_max_guard_ns = 0;
  std::uint64_t revocations = 0; ///< holds revoked at a guard bound, over the table's life
  std::uint64_t evictions = 0;   ///< sessions ended by table::evict (`gpushare evict`)
  /// The last eviction, if any: which session, and who evicted it when.
  struct eviction {
    session_id id;
    std::string name;
    std::int32_t pid = 0;     ///< the evicted process, as its PID namespace numbers it
    std::uint32_t by_uid = 0; ///< the effective uid of the process that evicted it
    std::uint64_t unix_ns = 0;
  };
  std::optional<eviction> last_eviction;
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
  /// Its guard bound (1 ms .. 3600 s; 0: none of its own, the table's default applies).
  std::optional<std::chrono::nanoseconds> max_guard;
  /// Its compute guarantee (ppm of wall time, up to 100%; 0: none).
  std::optional<std::uint32_t> compute_guarantee_ppm;
};

/// Settings of a table that apply to every session of it that sets none of its own.
struct table_defaults {
  /// The guard bound of sessions without their own max_guard (1 ms .. 3600 s; 0: none).
  std::optional<std::chrono::nanoseconds> max_guard;
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
  i.reserved = sat_sub(s.reserved, s.journal_shrink_bytes.load(std::memory_order_relaxed));
  i.external = s.external;
  i.peak = s.peak;
  i.reservations_granted = s.reservations_granted;
  i.reserve_waits = s.reserve_waits;
  i.reserve_wait_ns = s.reserve_wait_ns;
  i.reserve_wait_max_ns = s.reserve_wait_max_ns;
  // Updates in the journal (detail/journal.hpp) are shown as applied: a lock-free reader sees
  // them before the next locker folds them (a locked snapshot folds them first).
  i.waiting_for_memory =
      sat_sub32(s.memory_waiting, s.journal_memory_waiters.load(std::memory_order_relaxed));
  i.settings_seq = s.settings_seq;
  i.quantum_ns = s.quantum_ns;
  i.handover =
      s.handover_mode == handover_at_yield ? handover_point::at_yield : handover_point::at_guard;
  i.active_guards = sat_sub32(busy_guards(s), s.journal_exits.load(std::memory_order_relaxed));
  i.waiting_for_device =
      sat_sub32(s.wants_device, s.journal_device_waiters.load(std::memory_order_relaxed));
  // Lease guards' time not yet folded into the slot (read, never written: a reader changes
  // nothing).
  i.device_ns = sat_add(sat_add(s.device_ns, s.lease_used_ns.load(std::memory_order_relaxed)),
                        sat_add(s.journal_used_ns.load(std::memory_order_relaxed),
                                s.journal_device_ns.load(std::memory_order_relaxed)));
  i.guards = sat_add(sat_add(s.guards, s.lease_exits.load(std::memory_order_relaxed)),
                     s.journal_exits.load(std::memory_order_relaxed));
  i.guards_on_lease = sat_add(s.lease_guards_done, s.lease_exits.load(std::memory_order_relaxed));
  // How long its current guard has run: since it last started one under the lock, or, on its
  // lease, since a lease guard last ended (a lease guard records no start).
  if (i.active_guards > 0) {
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
  i.max_guard_ns = s.max_guard_ns;
  i.revocations = s.revocations;
  i.compute_guarantee_ppm = s.compute_guarantee_ppm;
  return i;
}

/// Throws invalid_argument unless `bound` is unset, 0 (none) or from 1 ms to 3600 s.
inline void check_max_guard(const std::optional<std::chrono::nanoseconds>& bound) {
  if (!bound || bound->count() == 0) return;
  if (bound->count() < static_cast<std::int64_t>(min_max_guard_ns) ||
      bound->count() > static_cast<std::int64_t>(max_max_guard_ns))
    throw error(errc::invalid_argument,
                "max_guard must be from 1ms to 3600s (or 0 for none), not " +
                    std::to_string(bound->count()) + " ns");
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
  check_max_guard(c.max_guard);
  if (c.compute_guarantee_ppm && *c.compute_guarantee_ppm > 1'000'000)
    throw error(errc::invalid_argument, "compute guarantee must be from 0% (none) to 100%");
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
  if (c.max_guard) s.max_guard_ns = static_cast<std::uint64_t>(c.max_guard->count());
  if (c.compute_guarantee_ppm) s.compute_guarantee_ppm = *c.compute_guarantee_ppm;
  s.memory_limit = limit; // a lower limit does not take back what is reserved; growth stops
  set_usage(h, s, s.reserved, s.external, guarantee);
  ++s.settings_seq;
  if (s.wants_device == 0) return settled;
  s.grant_word.fetch_add(1, std::memory_order_release);
  return i;
}

/// A snapshot of the table `v` (mapped, or a private copy of it) named `name`. Reads only.
/// `alive(i)` says whether the session in active slot i still lives (a dead one is left out).
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
  s.available = sat_sub(h.capacity, h.committed_total);
  s.lock_repairs = h.lock_repairs;
  s.sessions_reclaimed = h.sessions_reclaimed;
  s.handovers = h.handovers;
  s.default_max_guard_ns = h.default_max_guard_ns;
  s.revocations = h.revocations;
  s.evictions = h.evictions;
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
    if (hs.lease.load(std::memory_order_relaxed) == 1 && hs.handover_mode == handover_at_guard &&
        busy_guards(hs) == 0)
      holder = nobody;
  }
  if (holder != nobody)
    s.holder = session_id{static_cast<std::uint32_t>(holder), h.holder_generation};
  std::uint64_t accounted = 0;
  for (std::uint32_t i = 0; i < v.slot_count; ++i) {
    const slot_record& slot = v.slots[i];
    if (slot.state.load(std::memory_order_relaxed) != slot_active || !alive(i)) continue;
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
    std::size_t got = 0;
    while (got < size) {
      const ssize_t n = ::pread(fd.get(), buf.get() + got, size - got, static_cast<off_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        throw system_failure(errc::system_error, "cannot read table '" + name + "'", errno);
      if (n == 0) break; // shrunk meanwhile: checked below
      got += static_cast<std::size_t>(n);
    }
    const auto* h = reinterpret_cast<const table_header*>(buf.get());
    const table_prefix& pre = h->prefix;
    const bool ready = got >= sizeof(table_prefix) && pre.magic == table_magic &&
                       pre.init_state.load(std::memory_order_relaxed) == init_state_ready;
    if (!ready && (got < sizeof(table_prefix) || pre.magic == table_magic)) {
      // An unfinished creation: wait while its creator holds the init lock, else leave it.
      if (probe_byte(fd.get(), init_lock_byte) != holder::other)
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

/// What table::open() does when the key has no table yet. There is no default: whether a call
/// may create a table is the caller's decision, written where it is made.
enum class open_mode {
  /// Never create: a missing table is errc::no_such_table. What observers want (a monitoring
  /// script, a dashboard): looking must not leave a table behind.
  open_existing,
  /// Create it if needed, with the capacity, access mode and domain of the options (as a
  /// session joining the key does). Only the creator's capacity counts: a table that already
  /// exists keeps its own.
  open_or_create,
};

/// A handle on a table for observing and administering it (the CLI, tests, monitoring). It holds
/// no session: opening one never appears in a snapshot.
///
///     auto t = gpushare::table::open("GPU-1234", gpushare::open_mode::open_existing);
///     for (const auto& s : t.snapshot().sessions) std::cout << s.name << ' ' << s.reserved;
///
/// Which calls create a table: gpushare::session (and cuda::device_session) always may;
/// table::open only with open_mode::open_or_create; nothing else does.
class table {
public:
  /// Opens the table for `key` in the domain and access mode of `opts` and the environment
  /// (GPUSHARE_DOMAIN, GPUSHARE_TABLE_MODE). With open_mode::open_existing a missing table is
  /// errc::no_such_table; with open_mode::open_or_create it is created with `opts.capacity`.
  static table open(std::string_view key, open_mode mode, const session_options& opts = {}) {
    const resolved_options r = resolve_options(opts);
    if (mode == open_mode::open_existing)
      return table(detail::mapped_table::open_existing(
          detail::table_object_name(r.domain, key, r.access), detail::to_ns(r.open_timeout),
          detail::abandoned_creation::keep));
    detail::create_params p;
    p.domain = r.domain;
    p.key = std::string(key);
    p.access = r.access;
    p.capacity = r.capacity;
    p.open_timeout_ns = detail::to_ns(r.open_timeout);
    return table(detail::mapped_table::open_or_create(p));
  }

  /// Removes the table for `key` (domain and access mode from `opts` and the environment, as for
  /// open()) if no session uses it: a table with a live session, or one being created or joined,
  /// is never removed; the result then says removal_status::in_use and how many sessions live
  /// in it. Sessions that died are no obstacle (their slots go with the table). Returns
  /// removal_status::gone if there was no table. Uses the clean protocol (docs/cli.md), so a
  /// process joining at the same moment joins a table that exists, never the removed one.
  /// Throws errc::permission_denied (another user's table), errc::table_incompatible,
  /// errc::table_corrupt, errc::table_busy (its lock held by a stopped process).
  static removal_result remove(std::string_view key, const session_options& opts = {}) {
    const resolved_options r = resolve_options(opts);
    removal_options o;
    o.domain = r.domain;
    o.open_timeout = r.open_timeout;
    return remove_unused_table(detail::table_object_name(r.domain, key, r.access), o);
  }

  /// Opens an existing table by its shm object name ("/gpushare.<domain>.<owner>.<key>").
  static table open_existing(const std::string& object_name,
                             std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    return table(detail::mapped_table::open_existing(object_name, detail::to_ns(timeout)));
  }

  /// Every live session, consistent at one instant. Dead sessions are reclaimed first.
  table_snapshot snapshot() { return detail::take_snapshot(core_); }

  /// Reads the table `object_name` without locking or writing it (it is opened read-only and
  /// copied into private memory first), for observers that must not touch tables they do not
  /// own, e.g. the CLI run by root. Dead sessions are left out, not reclaimed. The snapshot may
  /// be torn (taken while sessions change the table), which is fine for display only.
  static table_snapshot
  read_unlocked(const std::string& object_name,
                std::chrono::milliseconds timeout = std::chrono::milliseconds(1000)) {
    return detail::copy_snapshot(object_name, detail::to_ns(timeout));
  }

  /// The uid, gid and permission bits of the table's file (fstat of the descriptor this handle
  /// mapped), for callers that must check who owns the table they opened.
  struct file_owner {
    std::uint32_t uid = 0;
    std::uint32_t gid = 0;
    std::uint32_t mode = 0;
  };
  file_owner owner() const {
    struct stat st {};
    if (::fstat(core_.fd(), &st) != 0)
      throw detail::system_failure(errc::system_error, "cannot stat table '" + core_.name() + "'",
                                   errno);
    file_owner o;
    o.uid = st.st_uid;
    o.gid = st.st_gid;
    o.mode = st.st_mode & 07777u;
    return o;
  }

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
    detail::table_core::guard g(core_);
    detail::slot_record& s = live_slot(id);
    const std::int64_t wake = detail::apply_settings(
        core_.view(), id.slot, change,
        "session '" + detail::read_bounded(s.name, detail::name_capacity) + "'");
    core_.unlock_after_release(g, change.memory_guarantee.has_value());
    core_.wake_slot(wake);
  }

  /// Ends the live session `id` at once, as if its process had died: its hold on the device
  /// passes to the next waiter, its reservations return to the table, its waiting threads wake
  /// and throw errc::session_closed, and its next call learns it was evicted. The remedy for a
  /// session stopped or hung inside a guard (SIGSTOP, a debugger, a frozen container), which
  /// liveness cannot free because it is alive. Its process keeps whatever device memory it
  /// allocated: evict a process that will be killed or restarted. Only the owner of the table's
  /// file and root may evict (errc::permission_denied otherwise); errc::invalid_argument if no
  /// such live session. Recorded in the table (table_snapshot::evictions, last_eviction).
  session_info evict(session_id id) {
    const std::uint32_t me = ::geteuid();
    const file_owner o = owner();
    if (me != 0 && me != o.uid)
      throw error(errc::permission_denied,
                  "only the owner of table '" + core_.name() + "' (uid " + std::to_string(o.uid) +
                      ") or root may evict one of its sessions; this process runs as uid " +
                      std::to_string(me));
    detail::table_core::guard g(core_);
    detail::slot_record& s = live_slot(id);
    const session_info info = detail::read_session(s, id.slot);
    detail::record_eviction(core_.header(), s, id, me);
    const std::int64_t next = core_.end_session_locked(id.slot);
    core_.unlock_after_release(g, true);
    core_.wake_slot(id.slot); // its own waiting threads: they find the session ended
    core_.wake_slot(next);
    return info;
  }

  /// Changes the table's defaults for sessions that set none of their own. Only the owner of the
  /// table's file and root may (errc::permission_denied otherwise).
  void configure_defaults(const table_defaults& d) {
    const std::uint32_t me = ::geteuid();
    if (const file_owner o = owner(); me != 0 && me != o.uid)
      throw error(errc::permission_denied,
                  "only the owner of table '" + core_.name() + "' (uid " + std::to_string(o.uid) +
                      ") or root may change its defaults; this process runs as uid " +
                      std::to_string(me));
    detail::check_max_guard(d.max_guard);
    detail::table_core::guard g(core_);
    if (d.max_guard)
      core_.header().default_max_guard_ns = static_cast<std::uint64_t>(d.max_guard->count());
  }

  /// Frees the slots of dead sessions now (any operation also does this when it needs to).
  std::uint32_t reclaim_dead_sessions() { return core_.reclaim_dead(); }

  const std::string& object_name() const noexcept { return core_.name(); }
  bool created() noexcept { return core_.mapping().created(); }

private:
  explicit table(detail::mapped_table m) : core_(std::move(m)) {}

  /// The slot of live session `id` (call under the lock); errc::invalid_argument if none.
  detail::slot_record& live_slot(session_id id) {
    if (id.slot >= core_.slot_count())
      throw error(errc::invalid_argument, "slot " + std::to_string(id.slot) + " does not exist");
    detail::slot_record& s = core_.slot(id.slot);
    if (s.state.load(std::memory_order_relaxed) != detail::slot_active ||
        s.generation != id.generation)
      throw error(errc::invalid_argument, "no live session " + std::to_string(id.slot) + "." +
                                              std::to_string(id.generation) + " in table '" +
                                              core_.name() + "'");
    return s;
  }

  detail::table_core core_;
};

} // namespace v0
} // namespace gpushare
