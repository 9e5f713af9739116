// SPDX-License-Identifier: Apache-2.0
// Finding the tables on this machine, and removing unused ones without racing joiners.
//
// Tables are POSIX shared-memory objects, which Linux shows as files in /dev/shm named
// "gpushare.<domain>.u<uid>.<key>" (or ".g<gid>." in group mode), or files of those names in a
// table directory (GPUSHARE_DIR). list_tables() reads /dev/shm, list_tables_in() a table
// directory; they open nothing, so they work for tables this user may not open. The grammar of
// those names, built and read back, is in detail/object_name.hpp.
//
// Removing unused tables (remove_unused_table(), table::remove()) is in <gpushare/removal.hpp>.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gpushare/detail/liveness.hpp>
#include <gpushare/detail/object_name.hpp>
#include <gpushare/detail/shm.hpp>
#include <gpushare/detail/table_core.hpp>
#include <gpushare/detail/table_dir.hpp>
#include <gpushare/error.hpp>
#include <gpushare/removal.hpp>
#include <gpushare/table_types.hpp>

namespace gpushare {
inline namespace v0 {

/// Splits a file name "gpushare.<domain>.<owner>.<key>" into its parts; nullopt if it is not the
/// name of a table.
///
/// Domains and keys may contain '.', so a name can be read in more than one way:
/// "gpushare.a.u5.u1000.k" is domain "a", owner "u5", key "u1000.k" or domain "a.u5", owner
/// "u1000", key "k". This overload picks the shortest domain. Pass the domain you are looking for
/// to the other overload to read the name as that domain's, and compare with the domain in the
/// table's header once it is open.
inline std::optional<table_entry> parse_table_file_name(std::string_view file_name) {
  return detail::read_table_file_name(file_name, [](auto, auto) { return true; });
}

/// Reads `file_name` as the name of a table of `domain`; nullopt if it cannot be one.
inline std::optional<table_entry> parse_table_file_name(std::string_view file_name,
                                                        std::string_view domain) {
  if (!detail::identifier_ok(domain, detail::max_domain_length)) return std::nullopt;
  return detail::read_table_file_name(file_name, [&](auto d, auto) { return d == domain; });
}

/// Reads `file_name` as the name of a table of key `key`, whatever its domain and owner;
/// nullopt if it cannot be one.
inline std::optional<table_entry> parse_table_file_name_for_key(std::string_view file_name,
                                                                std::string_view key) {
  return detail::read_table_file_name_for_key(file_name, key);
}

/// Every table in the table directory `dir` ("" or "/dev/shm": /dev/shm's), of every user, sorted
/// by name; only those of `domain` when one is given. Entries name their tables "<dir>/gpushare.
/// ..." (table::open_existing opens them). Throws errc::invalid_argument for a malformed path,
/// errc::bad_directory for a missing one, errc::permission_denied for one this process may not
/// list, errc::system_error for other failures.
inline std::vector<table_entry>
list_tables_in(std::string_view dir, std::optional<std::string_view> domain = std::nullopt) {
  const std::string d = detail::normalize_table_dir(dir);
  return detail::list_table_files(
      [&](std::string_view file_name, std::string_view in) {
        if (domain) {
          if (!detail::identifier_ok(*domain, detail::max_domain_length))
            return std::optional<table_entry>();
          return detail::read_table_file_name(
              file_name, [&](auto dom, auto) { return dom == *domain; }, in);
        }
        return detail::read_table_file_name(
            file_name, [](auto, auto) { return true; }, in);
      },
      d);
}

/// Every table object in /dev/shm (of every user), sorted by name; only those whose name reads as
/// a table of `domain` when one is given. Throws errc::system_error if /dev/shm cannot be read.
inline std::vector<table_entry> list_tables(std::optional<std::string_view> domain = std::nullopt) {
  return list_tables_in("", domain);
}

/// Every table object in the table directory `dir` (default /dev/shm) for key `key`, of any
/// domain, table mode and owner, sorted by name: processes that use one key in different tables
/// are not arbitrated against each other. Throws as list_tables_in().
inline std::vector<table_entry> list_tables_for_key(std::string_view key,
                                                    std::string_view dir = {}) {
  return detail::list_table_files_for_key(key, detail::normalize_table_dir(dir));
}

/// The keys that more than one of `tables` uses (in other domains, table modes or owners), each
/// with its tables in the order given: processes that use one key in different tables are not
/// arbitrated against each other.
inline std::map<std::string, std::vector<table_entry>>
split_keys(const std::vector<table_entry>& tables) {
  std::map<std::string, std::vector<table_entry>> by_key;
  for (const table_entry& e : tables) by_key[e.key].push_back(e);
  std::erase_if(by_key, [](const auto& kv) { return kv.second.size() < 2; });
  return by_key;
}

/// Whether this process is in group `gid` (its effective group or a supplementary one): the
/// members of a group-mode table's group may remove it when nobody uses it.
inline bool caller_in_group(gid_t gid) { return detail::in_group(gid); }

} // namespace v0
} // namespace gpushare
