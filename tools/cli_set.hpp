// SPDX-License-Identifier: Apache-2.0
// `gpushare set`: change a live session's settings through table::configure().
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <gpushare/options.hpp>
#include <gpushare/table.hpp>

#include "cli_args.hpp"
#include "cli_errors.hpp"
#include "cli_format.hpp"
#include "cli_sample.hpp"
#include "cli_status.hpp"
#include "cli_usage.hpp"

namespace gpushare::cli {

/// Which session `gpushare set` is about: a name, or a slot number.
struct session_target {
  std::optional<std::string> name;
  std::optional<std::uint32_t> slot;
};

/// Digits only: a slot number. "name:<rest>": the name <rest>. Anything else: a name.
inline session_target parse_session_target(const std::string& word) {
  session_target t;
  if (word.rfind("name:", 0) == 0) {
    t.name = word.substr(5);
  } else if (!word.empty() &&
             std::all_of(word.begin(), word.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    t.slot =
        static_cast<std::uint32_t>(parse_count("<session>", word, 0, detail::max_slot_count - 1));
  } else {
    t.name = word;
  }
  if (t.name && t.name->empty()) throw usage_error("the session name is empty");
  return t;
}

/// The settings change the flags ask for; usage_error if a value is malformed.
inline settings_change parse_settings(const parsed_args& a) {
  settings_change c;
  if (auto v = a.value("--share")) c.share = parse_value("--share", *v, detail::parse_share);
  if (auto v = a.value("--priority"))
    c.priority = parse_value("--priority", *v, detail::parse_priority);
  if (auto v = a.value("--compute-limit"))
    c.compute_limit_ppm = parse_value("--compute-limit", *v, detail::parse_percent_ppm);
  if (auto v = a.value("--memory-limit"))
    c.memory_limit = parse_value("--memory-limit", *v, detail::parse_memory_amount);
  if (auto v = a.value("--memory-guarantee"))
    c.memory_guarantee = parse_value("--memory-guarantee", *v, detail::parse_memory_amount);
  if (auto v = a.value("--quantum"))
    c.quantum = std::chrono::nanoseconds(
        static_cast<std::int64_t>(parse_value("--quantum", *v, detail::parse_duration_ns)));
  if (auto v = a.value("--handover"))
    c.handover = parse_value("--handover", *v, detail::parse_handover);
  return c;
}

/// "  share: 1 -> 4" for each setting the change names.
inline std::string describe_change(const settings_change& c, const session_info& before,
                                   const session_info& after) {
  std::string out;
  auto line = [&](const char* what, const std::string& old_value, const std::string& new_value) {
    out += std::string("  ") + what + ": " + old_value;
    out += old_value == new_value ? " (unchanged)\n" : " -> " + new_value + "\n";
  };
  if (c.priority) line("priority", priority_text(before.priority), priority_text(after.priority));
  if (c.share) line("share", std::to_string(before.share), std::to_string(after.share));
  if (c.compute_limit_ppm)
    line("compute limit", detail::format_ppm_percent(before.compute_limit_ppm),
         detail::format_ppm_percent(after.compute_limit_ppm));
  if (c.memory_limit)
    line("memory limit", bytes_text(before.memory_limit), bytes_text(after.memory_limit));
  if (c.memory_guarantee)
    line("memory guarantee", bytes_text(before.memory_guarantee),
         bytes_text(after.memory_guarantee));
  if (c.quantum) line("quantum", quantum_text(before.quantum_ns), quantum_text(after.quantum_ns));
  if (c.handover) line("handover", handover_text(before.handover), handover_text(after.handover));
  return out;
}

/// "  /gpushare...: permission denied ..." for each unreadable table, to explain a failed search.
inline std::string unreadable_note(const std::vector<const table_reading*>& tables) {
  std::string out;
  for (const auto* t : tables)
    if (!t->snapshot)
      out += "\n  (not searched) " + t->entry.object_name + ": " + unreadable_text(*t);
  return out;
}

/// The tables --table names (all of them when it is not given).
inline std::vector<const table_reading*> tables_for(const sample& s,
                                                    const std::optional<std::string>& which) {
  std::vector<const table_reading*> out;
  for (const auto& t : s.tables) {
    if (which) {
      const std::string& w = *which;
      const std::string key = t.snapshot ? t.snapshot->key : t.entry.key;
      const bool match = w[0] == '/'                    ? t.entry.object_name == w
                         : w.rfind("gpushare.", 0) == 0 ? t.entry.object_name == "/" + w
                                                        : key == w;
      if (!match) continue;
    }
    out.push_back(&t);
  }
  if (which && out.empty())
    throw runtime_failure("no table matches --table " + *which +
                          " (run `gpushare status` to list the tables)");
  if (which && out.size() > 1) {
    std::string names;
    for (const auto* t : out) names += "\n  " + t->entry.object_name;
    throw runtime_failure("several tables have the key " + *which +
                          "; give --table the object name, or --domain:" + names);
  }
  return out;
}

/// Whether the caller may lock and write a table whose file is `o`: the file is owned by the
/// effective uid, or, for a group table (mode 0660), its group is one of the caller's groups (root
/// only ever its own uid).
inline bool own_table(const table::file_owner& o) {
  const uid_t me = ::geteuid();
  if (o.uid == me) return true;
  if (me == 0 || (o.mode & 0070) == 0) return false;
  if (o.gid == ::getegid()) return true;
  const int n = ::getgroups(0, nullptr);
  if (n <= 0) return false;
  std::vector<gid_t> groups(static_cast<std::size_t>(n));
  const int got = ::getgroups(n, groups.data());
  for (int i = 0; i < got; ++i)
    if (groups[static_cast<std::size_t>(i)] == o.gid) return true;
  return false;
}

/// `set` changes only the caller's own tables: it never locks or writes another user's table.
inline void check_own_table(const table::file_owner& o, const std::string& object_name) {
  if (own_table(o)) return;
  throw runtime_failure("refusing to change table " + object_name + ": it belongs to uid " +
                        std::to_string(o.uid) + " (gid " + std::to_string(o.gid) + ", mode " +
                        mode_text(o.mode) +
                        "), and gpushare set only changes the caller's own tables (or its "
                        "group's); run it as that user, e.g. sudo -u '#" +
                        std::to_string(o.uid) + "' gpushare set ...");
}

inline int run_set(std::span<const std::string> args) {
  static constexpr flag_spec specs[] = {{"--table", true},        {"--domain", true},
                                        {"--all-domains", false}, {"--share", true},
                                        {"--priority", true},     {"--compute-limit", true},
                                        {"--memory-limit", true}, {"--memory-guarantee", true},
                                        {"--quantum", true},      {"--handover", true}};
  const parsed_args a = parse_command_line(args, specs, 1);
  if (a.help) {
    write_stdout(std::string(set_usage));
    return 0;
  }
  if (a.positionals.empty()) throw usage_error("which session? give its name or its slot number");
  const session_target target = parse_session_target(a.positionals[0]);
  const settings_change change = parse_settings(a);
  if (!change.priority && !change.share && !change.compute_limit_ppm && !change.memory_limit &&
      !change.memory_guarantee && !change.quantum && !change.handover)
    throw usage_error("nothing to change: give at least one setting, e.g. --share 2");
  const domain_choice domain = domain_option(a);

  const sample s = take_sample(domain);
  // Where the search found nothing to search: why, and where the tables are.
  const std::string nothing_to_search =
      s.tables.empty() ? ": " + no_tables_text(s.other_domains, domain) : std::string();
  const std::string where = domain.name ? " in " + domain.text() : std::string();
  if (a.value("--table") && s.tables.empty())
    throw runtime_failure("no table matches --table " + *a.value("--table") + nothing_to_search);
  const std::vector<const table_reading*> tables = tables_for(s, a.value("--table"));
  std::vector<std::pair<const table_reading*, session_info>> matches;
  if (target.slot) {
    std::vector<const table_reading*> readable;
    for (const auto* t : tables)
      if (t->snapshot) readable.push_back(t);
    if (readable.empty())
      throw runtime_failure("no table to look in" + nothing_to_search + unreadable_note(tables));
    if (readable.size() > 1) {
      std::string names;
      for (const auto* t : readable) names += "\n  " + t->entry.object_name;
      throw runtime_failure("a slot number needs --table: there are " +
                            plural(readable.size(), "table") + where + ":" + names);
    }
    for (const auto& i : readable[0]->snapshot->sessions)
      if (i.id.slot == *target.slot) matches.emplace_back(readable[0], i);
    if (matches.empty())
      throw runtime_failure("no live session in slot " + std::to_string(*target.slot) +
                            " of table " + readable[0]->entry.object_name);
  } else {
    for (const auto* t : tables)
      if (t->snapshot)
        for (const auto& i : t->snapshot->sessions)
          if (i.name == *target.name) matches.emplace_back(t, i);
    if (matches.empty())
      throw runtime_failure("no live session named " + detail::quote(*target.name) +
                            (tables.empty() ? nothing_to_search : where) + unreadable_note(tables));
    if (matches.size() > 1) {
      std::string list;
      for (const auto& [t, i] : matches)
        list += "\n  table " + t->entry.object_name + " slot " + std::to_string(i.id.slot) +
                " pid " + std::to_string(i.pid);
      throw runtime_failure(std::to_string(matches.size()) + " live sessions are named " +
                            detail::quote(*target.name) + ":" + list +
                            "\nadd --table, or give a slot number instead of the name");
    }
  }

  const auto& [reading, before] = matches.front();
  // Checked on the listing's stat (so another user's table is not even opened for writing), then
  // again on the opened descriptor (the name may have been replaced in between).
  const table_entry& e = reading->entry;
  check_own_table({e.file_uid, e.file_gid, e.file_mode}, e.object_name);
  table handle = table::open_existing(e.object_name, open_timeout);
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
  for (const auto& i : table::read_unlocked(e.object_name, open_timeout).sessions)
    if (i.id == before.id) after = i;
  std::string out = "session " + detail::quote(before.name) + " (slot " +
                    std::to_string(before.id.slot) + ", pid " + std::to_string(before.pid) +
                    ") in table " + reading->entry.object_name + ":\n";
  if (after)
    out += describe_change(change, before, *after);
  else
    out += "  changed, but the session has left since\n";
  write_stdout(out);
  return 0;
}

} // namespace gpushare::cli
