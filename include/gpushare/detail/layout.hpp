// SPDX-License-Identifier: Apache-2.0
// The bytes of the shared table. Every process that maps a table interprets it through these
// structs, so any change here must bump gpushare::table_layout_version.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <gpushare/types.hpp>
#include <gpushare/version.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

inline constexpr std::uint64_t table_magic = 0x4552414853555047ull;  // "GPUSHARE" (little endian)
inline constexpr std::uint32_t init_state_fresh = 0;                 // zero-filled by fallocate
inline constexpr std::uint32_t init_state_initialising = 0x54494E49; // "INIT"
inline constexpr std::uint32_t init_state_ready = 0x59444552;        // "REDY"

inline constexpr std::uint32_t default_slot_count = 256;
inline constexpr std::uint32_t max_slot_count = 4096;
inline constexpr std::uint64_t unlimited_capacity = 1ull << 63;

inline constexpr std::uint32_t slot_free = 0;
inline constexpr std::uint32_t slot_active = 0x45564C41; // "ALVE"

inline constexpr std::uint32_t handover_at_guard = 0;
inline constexpr std::uint32_t handover_at_yield = 1;

inline constexpr std::size_t name_capacity = 64; // session name incl. terminating NUL
inline constexpr std::size_t key_capacity = 128; // table key incl. NUL
inline constexpr std::size_t domain_capacity = 48;
inline constexpr std::size_t device_name_capacity = 96;

/// Byte offsets (in the table's file) used as kernel-held OFD locks. They are lock ranges, not
/// data: fcntl locks may lie anywhere, so they do not overlap the mapped structures' meaning.
inline constexpr off_t init_lock_byte = 0;
inline constexpr off_t slot_lock_byte(std::uint32_t slot) { return 1 + static_cast<off_t>(slot); }
/// Locker ids (detail/table_lock.hpp): 1..max_locker_ids, each proven alive by its own byte,
/// after the slots' bytes.
inline constexpr std::uint32_t max_locker_ids = 1u << 16;
inline constexpr off_t locker_byte(std::uint32_t id) {
  return 1 + static_cast<off_t>(max_slot_count) + static_cast<off_t>(id - 1);
}

/// The fixed prefix: the same in every layout version, so any version can recognise another
/// version's table (and refuse it) instead of misreading it.
struct table_prefix {
  std::uint64_t magic;
  std::uint32_t layout_version;
  std::atomic<std::uint32_t> init_state;
  std::uint32_t header_size;
  std::uint32_t slot_size;
  std::uint32_t slot_count;
  std::uint32_t lock_size; ///< bytes of the table lock (layouts 1-3: sizeof(pthread_mutex_t))
  std::uint64_t total_size;
};

/// What table_prefix::lock_size holds in this layout.
inline constexpr std::uint32_t table_lock_size = sizeof(std::atomic<std::uint32_t>);

struct alignas(64) table_header {
  table_prefix prefix;
  // ---- creation facts, written once before init_state becomes ready
  std::int32_t creator_pid;
  std::uint32_t access_mode; ///< file mode bits the table was created with (0600 or 0660)
  std::uint64_t created_unix_ns;
  char key[key_capacity];
  char domain[domain_capacity];

  // ---- protected by `lock`
  /// The table lock (detail/table_lock.hpp): 0 free, else the owner's locker id | sleepers bit.
  alignas(64) std::atomic<std::uint32_t> lock;
  /// display only: the pid (in its own PID namespace) of the process holding `lock` (0: nobody)
  std::atomic<std::int32_t> lock_holder_pid;
  std::uint32_t memory_waiters;     ///< derived: sum of slot::memory_waiting
  std::uint64_t capacity;           ///< bytes the sessions of this table may reserve in total
  std::uint64_t reserved_total;     ///< derived: sum of slot::reserved over active slots
  std::uint64_t committed_total;    ///< derived: sum of commitment(slot) over active slots
  std::uint32_t live_sessions;      ///< derived: number of active slots
  std::uint32_t holder_started;     ///< the holder has begun using the device since its grant
  std::uint64_t lock_repairs;       ///< times a locker found the lock's owner dead and repaired
  std::uint64_t sessions_reclaimed; ///< dead sessions whose resources a peer reclaimed

  // ---- compute arbitration (detail/scheduler.hpp), under `lock`
  std::uint32_t holder;               ///< slot + 1 of the session holding the device; 0: nobody
  std::uint32_t holder_generation;    ///< that session's generation (a stale holder never matches)
  std::uint64_t holder_since_ns;      ///< monotonic time the holder was granted the device
  std::uint64_t holder_idle_since_ns; ///< when the holder's active guards last dropped to 0
  std::uint64_t quantum_used_ns;      ///< device time the holder used since it was granted
  std::uint64_t min_vtime[8];         ///< per priority class: the class clock's monotone floor
  std::uint64_t handovers;            ///< times the device went from one session to another
  std::uint64_t holder_idle_ns;       ///< idle time the holder spent between guards while others
                                      ///< waited, in its current quantum (its idle budget)
  std::uint64_t holder_exits;         ///< times the holder's last active guard ended
  std::uint64_t watch_until_ns;       ///< a waiting thread re-checks the holder by then (0: nobody)
  std::uint64_t watch_exits;          ///< holder_exits when that watch was armed
  std::uint32_t last_holder;          ///< slot + 1 of the session that last freed the device
  std::uint32_t last_holder_generation; ///< its generation
  std::uint64_t quantum_start_ns; ///< when the holder's current quantum began (its wall bound)
  std::uint32_t watcher;          ///< slot + 1 of the session whose thread armed the watch
  std::uint32_t reserved1;        ///< zero
  /// Bit i set: slot i has threads waiting for the device (wants_device > 0). Lets a decision
  /// visit only the waiting slots instead of all of them.
  std::uint64_t waiting_mask[max_slot_count / 64];

  // ---- the device behind the table, as last observed by a CUDA-layer session (all zero for a
  // table only host code uses), under `lock`
  char device_name[device_name_capacity]; ///< e.g. "NVIDIA H100 80GB HBM3"
  std::uint64_t device_total;             ///< bytes of device memory (cudaMemGetInfo total)
  std::uint64_t device_free;              ///< bytes free on the device at the observation
  std::uint64_t device_observed_unix_ns;  ///< when (0: never observed)
  std::int32_t device_observer_pid;       ///< display only: who observed it
  std::int32_t device_ordinal_hint;       ///< display only: that process's ordinal for the GPU

  // ---- creation fact, written once before init_state becomes ready
  /// The creator's CLOCK_MONOTONIC offset from the host's (its time namespace; 0 on the host).
  /// Every process of a table writes and compares monotonic timestamps, so only processes whose
  /// offset is the same may open it (validate_ready()).
  std::int64_t monotonic_offset_ns;

  // ---- a stuck holder's remedies (docs/design.md section 11), under `lock`
  std::uint64_t default_max_guard_ns;     ///< max_guard for sessions that set none (0: none)
  std::uint64_t revocations;              ///< guards whose hold on the device was revoked
  std::uint64_t evictions;                ///< sessions ended by `gpushare evict` (table::evict)
  std::uint64_t last_eviction_unix_ns;    ///< the last eviction: when (0: none yet) ...
  std::uint32_t last_eviction_by_uid;     ///< ... by whom ...
  std::int32_t last_eviction_pid;         ///< ... of which process (display only) ...
  std::uint32_t last_eviction_slot;       ///< ... in which slot ...
  std::uint32_t last_eviction_generation; ///< ... of which generation ...
  char last_eviction_name[name_capacity]; ///< ... and what it was called

  // ---- futex words and lock-free hints, each on its own cache line
  alignas(64) std::atomic<std::uint32_t> memory_wake;    ///< bumped whenever memory is released
  alignas(64) std::atomic<std::uint32_t> device_waiters; ///< threads waiting for the device
  /// Bumped after a session writes its slot's journal (detail/journal.hpp); every locker checks
  /// it once and, when it is not 0, folds every slot's journal before anything else.
  alignas(64) std::atomic<std::uint32_t> journal_pending;

  // ---- the start-up lock (detail/startup.hpp): one session at a time starts its engine.
  // `startup_owner` changes by compare-and-swap (taken under `lock`, released with or without
  // it); the rest is written by the session that took it, under `lock`.
  alignas(64) std::atomic<std::uint32_t> startup_wake; ///< bumped whenever the lock is released
  std::uint32_t startup_unused;                        ///< zero
  std::atomic<std::uint64_t>
      startup_owner; ///< (slot + 1) << 32 | generation of the holder; 0: free
  std::atomic<std::uint64_t> startup_since_ns;      ///< monotonic time the holder took it
  std::atomic<std::uint64_t> startup_since_unix_ns; ///< the same, as wall-clock time
  std::uint64_t startup_takes;                      ///< times it was taken, over the table's life

  // ---- cooperative reclaim (detail/reclaim.hpp, docs/design.md section 15), under `lock`
  std::uint64_t reclaim_requests;     ///< requests sent to sessions holding reclaimable memory
  std::uint64_t reclaim_answered;     ///< requests their sessions answered
  std::uint64_t reclaim_skipped;      ///< requests that passed their deadline unanswered
  std::uint64_t reclaim_withdrawn;    ///< requests withdrawn: nobody waited for memory any more
  std::uint64_t reclaim_given;        ///< bytes the answers said they gave back
  std::uint64_t reclaim_grants;       ///< waiting reserves granted after they had sent requests
  std::uint64_t reclaim_grant_ns;     ///< their time from the first request to the grant, summed
  std::uint64_t reclaim_grant_max_ns; ///< the longest of those times

  // ---- lent guarantees (docs/design.md section 15), under `lock`
  std::uint64_t held_total;       ///< derived: sum of reserved + external over active slots
  std::uint64_t lent_total;       ///< derived: sum of slot_loan::borrowed over active slots
  std::uint64_t loans;            ///< reclaimable growths granted on loan
  std::uint64_t loan_calls;       ///< requests that called loans back
  std::uint64_t loan_write_offs;  ///< loan calls unanswered by their deadline: written off
  std::uint64_t loan_written_off; ///< bytes those write-offs took off their borrowers

  // ---- the memory waiters' order (detail/memory_queue.hpp), under `lock`
  std::uint64_t memory_tickets; ///< the last place given to a waiting reserve (0: none yet)
  std::uint64_t queue_holds;    ///< growths refused because a waiter ahead would not fit after

  // ---- class activity (detail/sched_gpu.hpp), a lock-free hint on its own cache line
  /// Per priority class: the monotonic time a session of that class last asked for the device
  /// (refreshed at most once per class_active_refresh_ns). A lower class keeps less work in
  /// flight while a higher class was active lately.
  alignas(64) std::atomic<std::uint64_t> class_active_ns[8];
};

/// A session's settings: written when it joins (one assignment), and by the owner or a remote
/// configurer (detail/settings.hpp) under the table lock. Every field is fixed at join or changed
/// by a settings change; nothing else writes them.
struct slot_settings {
  std::int32_t priority;
  std::uint32_t share;
  std::uint32_t compute_limit_ppm;
  std::uint32_t compute_guarantee_ppm; ///< device time it keeps while busy (0: none)
  std::uint32_t handover_mode;         ///< handover_at_guard or handover_at_yield
  /// Idle it may keep through its pauses while below its share, in ppm of its device time
  /// (detail/sched_turns.hpp, holds_through; 0: none).
  std::uint32_t pause_hold_ppm;
  std::uint64_t memory_limit;     ///< bytes, resolved against capacity
  std::uint64_t memory_guarantee; ///< bytes, resolved against capacity
  std::uint64_t quantum_ns;       ///< device time it may keep the device while equals wait
  std::uint64_t max_guard_ns;     ///< its guards lose the device after this long without a guard
                                  ///< boundary (0: the table's default_max_guard_ns)
};

/// A session's memory accounting, under the table lock. `reserved` and `external` count in the
/// table's totals (detail/budget.hpp, their and the waiter counts' only writer).
struct slot_memory {
  std::uint64_t reserved; ///< bytes held by this session's reservations
  std::uint64_t external; ///< bytes used outside reservations (e.g. a CUDA context)
  std::uint64_t peak;     ///< max of reserved + external
  std::uint32_t waiting;  ///< threads of this session blocked in reserve()
  std::uint32_t unused;   ///< zero
};

/// A session's compute-arbitration state (detail/scheduler.hpp and the sched_*.hpp it includes),
/// under the table lock.
struct slot_compute {
  std::uint32_t active_guards;   ///< guards of this session inside their region now
  std::uint32_t wants_device;    ///< threads of this session waiting for the device
  std::uint64_t vtime;           ///< virtual time: device ns * 1000 / share
  std::uint64_t wait_since_ns;   ///< when its oldest waiting thread started waiting
  std::uint64_t cap_vclock_ns;   ///< compute-limit pacing clock: may start a guard when <= now
  std::uint64_t last_active_ns;  ///< monotonic time it last held or used the device (0: never)
  std::uint64_t quantum_debt_ns; ///< how far its last turn overran its quantum: its next is shorter
  std::uint32_t last_turn_busy;  ///< its last turn was mostly guards, not idle gaps (1) or not (0)
  std::uint32_t cpu_wait_ppm;    ///< its threads' recent share of time waiting for a CPU
  /// Idle time it kept the device from waiters, less 1/16 of the device time it used since (a
  /// leaky bucket): once this reaches the idle grace, it hands its gaps to equal waiters.
  std::uint64_t idle_debt_ns;
  std::uint64_t last_turn_ns;        ///< how long its last turn was (device and idle time)
  std::uint64_t guarantee_vclock_ns; ///< compute-guarantee clock: owed while below now
  /// As idle_debt_ns, drained by 1/4 of its device time: once this reaches the idle grace, a
  /// lower class takes its gaps.
  std::uint64_t lower_debt_ns;
};

inline constexpr std::size_t pod_capacity = 256;            // a pod name (up to 253) incl. NUL
inline constexpr std::size_t k8s_label_capacity = 64;       // a namespace or container (63) + NUL
inline constexpr std::uint32_t platform_has_job = 1;        // slurm_job_id is set
inline constexpr std::uint32_t platform_has_step = 2;       // slurm_step_id is set
inline constexpr std::uint32_t platform_has_array_job = 4;  // slurm_array_job_id is set
inline constexpr std::uint32_t platform_has_array_task = 8; // slurm_array_task_id is set

/// Who the session belongs to on its platform (platform_identity, detail/identity.hpp): written
/// once when it joins, display only. Strings are NUL-terminated (empty: not known).
struct slot_platform {
  char pod[pod_capacity];
  char pod_namespace[k8s_label_capacity];
  char container[k8s_label_capacity];
  std::uint32_t present; ///< platform_has_* bits: which Slurm ids are set
  std::uint32_t slurm_job_id;
  std::uint32_t slurm_step_id;
  std::uint32_t slurm_array_job_id;
  std::uint32_t slurm_array_task_id;
  std::uint32_t unused; ///< zero
};

inline constexpr std::size_t group_capacity = 48; // a group name incl. NUL

/// The group a session belongs to (detail/group.hpp), written once when it joins. Sessions of
/// one table that name the same group share one memory limit (the sum of their commitments stays
/// within `memory_limit`) and, within a priority class, one compute share: device time any of
/// them uses advances every member's virtual time at `share`. Every member holds the same values
/// (a join that gives others is refused). An empty name: no group.
struct slot_group {
  char name[group_capacity];
  std::uint64_t memory_limit; ///< bytes the members may commit together, resolved at join
  /// The widest quantum among its members (when one joined or changed its quantum last): the
  /// scheduler's window for a member's claim, so that members of different quanta take turns.
  std::uint64_t quantum_ns;
  std::uint32_t share;  ///< the group's compute share (>= 1)
  std::uint32_t unused; ///< zero
};

/// A session's reclaimable memory and the requests to give it back (detail/reclaim.hpp, docs/
/// design.md section 15). Under the table lock, except `asked`, which the owner also reads
/// lock-free (a relaxed load at yield() and guard exits: the cost when nobody asks), and the
/// journal word.
struct slot_reclaim {
  std::uint64_t reclaimable; ///< bytes of its reservations it gives back when asked (<= reserved)
  /// Bytes it is asked to give back now (0: no request). Set by a waiting reserve of another
  /// session, cleared by its answer, its deadline, or the end of every memory wait.
  std::atomic<std::uint64_t> asked;
  std::uint64_t deadline_ns;      ///< monotonic time by which the request must be answered
  std::uint64_t asked_ns;         ///< when the current request began (0: none)
  std::atomic<std::uint32_t> seq; ///< bumped at each new request: its watcher's futex word
  std::uint32_t asked_by;         ///< slot + 1 of the session whose reserve asked last
  std::uint64_t skip_until_ns;    ///< it missed a deadline: not asked again before this time
  std::uint64_t wanted;           ///< while its reserves wait: the bytes they lack (display)
  /// Reclaimable bytes released by a shrink that could not take the lock (its bytes are in
  /// journal_shrink_bytes): the next locker lowers `reclaimable` by them.
  std::atomic<std::uint64_t> journal_bytes;
  std::uint64_t requests; ///< requests it received
  std::uint64_t answered; ///< requests it answered
  std::uint64_t skipped;  ///< requests it let pass their deadline
  std::uint64_t given;    ///< bytes its answers said they gave back
};

/// Memory lent to a session out of other sessions' idle guarantees (docs/design.md section 15):
/// part of its reclaimable reservations that its commitment does not count.
struct slot_loan {
  std::uint64_t borrowed; ///< bytes of its reclaimable reservations on loan (<= reclaimable)
  /// Bytes the table wrote off its reservations when it missed a loan call's deadline: its own
  /// next releases, which still count them, take these off first.
  std::uint64_t written_off;
  std::uint64_t loans;      ///< growths granted to it on loan
  std::uint64_t write_offs; ///< loan calls it missed
  std::uint32_t call;       ///< 1: its current request calls a loan back (reclaim.asked)
  /// reclaim.seq when its current loan call began: an answer to an earlier request (seen at a
  /// lower seq: a call written off, then a new one) does not lower this call.
  std::uint32_t call_seq;
  /// While a reserve of this session waits and only loans stand in its way (its commitment
  /// fits): the bytes it waits for, which every waiter's loan calls count (call_loans).
  std::uint64_t waiting_bytes;
};

/// A session's place among the memory waiters (detail/memory_queue.hpp), under the table lock:
/// that of its oldest reserve that waits now (all zero: none waits).
struct slot_queue {
  std::uint64_t ticket;    ///< its place: lower came first (header.memory_tickets)
  std::uint64_t bytes;     ///< what that reserve asks for
  std::uint64_t looked_ns; ///< when a waiting reserve of it last looked (a stopped one does not)
};

/// One session's record. A join resets the whole record but what must stay monotone across the
/// sessions that use the slot (detail/slot.hpp), then writes the identity, `settings` in one
/// assignment and the usage; everything else starts at zero.
struct alignas(64) slot_record {
  std::atomic<std::uint32_t> state; ///< slot_free or slot_active; written under the table lock
  std::uint32_t generation;         ///< bumped at every join: (index, generation) names a session
  std::uint32_t settings_seq;       ///< bumped on every change of the settings
  /// Bumped to wake this session's waiting threads (a futex word, so monotone across sessions).
  std::atomic<std::uint32_t> grant_word;
  std::int32_t pid;               ///< display only: liveness never trusts it
  std::uint32_t evicted_by_uid;   ///< who evicted it (`gpushare evict`, table::evict)
  std::uint64_t evicted_unix_ns;  ///< when it was evicted (kept after the slot is freed)
  std::uint64_t start_time_ticks; ///< display only: /proc/self/stat starttime
  std::uint64_t joined_unix_ns;
  char name[name_capacity];

  slot_settings settings;
  slot_memory memory;
  slot_compute compute;
  session_statistics stats; ///< its counters, as session_info shows them

  // ---- the lease (detail/sched_lease.hpp): an uncontended holder's guards enter and exit
  // without the table lock. Atomics, written by the owner's guards without the lock and folded
  // (exchanged) by any lock holder.
  std::atomic<std::uint32_t> lease;         ///< 1: its guards may enter and exit without the lock
  std::atomic<std::uint32_t> lease_guards;  ///< guards entered on the lease, inside their region
  std::atomic<std::uint64_t> lease_used_ns; ///< device time of exited lease guards, not yet folded
  std::atomic<std::uint64_t> lease_exits;   ///< lease guards that exited, not yet folded
  std::atomic<std::uint64_t> lease_last_exit_ns; ///< when one last exited (or the lease began)

  // ---- the journal (detail/journal.hpp): updates of this session's exit paths that could not
  // take the table lock (a stopped peer held it past the lock timeout). Atomics, added to by the
  // owner without the lock and folded (exchanged) by whichever process takes the lock next, so
  // an update is applied even if its session never calls gpushare again.
  std::atomic<std::uint32_t> journal_exits;          ///< guard exits (locked guards) to apply
  std::atomic<std::uint32_t> journal_device_waiters; ///< device-waiter registrations to undo
  std::atomic<std::uint64_t> journal_used_ns;        ///< device time of those guard exits
  std::atomic<std::uint64_t> journal_first_start_ns; ///< earliest start among them (0: none)
  std::atomic<std::uint64_t> journal_last_exit_ns;   ///< latest exit among them
  std::atomic<std::uint64_t> journal_device_ns;      ///< device time measured after its guard
  std::atomic<std::uint64_t> journal_shrink_bytes;   ///< reservation bytes released
  std::atomic<std::uint32_t> journal_memory_waiters; ///< memory-waiter counts to undo
  std::atomic<std::uint32_t> journal_lease_exits;    ///< lease guards owed their locked exit

  // ---- the start-up lock (detail/startup.hpp), under the table lock
  std::uint32_t startup_waiting; ///< threads of this session waiting for the start-up lock
  std::uint32_t startup_unused;  ///< zero

  slot_platform platform; ///< who it belongs to (written at join)
  slot_group group;       ///< the group it belongs to (written at join)
  slot_reclaim reclaim;   ///< reclaimable memory and requests to give it back
  slot_loan loan;         ///< what it borrows from idle guarantees
  slot_queue queue;       ///< its oldest waiting reserve's place among the memory waiters
  /// Gaps it kept idle while equal waiters waited, less pause_hold_ppm of its device time since
  /// (a leaky bucket, under the lock): it holds through pauses while this stays below
  /// pause_hold_burst_ns (detail/sched_turns.hpp).
  std::uint64_t hold_debt_ns;
  /// While it holds the device: the idle of its current turn that it held through (not counted
  /// in the turn's length, last_turn_ns, nor in its idle, holder_idle_ns). Under the lock.
  std::uint64_t hold_turn_ns;

  // ---- work of its guards still running on the GPU after they ended (detail/sched_gpu.hpp;
  // docs/design.md section 12, "Guards on streams", rule 2). Atomics: the owner's CUDA layer
  // marks it without the lock; a host function on its stream clears it when the work finished.
  /// (generation << 32) | a mark number of the owner's; 0: nothing marked in flight.
  std::atomic<std::uint64_t> gpu_mark;
  /// Monotonic time by which the marked work is expected to have finished at the latest: a mark
  /// never holds anyone back past it (its owner stopped, its host function never ran).
  std::atomic<std::uint64_t> gpu_until_ns;
  /// Slot + 1 of a session that waits for the marked work to finish (the host function wakes it).
  std::atomic<std::uint32_t> gpu_watcher;
  std::uint32_t gpu_unused; ///< zero
  /// Monotonic time until which the owner asked to keep the device through its gaps against
  /// lower classes (session::linger; detail/sched_gpu.hpp). Written by the owner without the lock.
  std::atomic<std::uint64_t> linger_until_ns;
};

static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
static_assert(std::is_standard_layout_v<table_prefix>);
static_assert(offsetof(table_prefix, init_state) == 12);
static_assert(sizeof(table_prefix) == 40);
static_assert(std::is_standard_layout_v<slot_record>);
static_assert(sizeof(slot_record) == 1216, "slot layout changed: bump table_layout_version");
static_assert(std::is_trivially_copyable_v<session_statistics>);
static_assert(std::is_standard_layout_v<session_statistics>);
static_assert(sizeof(slot_settings) == 56 && sizeof(slot_memory) == 32 &&
              sizeof(slot_compute) == 88);
static_assert(sizeof(session_statistics) == 13 * 8, "a new statistic: bump table_layout_version");
static_assert(offsetof(slot_record, grant_word) == 12);
static_assert(offsetof(slot_record, settings) == 112);
static_assert(offsetof(slot_record, stats) == 288);
static_assert(offsetof(slot_record, lease) == 392);
static_assert(offsetof(slot_record, journal_exits) == 424);
static_assert(offsetof(slot_record, startup_waiting) == 480);
static_assert(sizeof(slot_platform) == 408);
static_assert(offsetof(slot_record, platform) == 488);
static_assert(sizeof(slot_group) == 72);
static_assert(offsetof(slot_record, group) == 896);
static_assert(sizeof(slot_reclaim) == 96);
static_assert(offsetof(slot_record, reclaim) == 968);
static_assert(sizeof(slot_loan) == 48);
static_assert(sizeof(slot_queue) == 24);
static_assert(offsetof(slot_record, queue) == 1112);
static_assert(offsetof(slot_record, hold_debt_ns) == 1136);
static_assert(offsetof(slot_record, hold_turn_ns) == 1144);
static_assert(offsetof(slot_record, gpu_mark) == 1152);
static_assert(offsetof(slot_record, linger_until_ns) == 1176);
static_assert(offsetof(table_header, class_active_ns) == 1664);
static_assert(sizeof(table_header) == 1728, "header layout changed: bump table_layout_version");
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(offsetof(table_header, lock) % 64 == 0);
static_assert(offsetof(table_header, startup_wake) % 64 == 0);
static_assert(offsetof(table_header, startup_owner) == offsetof(table_header, startup_wake) + 8);

inline constexpr std::size_t table_size(std::uint32_t slot_count) {
  return sizeof(table_header) + static_cast<std::size_t>(slot_count) * sizeof(slot_record);
}

/// The mapped table: header followed by `slot_count` slots.
struct table_view {
  table_header* header = nullptr;
  slot_record* slots = nullptr;
  std::uint32_t slot_count = 0; ///< validated at open; never re-read from shared memory
};

} // namespace detail
} // namespace v0
} // namespace gpushare
