// SPDX-License-Identifier: Apache-2.0
// `gpushare status`: every table and its live sessions, as aligned text or as JSON.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gpushare/version.hpp>

#include "cli_args.hpp"
#include "cli_format.hpp"
#include "cli_groups.hpp"
#include "cli_identity.hpp"
#include "cli_json.hpp"
#include "cli_reclaim.hpp"
#include "cli_sample.hpp"
#include "cli_usage.hpp"

namespace gpushare::cli {

/// Schema version of `gpushare status --json`. Adding a field keeps it; renaming or removing one,
/// or changing a field's meaning or unit, increases it.
inline constexpr std::uint64_t status_schema_version = 1;

inline constexpr std::uint64_t default_status_interval_ns = 200'000'000;

/// A guard that has run this many of its session's quanta (and at least stuck_guard_min_ns) with
/// no guard entry or exit is flagged: its holder is likely stopped (SIGSTOP, a debugger, `docker
/// pause`) or hung inside the guard, and every waiter waits for it (design.md, invariant 8).
inline constexpr std::uint64_t stuck_guard_quanta = 100;
inline constexpr std::uint64_t stuck_guard_min_ns = 1'000'000'000;

/// Whether session `i` has been inside one guard far longer than its quantum.
inline bool guard_stuck(const session_info& i) {
  return i.active_guards > 0 &&
         i.in_guard_ns > std::max(stuck_guard_min_ns, i.quantum_ns > UINT64_MAX / stuck_guard_quanta
                                                          ? UINT64_MAX
                                                          : i.quantum_ns * stuck_guard_quanta);
}

/// The STATE column: running / waiting / idle, and for a guard far over its quantum, how long.
inline std::string state_text(const session_info& i) {
  if (!guard_stuck(i)) return i.state();
  return std::string(i.state()) + ", in one guard " + duration_text(i.in_guard_ns) + " (quantum " +
         quantum_text(i.quantum_ns) + "): stopped or hung?";
}

/// The table's remedies for stopped holders, when any is in use: "  stuck guards: default guard
/// bound 30 s, 2 revocations, 1 eviction (last: "trainer", slot 3, pid 4242, by uid 1000, 5 s
/// ago)\n"; "" when the table has no default bound, no revocation and no eviction.
inline std::string remedies_text(const table_snapshot& s, std::uint64_t now_unix_ns) {
  std::vector<std::string> parts;
  if (s.default_max_guard_ns != 0)
    parts.push_back("default guard bound " + guard_bound_text(s.default_max_guard_ns));
  if (s.revocations != 0) parts.push_back(plural(s.revocations, "revocation"));
  if (s.evictions != 0) {
    std::string e = plural(s.evictions, "eviction");
    if (const auto& last = s.last_eviction)
      e += " (last: " + quote(last->name) + ", slot " + std::to_string(last->id.slot) + ", pid " +
           std::to_string(last->pid) + ", by uid " + std::to_string(last->by_uid) + ", " +
           age_text(now_unix_ns, last->unix_ns) + ")";
    parts.push_back(e);
  }
  if (parts.empty()) return "";
  std::string out = "  stuck guards: ";
  for (std::size_t k = 0; k < parts.size(); ++k) out += (k == 0 ? "" : ", ") + parts[k];
  return out + "\n";
}

/// The start-up lock (<gpushare/startup.hpp>), when held or waited for: "  start-up lock: held by
/// "vllm-a" (slot 3, pid 4242) for 12.0 s, 2 waiting, taken 5 times\n"; "" otherwise.
inline std::string startup_text(const table_snapshot& s) {
  if (!s.startup && s.startup_waiters == 0) return "";
  std::string out = "  start-up lock: ";
  if (const auto& h = s.startup)
    out += "held by " + quote(h->name) + " (slot " + std::to_string(h->id.slot) + ", pid " +
           std::to_string(h->pid) + ") for " + duration_text(h->held_ns);
  else
    out += "free";
  return out + ", " + std::to_string(s.startup_waiters) + " waiting, taken " +
         plural(s.startup_takes, "time") + "\n";
}

/// How to name session `i` of `s` to `gpushare evict` in a shell: its name when it is unique in
/// the table and plain ASCII (name:<name> for a numeric name or one that starts with "name:",
/// 'quoted' when the shell needs quotes), else its slot with --table.
inline std::string evict_argument(const table_snapshot& s, const session_info& i) {
  const std::string& n = i.name;
  const auto only = [&](std::string_view extra) {
    return std::all_of(n.begin(), n.end(), [&](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || extra.find(c) != extra.npos;
    });
  };
  const auto same = std::count_if(s.sessions.begin(), s.sessions.end(),
                                  [&](const session_info& o) { return o.name == n; });
  if (same != 1 || n.empty() || n[0] == '-' || !only(" ._:@%+=,/-!#$&()*;<>?[]^`{|}~\""))
    return std::to_string(i.id.slot) + " --table " + s.object_name;
  const bool digits = std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; });
  const std::string word = digits || n.rfind("name:", 0) == 0 ? "name:" + n : n;
  return only("._:@%+=,/-") ? word : "'" + word + "'";
}

/// For each session of `s` flagged "stopped or hung?": a hint naming `gpushare evict`.
inline std::string stuck_hints(const table_snapshot& s) {
  std::string out;
  for (const auto& i : s.sessions)
    if (guard_stuck(i))
      out += "  hint: " + quote(i.name) + " (slot " + std::to_string(i.id.slot) +
             ") has run one guard for " + duration_text(i.in_guard_ns) +
             "; if its process is stopped or hung, `gpushare evict " +
             safe_text(evict_argument(s, i)) +
             "` gives the device to the others (its process keeps its device memory: kill or "
             "restart it)\n";
  return out;
}

/// One column of the session rows: its title and alignment, whether it is shown, and its cell.
struct session_column {
  text_table::column column;
  bool shown = true;
  std::string (*cell)(const session_info&, std::optional<double> recent) = nullptr;
};

/// The columns of the session rows of `s`. EXTERNAL, CGUARANTEE, MAXGUARD, REVOKED, IDENTITY,
/// GROUP, RECLAIMABLE, ASKED and BORROWED are shown only when a session of the table has a value
/// there (RECLAIMABLE and ASKED also when a session lacks bytes for a waiting reserve).
inline std::vector<session_column> session_columns(const table_snapshot& s) {
  bool external = false, guarantee = false, bound = false, revoked = false;
  // Before the list, not inside it: GCC 12 at -O3 took a call there for a path on which an
  // element's title string is used uninitialised (-Wmaybe-uninitialized, a false positive).
  const bool grouped = !groups_of(s).empty();
  const bool reclaim = any_reclaim(s);
  const bool borrowed = any_borrowed(s);
  for (const auto& i : s.sessions) {
    external = external || i.external > 0;
    guarantee = guarantee || i.compute_guarantee_ppm > 0;
    bound = bound || i.max_guard_ns > 0;
    revoked = revoked || i.revocations > 0;
  }
  using I = const session_info&;
  using P = std::optional<double>;
  constexpr auto L = text_table::align::left;
  constexpr auto R = text_table::align::right;
  return {
      {{"SLOT", R}, true, [](I i, P) { return std::to_string(i.id.slot); }},
      {{"NAME", L}, true, [](I i, P) { return safe_text(i.name); }},
      {{"PID", R}, true, [](I i, P) { return std::to_string(i.pid); }},
      {{"IDENTITY", L}, any_identity(s.sessions), [](I i, P) { return identity_cell(i); }},
      {{"GROUP", L}, grouped, [](I i, P) { return group_cell(i); }},
      {{"PRIO", L}, true, [](I i, P) { return priority_text(i.priority); }},
      {{"SHARE", R}, true, [](I i, P) { return std::to_string(i.share); }},
      {{"CLIMIT", R}, true, [](I i, P) { return format_percent(i.compute_limit_ppm); }},
      {{"CGUARANTEE", R},
       guarantee,
       [](I i, P) {
         return i.compute_guarantee_ppm ? guarantee_text(i.compute_guarantee_ppm) : "-";
       }},
      {{"MLIMIT", R}, true, [](I i, P) { return bytes_text(i.memory_limit); }},
      {{"GUARANTEE", R}, true, [](I i, P) { return bytes_text(i.memory_guarantee); }},
      {{"RESERVED", R}, true, [](I i, P) { return bytes_text(i.reserved); }},
      {{"EXTERNAL", R}, external, [](I i, P) { return bytes_text(i.external); }},
      {{"RECLAIMABLE", R}, reclaim, [](I i, P) { return bytes_text(i.reclaim.reclaimable); }},
      {{"ASKED", R}, reclaim, [](I i, P) { return asked_cell(i); }},
      {{"BORROWED", R}, borrowed, [](I i, P) { return bytes_text(i.reclaim.borrowed); }},
      {{"PEAK", R}, true, [](I i, P) { return bytes_text(i.peak); }},
      {{"DEVICE", R}, true, [](I i, P) { return duration_text(i.device_ns); }},
      {{"RECENT", R}, true, [](I, P r) { return r ? percent_text(*r) : std::string("-"); }},
      {{"WAITS", R}, true, [](I i, P) { return std::to_string(i.device_waits); }},
      {{"MEMWAITS", R}, true, [](I i, P) { return std::to_string(i.reserve_waits); }},
      {{"MAXGUARD", R},
       bound,
       [](I i, P) { return i.max_guard_ns ? guard_bound_text(i.max_guard_ns) : "-"; }},
      {{"REVOKED", R}, revoked, [](I i, P) { return std::to_string(i.revocations); }},
      {{"STATE", L}, true, [](I i, P) { return state_text(i); }},
  };
}

/// A column that `top` adds after RECENT (its history): the title, and the cell of the session
/// at an index of the table's snapshot.
struct extra_column {
  std::string title;
  std::function<std::string(const table_reading&, std::size_t)> cell;
};

/// The aligned session rows of `t`, with their header (and `extra`'s column, when given).
inline std::string sessions_text(const table_reading& t, const recent_usage& recent,
                                 const extra_column* extra = nullptr) {
  const table_snapshot& s = *t.snapshot;
  std::vector<session_column> cols = session_columns(s);
  std::erase_if(cols, [](const session_column& c) { return !c.shown; });
  std::vector<text_table::column> titles;
  std::size_t after = cols.size();
  for (std::size_t c = 0; c < cols.size(); ++c) {
    titles.push_back(cols[c].column);
    if (cols[c].column.title == "RECENT") after = c + 1;
  }
  if (extra) titles.insert(titles.begin() + static_cast<std::ptrdiff_t>(after), {extra->title});
  text_table tt(titles);
  for (std::size_t k = 0; k < s.sessions.size(); ++k) {
    std::vector<std::string> row;
    for (const auto& c : cols) row.push_back(c.cell(s.sessions[k], recent.percent[k]));
    if (extra) row.insert(row.begin() + static_cast<std::ptrdiff_t>(after), extra->cell(t, k));
    tt.add_row(std::move(row));
  }
  return tt.render("  ");
}

/// One line per dead session not reclaimed yet, with what it still holds of the table, and how
/// it goes: "" when there is none.
inline std::string dead_sessions_text(const table_snapshot& s) {
  std::string out;
  for (const session_info& i : s.dead_sessions)
    out += "  dead, not reclaimed yet: " + safe_text(quote(i.name)) + " (slot " +
           std::to_string(i.id.slot) + ", pid " + std::to_string(i.pid) + ") holds " +
           bytes_text(i.reserved) + " reserved, " + bytes_text(i.external) + " external, " +
           bytes_text(i.memory_guarantee) + " guaranteed\n";
  if (!s.dead_sessions.empty())
    out += "  (a live session reclaims what they hold when it needs the memory or takes a "
           "snapshot; `gpushare clean` removes the table if no live session is left; status "
           "itself only reads)\n";
  return out;
}

/// The text block of one readable table: its facts, then one aligned row per live session.
inline std::string table_text(const table_reading& t, const recent_usage& recent,
                              std::uint64_t now_unix_ns, const extra_column* extra = nullptr) {
  const table_snapshot& s = *t.snapshot;
  std::string out = safe_text(s.object_name) + "  key " + safe_text(s.key) + ", domain " +
                    safe_text(s.domain) + ", " + (s.access_mode == 0660 ? "group" : "user") +
                    " table (" + mode_text(t.entry.file_mode ? t.entry.file_mode : s.access_mode) +
                    "), " + plural(s.slot_count, "slot") + ", created by pid " +
                    std::to_string(s.creator_pid) + "\n";
  out += "  memory: capacity " + bytes_text(s.capacity) + ", free " +
         (s.capacity >= unlimited_memory ? std::string("unlimited") : bytes_text(s.available)) +
         " (committed " + bytes_text(s.committed_total) + ", reserved " +
         bytes_text(s.reserved_total) + ")\n";
  if (s.device_observed_unix_ns != 0)
    out +=
        "  GPU: " + (s.device_name.empty() ? std::string("(unnamed)") : safe_text(s.device_name)) +
        ", device free " + bytes_text(s.device_free) + " of " + bytes_text(s.device_total) +
        ", untracked " + bytes_text(s.device_untracked) +
        (s.device_releasing > 0
             ? ", being released " + bytes_text(s.device_releasing) + " (dead sessions below)"
             : std::string()) +
        " (observed by pid " + std::to_string(s.device_observer_pid) + ", " +
        age_text(now_unix_ns, s.device_observed_unix_ns) + ")\n";
  out += remedies_text(s, now_unix_ns);
  out += startup_text(s);
  out += groups_text(s);
  out += reclaim_text(s) + loans_text(s);
  if (s.sessions.empty())
    out += "  no live sessions\n";
  else
    out += sessions_text(t, recent, extra) + stuck_hints(s) + reclaim_hints(s);
  return out + dead_sessions_text(s);
}

/// One warning line per key of a table in `now` that other tables of the machine use too (any
/// domain, mode or owner; `all` is every table of the machine): their sessions are not
/// arbitrated against each other.
inline std::string split_keys_text(const sample& now, const std::vector<table_entry>& all) {
  std::string out;
  for (const auto& [key, tables] : split_keys(all)) {
    if (std::none_of(now.tables.begin(), now.tables.end(),
                     [&](const table_reading& t) { return t.entry.key == key; }))
      continue;
    out += "warning: key " + safe_text(quote(key)) + " has " + std::to_string(tables.size()) +
           " tables (";
    for (std::size_t i = 0; i < tables.size(); ++i)
      out += (i == 0 ? "" : ", ") + safe_text(tables[i].object_name);
    out += "): sessions in different tables are not arbitrated against each other; give every "
           "process the same GPUSHARE_DOMAIN and GPUSHARE_TABLE_MODE\n";
  }
  return out;
}

/// `gpushare status` as text. `before` (may be null) is the earlier sample for recent %; `extra`
/// is top's history column.
inline std::string status_text(const sample* before, const sample& now, const domain_choice& domain,
                               const extra_column* extra = nullptr) {
  std::size_t sessions = 0;
  for (const auto& t : now.tables) sessions += t.snapshot ? t.snapshot->sessions.size() : 0;
  if (now.tables.empty()) return no_tables_text(now.other_domains, domain) + "\n";
  std::string out = plural(now.tables.size(), "table") + ", " + plural(sessions, "live session");
  if (now.readable() < now.tables.size())
    out += ", " + std::to_string(now.tables.size() - now.readable()) + " unreadable";
  // A filter the user did not type is easy to forget: say where it comes from.
  if (domain.from_environment)
    out += " (only domain " + quote(*domain.name) +
           ", from GPUSHARE_DOMAIN; --all-domains shows every domain)";
  out += "\n";
  try {
    out += split_keys_text(now, list_tables_in(now.dir));
  } catch (const error&) { // the directory cannot be listed: take_sample() said so already
  }
  for (const auto& t : now.tables) {
    out += "\n";
    if (!t.snapshot) {
      out += safe_text(t.entry.object_name) + "  " + safe_text(unreadable_text(t)) + "\n";
      continue;
    }
    out +=
        table_text(t, recent_device_usage(find_previous(before, t), t), now.taken_unix_ns, extra);
  }
  return out;
}

inline void session_json(json_writer& w, const session_info& i, std::optional<double> recent) {
  w.begin_object();
  w.field("slot", i.id.slot);
  w.field("generation", i.id.generation);
  w.field("name", i.name);
  w.field("pid", i.pid);
  w.field("start_time_ticks", i.start_time_ticks);
  w.field("joined_unix_ns", i.joined_unix_ns);
  identity_json(w, i.identity);
  session_group_json(w, i);
  w.field("state", i.state());
  w.field("priority", static_cast<std::int32_t>(i.priority));
  w.field("priority_name", priority_text(i.priority));
  w.field("share", i.share);
  w.field("compute_limit_ppm", i.compute_limit_ppm);
  w.field("quantum_ns", i.quantum_ns);
  w.field("handover", handover_text(i.handover));
  w.field("memory_limit_bytes", i.memory_limit);
  w.field("memory_guarantee_bytes", i.memory_guarantee);
  w.field("reserved_bytes", i.reserved);
  w.field("external_bytes", i.external);
  w.field("peak_bytes", i.peak);
  w.field("reservations_granted", i.reservations_granted);
  w.field("reserve_waits", i.reserve_waits);
  w.field("reserve_wait_ns", i.reserve_wait_ns);
  w.field("reserve_wait_max_ns", i.reserve_wait_max_ns);
  w.field("waiting_for_memory", i.waiting_for_memory);
  w.field("holds_device", i.holds_device);
  w.field("active_guards", i.active_guards);
  w.field("waiting_for_device", i.waiting_for_device);
  w.field("holds_startup", i.holds_startup);
  w.field("waiting_for_startup", i.waiting_for_startup);
  w.field("device_ns", i.device_ns);
  w.field("in_guard_ns", i.in_guard_ns);
  w.field("guard_stuck", guard_stuck(i));
  w.key("recent_device_percent");
  if (recent)
    w.number(*recent, 2);
  else
    w.null();
  w.field("guards", i.guards);
  w.field("guards_on_lease", i.guards_on_lease);
  w.field("device_waits", i.device_waits);
  w.field("device_wait_ns", i.device_wait_ns);
  w.field("device_wait_max_ns", i.device_wait_max_ns);
  w.field("handovers", i.handovers);
  w.field("cap_throttle_ns", i.cap_throttle_ns);
  w.field("vtime", i.vtime);
  w.field("max_guard_ns", i.max_guard_ns);
  w.field("revocations", i.revocations);
  w.field("compute_guarantee_ppm", i.compute_guarantee_ppm);
  w.field("pause_hold_ppm", i.pause_hold_ppm);
  w.field("settings_seq", i.settings_seq);
  session_reclaim_json(w, i);
  w.end_object();
}

/// "last_eviction": {"slot", "generation", "name", "pid", "by_uid", "unix_ns"}, or null.
inline void last_eviction_json(json_writer& w,
                               const std::optional<table_snapshot::eviction>& last) {
  w.key("last_eviction");
  if (!last) return w.null();
  w.begin_object();
  w.field("slot", last->id.slot);
  w.field("generation", last->id.generation);
  w.field("name", last->name);
  w.field("pid", last->pid);
  w.field("by_uid", last->by_uid);
  w.field("unix_ns", last->unix_ns);
  w.end_object();
}

/// "startup": {"holder": {"slot", "generation", "name", "pid", "since_unix_ns", "held_ns"} or
/// null, "waiters", "takes"}: the start-up lock.
inline void startup_json(json_writer& w, const table_snapshot& s) {
  w.key("startup");
  w.begin_object();
  w.key("holder");
  if (const auto& h = s.startup) {
    w.begin_object();
    w.field("slot", h->id.slot);
    w.field("generation", h->id.generation);
    w.field("name", h->name);
    w.field("pid", h->pid);
    w.field("since_unix_ns", h->since_unix_ns);
    w.field("held_ns", h->held_ns);
    w.end_object();
  } else {
    w.null();
  }
  w.field("waiters", s.startup_waiters);
  w.field("takes", s.startup_takes);
  w.end_object();
}

/// "device": the GPU a CUDA-layer session observed, or null.
inline void device_json(json_writer& w, const table_snapshot& s) {
  w.key("device");
  if (s.device_observed_unix_ns == 0) return w.null();
  w.begin_object();
  w.field("name", s.device_name);
  w.field("total_bytes", s.device_total);
  w.field("free_bytes", s.device_free);
  w.field("untracked_bytes", s.device_untracked);
  w.field("releasing_bytes", s.device_releasing);
  w.field("observed_unix_ns", s.device_observed_unix_ns);
  w.field("observer_pid", s.device_observer_pid);
  w.end_object();
}

inline void table_json(json_writer& w, const table_reading& t, const recent_usage& recent) {
  const table_snapshot& s = *t.snapshot;
  w.begin_object();
  w.field("object_name", s.object_name);
  w.field("path", t.entry.path);
  w.field("key", s.key);
  w.field("domain", s.domain);
  w.field("owner", t.entry.owner);
  w.field("access", s.access_mode == 0660 ? "group" : "user");
  w.field("mode", mode_text(s.access_mode));
  w.field("creator_pid", s.creator_pid);
  w.field("created_unix_ns", s.created_unix_ns);
  w.field("slot_count", s.slot_count);
  w.field("capacity_bytes", s.capacity);
  w.field("capacity_unlimited", s.capacity >= unlimited_memory);
  w.field("committed_bytes", s.committed_total);
  w.field("reserved_bytes", s.reserved_total);
  w.field("available_bytes", s.available);
  w.field("live_sessions", static_cast<std::uint64_t>(s.sessions.size()));
  w.field("lock_repairs", s.lock_repairs);
  w.field("sessions_reclaimed", s.sessions_reclaimed);
  w.field("handovers", s.handovers);
  w.field("queue_holds", s.queue_holds);
  w.field("default_max_guard_ns", s.default_max_guard_ns);
  w.field("revocations", s.revocations);
  w.field("evictions", s.evictions);
  last_eviction_json(w, s.last_eviction);
  w.key("holder");
  if (s.holder) {
    w.begin_object();
    w.field("slot", s.holder->slot);
    w.field("generation", s.holder->generation);
    w.end_object();
  } else {
    w.null();
  }
  startup_json(w, s);
  device_json(w, s);
  groups_json(w, s);
  table_reclaim_json(w, s);
  table_loans_json(w, s);
  w.key("recent_window_ns");
  if (recent.window_ns)
    w.number(*recent.window_ns);
  else
    w.null();
  w.key("sessions");
  w.begin_array();
  for (std::size_t k = 0; k < s.sessions.size(); ++k)
    session_json(w, s.sessions[k], recent.percent[k]);
  w.end_array();
  w.key("dead_sessions"); // not reclaimed yet: what they hold is still committed
  w.begin_array();
  for (const session_info& i : s.dead_sessions) session_json(w, i, std::nullopt);
  w.end_array();
  w.end_object();
}

inline void unreadable_json(json_writer& w, const table_reading& t) {
  w.begin_object();
  w.field("object_name", t.entry.object_name);
  w.field("path", t.entry.path);
  w.field("domain", t.entry.domain);
  w.field("owner", t.entry.owner);
  w.field("key", t.entry.key);
  w.field("file_uid", t.entry.file_uid);
  w.field("file_gid", t.entry.file_gid);
  w.field("file_mode", mode_text(t.entry.file_mode));
  w.field("error", gpushare::to_string(t.error.value_or(errc::system_error)));
  w.field("message", t.message);
  w.end_object();
}

/// "split_keys": the keys of the listed tables that other tables use too (split_keys_text).
inline void split_keys_json(json_writer& w, const sample& now) {
  std::vector<table_entry> all;
  try {
    all = list_tables_in(now.dir);
  } catch (const error&) {
  }
  w.key("split_keys");
  w.begin_array();
  for (const auto& [key, tables] : split_keys(all)) {
    if (std::none_of(now.tables.begin(), now.tables.end(),
                     [&](const table_reading& t) { return t.entry.key == key; }))
      continue;
    w.begin_object();
    w.field("key", key);
    w.key("tables");
    w.begin_array();
    for (const table_entry& e : tables) w.string(e.object_name);
    w.end_array();
    w.end_object();
  }
  w.end_array();
}

/// `gpushare status --json`: the document described in docs/cli.md.
inline std::string status_json(const sample* before, const sample& now,
                               const std::optional<std::string>& domain,
                               std::uint64_t interval_ns) {
  json_writer w;
  w.begin_object();
  w.field("schema_version", status_schema_version);
  w.field("gpushare_version", GPUSHARE_VERSION_STRING);
  w.field("table_layout_version", static_cast<std::uint64_t>(table_layout_version));
  w.field("generated_unix_ns", now.taken_unix_ns);
  w.field("interval_ns", interval_ns);
  w.key("domain");
  if (domain)
    w.string(*domain);
  else
    w.null();
  w.key("tables");
  w.begin_array();
  for (const auto& t : now.tables)
    if (t.snapshot) table_json(w, t, recent_device_usage(find_previous(before, t), t));
  w.end_array();
  w.key("unreadable");
  w.begin_array();
  for (const auto& t : now.tables)
    if (!t.snapshot) unreadable_json(w, t);
  w.end_array();
  split_keys_json(w, now);
  w.end_object();
  return w.str();
}

inline void write_stdout(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

inline int run_status(std::span<const std::string> args) {
  static constexpr flag_spec specs[] = {{"--domain", true},
                                        {"--all-domains", false},
                                        {"--dir", true},
                                        {"--json", false},
                                        {"--interval", true}};
  const parsed_args a = parse_command_line(args, specs, 0);
  if (a.help) {
    write_stdout(std::string(status_usage));
    return 0;
  }
  const domain_choice domain = domain_option(a);
  const std::uint64_t interval_ns =
      a.value("--interval")
          ? parse_interval_ns("--interval", *a.value("--interval"), status_interval)
          : default_status_interval_ns;
  std::optional<sample> first;
  if (interval_ns > 0) {
    first = take_sample(domain);
    if (!first->tables.empty()) std::this_thread::sleep_for(std::chrono::nanoseconds(interval_ns));
  }
  const sample now = take_sample(domain);
  const sample* before = first ? &*first : nullptr;
  write_stdout(a.has("--json") ? status_json(before, now, domain.name, interval_ns)
                               : status_text(before, now, domain));
  return 0;
}

} // namespace gpushare::cli
