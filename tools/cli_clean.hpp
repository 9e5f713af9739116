// SPDX-License-Identifier: Apache-2.0
// `gpushare clean`: remove tables that no live session uses (all matching tables with --force).
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <span>
#include <string>

#include <gpushare/discovery.hpp>

#include "cli_args.hpp"
#include "cli_clean_cudasim.hpp"
#include "cli_sample.hpp"
#include "cli_status.hpp"
#include "cli_usage.hpp"

namespace gpushare::cli {

/// "1 live session", "2 dead sessions".
inline std::string sessions_text(std::uint32_t n, const char* kind) {
  return plural(n, std::string(kind) + " session");
}

/// One `gpushare clean` run over the tables it lists: what it says and what it counted.
struct cleaner {
  bool force = false, dry_run = false;
  removal_options options;
  uid_t euid = ::geteuid();
  bool members_remove = false; ///< a group member may remove the group's tables (see below)
  std::string out;
  std::size_t matching = 0, removed = 0, failed = 0;

  /// Unlinks the name whatever the table holds (--force); `why` says what it held.
  void remove_forcibly(const table_entry& e, const std::string& why) {
    if (dry_run) {
      out += "would remove " + e.object_name + " (--force: " + why + ")\n";
      ++removed;
      return;
    }
    try {
      if (remove_table_forcibly(e.object_name)) {
        out += "removed " + e.object_name + " (--force: " + why + ")\n";
        ++removed;
      } else {
        out += "skipped " + e.object_name + ": it no longer exists\n";
      }
    } catch (const gpushare::error& err) {
      out += "failed to remove " + e.object_name + ": " + err.what() + "\n";
      ++failed;
    }
  }

  /// What remove_unused_table() said of table `e` (a `foreign` one: another owner's).
  void report(const table_entry& e, const removal_result& r, bool foreign) {
    switch (r.status) {
    case removal_status::other_domain: return; // the name only looked like the domain's
    case removal_status::gone: out += "skipped " + e.object_name + ": it no longer exists\n"; break;
    case removal_status::removed:
    case removal_status::would_remove:
      ++removed;
      out += (dry_run ? "would remove " : "removed ") + e.object_name + " (" +
             (r.dead_sessions ? sessions_text(r.dead_sessions, "dead") : "no live sessions") +
             ")\n";
      break;
    case removal_status::in_use:
      if (force && !foreign) {
        // A dry run removes nothing: said in the conditional, not as done.
        const bool one = r.live_sessions == 1;
        remove_forcibly(e,
                        (dry_run ? "it has " : "it had ") + sessions_text(r.live_sessions, "live") +
                            (dry_run ? ", which would go" : (one ? ", which goes" : ", which go")) +
                            " on using the removed table, no longer arbitrated with "
                            "processes that start later");
      } else
        out += "kept " + e.object_name + ": " + sessions_text(r.live_sessions, "live") + "\n";
      break;
    }
    ++matching;
  }

  /// A table that could not be opened to check it (`err`).
  void unreadable(const table_entry& e, const gpushare::error& err, bool foreign) {
    ++matching;
    table_reading t;
    t.entry = e;
    t.error = err.code();
    t.message = err.what();
    if (force && !foreign)
      remove_forcibly(e, unreadable_text(t));
    else if (foreign)
      out += "kept " + e.object_name + " of uid " + std::to_string(e.file_uid) + ": " +
             unreadable_text(t) + "\n";
    else
      out += "kept " + e.object_name + ": " + unreadable_text(t) +
             (err.code() == errc::permission_denied ? "\n" : "; --force removes it anyway\n");
  }

  void clean(const table_entry& e) {
    // Another owner's object: never without --force, never forcibly, and only by root, and then
    // only what remove_unused_table() verifies, under the table's own lock, to be an unused table.
    const bool foreign =
        e.file_uid != euid && !(members_remove && e.group && caller_in_group(e.file_gid));
    if (foreign && !(force && euid == 0)) {
      ++matching;
      out += "kept " + e.object_name + ": owned by uid " + std::to_string(e.file_uid) +
             (euid == 0 ? " (as root, --force removes another user's table if it is an unused "
                          "gpushare table)\n"
                        : "\n");
      return;
    }
    removal_options eo = options;
    eo.any_owner = foreign;
    try {
      report(e, remove_unused_table(e.object_name, eo), foreign);
    } catch (const gpushare::error& err) {
      unreadable(e, err, foreign);
    }
  }
};

inline int run_clean(std::span<const std::string> args) {
  static constexpr flag_spec specs[] = {{"--domain", true},   {"--all-domains", false},
                                        {"--dir", true},      {"--force", false},
                                        {"--dry-run", false}, {"--cudasim", false}};
  const parsed_args a = parse_command_line(args, specs, 256);
  if (a.help) {
    write_stdout(std::string(clean_usage));
    return 0;
  }
  if (a.has("--cudasim")) return run_clean_cudasim(a);
  if (!a.positionals.empty())
    throw usage_error("unexpected argument '" + a.positionals.front() +
                      "' (names are given only with --cudasim)");
  const domain_choice choice = domain_option(a);
  const std::optional<std::string>& domain = choice.name;
  cleaner c;
  c.force = a.has("--force");
  c.dry_run = a.has("--dry-run");
  c.options.dry_run = c.dry_run;
  c.options.domain = domain;
  c.options.open_timeout = open_timeout;
  c.options.lock_timeout = lock_options.lock_timeout;
  // In a table directory without the sticky bit, a member of a group-mode table's group may
  // remove it as its owner may (the directory lets it unlink; /dev/shm is sticky: only owners).
  struct stat dir_st {};
  c.members_remove = !choice.dir.empty() && ::stat(choice.dir.c_str(), &dir_st) == 0 &&
                     (dir_st.st_mode & S_ISVTX) == 0;
  for (const table_entry& e : list_tables_in(choice.dir, domain)) c.clean(e);
  std::string out = std::move(c.out);
  out += (c.dry_run ? "would remove " : "removed ") + std::to_string(c.removed) + " of " +
         plural(c.matching, "table") + (c.dry_run ? " (dry run: nothing was removed)" : "");
  if (c.matching == 0 && domain)
    out += ": " + no_tables_text(domains_other_than(*domain, choice.dir), choice);
  else if (choice.from_environment)
    out += " (only domain " + quote(*domain) +
           ", from GPUSHARE_DOMAIN; --all-domains cleans every domain)";
  out += "\n";
  write_stdout(out);
  return c.failed > 0 ? 1 : 0;
}

} // namespace gpushare::cli
