// SPDX-License-Identifier: Apache-2.0
// The long texts a session shows its user: why a join, a reservation or a guard failed, and the
// notice that the table's capacity is not the one the session asked for. Each is built from the
// table and what the session recorded about itself when it joined (session_facts); none of them
// changes anything. Call those that read slots or totals under the table lock.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <ctime>
#include <string>

#include <gpushare/detail/budget.hpp>
#include <gpushare/detail/group.hpp>
#include <gpushare/detail/parse.hpp>
#include <gpushare/detail/posix.hpp>
#include <gpushare/detail/scheduler.hpp>
#include <gpushare/detail/table_core.hpp>
#include <gpushare/error.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// What a session's messages say about it: set when it joins (session_join.hpp), never after.
struct session_facts {
  std::string name;                     ///< the session's name
  bool created_table = false;           ///< this session's join created the table
  std::uint64_t requested_capacity = 0; ///< its capacity option; 0: none asked for
  /// How its limit and guarantee were given (resolved_options), and the limit they resolved to
  /// at join: messages show the given form while the limit is still that one.
  std::string limit_given, guarantee_given;
  std::uint64_t limit_at_join = 0;
};

/// "created by pid 4242 (uid 1000) at 2026-11-22 21:03:11 UTC": who made the table and when, from
/// its header (the pid is in the creator's PID namespace) and its file's owner.
inline std::string creation_text(const table_header& h, int fd) {
  std::string t = "created by pid " + std::to_string(h.creator_pid);
  struct stat st {};
  if (::fstat(fd, &st) == 0) t += " (uid " + std::to_string(st.st_uid) + ")";
  const std::time_t secs = static_cast<std::time_t>(h.created_unix_ns / 1'000'000'000u);
  std::tm tm{};
  char when[32];
  if (h.created_unix_ns != 0 && ::gmtime_r(&secs, &tm) != nullptr &&
      std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm) != 0)
    t += std::string(" at ") + when;
  return t;
}

/// Why the table's capacity is not the one the session asked for (empty if it is, or if the
/// session asked for none): the table existed already, and a table keeps the capacity it was
/// created with.
inline std::string capacity_mismatch_text(const session_facts& f, const table_core& t) {
  const table_header& h = t.header();
  if (f.requested_capacity == 0 || f.created_table || h.capacity == f.requested_capacity) return {};
  return "session '" + f.name + "' asked for a table capacity of " +
         format_capacity(f.requested_capacity) + ", but table '" + t.name() +
         "' already existed with a capacity of " + format_capacity(h.capacity) + " (" +
         creation_text(h, t.fd()) + "); a table keeps the capacity it was created with, so " +
         format_capacity(h.capacity) +
         " applies. To use another capacity, remove the table once no session uses it "
         "(`gpushare clean`, or gpushare::table::remove) and the next session creates it anew";
}

/// A join that found every slot held by a live session.
inline error no_free_slot(const table_core& t) {
  return error(errc::no_free_slot, "all " + std::to_string(t.slot_count()) +
                                       " session slots of table '" + t.name() +
                                       "' are held by live sessions; end some or use another "
                                       "GPUSHARE_DOMAIN");
}

/// A join that started over `attempts` times because the table was removed each time.
inline error removed_while_joining(const session_facts& f, const table_core& t, int attempts) {
  return error(errc::table_busy, "table '" + t.name() + "' was removed " +
                                     std::to_string(attempts) + " times while session '" + f.name +
                                     "' was joining it; is `gpushare clean` running in a loop?");
}

/// A session whose memory guarantee is above its own memory limit.
inline error guarantee_over_limit(const session_facts& f, std::uint64_t guarantee,
                                  std::uint64_t limit) {
  return error(errc::invalid_argument,
               guarantee_over_limit_text(
                   "session '" + f.name + "': ",
                   format_bytes(guarantee) + amount_read_as(f.guarantee_given, guarantee),
                   format_capacity(limit) + amount_read_as(f.limit_given, limit)));
}

/// The one message of a memory guarantee the table cannot promise, at join and on a settings
/// change (call under the lock): `who` is "session 'x'", `guarantee` the amount as shown,
/// `committed` what the table's other sessions have committed.
inline error guarantee_unavailable(const std::string& who, const std::string& guarantee,
                                   const std::string& table, std::uint64_t capacity,
                                   std::uint64_t committed) {
  return error(errc::guarantee_unavailable,
               who + ": a memory guarantee of " + guarantee + " cannot be promised in table '" +
                   table + "': capacity " + format_capacity(capacity) + ", already committed " +
                   format_bytes(committed) + " to other sessions; lower the guarantee or wait");
}

/// A joining session whose memory guarantee the table cannot promise (call under the lock; the
/// joiner's slot counts nowhere yet, so all that is committed is other sessions').
inline error guarantee_unavailable(const session_facts& f, const table_core& t,
                                   std::uint64_t guarantee) {
  const table_header& h = t.header();
  return guarantee_unavailable("session '" + f.name + "'",
                               format_bytes(guarantee) +
                                   amount_read_as(f.guarantee_given, guarantee),
                               t.name(), h.capacity, h.committed_total);
}

/// A group's memory limit as shown: "4.00 GiB", or "no limit".
inline std::string format_group_limit(std::uint64_t bytes) {
  return bytes == unlimited_group_memory ? std::string("no limit") : format_bytes(bytes);
}

/// A session joining a group with a memory limit or share other than its members' `o` (`who`
/// is "session 'x' of group 'g'"; `limit` the joiner's limit, resolved).
inline error group_settings_differ(const std::string& who, const resolved_options& r,
                                   std::uint64_t limit, const slot_record& o, bool limit_differs) {
  const std::string member =
      "session '" + read_bounded(o.name, name_capacity) + "' (pid " + std::to_string(o.pid) + ")";
  const std::string what =
      limit_differs ? "a group memory limit of " + format_group_limit(limit) +
                          amount_read_as(r.group_memory_limit_given, limit) + ", but its member " +
                          member + " joined with " + format_group_limit(o.group.memory_limit)
                    : "a group share of " + std::to_string(*r.group_share) + ", but its member " +
                          member + " joined with " + std::to_string(o.group.share);
  return error(errc::invalid_argument,
               who + " gives " + what +
                   ". A group's limit and share belong to the whole group: give every member the "
                   "same GPUSHARE_GROUP_MEMORY_LIMIT and GPUSHARE_GROUP_SHARE, or leave them "
                   "unset in all but the first");
}

/// A joining member's guarantee that its group's limit cannot hold besides what its members
/// commit.
inline error group_guarantee_unavailable(const std::string& who, std::uint64_t guarantee,
                                         std::uint64_t committed, std::uint64_t limit) {
  return error(errc::guarantee_unavailable,
               who + ": a memory guarantee of " + format_bytes(guarantee) +
                   " cannot be promised within the group: its members already commit " +
                   format_bytes(committed) + " of its memory limit of " +
                   format_group_limit(limit) + "; lower the guarantee or wait");
}

/// Why a session no longer holds its slot `slot` (call under the lock; `s` is that slot,
/// `generation` the session's): an operator evicted it (`gpushare evict`, table::evict), or a
/// peer reclaimed it (its liveness lock was lost).
inline std::string closed_text(const session_facts& f, const table_core& t, const slot_record& s,
                               std::uint32_t slot, std::uint32_t generation) {
  const table_header& h = t.header();
  const bool evicted = (s.generation == generation && s.evicted_unix_ns != 0) ||
                       (h.last_eviction_slot == slot && h.last_eviction_generation == generation &&
                        h.last_eviction_unix_ns != 0);
  if (!evicted)
    return "session '" + f.name + "' no longer holds slot " + std::to_string(slot) + " of table '" +
           t.name() + "' (was it reclaimed?)";
  const std::uint32_t by = s.generation == generation ? s.evicted_by_uid : h.last_eviction_by_uid;
  return "session '" + f.name + "' was evicted from table '" + t.name() + "' by uid " +
         std::to_string(by) +
         " (`gpushare evict`): its hold on the device and its reservations were given to the "
         "other sessions; open a new session to use the table again";
}

/// For a wait of a group's member: "; its group 'g' commits 3.00 GiB of its limit of 4.00 GiB".
inline std::string group_wait_text(const table_view& t, const slot_record& s) {
  if (!has_group(s)) return {};
  return "; its group '" + std::string(group_name(s)) + "' commits " +
         format_bytes(group_committed(t, group_name(s))) + " of its limit of " +
         format_group_limit(s.group.memory_limit);
}

/// A reservation of `bytes` by slot `s` that can never fit (verdict `v`: over the session's
/// limit, over its group's limit by itself, or over the table's whole capacity). Call under the
/// lock.
inline error never_fits(const session_facts& f, const table_core& t, budget_verdict v,
                        const slot_record& s, std::uint64_t bytes) {
  if (v == budget_verdict::exceeds_capacity) {
    const table_header& h = t.header();
    std::string why = "session '" + f.name + "': a reservation of " + format_bytes(bytes) +
                      " exceeds the whole capacity of table '" + t.name() + "' (" +
                      format_capacity(h.capacity) + ")";
    if (f.created_table) {
      why += ", the capacity this session created the table with";
    } else {
      why += ". The table already existed when this session joined: it was " +
             creation_text(h, t.fd()) + ", and a table keeps the capacity it was created with";
      why += f.requested_capacity != 0 ? std::string(" (this session asked for ") +
                                             format_capacity(f.requested_capacity) + ")"
                                       : std::string(" (this session set no capacity)");
      why += ". If it is a table left from an earlier run, remove it once no session uses it "
             "(`gpushare clean`, or gpushare::table::remove) and the next session creates it "
             "with its own capacity";
    }
    return error(errc::exceeds_capacity, why);
  }
  if (v == budget_verdict::over_group_limit)
    return error(errc::over_limit,
                 "session '" + f.name + "' of group '" + std::string(group_name(s)) +
                     "': reserving " + format_bytes(bytes) +
                     " would exceed the group's memory limit of " +
                     format_group_limit(s.group.memory_limit) + " by itself (reserved " +
                     format_bytes(s.memory.reserved) + ", used outside reservations " +
                     format_bytes(s.memory.external) +
                     "); the group's members share that limit (GPUSHARE_GROUP_MEMORY_LIMIT)");
  return error(errc::over_limit,
               "session '" + f.name + "': reserving " + format_bytes(bytes) +
                   " would exceed its memory limit of " + format_capacity(s.settings.memory_limit) +
                   (s.settings.memory_limit == f.limit_at_join
                        ? amount_read_as(f.limit_given, s.settings.memory_limit)
                        : std::string()) +
                   " (reserved " + format_bytes(s.memory.reserved) +
                   ", used outside reservations " + format_bytes(s.memory.external) +
                   "); raise the limit (GPUSHARE_MEMORY_LIMIT or `gpushare "
                   "set`) or reserve less");
}

/// A reservation of `bytes` by slot `s` that did not fit within `timeout_ns` (call under the
/// lock).
inline error not_available(const session_facts& f, const table_core& t, const slot_record& s,
                           std::uint64_t bytes, std::uint64_t timeout_ns) {
  const table_header& h = t.header();
  return error(errc::timeout,
               "session '" + f.name + "': " + format_bytes(bytes) +
                   " did not become available in " + std::to_string(timeout_ns / 1'000'000) +
                   " ms (table '" + t.name() + "': capacity " + format_capacity(h.capacity) +
                   ", committed " + format_bytes(h.committed_total) + "; this session holds " +
                   format_bytes(s.memory.reserved) + group_wait_text(t.view(), s) + ")");
}

/// Slot `s` cannot make `bytes` of its reclaimable memory fixed: some is on loan out of idle
/// guarantees and the table has no room to count it as its own (call under the lock).
inline std::string loan_stays_reclaimable_text(const session_facts& f, const table_core& t,
                                               const slot_record& s, std::uint64_t bytes) {
  const table_header& h = t.header();
  return "session '" + f.name + "': " + format_bytes(bytes) +
         " cannot stop being reclaimable now: " + format_bytes(s.loan.borrowed) +
         " of its reclaimable memory is on loan out of other sessions' idle guarantees, and table "
         "'" +
         t.name() + "' has no room to count it as this session's own (capacity " +
         format_capacity(h.capacity) + ", committed " + format_bytes(h.committed_total) +
         "); release the reservation and reserve it again as fixed memory, or try later";
}

/// The error of a guard of the session in slot `slot` that did not get the device by its
/// deadline (call under the lock): names the session that holds the device and how long it has
/// been in its guard, since the usual cause of a long wait is a holder that is stopped (SIGSTOP,
/// a debugger, `docker pause`) or hung inside a guard, which liveness cannot free: it is alive.
inline error guard_timeout(const session_facts& f, const table_core& t, std::uint32_t slot,
                           std::uint64_t timeout_ns, std::uint64_t waited_ns) {
  const table_view& v = t.view();
  const std::uint64_t now = monotonic_ns();
  std::string why;
  const std::int64_t h = current_holder(v);
  if (h == nobody) {
    why = paced(t.slot(slot), now) ? "its own compute limit holds it back"
                                   : "the device is free but others had the better claim";
  } else if (h == slot) {
    why = "this session holds the device but must first let its running guards drain";
  } else {
    const slot_record& hs = v.slots[h];
    const std::uint64_t quiet =
        hs.compute.last_active_ns ? sat_sub(now, hs.compute.last_active_ns) : 0;
    why = "the device is held by session '" + read_bounded(hs.name, name_capacity) + "' (slot " +
          std::to_string(h) + ", pid " + std::to_string(hs.pid) + ")";
    if (busy_guards(hs) > 0)
      why += ", inside a guard with no guard entry or exit for " +
             std::to_string(quiet / 1'000'000) +
             " ms (its quantum: " + std::to_string(hs.settings.quantum_ns / 1'000'000) +
             " ms); is it stopped (SIGSTOP, a debugger, docker pause) or hung in its guard? "
             "`gpushare evict` ends such a session; a guard bound (GPUSHARE_MAX_GUARD, or the "
             "table's default) revokes such a hold by itself";
    else
      why += ", between its guards";
  }
  return error(errc::timeout, "session '" + f.name + "': no turn on the device of table '" +
                                  t.name() + "' within its guard timeout of " +
                                  std::to_string(timeout_ns / 1'000'000) + " ms (waited " +
                                  std::to_string(waited_ns / 1'000'000) + " ms): " + why);
}

} // namespace detail
} // namespace v0
} // namespace gpushare
