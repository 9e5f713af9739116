// SPDX-License-Identifier: Apache-2.0
// Session groups (session_options::group, GPUSHARE_GROUP) as the tool shows them: the GROUP
// column and a "groups:" line in `gpushare status`, "group" fields and a "groups" array in its
// JSON, and the gpushare_group_* families and the group label of `gpushare metrics`.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <gpushare/table.hpp>
#include <gpushare/types.hpp>

#include "cli_format.hpp"
#include "cli_json.hpp"
#include "cli_prometheus.hpp"

namespace gpushare::cli {

/// One group of a table, summed over its live members.
struct group_summary {
  std::string name;
  std::uint64_t memory_limit = 0; ///< UINT64_MAX: no limit
  std::uint32_t share = 1;
  std::uint64_t sessions = 0;
  std::uint64_t committed = 0; ///< sum of max(reserved + external, guarantee): what the limit holds
  std::uint64_t reserved = 0;
};

/// The groups of `s`'s live sessions, by name.
inline std::vector<group_summary> groups_of(const table_snapshot& s) {
  std::vector<group_summary> out;
  for (const session_info& i : s.sessions) {
    if (i.group.empty()) continue;
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const group_summary& g) { return g.name == i.group; });
    if (it == out.end()) {
      out.push_back({i.group, i.group_memory_limit, i.group_share, 0, 0, 0});
      it = out.end() - 1;
    }
    ++it->sessions;
    it->committed = saturating_add(it->committed,
                                   memory_commitment(i.reserved, i.external, i.memory_guarantee));
    it->reserved = saturating_add(it->reserved, i.reserved);
  }
  std::sort(out.begin(), out.end(),
            [](const group_summary& a, const group_summary& b) { return a.name < b.name; });
  return out;
}

inline std::string group_limit_text(std::uint64_t limit) {
  return limit == UINT64_MAX ? std::string("no limit") : bytes_text(limit);
}

/// "  groups: "pod-a" 2 sessions, share 2, committed 70.00 MiB of 100.00 MiB; ...\n", or "".
inline std::string groups_text(const table_snapshot& s) {
  const auto groups = groups_of(s);
  if (groups.empty()) return "";
  std::string out = "  groups: ";
  for (std::size_t k = 0; k < groups.size(); ++k) {
    const group_summary& g = groups[k];
    out +=
        (k == 0 ? "" : "; ") + quote(g.name) + " " + plural(g.sessions, "session") + ", share " +
        std::to_string(g.share) + ", committed " + bytes_text(g.committed) +
        (g.memory_limit == UINT64_MAX ? ", no memory limit" : " of " + bytes_text(g.memory_limit));
  }
  return out + "\n";
}

/// The GROUP cell of a session row: its group's name, or "-".
inline std::string group_cell(const session_info& i) {
  return i.group.empty() ? std::string("-") : safe_text(i.group);
}

/// "group": the session's group's name, or null.
inline void session_group_json(json_writer& w, const session_info& i) {
  w.key("group");
  if (i.group.empty())
    w.null();
  else
    w.string(i.group);
}

/// "groups": [{"name", "sessions", "share", "memory_limit_bytes" (null: none),
/// "committed_bytes", "reserved_bytes"}] of the table's live sessions.
inline void groups_json(json_writer& w, const table_snapshot& s) {
  w.key("groups");
  w.begin_array();
  for (const group_summary& g : groups_of(s)) {
    w.begin_object();
    w.field("name", g.name);
    w.field("sessions", g.sessions);
    w.field("share", g.share);
    w.key("memory_limit_bytes");
    if (g.memory_limit == UINT64_MAX)
      w.null();
    else
      w.number(g.memory_limit);
    w.field("committed_bytes", g.committed);
    w.field("reserved_bytes", g.reserved);
    w.end_object();
  }
  w.end_array();
}

/// The group families, after the table families.
inline void declare_group_metrics(exposition& x) {
  x.declare("gpushare_group_sessions", "gauge", "Live sessions of the session group.");
  x.declare("gpushare_group_share", "gauge",
            "Weighted share of device time of the session group as a whole.");
  x.declare("gpushare_group_memory_limit_bytes", "gauge",
            "Most memory the group's sessions may commit together (absent: no limit).");
  x.declare("gpushare_group_committed_bytes", "gauge",
            "Memory the group's sessions commit: reservations, external usage and unused "
            "guarantees.");
  x.declare("gpushare_group_reserved_bytes", "gauge",
            "Bytes held by the reservations of the group's sessions.");
}

/// The samples of the groups of `s`; `labels` are its table's.
inline void group_samples(exposition& x, const label_set& labels, const table_snapshot& s) {
  for (const group_summary& g : groups_of(s)) {
    label_set l = labels;
    l.emplace_back("group", g.name);
    x.sample("gpushare_group_sessions", l, g.sessions);
    x.sample("gpushare_group_share", l, g.share);
    if (g.memory_limit != UINT64_MAX)
      x.sample("gpushare_group_memory_limit_bytes", l, g.memory_limit);
    x.sample("gpushare_group_committed_bytes", l, g.committed);
    x.sample("gpushare_group_reserved_bytes", l, g.reserved);
  }
}

} // namespace gpushare::cli
