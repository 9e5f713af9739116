// SPDX-License-Identifier: Apache-2.0
// `gpushare evict`: end a live session at once through table::evict(), the remedy for a session
// stopped or hung inside a guard (which liveness cannot free: its process is alive).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdlib>
#include <span>
#include <string>

#include <gpushare/table.hpp>

#include "cli_args.hpp"
#include "cli_errors.hpp"
#include "cli_find.hpp"
#include "cli_format.hpp"
#include "cli_sample.hpp"
#include "cli_status.hpp"
#include "cli_usage.hpp"

namespace gpushare::cli {

/// What went back to the table with an evicted session: "its device hold and 1.50 GiB of
/// reservations went back to the table" (and "; its start-up lock passed on" when it held it).
inline std::string returned_text(const session_info& gone) {
  const std::string bytes = bytes_text(gone.reserved) + " of reservations";
  const std::string lock = gone.holds_startup ? "; its start-up lock passed on" : "";
  if (gone.holds_device && gone.reserved > 0)
    return "its device hold and " + bytes + " went back to the table" + lock;
  if (gone.holds_device) return "its device hold went back to the table" + lock;
  if (gone.reserved > 0) return "its " + bytes + " went back to the table" + lock;
  if (gone.holds_startup) return "its start-up lock passed on";
  return "it held neither the device nor reservations";
}

/// The line `evict` prints: "evicted session "trainer" (slot 3, pid 4242) from /gpushare...: its
/// device hold and 1.50 GiB of reservations went back to the table".
inline std::string evicted_text(const session_info& gone, const std::string& object_name) {
  return "evicted session " + quote(gone.name) + " (slot " + std::to_string(gone.id.slot) +
         ", pid " + std::to_string(gone.pid) + ") from " + object_name + ": " +
         returned_text(gone) + "\n";
}

/// Evicts `target` from table `handle`, turning the library's refusals into one-line failures.
inline session_info evict_from(table& handle, const session_info& target) {
  try {
    return handle.evict(target.id);
  } catch (const gpushare::error& err) {
    if (err.code() == errc::table_busy)
      throw runtime_failure("table " + handle.object_name() +
                            " is busy: its lock is held (by a stopped or hung process?), so "
                            "nothing was evicted; kill the process that holds it (the next "
                            "session repairs the lock)");
    if (err.code() == errc::invalid_argument)
      throw runtime_failure("session " + quote(target.name) + " (slot " +
                            std::to_string(target.id.slot) + ") left table " +
                            handle.object_name() + " before it could be evicted; nothing to do");
    throw;
  }
}

/// Opens the table of `e` to evict from it. Root opens another user's user-mode table with its
/// effective uid switched to the table's owner for the open alone: table::open_existing() accepts
/// a user-mode table only when its file, its name and the effective uid agree (its check of what
/// the object is stays in force), while table::evict() lets root evict. The effective uid is root
/// again before anything is locked or written, so the eviction is recorded as root's. The real
/// and saved uids stay root throughout, so the owner can neither signal nor trace the tool.
inline table open_for_evict(const table_entry& e) {
  const bool switch_uid =
      ::geteuid() == 0 && e.file_uid != 0 && e.owner == "u" + std::to_string(e.file_uid);
  if (!switch_uid) return table::open_existing(e.object_name, lock_options);
  if (::seteuid(static_cast<uid_t>(e.file_uid)) != 0)
    throw runtime_failure("cannot take the effective uid " + std::to_string(e.file_uid) +
                          " to open table " + e.object_name);
  struct back_to_root {
    ~back_to_root() {
      if (::seteuid(0) != 0) std::abort(); // cannot fail: the saved uid is 0
    }
  } restore;
  return table::open_existing(e.object_name, lock_options);
}

inline int run_evict(std::span<const std::string> args) {
  static constexpr flag_spec specs[] = {
      {"--table", true}, {"--domain", true}, {"--all-domains", false}, {"--dir", true}};
  const parsed_args a = parse_command_line(args, specs, 1);
  if (a.help) {
    write_stdout(std::string(evict_usage));
    return 0;
  }
  if (a.positionals.empty()) throw usage_error("which session? give its name or its slot number");
  const session_target target = parse_session_target(a.positionals[0]);
  const domain_choice domain = domain_option(a);
  const sample s = take_sample(domain);
  const auto [reading, found] = find_session(s, target, a.value("--table"), domain);
  // As for `set`: checked on the listing's stat, then on the descriptor opened.
  const table_entry& e = reading->entry;
  check_may_evict({e.file_uid, e.file_gid, e.file_mode}, e.object_name);
  table handle = open_for_evict(e);
  check_may_evict(handle.owner(), e.object_name);
  const session_info gone = evict_from(handle, found); // as it was at the eviction
  write_stdout(evicted_text(gone, e.object_name));
  return 0;
}

} // namespace gpushare::cli
