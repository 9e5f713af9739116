// SPDX-License-Identifier: Apache-2.0
// Reading every table of the machine at one moment (a "sample"), and the device time each session
// used between two samples. status, top, metrics and set all start here.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <gpushare/discovery.hpp>
#include <gpushare/error.hpp>
#include <gpushare/table.hpp>

#include "cli_args.hpp"
#include "cli_format.hpp"

namespace gpushare::cli {

/// How long the tool waits for a table that another process is still initialising.
inline constexpr std::chrono::milliseconds open_timeout{1000};
/// How the commands that lock a table (set, evict, clean) open it: a table whose lock a stopped
/// process holds is reported busy after 100 ms, not after the library's 10 s (docs/cli.md).
inline const table_open_options lock_options{open_timeout, std::chrono::milliseconds(100)};

/// One table as the tool saw it: its snapshot, or why it could not be read.
struct table_reading {
  table_entry entry;
  std::optional<table_snapshot> snapshot;
  std::uint64_t taken_ns = 0; ///< monotonic time right after the snapshot
  std::optional<errc> error;  ///< set when the table could not be read
  std::string message;        ///< the library's message for `error`
};

/// Every table (of one domain, if asked) at one moment.
struct sample {
  std::string dir; ///< the table directory it lists, normalised ("" for /dev/shm)
  std::uint64_t taken_unix_ns = 0;
  std::vector<table_reading> tables;
  /// When a domain was asked for and it has no tables: the domains that have some (from the file
  /// names), sorted, so that "no tables" can say where the tables are.
  std::vector<std::string> other_domains;

  std::size_t readable() const {
    std::size_t n = 0;
    for (const auto& t : tables) n += t.snapshot ? 1 : 0;
    return n;
  }
};

/// One sentence for a human on why the table could not be read.
inline std::string unreadable_text(const table_reading& t) {
  const table_entry& e = t.entry;
  switch (t.error.value_or(errc::system_error)) {
  case errc::permission_denied:
    return "permission denied: the table belongs to another user or group (file owner uid " +
           std::to_string(e.file_uid) + ", gid " + std::to_string(e.file_gid) + ", mode " +
           mode_text(e.file_mode) + "); run as that user to see it";
  case errc::table_incompatible:
    return "incompatible layout (made by another gpushare version): " + t.message;
  case errc::table_corrupt: return "corrupt: " + t.message;
  case errc::table_busy: return "busy: " + t.message;
  default: return t.message;
  }
}

/// The domains other than `domain` that have tables in the table directory `dir` (going by the
/// file names), sorted.
inline std::vector<std::string> domains_other_than(const std::string& domain,
                                                   const std::string& dir) {
  std::set<std::string> others;
  for (const table_entry& e : list_tables_in(dir))
    if (e.domain != domain) others.insert(e.domain);
  return {others.begin(), others.end()};
}

/// Snapshots every table in the chosen table directory (of `domain` only, when given). Tables that
/// disappear meanwhile are left out; tables that cannot be read are kept with their error. Every
/// table is read lock-free into a private copy (table::read_unlocked): nothing is locked or
/// written, so a table of another user, or one whose lock a stopped process holds, is read all the
/// same; the snapshot may be torn (docs/cli.md, "Other users' tables"). Throws errc::system_error
/// if /dev/shm cannot be listed.
inline sample take_sample(const domain_choice& choice) {
  const std::optional<std::string>& domain = choice.name;
  sample s;
  s.dir = choice.dir;
  for (table_entry& e : list_tables_in(choice.dir, domain)) {
    table_reading t;
    t.entry = std::move(e);
    try {
      t.snapshot = table::read_unlocked(t.entry.object_name, open_timeout);
      t.taken_ns =
          static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         std::chrono::steady_clock::now().time_since_epoch())
                                         .count());
      // A name can read as several domains (see parse_table_file_name); the header decides.
      if (domain && t.snapshot->domain != *domain) continue;
    } catch (const gpushare::error& err) {
      // no_such_table: the name vanished, or it is a creation abandoned by its creator (not a
      // table: the next session of its key recreates it, `gpushare clean` removes it).
      if (err.code() == errc::no_such_table) continue;
      t.error = err.code();
      t.message = err.what();
    }
    s.tables.push_back(std::move(t));
  }
  s.taken_unix_ns =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  if (domain && s.tables.empty()) s.other_domains = domains_other_than(*domain, choice.dir);
  return s;
}

/// Why there is nothing to show: "there are no gpushare tables in /dev/shm", or for one domain
/// `domain "x" has no tables; tables exist in domains "a", "b" (see gpushare status
/// --all-domains)`.
inline std::string no_tables_text(const std::vector<std::string>& other_domains,
                                  const domain_choice& choice) {
  if (!choice.name) return "there are no gpushare tables in " + choice.dir_text();
  std::string out =
      choice.text() + " has no tables" + (choice.dir.empty() ? std::string() : " in " + choice.dir);
  if (other_domains.empty())
    return out + " (there are no gpushare tables in " + choice.dir_text() + " at all)";
  out += std::string("; tables exist in ") + (other_domains.size() == 1 ? "domain " : "domains ");
  for (std::size_t i = 0; i < other_domains.size(); ++i)
    out += (i == 0 ? std::string() : std::string(", ")) + quote(other_domains[i]);
  return out + " (see `gpushare status --all-domains`)";
}

/// The reading of the same table (same name, same creation time) in `before`, if any.
inline const table_reading* find_previous(const sample* before, const table_reading& now) {
  if (before == nullptr || !now.snapshot) return nullptr;
  for (const auto& t : before->tables)
    if (t.snapshot && t.entry.object_name == now.entry.object_name &&
        t.snapshot->created_unix_ns == now.snapshot->created_unix_ns)
      return &t;
  return nullptr;
}

/// Device time used over the window between two readings of one table, per session of `now`.
struct recent_usage {
  std::optional<std::uint64_t> window_ns; ///< wall time between the two snapshots
  /// One per session of now.snapshot, in its order: device ns accounted in the window * 100 /
  /// the window's ns, or / all the device ns accounted in it when that is more, so that they add
  /// up to at most 100%; nullopt for a session that was not in the earlier snapshot.
  std::vector<std::optional<double>> percent;
};

inline recent_usage recent_device_usage(const table_reading* before, const table_reading& now) {
  recent_usage r;
  if (!now.snapshot) return r;
  r.percent.resize(now.snapshot->sessions.size());
  if (before == nullptr || !before->snapshot || now.taken_ns <= before->taken_ns) return r;
  r.window_ns = now.taken_ns - before->taken_ns;
  std::vector<std::optional<std::uint64_t>> used(now.snapshot->sessions.size());
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < now.snapshot->sessions.size(); ++i) {
    const session_info& s = now.snapshot->sessions[i];
    for (const session_info& p : before->snapshot->sessions) {
      if (p.id != s.id) continue;
      used[i] = s.device_ns > p.device_ns ? s.device_ns - p.device_ns : 0;
      total += *used[i];
    }
  }
  // A guard's time is accounted when it ends, all of it: one that began before the window adds
  // time from before it, and the column added up to more than 100% (96.0 + 7.3). Over the window,
  // or over the time accounted in it when that is longer, the column adds up to at most 100%.
  const double base = static_cast<double>(std::max(*r.window_ns, total));
  for (std::size_t i = 0; i < used.size(); ++i)
    if (used[i]) r.percent[i] = static_cast<double>(*used[i]) * 100.0 / base;
  return r;
}

} // namespace gpushare::cli
