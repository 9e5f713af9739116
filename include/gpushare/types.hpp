// SPDX-License-Identifier: Apache-2.0
// The leaf value types of the API and their limits: priorities, shares, memory amounts, handover
// points, table access modes, durations' descriptions, a session's counters and notices, and a
// session's options as given (session_options) and once resolved (resolved_options). Standard
// headers only, so that every other header, the library's internals included, can use them
// without pulling in the options machinery (resolve_options() is in <gpushare/options.hpp>).
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpushare {
inline namespace v0 {

/// a + b, or the largest value when that overflows: how the library adds byte counts (a
/// corrupt or hostile figure cannot wrap a total round to a small one).
inline constexpr std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) noexcept {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}
/// The bytes of the capacity a session keeps from the others: what it reserved plus its
/// external usage, or its memory guarantee if that is more (loans aside: section 15 of
/// docs/design.md). `gpushare status` sums these.
inline constexpr std::uint64_t memory_commitment(std::uint64_t reserved, std::uint64_t external,
                                                 std::uint64_t guarantee) noexcept {
  const std::uint64_t used = saturating_add(reserved, external);
  return used > guarantee ? used : guarantee;
}

/// Priority classes: a higher number runs first. Any integer in [min_priority, max_priority] is
/// valid; these are the named ones accepted by GPUSHARE_PRIORITY.
namespace priority {
inline constexpr int low = 0;      ///< runs after normal
inline constexpr int normal = 1;   ///< the default
inline constexpr int high = 2;     ///< runs before normal
inline constexpr int critical = 3; ///< runs before high
} // namespace priority
/// The range of valid priorities.
///@{
inline constexpr int min_priority = 0;
inline constexpr int max_priority = 7;
///@}

/// The range of valid compute shares (session_options::share).
///@{
inline constexpr std::uint32_t min_share = 1;
inline constexpr std::uint32_t max_share = 1'000'000;
///@}
/// The share of a session that sets none.
inline constexpr std::uint32_t default_share = 1;

/// An amount of device memory: either absolute bytes or a fraction of the table's capacity
/// (parts per million), resolved against the capacity when the session joins.
struct memory_amount {
  /// Absolute bytes, or a fraction of the capacity.
  enum class unit { bytes, fraction };
  unit kind = unit::bytes; ///< which of the two `value` is
  std::uint64_t value = 0; ///< bytes, or parts per million of capacity

  /// `b` bytes.
  static constexpr memory_amount of_bytes(std::uint64_t b) { return {unit::bytes, b}; }
  /// `ppm` parts per million of the capacity.
  static constexpr memory_amount of_ppm(std::uint64_t ppm) { return {unit::fraction, ppm}; }
  /// Bytes this amount stands for in a table of `capacity` bytes (fractions round down). Never
  /// truncated: a fraction over 100% (which every entry point refuses) saturates at 2^64 - 1.
  constexpr std::uint64_t resolve(std::uint64_t capacity) const {
    if (kind == unit::bytes) return value;
    __extension__ using u128 = unsigned __int128; // __extension__: no -Wpedantic warning
    const u128 bytes = (static_cast<u128>(capacity) * value) / 1'000'000u;
    return bytes > UINT64_MAX ? UINT64_MAX : static_cast<std::uint64_t>(bytes);
  }
  /// Same unit and value.
  friend constexpr bool operator==(const memory_amount&, const memory_amount&) = default;
};

/// A session's counters since it joined: what it reserved, waited for and ran. One struct is both
/// a part of every session's record in the shared table (detail/layout.hpp) and the base of
/// session_info, so a counter is declared once: adding one here adds it to the table and to every
/// snapshot (and changes the table's layout: table_layout_version moves with it). Fixed-width
/// integers only, all zero in a new record.
struct session_statistics {
  std::uint64_t reservations_granted = 0; ///< reservations granted
  std::uint64_t reserve_waits = 0;        ///< reservations that had to wait
  std::uint64_t reserve_wait_ns = 0;      ///< total time spent waiting
  std::uint64_t reserve_wait_max_ns = 0;  ///< longest single wait
  std::uint64_t device_ns = 0;            ///< device time used in guards (wall time or measured)
  std::uint64_t guards = 0;               ///< guards completed
  /// of them, those that entered and exited on the session's lease, without the table lock
  /// (it held the device and nobody else waited; docs/design.md section 11, "The lease")
  std::uint64_t guards_on_lease = 0;
  std::uint64_t device_waits = 0;       ///< guards and yields that had to wait for the device
  std::uint64_t device_wait_ns = 0;     ///< total time waited for the device
  std::uint64_t device_wait_max_ns = 0; ///< longest single wait
  std::uint64_t handovers = 0;          ///< times it gave the device to another session
  std::uint64_t cap_throttle_ns = 0;    ///< time its compute limit held it back
  /// Times its hold on the device was revoked: one of its guards ran past its guard bound with no
  /// guard entry or exit, and peers were let in while it still ran (docs/design.md section 11).
  std::uint64_t revocations = 0;
};

/// A notice: what the library has to tell a user that is not an error (<gpushare/notices.hpp>).
/// `text` is one sentence or a few, without the "gpushare:" prefix.
struct notice {
  /// How much it matters.
  enum class kind {
    note,   ///< for information: e.g. the table keeps the capacity it was created with
    warning ///< probably a mistake: e.g. processes of one key that cannot see each other
  };
  kind severity = kind::note; ///< how much it matters
  std::string text;           ///< what it says
  /// Same severity and text.
  friend bool operator==(const notice&, const notice&) = default;
};

/// Receives each notice once per process (set_notice_handler(), <gpushare/notices.hpp>).
using notice_handler = std::function<void(const notice&)>;

/// Where a session that holds the device lets an equal-priority waiter take over once its
/// quantum is used: at any guard boundary (the default), or only at its yield() points (for
/// applications whose guards inside an iteration are not cheap switching points). A waiter of a
/// higher priority class always gets the device at the next guard boundary.
enum class handover_point { at_guard, at_yield };

/// Who may open a table: only the creating user (0600, the default) or its group too (0660).
enum class table_access { user, group };

/// How one option that takes a duration is read and checked (parse_duration() and
/// format_duration() in <gpushare/text.hpp>): every duration in gpushare has the same grammar, a
/// decimal number with a unit ns, us, ms, s, min or h (case-insensitive: "500us", "2min",
/// "0.5s"), and each option adds its range, whether "none" is allowed and what a bare number is.
struct duration_option {
  std::string_view name;    ///< for messages: "invalid <name> "<value>": ..."
  std::uint64_t min_ns = 0; ///< the smallest value accepted
  std::uint64_t max_ns = 0; ///< the largest value accepted
  /// Whether "none" (or "off", "infinite") is accepted; it reads as `none_ns`, and the messages
  /// describe it as `none_means` ("no bound", "wait without end").
  ///@{
  bool allows_none = false;
  std::uint64_t none_ns = 0;
  std::string_view none_means;
  ///@}
  /// What a number without a unit counts (1'000'000'000: seconds); 0: a unit is required.
  std::uint64_t bare_unit_ns = 0;
  std::string_view examples; ///< for messages: "\"500us\", \"5ms\""
};

/// Slurm's special step ids (Slurm's slurm.h): the step of a batch script, of the processes
/// Slurm adopts into a job from outside (its "extern" step) and of an interactive allocation.
/// Slurm writes SLURM_STEP_ID with "%u", so these arrive as their decimal values.
///@{
inline constexpr std::uint32_t slurm_batch_step = 0xfffffffbu;
inline constexpr std::uint32_t slurm_extern_step = 0xfffffffcu;
inline constexpr std::uint32_t slurm_interactive_step = 0xfffffffau;
///@}

/// Who a session belongs to on its platform, as the platform says it (docs/cluster-env.md):
/// a Kubernetes pod, namespace and container, a Slurm job, step and array task. Shown by
/// `gpushare status`, its JSON and `gpushare metrics`; never trusted for anything. Empty
/// strings and nullopt: not known.
struct platform_identity {
  std::string pod;           ///< Kubernetes pod name (DNS-1123 subdomain, up to 253 characters)
  std::string pod_namespace; ///< Kubernetes namespace (DNS-1123 label, up to 63 characters)
  std::string container;     ///< Kubernetes container name (DNS-1123 label, up to 63)
  std::optional<std::uint32_t> slurm_job_id;        ///< Slurm job id
  std::optional<std::uint32_t> slurm_step_id;       ///< a step number or one of slurm_*_step
  std::optional<std::uint32_t> slurm_array_job_id;  ///< Slurm array job id
  std::optional<std::uint32_t> slurm_array_task_id; ///< Slurm array task id

  /// Whether nothing is known.
  bool empty() const noexcept {
    return pod.empty() && pod_namespace.empty() && container.empty() && !slurm_job_id &&
           !slurm_step_id && !slurm_array_job_id && !slurm_array_task_id;
  }
  /// Every field equal.
  friend bool operator==(const platform_identity&, const platform_identity&) = default;
};

/// The options with every field filled in: code, then environment, then defaults.
struct resolved_options {
  std::string name;                            ///< session_options::name
  int priority = priority::normal;             ///< session_options::priority
  std::uint32_t share = default_share;         ///< session_options::share
  std::uint32_t compute_limit_ppm = 1'000'000; ///< session_options::compute_limit_ppm
  std::optional<memory_amount> memory_limit;   ///< nullopt: no limit but the capacity
  memory_amount memory_guarantee = memory_amount::of_bytes(0); ///< 0 bytes: none
  /// How the limit and the guarantee were given when they came from the environment
  /// ("GPUSHARE_MEMORY_LIMIT=4gb"), for messages that show them resolved; "" otherwise.
  ///@{
  std::string memory_limit_given, memory_guarantee_given;
  ///@}
  std::string domain = "default";           ///< session_options::domain
  std::string directory;                    ///< the table directory, normalised; "" for /dev/shm
  table_access access = table_access::user; ///< who may open the table
  std::uint64_t capacity = 0;               ///< session_options::capacity (0: unlimited)
  std::uint64_t quantum_ns = 5'000'000;     ///< compute quantum (ns)
  handover_point handover = handover_point::at_guard; ///< where it hands the device over
  std::uint64_t max_guard_ns = 0;                     ///< 0: the table's default
  std::uint32_t compute_guarantee_ppm = 0;            ///< 0: none
  std::uint32_t pause_hold_ppm = 2'000'000;           ///< session_options::pause_hold_ppm
  std::uint64_t reclaim_deadline_ns = 2'000'000'000;  ///< how long its requests to give back last
  std::chrono::milliseconds open_timeout{5000};       ///< session_options::open_timeout
  /// The group it belongs to ("" for none) and the group's settings as this session gives them:
  /// nullopt leaves them to the group's members (or the defaults: no limit, share 1).
  ///@{
  std::string group;
  std::optional<memory_amount> group_memory_limit;
  std::optional<std::uint32_t> group_share;
  ///@}
  std::string group_memory_limit_given; ///< "GPUSHARE_GROUP_MEMORY_LIMIT=..." when from there
  platform_identity identity;           ///< who the session belongs to (docs/cluster-env.md)
  /// Where a setting came from a cluster scheduler's variable instead of a GPUSHARE_* one
  /// ("CUDA_DEVICE_MEMORY_LIMIT_0=4g"), for messages: "" otherwise.
  ///@{
  std::string memory_limit_from_cluster, compute_limit_from_cluster;
  ///@}
  /// What resolving had to tell that is not an error (an identity variable that is not valid and
  /// was ignored, a cluster limit that was read): raised when the session joins.
  std::vector<notice> notices;
};

/// Everything a session can be configured with. Unset (nullopt) fields take the value of the
/// matching GPUSHARE_* environment variable if it is set, else the documented default.
/// Precedence: a value set here in code > the environment > the default.
struct session_options {
  std::optional<std::string> name;    ///< shown in status; default: the program's name (comm)
  std::optional<int> priority;        ///< GPUSHARE_PRIORITY; default priority::normal
  std::optional<std::uint32_t> share; ///< GPUSHARE_SHARE; default 1
  std::optional<std::uint32_t> compute_limit_ppm; ///< GPUSHARE_COMPUTE_LIMIT; default 100%
  std::optional<memory_amount> memory_limit;      ///< GPUSHARE_MEMORY_LIMIT; default: capacity
  std::optional<memory_amount> memory_guarantee;  ///< GPUSHARE_MEMORY_GUARANTEE; default 0
  std::optional<std::string> domain;              ///< GPUSHARE_DOMAIN; default "default"
  /// GPUSHARE_TABLE_MODE; default table_access::user, or table_access::group in a table
  /// directory with the setgid bit (the multi-user convention: README, "In a cluster").
  std::optional<table_access> access;
  /// GPUSHARE_DIR: the table directory, an absolute path ("/run/gpushare/GPU-..."); default
  /// /dev/shm. Tables there are files of the same names, same layout and same protocols; the
  /// directory must exist on a local filesystem (errc::bad_directory otherwise).
  std::optional<std::string> directory;
  /// Capacity in bytes, used only if this process creates the table. GPUSHARE_CAPACITY
  /// ("80GiB", "unlimited"); default: 0 = unlimited (2^63 bytes), or, for the CUDA layer's
  /// device_session, the device's memory minus headroom.
  std::optional<std::uint64_t> capacity;
  /// GPUSHARE_QUANTUM (e.g. "5ms"): device time a holder may keep the device across consecutive
  /// guards while sessions of its priority wait; default 5 ms, range 1 us .. 10 s.
  std::optional<std::chrono::nanoseconds> quantum;
  /// GPUSHARE_HANDOVER ("guard" or "yield"); default handover_point::at_guard.
  std::optional<handover_point> handover;
  /// GPUSHARE_MAX_GUARD ("30s", "none"): when this session holds the device and has gone this
  /// long without a guard entry or exit while others wait (one of its guards stopped or hung),
  /// its hold is revoked: peers may start guards while that guard still runs (docs/design.md,
  /// "A stopped or hung holder"). 1 ms .. 3600 s; 0 or unset: the table's default, none unless
  /// its owner set one (table::configure_defaults, `gpushare set --table-default`).
  std::optional<std::chrono::nanoseconds> max_guard;
  /// GPUSHARE_COMPUTE_GUARANTEE ("10%", "none"): the share of wall time this session keeps on
  /// the device while it wants it, whatever priority classes above it want: a waiter owed its
  /// guarantee counts as the highest class. Default none: priority classes are strict.
  std::optional<std::uint32_t> compute_guarantee_ppm;
  /// GPUSHARE_PAUSE_HOLD ("2", "0.5", "none"): while this session is below its share and an
  /// equal-class session with longer guards waits, it keeps the device through its short pauses
  /// between guards (up to 200 us each), as long as the idle it keeps that way stays within this
  /// many times its own device time; in millionths (2000000: twice). It trades utilisation for
  /// its share (docs/design.md, "Pause hold"). 0 to 100 times; default 2; 0: never.
  std::optional<std::uint32_t> pause_hold_ppm;
  /// GPUSHARE_RECLAIM_DEADLINE ("2s"): when a reserve of this session waits, the sessions of
  /// lower priority classes that hold reclaimable memory are asked to give some back
  /// (docs/design.md section 15); one that has not answered within this long is skipped and the
  /// next one is asked. 1 ms .. 3600 s; default 2 s.
  std::optional<std::chrono::nanoseconds> reclaim_deadline;
  /// GPUSHARE_GROUP: a group of sessions of the table (a pod's containers, a job's ranks, e.g.
  /// "pod-7f9c" or "job-4242") that share one memory limit and one compute share; default none.
  /// 1 to 47 characters from A-Z, a-z, 0-9, '.', '_' and '-'.
  std::optional<std::string> group;
  /// GPUSHARE_GROUP_MEMORY_LIMIT: what the group's sessions may commit together; default: the
  /// value its members already have, else no limit. Every member gives the same or none.
  std::optional<memory_amount> group_memory_limit;
  /// GPUSHARE_GROUP_SHARE: the group's compute share (1 to 1000000), used in place of each
  /// member's own share; default: its members', else 1.
  std::optional<std::uint32_t> group_share;
  /// How long opening waits for another process that is initialising the table.
  std::chrono::milliseconds open_timeout{5000};

  // Who the session belongs to (docs/cluster-env.md). Each field set here wins; an unset one is
  // read from the environment. An empty string set here means "none" (the environment is not
  // read for it).
  std::optional<std::string> pod;                   ///< GPUSHARE_POD_NAME, else POD_NAME
  std::optional<std::string> pod_namespace;         ///< GPUSHARE_POD_NAMESPACE, else POD_NAMESPACE
  std::optional<std::string> container;             ///< GPUSHARE_CONTAINER_NAME
  std::optional<std::uint32_t> slurm_job_id;        ///< SLURM_JOB_ID, else SLURM_JOBID
  std::optional<std::uint32_t> slurm_step_id;       ///< SLURM_STEP_ID, else SLURM_STEPID
  std::optional<std::uint32_t> slurm_array_job_id;  ///< SLURM_ARRAY_JOB_ID
  std::optional<std::uint32_t> slurm_array_task_id; ///< SLURM_ARRAY_TASK_ID
  /// The CUDA ordinal (as this process sees it) of the GPU the session stands for: picks the
  /// per-device value of a cluster scheduler's limit (CUDA_DEVICE_MEMORY_LIMIT_<n>,
  /// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT's "<n>=..."). cuda::device_session sets its device's;
  /// unset: 0, the first visible device (docs/cluster-env.md).
  std::optional<int> device_ordinal;
};

/// Reads an environment variable: nullopt when unset. Tests pass a fake one.
using env_lookup = std::function<std::optional<std::string>(const char* name)>;

/// The process's environment (std::getenv). A variable that is set but empty is returned as "";
/// resolve_options() rejects that ("set but empty; unset it or give a value") rather than silently
/// treating it as unset.
inline std::optional<std::string> process_environment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

} // namespace v0
} // namespace gpushare
