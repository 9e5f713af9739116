// SPDX-License-Identifier: Apache-2.0
// `gpushare set`: change a live session's settings through table::configure(), or with
// --table-default the defaults of tables through table::configure_defaults().
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <gpushare/options.hpp>
#include <gpushare/table.hpp>

#include "cli_args.hpp"
#include "cli_errors.hpp"
#include "cli_find.hpp"
#include "cli_format.hpp"
#include "cli_sample.hpp"
#include "cli_status.hpp"
#include "cli_usage.hpp"

namespace gpushare::cli {

/// The settings change the flags ask for; usage_error if a value is malformed.
inline settings_change parse_settings(const parsed_args& a) {
  settings_change c;
  if (auto v = a.value("--share")) c.share = parse_value("--share", *v, parse_share);
  if (auto v = a.value("--priority")) c.priority = parse_value("--priority", *v, parse_priority);
  if (auto v = a.value("--compute-limit"))
    c.compute_limit_ppm = parse_value("--compute-limit", *v, parse_percent);
  if (auto v = a.value("--memory-limit"))
    c.memory_limit = parse_value("--memory-limit", *v, parse_memory_amount);
  if (auto v = a.value("--memory-guarantee"))
    c.memory_guarantee = parse_value("--memory-guarantee", *v, parse_memory_amount);
  if (auto v = a.value("--quantum")) c.quantum = parse_value("--quantum", *v, parse_quantum);
  if (auto v = a.value("--handover")) c.handover = parse_value("--handover", *v, parse_handover);
  if (auto v = a.value("--max-guard"))
    c.max_guard = parse_value("--max-guard", *v, parse_max_guard);
  if (auto v = a.value("--compute-guarantee"))
    c.compute_guarantee_ppm = parse_value("--compute-guarantee", *v, parse_compute_guarantee);
  if (auto v = a.value("--pause-hold"))
    c.pause_hold_ppm = parse_value("--pause-hold", *v, parse_pause_hold);
  return c;
}

/// Whether the change names no setting at all.
inline bool change_is_empty(const settings_change& c) {
  return !c.priority && !c.share && !c.compute_limit_ppm && !c.memory_limit &&
         !c.memory_guarantee && !c.quantum && !c.handover && !c.max_guard &&
         !c.compute_guarantee_ppm && !c.pause_hold_ppm;
}

/// The setting flags of `set` that only a session has. --max-guard is not among them: it is also
/// the one default of a table (--table-default).
inline constexpr std::string_view session_setting_flags[] = {
    "--share",   "--priority", "--compute-limit",     "--memory-limit", "--memory-guarantee",
    "--quantum", "--handover", "--compute-guarantee", "--pause-hold"};

/// The table defaults `set --table-default` asks for; usage_error for a session given with it, a
/// session setting, or a missing --max-guard.
inline table_defaults parse_table_defaults(const parsed_args& a) {
  if (!a.positionals.empty())
    throw usage_error("give --table-default or a session ('" + a.positionals[0] +
                      "'), not both: --table-default changes the defaults of tables, not a "
                      "session's settings");
  for (const auto& [flag, value] : a.flags)
    for (const std::string_view setting : session_setting_flags)
      if (flag == setting)
        throw usage_error(flag +
                          " cannot be used with --table-default: it is a setting of a session; "
                          "a table has a default guard bound (--max-guard DUR|none) and a "
                          "capacity (--capacity SIZE|unlimited)");
  const auto v = a.value("--max-guard");
  const auto c = a.value("--capacity");
  if (!v && !c)
    throw usage_error("--table-default needs --max-guard DUR|none (the guard bound of the "
                      "sessions that set none of their own) or --capacity SIZE|unlimited");
  table_defaults d;
  if (v) d.max_guard = parse_value("--max-guard", *v, parse_max_guard);
  if (c) d.capacity = parse_value("--capacity", *c, parse_capacity);
  return d;
}

/// "  share: 1 -> 4" for each setting the change names. `table_default_ns` is the table's default
/// guard bound, which applies to a session without a bound of its own.
inline std::string describe_change(const settings_change& c, const session_info& before,
                                   const session_info& after, std::uint64_t table_default_ns = 0) {
  std::string out;
  auto line = [&](const char* what, const std::string& old_value, const std::string& new_value) {
    out += std::string("  ") + what + ": " + old_value;
    out += old_value == new_value ? " (unchanged)\n" : " -> " + new_value + "\n";
  };
  if (c.priority) line("priority", priority_text(before.priority), priority_text(after.priority));
  if (c.share) line("share", std::to_string(before.share), std::to_string(after.share));
  if (c.compute_limit_ppm)
    line("compute limit", format_percent(before.compute_limit_ppm),
         format_percent(after.compute_limit_ppm));
  if (c.memory_limit)
    line("memory limit", bytes_text(before.memory_limit), bytes_text(after.memory_limit));
  if (c.memory_guarantee)
    line("memory guarantee", bytes_text(before.memory_guarantee),
         bytes_text(after.memory_guarantee));
  if (c.quantum) line("quantum", quantum_text(before.quantum_ns), quantum_text(after.quantum_ns));
  if (c.handover) line("handover", handover_text(before.handover), handover_text(after.handover));
  if (c.max_guard)
    line("guard bound", session_guard_bound_text(before.max_guard_ns, table_default_ns),
         session_guard_bound_text(after.max_guard_ns, table_default_ns));
  if (c.compute_guarantee_ppm)
    line("compute guarantee", guarantee_text(before.compute_guarantee_ppm),
         guarantee_text(after.compute_guarantee_ppm));
  if (c.pause_hold_ppm)
    line("pause hold", pause_hold_text(before.pause_hold_ppm),
         pause_hold_text(after.pause_hold_ppm));
  return out;
}

/// The flags `set` accepts.
inline constexpr flag_spec set_flags[] = {{"--table", true},          {"--domain", true},
                                          {"--all-domains", false},   {"--dir", true},
                                          {"--table-default", false}, {"--share", true},
                                          {"--priority", true},       {"--compute-limit", true},
                                          {"--memory-limit", true},   {"--memory-guarantee", true},
                                          {"--quantum", true},        {"--handover", true},
                                          {"--max-guard", true},      {"--compute-guarantee", true},
                                          {"--pause-hold", true},     {"--capacity", true}};

/// Changes the settings of the one session `a` names, and prints them as old -> new.
inline int set_session(const parsed_args& a) {
  if (a.positionals.empty())
    throw usage_error("which session? give its name or its slot number (or --table-default to "
                      "change the tables' default guard bound or capacity)");
  if (a.has("--capacity"))
    throw usage_error("--capacity is a table's, not a session's: use gpushare set "
                      "--table-default --capacity SIZE --table T");
  const session_target target = parse_session_target(a.positionals[0]);
  const settings_change change = parse_settings(a);
  if (change_is_empty(change))
    throw usage_error("nothing to change: give at least one setting, e.g. --share 2");
  const domain_choice domain = domain_option(a);
  const sample s = take_sample(domain);
  const auto [reading, before] = find_session(s, target, a.value("--table"), domain);
  // Checked on the listing's stat (so another user's table is not even opened for writing), then
  // again on the opened descriptor (the name may have been replaced in between).
  const table_entry& e = reading->entry;
  check_own_table({e.file_uid, e.file_gid, e.file_mode}, e.object_name);
  table handle = table::open_existing(e.object_name, lock_options);
  check_own_table(handle.owner(), e.object_name);
  try {
    handle.configure(before.id, change);
  } catch (const gpushare::error& err) {
    if (err.code() != errc::table_busy) throw;
    throw runtime_failure("table " + e.object_name +
                          " is busy: its lock is held (by a stopped or hung process?); nothing "
                          "changed");
  }
  std::optional<session_info> after;
  const table_snapshot now = table::read_unlocked(e.object_name, open_timeout);
  for (const auto& i : now.sessions)
    if (i.id == before.id) after = i;
  std::string out = "session " + quote(before.name) + " (slot " + std::to_string(before.id.slot) +
                    ", pid " + std::to_string(before.pid) + ") in table " + e.object_name + ":\n";
  if (after)
    out += describe_change(change, before, *after, now.default_max_guard_ns);
  else
    out += "  changed, but the session has left since\n";
  write_stdout(out);
  return 0;
}

/// The tables `set --table-default` changes: every table of the selection, or none when one of
/// them cannot be changed (unreadable, or not the caller's).
inline std::vector<const table_reading*> tables_to_default(const sample& s, const parsed_args& a,
                                                           const domain_choice& domain) {
  const search_scope scope = scope_of(s, a.value("--table"), domain);
  if (scope.tables.empty()) throw runtime_failure("no table to change" + scope.nothing_to_search);
  std::string refused;
  for (const auto* t : scope.tables) {
    const table_entry& e = t->entry;
    if (!t->snapshot)
      refused += "\n  " + e.object_name + ": " + unreadable_text(*t);
    else if (e.file_uid != ::geteuid())
      refused += "\n  " + e.object_name + ": it belongs to " +
                 owner_text({e.file_uid, e.file_gid, e.file_mode}) +
                 "; only the owner of a table's file may change its defaults";
  }
  if (!refused.empty())
    throw runtime_failure("nothing changed: of the " + plural(scope.tables.size(), "table") +
                          " selected" + scope.where +
                          ", these cannot be changed by this user:" + refused +
                          "\nchoose the tables with --table or --domain, or run as their owner");
  return scope.tables;
}

/// "default guard bound of T: none -> 30 s", "capacity of T: unlimited -> 80.00 GiB": a line for
/// each of `d`'s settings, from the table's readings before and after.
inline std::string table_defaults_text(const std::string& name, const table_defaults& d,
                                       const table_snapshot& before, const table_snapshot& after) {
  std::string out;
  const auto line = [&](const char* what, const std::string& b, const std::string& a) {
    out += std::string(what) + " of " + name + ": " + b + (b == a ? " (unchanged)" : " -> " + a) +
           "\n";
  };
  if (d.max_guard)
    line("default guard bound", guard_bound_text(before.default_max_guard_ns),
         guard_bound_text(after.default_max_guard_ns));
  if (d.capacity)
    line("capacity", format_capacity(before.capacity), format_capacity(after.capacity));
  return out;
}

/// `set --table-default`: changes the defaults of every table selected, printing each as old ->
/// new. A table found busy is reported and the others are still changed (exit 1).
inline int set_table_defaults(const parsed_args& a) {
  const table_defaults defaults = parse_table_defaults(a);
  const domain_choice domain = domain_option(a);
  const sample s = take_sample(domain);
  const auto tables = tables_to_default(s, a, domain);
  if (defaults.capacity && tables.size() > 1)
    throw usage_error("--capacity changes one table, and " + std::to_string(tables.size()) +
                      " are selected: choose it with --table");
  std::string busy;
  for (const auto* t : tables) {
    const std::string& name = t->entry.object_name;
    table handle = table::open_existing(name, lock_options);
    check_table_file_owner(handle.owner(), name);
    const table_snapshot before = table::read_unlocked(name, open_timeout);
    try {
      handle.configure_defaults(defaults);
    } catch (const gpushare::error& err) {
      if (err.code() == errc::invalid_argument) throw runtime_failure(err.what());
      if (err.code() != errc::table_busy) throw;
      busy += "\n  " + name;
      continue;
    }
    write_stdout(
        table_defaults_text(name, defaults, before, table::read_unlocked(name, open_timeout)));
  }
  if (!busy.empty())
    throw runtime_failure("unchanged, busy: the lock of these tables is held (by a stopped or "
                          "hung process?); the others were changed:" +
                          busy);
  return 0;
}

inline int run_set(std::span<const std::string> args) {
  const parsed_args a = parse_command_line(args, set_flags, 1);
  if (a.help) {
    write_stdout(std::string(set_usage));
    return 0;
  }
  return a.has("--table-default") ? set_table_defaults(a) : set_session(a);
}

} // namespace gpushare::cli
