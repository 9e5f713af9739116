// SPDX-License-Identifier: Apache-2.0
// Finding the session or the tables a command changes (`gpushare set`, `gpushare evict`), and who
// may change a table.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gpushare/table.hpp>

#include "cli_args.hpp"
#include "cli_errors.hpp"
#include "cli_format.hpp"
#include "cli_sample.hpp"

namespace gpushare::cli {

/// Which session `gpushare set` or `gpushare evict` is about: a name, or a slot number.
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
    t.slot = static_cast<std::uint32_t>(parse_count("<session>", word, 0, max_session_slots - 1));
  } else {
    t.name = word;
  }
  if (t.name && t.name->empty()) throw usage_error("the session name is empty");
  return t;
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

/// The tables a command looks in (--table, else all of the sample), with an explanation when
/// there are none to look in.
struct search_scope {
  std::vector<const table_reading*> tables;
  std::string nothing_to_search; ///< ": <why there are no tables>" when the sample has none
  std::string where;             ///< " in domain \"x\"" when a domain was chosen
};

inline search_scope scope_of(const sample& s, const std::optional<std::string>& which,
                             const domain_choice& domain) {
  search_scope scope;
  scope.nothing_to_search =
      s.tables.empty() ? ": " + no_tables_text(s.other_domains, domain) : std::string();
  scope.where = domain.name ? " in " + domain.text() : std::string();
  if (which && s.tables.empty())
    throw runtime_failure("no table matches --table " + *which + scope.nothing_to_search);
  scope.tables = tables_for(s, which);
  return scope;
}

/// One live session and the table it was found in.
struct found_session {
  const table_reading* reading = nullptr;
  session_info info;
};

/// The live session in slot `slot` of the only readable table of `scope`.
inline found_session find_by_slot(const search_scope& scope, std::uint32_t slot) {
  std::vector<const table_reading*> readable;
  for (const auto* t : scope.tables)
    if (t->snapshot) readable.push_back(t);
  if (readable.empty())
    throw runtime_failure("no table to look in" + scope.nothing_to_search +
                          unreadable_note(scope.tables));
  if (readable.size() > 1) {
    std::string names;
    for (const auto* t : readable) names += "\n  " + t->entry.object_name;
    throw runtime_failure("a slot number needs --table: there are " +
                          plural(readable.size(), "table") + scope.where + ":" + names);
  }
  for (const auto& i : readable[0]->snapshot->sessions)
    if (i.id.slot == slot) return {readable[0], i};
  throw runtime_failure("no live session in slot " + std::to_string(slot) + " of table " +
                        readable[0]->entry.object_name);
}

/// The only live session named `name` in the tables of `scope`.
inline found_session find_by_name(const search_scope& scope, const std::string& name) {
  std::vector<found_session> matches;
  for (const auto* t : scope.tables)
    if (t->snapshot)
      for (const auto& i : t->snapshot->sessions)
        if (i.name == name) matches.push_back({t, i});
  if (matches.empty())
    throw runtime_failure("no live session named " + quote(name) +
                          (scope.tables.empty() ? scope.nothing_to_search : scope.where) +
                          unreadable_note(scope.tables));
  if (matches.size() > 1) {
    std::string list;
    for (const auto& m : matches)
      list += "\n  table " + m.reading->entry.object_name + " slot " +
              std::to_string(m.info.id.slot) + " pid " + std::to_string(m.info.pid);
    throw runtime_failure(std::to_string(matches.size()) + " live sessions are named " +
                          quote(name) + ":" + list +
                          "\nadd --table, or give a slot number instead of the name");
  }
  return matches.front();
}

/// The one live session `target` names in `s` (only in the table --table `which` names, when
/// given); runtime_failure when there is none or more than one.
inline found_session find_session(const sample& s, const session_target& target,
                                  const std::optional<std::string>& which,
                                  const domain_choice& domain) {
  const search_scope scope = scope_of(s, which, domain);
  return target.slot ? find_by_slot(scope, *target.slot) : find_by_name(scope, *target.name);
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

/// "uid 1000 (gid 1000, mode 0600)": whose file it is.
inline std::string owner_text(const table::file_owner& o) {
  return "uid " + std::to_string(o.uid) + " (gid " + std::to_string(o.gid) + ", mode " +
         mode_text(o.mode) + ")";
}

/// `set` changes only the caller's own tables: it never locks or writes another user's table.
inline void check_own_table(const table::file_owner& o, const std::string& object_name) {
  if (own_table(o)) return;
  throw runtime_failure("refusing to change table " + object_name + ": it belongs to " +
                        owner_text(o) +
                        ", and gpushare set only changes the caller's own tables (or its "
                        "group's); run it as that user, e.g. sudo -u '#" +
                        std::to_string(o.uid) + "' gpushare set ...");
}

/// A table's defaults: only the owner of its file may change them (the library also lets root,
/// but `set` never changes another user's table, and a group member is not the owner).
inline void check_table_file_owner(const table::file_owner& o, const std::string& object_name) {
  if (o.uid == ::geteuid()) return;
  throw runtime_failure("refusing to change the defaults of table " + object_name +
                        ": it belongs to " + owner_text(o) +
                        ", and only the owner of a table's file may change its defaults; run it "
                        "as that user, e.g. sudo -u '#" +
                        std::to_string(o.uid) + "' gpushare set --table-default ...");
}

/// `evict` follows the library's rule: the owner of the table's file, or root (euid 0). Unlike
/// `set`, root may evict on another user's table; a group member may not.
inline void check_may_evict(const table::file_owner& o, const std::string& object_name) {
  const uid_t me = ::geteuid();
  if (me == 0 || o.uid == me) return;
  throw runtime_failure("refusing to evict from table " + object_name + ": it belongs to " +
                        owner_text(o) + ", and only the owner of a table's file, or root, may " +
                        "evict its sessions (this process runs as uid " + std::to_string(me) +
                        "); run it as that user, e.g. sudo -u '#" + std::to_string(o.uid) +
                        "' gpushare evict ..., or as root");
}

} // namespace gpushare::cli
