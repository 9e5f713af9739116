// SPDX-License-Identifier: Apache-2.0
// Warnings a session prints once per process when it joins, for configurations that would
// otherwise fail silently (issue 24, item 2):
//   - a GPUSHARE_* variable of the environment that gpushare does not know (a misspelling such
//     as GPUSHARE_PRIORTY is otherwise ignored): named, with the nearest known variable;
//   - other tables for the same key (another GPUSHARE_DOMAIN, another table mode, another
//     user): processes in different tables are not arbitrated against each other at all.
// The texts are built by pure functions, which the tests call directly.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <gpushare/detail/object_name.hpp>
#include <gpushare/error.hpp>
#include <gpushare/table_types.hpp>

extern char** environ; // POSIX: the process's environment

namespace gpushare {
inline namespace v0 {
namespace detail {

/// Every environment variable gpushare reads, the CUDA layer's included (README, Configuration).
inline constexpr std::string_view known_variables[] = {
    "GPUSHARE_NAME",
    "GPUSHARE_DOMAIN",
    "GPUSHARE_DIR",
    "GPUSHARE_TABLE_MODE",
    "GPUSHARE_PRIORITY",
    "GPUSHARE_SHARE",
    "GPUSHARE_COMPUTE_LIMIT",
    "GPUSHARE_QUANTUM",
    "GPUSHARE_HANDOVER",
    "GPUSHARE_MAX_GUARD",
    "GPUSHARE_COMPUTE_GUARANTEE",
    "GPUSHARE_RECLAIM_DEADLINE",
    "GPUSHARE_MEMORY_LIMIT",
    "GPUSHARE_MEMORY_GUARANTEE",
    "GPUSHARE_GROUP",
    "GPUSHARE_GROUP_MEMORY_LIMIT",
    "GPUSHARE_GROUP_SHARE",
    "GPUSHARE_CAPACITY",
    "GPUSHARE_DEVICE_HEADROOM",
    "GPUSHARE_CONTEXT_OVERHEAD",
    "GPUSHARE_ALLOC_TIMEOUT",
    "GPUSHARE_MAX_IN_FLIGHT",
    "GPUSHARE_MAX_IN_FLIGHT_LOWER",
    "GPUSHARE_DRAIN",
    "GPUSHARE_DRAIN_TIMEOUT",
    "GPUSHARE_POD_NAME",
    "GPUSHARE_POD_NAMESPACE",
    "GPUSHARE_CONTAINER_NAME",
    // Not read by the library: `gpushare run --library` passes the key to the program in it.
    "GPUSHARE_KEY",
};

/// Variables of gpushare's own test and build tooling: not the library's, never warned about.
inline constexpr std::string_view tooling_prefix = "GPUSHARE_TEST_";

/// The edit distance of `a` and `b` (insertions, deletions, substitutions and transpositions of
/// two neighbours, each 1: optimal string alignment).
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

/// The known variables nearest to `name`, all of them on a tie (none if none is near: more than
/// a third of the letters after GPUSHARE_ differ, and more than 2).
inline std::vector<std::string_view> nearest_variables(std::string_view name) {
  std::vector<std::string_view> best;
  std::size_t best_d = std::string_view::npos;
  for (std::string_view k : known_variables) {
    const std::size_t d = edit_distance(name, k);
    if (d < best_d) best.clear(), best_d = d;
    if (d == best_d) best.push_back(k);
  }
  const std::size_t tail = name.size() > 9 ? name.size() - 9 : 0; // after "GPUSHARE_"
  if (best_d > std::max<std::size_t>(2, tail / 3)) best.clear();
  return best;
}

/// One warning per GPUSHARE_* name in `names` that gpushare does not read (in order; empty if
/// none). `names` are variable names (without "=value").
inline std::vector<std::string> unknown_variable_warnings(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const std::string& n : names) {
    if (n.rfind("GPUSHARE_", 0) != 0 || n.rfind(tooling_prefix, 0) == 0) continue;
    if (std::find(std::begin(known_variables), std::end(known_variables), n) !=
        std::end(known_variables))
      continue;
    std::string w = "environment variable " + n + " is not one gpushare reads, so it is ignored";
    if (const auto near = nearest_variables(n); !near.empty()) {
      w += "; did you mean ";
      for (std::size_t i = 0; i < near.size(); ++i)
        w += (i == 0 ? "" : i + 1 == near.size() ? " or " : ", ") + std::string(near[i]);
      w += "?";
    } else
      w += " (README.md, \"Configuration\", lists the variables)";
    out.push_back(std::move(w));
  }
  return out;
}

/// The names of the GPUSHARE_* variables of this process's environment.
inline std::vector<std::string> environment_gpushare_names() {
  std::vector<std::string> names;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry = *e;
    if (entry.rfind("GPUSHARE_", 0) != 0) continue;
    names.emplace_back(entry.substr(0, entry.find('=')));
  }
  return names;
}

/// "domain "x", group 100's" / "domain "x", uid 1000's": how a table differs, for the warning.
inline std::string table_entry_text(const table_entry& e) {
  return e.object_name + " (domain \"" + e.domain + "\", " + (e.group ? "group" : "user") +
         " mode, " + (e.group ? "gid " : "uid ") + std::to_string(e.owner_id) + ")";
}

/// The warning for a session that joined table `own` (its object name) of key `key` while
/// `tables` (every table of that key, `own` among them or not) holds others; empty if none.
inline std::string split_tables_warning(std::string_view own, std::string_view key,
                                        const std::vector<table_entry>& tables) {
  std::string others;
  std::size_t n = 0;
  for (const table_entry& e : tables) {
    if (e.object_name == own) continue;
    if (n++ != 0) others += ", ";
    others += table_entry_text(e);
  }
  if (n == 0) return {};
  return "this session joined table " + std::string(own) + ", but " + std::to_string(n) +
         (n == 1 ? " other table exists" : " other tables exist") + " for key \"" +
         std::string(key) + "\": " + others +
         ". Sessions in different tables are not arbitrated against each other: give every "
         "process sharing this GPU the same GPUSHARE_DOMAIN and GPUSHARE_TABLE_MODE (group mode "
         "for several users). A table no session uses any more is removed by `gpushare clean`.";
}

/// The warnings for a session that joined table `own` of key `key`: unknown GPUSHARE_*
/// variables of the environment, then other tables of its key, in its own table directory and
/// in /dev/shm. A directory that cannot be listed gives no split warning (the join succeeded).
inline std::vector<std::string> join_warnings(const std::string& own, std::string_view key) {
  std::vector<std::string> out = unknown_variable_warnings(environment_gpushare_names());
  try {
    std::vector<table_entry> tables = list_table_files_for_key(key);
    if (name_is_path(own)) {
      std::vector<table_entry> in_dir = list_table_files_for_key(key, object_dir(own));
      tables.insert(tables.begin(), in_dir.begin(), in_dir.end());
    }
    if (std::string w = split_tables_warning(own, key, tables); !w.empty())
      out.push_back(std::move(w));
  } catch (const error&) {
  }
  return out;
}

} // namespace detail
} // namespace v0
} // namespace gpushare
