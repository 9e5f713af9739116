// SPDX-License-Identifier: Apache-2.0
// The value types of a table's observers and administrators: a session's identity and figures,
// a table snapshot, settings changes and table defaults (gpushare::table, gpushare::session), and
// a table object found in /dev/shm (gpushare::list_tables()).
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <gpushare/types.hpp>

namespace gpushare {
inline namespace v0 {

/// Names one session of a table: its slot and the join generation of that slot (a later session
/// in the same slot has another generation, so a stale id never reaches it).
struct session_id {
  std::uint32_t slot = 0;       ///< its slot in the table
  std::uint32_t generation = 0; ///< the slot's join generation
  /// Same slot and generation.
  friend bool operator==(const session_id&, const session_id&) = default;
};

/// One session of a table, as a snapshot shows it: who it is, its settings, what it holds, and
/// its counters (session_statistics, the base: `info.guards`, `info.device_ns`, ...).
struct session_info : session_statistics {
  session_id id;                      ///< its slot and generation
  std::string name;                   ///< session_options::name
  std::int32_t pid = 0;               ///< for display: liveness never relies on it
  std::uint64_t start_time_ticks = 0; ///< its process's start time (/proc stat), display only
  std::uint64_t joined_unix_ns = 0;   ///< when it joined (Unix time, ns)
  /// Who it belongs to on its platform: pod, namespace, container, Slurm job and step, as the
  /// session's options or environment said when it joined (docs/cluster-env.md). pids collide
  /// across PID namespaces; this tells sessions of different containers apart.
  platform_identity identity;
  ///@{
  /// The group it belongs to ("": none) and the group's memory limit (UINT64_MAX: none) and
  /// compute share, which every member of the group has (session_options::group).
  std::string group;
  std::uint64_t group_memory_limit = 0;
  std::uint32_t group_share = 0;
  ///@}
  int priority = priority::normal;     ///< its priority class (priority::low .. priority::critical)
  std::uint32_t share = default_share; ///< its compute share within its class
  std::uint32_t compute_limit_ppm = 1'000'000; ///< its cap on device time (ppm of wall time)
  std::uint64_t memory_limit = 0;              ///< its memory limit, in bytes
  std::uint64_t memory_guarantee = 0;          ///< its memory guarantee, in bytes
  std::uint64_t reserved = 0;                  ///< bytes held by reservations
  std::uint64_t external = 0;           ///< bytes used outside reservations (e.g. CUDA context)
  std::uint64_t peak = 0;               ///< max of reserved + external
  std::uint32_t waiting_for_memory = 0; ///< threads blocked in reserve() right now
  std::uint32_t settings_seq = 0;       ///< bumped by every change of the settings

  // compute arbitration
  std::uint64_t quantum_ns = 0;                       ///< its compute quantum (ns)
  handover_point handover = handover_point::at_guard; ///< where it hands the device over
  bool holds_device = false;                          ///< it is the table's device holder now
  std::uint32_t active_guards = 0;                    ///< its guards inside their region now
  std::uint32_t waiting_for_device = 0;               ///< its threads waiting for the device now
  std::uint64_t vtime = 0;                            ///< virtual time (device ns * 1000 / share)
  /// Its own guard bound (0: the table's default applies, table_snapshot::default_max_guard_ns).
  std::uint64_t max_guard_ns = 0;
  /// The share of wall time it keeps on the device while it wants it, whatever the priority
  /// classes above it want (ppm; 0: none, strict priority).
  std::uint32_t compute_guarantee_ppm = 0;
  /// The idle it may keep through its pauses while below its share, in millionths of its device
  /// time (session_options::pause_hold_ppm; 0: none).
  std::uint32_t pause_hold_ppm = 0;
  /// While it has a guard running: how long since its last guard entry or exit (by the clock of
  /// the process that took the snapshot), i.e. how long its current guard has run at least. Far
  /// above its quantum means a holder stopped or hung inside a guard; 0 when no guard runs.
  std::uint64_t in_guard_ns = 0;
  /// Cooperative reclaim (docs/design.md section 15): its reclaimable bytes, what it is asked to
  /// give back now (and by when, by the snapshot taker's clock: 0 when it is overdue or none is
  /// asked), what its waiting reserves lack, and its requests over its life.
  struct reclaim_figures {
    std::uint64_t reclaimable = 0;    ///< bytes it marked reclaimable
    std::uint64_t asked = 0;          ///< bytes it is asked to give back now
    std::uint64_t deadline_in_ns = 0; ///< time left to give them (0: overdue or none asked)
    std::optional<std::uint32_t> asked_by_slot; ///< the slot whose reserve asked last
    std::uint64_t wanted = 0;                   ///< bytes its waiting reserves lack
    bool skipped_now = false; ///< it missed a deadline recently: not asked for now
    /// Over its life: requests it was sent, answered, skipped at their deadline, bytes given.
    ///@{
    std::uint64_t requests = 0, answered = 0, skipped = 0, given = 0;
    ///@}
    ///@{
    /// Of its reclaimable bytes, those on loan out of other sessions' idle guarantees; growths
    /// granted on loan, and loan calls it missed (their bytes were written off), over its life.
    std::uint64_t borrowed = 0, loans = 0, write_offs = 0;
    ///@}
    bool loan_call = false; ///< what it is asked for now calls a loan back
  } reclaim;                ///< its cooperative reclaim figures
  /// It holds the table's start-up lock (<gpushare/startup.hpp>): its engine is starting.
  bool holds_startup = false;
  std::uint32_t waiting_for_startup = 0; ///< its threads waiting for the start-up lock now

  /// "running" (in a guard), "waiting" (for the device, memory or the start-up lock) or "idle".
  const char* state() const noexcept {
    if (active_guards > 0) return "running";
    if (waiting_for_device > 0 || waiting_for_memory > 0 || waiting_for_startup > 0)
      return "waiting";
    return "idle";
  }
};

/// A table at one instant (taken under the table lock by table::snapshot(); read lock-free, and
/// possibly torn, by table::read_unlocked()).
struct table_snapshot {
  std::string object_name;           ///< the POSIX shm name, e.g. "/gpushare.default.u1000.GPU-..."
  std::string key;                   ///< the key it was opened with (e.g. a GPU UUID)
  std::string domain;                ///< its domain (session_options::domain)
  std::uint32_t access_mode = 0600;  ///< mode bits it was created with (0600 or 0660)
  std::int32_t creator_pid = 0;      ///< the process that created it
  std::uint64_t created_unix_ns = 0; ///< when it was created (Unix time, ns)
  std::uint32_t slot_count = 0;      ///< its number of session slots
  std::uint64_t capacity = 0;        ///< bytes its sessions may commit in all
  std::uint64_t reserved_total = 0;  ///< bytes held by reservations, all sessions
  std::uint64_t committed_total = 0; ///< reservations + external + unused guarantees
  /// capacity - committed_total; unlimited_memory for a table of unlimited capacity, so that
  /// format_capacity() shows "unlimited" for both.
  std::uint64_t available = 0;
  std::uint64_t lock_repairs = 0;    ///< times a locker found the lock's owner dead and repaired it
  std::uint64_t sessions_reclaimed = 0; ///< dead sessions whose resources a peer reclaimed
  std::uint64_t handovers = 0;          ///< times the device went from one session to another
  /// Growths refused because a waiting reserve ahead of them (a higher class, or its class and
  /// waiting longer) would not have fitted after them (docs/design.md section 8, "Waiters'
  /// order"), over the table's life.
  std::uint64_t queue_holds = 0;
  std::optional<session_id> holder; ///< the session holding the device, if any
  /// The guard bound of sessions that set none (0: none; table::configure_defaults).
  std::uint64_t default_max_guard_ns = 0;
  std::uint64_t revocations = 0; ///< holds revoked at a guard bound, over the table's life
  std::uint64_t evictions = 0;   ///< sessions ended by table::evict (`gpushare evict`)
  /// The last eviction, if any: which session, and who evicted it when.
  struct eviction {
    session_id id;             ///< the session evicted
    std::string name;          ///< its name
    std::int32_t pid = 0;      ///< the evicted process, as its PID namespace numbers it
    std::uint32_t by_uid = 0;  ///< the effective uid of the process that evicted it
    std::uint64_t unix_ns = 0; ///< when (Unix time, ns)
  };
  std::optional<eviction> last_eviction; ///< see eviction
  /// Who holds the start-up lock (<gpushare/startup.hpp>), if anyone, and since when.
  struct startup_holder {
    session_id id;                   ///< the holding session
    std::string name;                ///< its name
    std::int32_t pid = 0;            ///< as its PID namespace numbers it (display only)
    std::uint64_t since_unix_ns = 0; ///< when it took the lock (Unix time, ns)
    std::uint64_t held_ns = 0;       ///< how long it has held it, by the snapshot taker's clock
  };
  std::optional<startup_holder> startup; ///< see startup_holder
  /// Cooperative reclaim over the table's life (docs/design.md section 15): requests sent,
  /// answered, skipped at their deadline and withdrawn (nobody waited any more); bytes the
  /// answers gave back; and reserves granted after requests were out for them, with their time
  /// from the first request to the grant (total and longest).
  struct reclaim_counters {
    /// Requests sent, answered, skipped and withdrawn; bytes the answers gave back.
    ///@{
    std::uint64_t requests = 0, answered = 0, skipped = 0, withdrawn = 0, given = 0;
    ///@}
    /// Reserves granted after requests were out for them; their time to the grant (ns, total
    /// and longest).
    ///@{
    std::uint64_t grants = 0, grant_ns = 0, grant_max_ns = 0;
    ///@}
  } reclaim; ///< see reclaim_counters
  /// Idle guarantees lent as reclaimable memory (docs/design.md section 15): bytes guaranteed to
  /// sessions but not held by them, bytes on loan now, and what every session holds (on loan or
  /// not); over the table's life, growths granted on loan, loan calls, and calls missed (written
  /// off, with their bytes).
  struct loan_figures {
    /// Bytes now: guaranteed to sessions but not held, on loan, held by every session.
    ///@{
    std::uint64_t idle_guarantees = 0, lent = 0, held = 0;
    ///@}
    /// Over the table's life: growths granted on loan, loan calls, calls missed (written off)
    /// and the bytes written off.
    ///@{
    std::uint64_t loans = 0, calls = 0, write_offs = 0, written_off = 0;
    ///@}
  } loans;                            ///< see loan_figures
  std::uint32_t startup_waiters = 0;  ///< threads of live sessions waiting for the start-up lock
  std::uint64_t startup_takes = 0;    ///< times the start-up lock was taken, over the table's life
  std::vector<session_info> sessions; ///< live sessions, by slot
  /// Sessions whose process died and that no live process has reclaimed yet, by slot: what they
  /// held is still committed until one does. (A snapshot under the lock reclaims them first, so
  /// only lock-free readings, table::read_unlocked(), show any.)
  std::vector<session_info> dead_sessions;

  /// The device behind the table, as a CUDA-layer session last observed it (cudaMemGetInfo);
  /// all zero/empty for a table that only host code uses: its name.
  std::string device_name;
  std::uint64_t device_total = 0;            ///< bytes of device memory
  std::uint64_t device_free = 0;             ///< bytes free on the device at the observation
  std::uint64_t device_observed_unix_ns = 0; ///< when it was observed (Unix time, ns)
  std::int32_t device_observer_pid = 0;      ///< the process that observed it
  /// Device memory in use that no session of this table accounts for, at the observation:
  /// (total - free) - sum of (reserved + external) over all sessions, floored at 0. Other
  /// programs, sessions of other domains or users, and allocator rounding show up here.
  std::uint64_t device_untracked = 0;
  /// Device memory in use that dead sessions (dead_sessions) had accounted: their processes
  /// died, and the driver is releasing it. Counted here, not in device_untracked.
  std::uint64_t device_releasing = 0;
};

/// Changes to a live session's settings. Unset fields stay as they are.
struct settings_change {
  std::optional<int> priority;                    ///< its priority class
  std::optional<std::uint32_t> share;             ///< its compute share
  std::optional<std::uint32_t> compute_limit_ppm; ///< its cap on device time (ppm of wall time)
  std::optional<memory_amount>
      memory_limit; ///< its memory limit (bytes or a fraction of the capacity)
  std::optional<memory_amount> memory_guarantee;   ///< its memory guarantee (bytes or a fraction)
  std::optional<std::chrono::nanoseconds> quantum; ///< its compute quantum
  std::optional<handover_point> handover;          ///< where it hands the device over
  /// Its guard bound (1 ms .. 3600 s; 0: none of its own, the table's default applies).
  std::optional<std::chrono::nanoseconds> max_guard;
  /// Its compute guarantee (ppm of wall time, up to 100%; 0: none).
  std::optional<std::uint32_t> compute_guarantee_ppm;
  /// Its pause hold (millionths of its device time, up to 100 times; 0: none).
  std::optional<std::uint32_t> pause_hold_ppm;
};

/// Settings of a table that apply to every session of it that sets none of its own.
struct table_defaults {
  /// The guard bound of sessions without their own max_guard (1 ms .. 3600 s; 0: none).
  std::optional<std::chrono::nanoseconds> max_guard;
  /// The table's capacity in bytes (0: unlimited, 2^63 bytes). Never below what its sessions
  /// have committed now (errc::invalid_argument). A live session whose memory limit is the
  /// capacity (the default: it set none) follows the new capacity; fractions that sessions gave
  /// for their limits and guarantees were resolved when they joined, and stay as they were.
  std::optional<std::uint64_t> capacity;
};

/// A table object found in /dev/shm. Everything here comes from the file's name and its inode;
/// the table itself was not opened, so a table of another user is listed too.
struct table_entry {
  std::string object_name;    ///< "/gpushare.<domain>.<owner>.<key>", for table::open_existing()
  std::string path;           ///< "/dev/shm/gpushare.<domain>.<owner>.<key>"
  std::string domain;         ///< from the name (the table's header is authoritative)
  std::string owner;          ///< "u<uid>" or "g<gid>"
  std::string key;            ///< from the name
  bool group = false;         ///< a group-mode table (owner "g<gid>")
  std::uint64_t owner_id = 0; ///< the uid or gid in the name
  // From stat(2), when it succeeded (0 otherwise).
  std::uint32_t file_uid = 0;  ///< the file's owner uid
  std::uint32_t file_gid = 0;  ///< the file's group gid
  std::uint32_t file_mode = 0; ///< permission bits, e.g. 0600
  std::uint64_t file_size = 0; ///< the file's size in bytes
};

} // namespace v0
} // namespace gpushare
