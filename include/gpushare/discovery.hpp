// SPDX-License-Identifier: Apache-2.0
// Finding the tables on this machine, and removing unused ones without racing joiners.
//
// Tables are POSIX shared-memory objects, which Linux shows as files in /dev/shm named
// "gpushare.<domain>.u<uid>.<key>" (or ".g<gid>." in group mode). list_tables() reads that
// directory; it opens nothing, so it works for tables this user may not open.
//
// Removing unused tables (remove_unused_table(), table::remove()) is in <gpushare/removal.hpp>.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <dirent.h>
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
#include <gpushare/detail/shm.hpp>
#include <gpushare/detail/table_core.hpp>
#include <gpushare/error.hpp>
#include <gpushare/removal.hpp>

namespace gpushare {
inline namespace v0 {

/// A table object found in /dev/shm. Everything here comes from the file's name and its inode;
/// the table itself was not opened, so a table of another user is listed too.
struct table_entry {
  std::string object_name;    ///< "/gpushare.<domain>.<owner>.<key>", for table::open_existing()
  std::string path;           ///< "/dev/shm/gpushare.<domain>.<owner>.<key>"
  std::string domain;         ///< from the name (the table's header is authoritative)
  std::string owner;          ///< "u<uid>" or "g<gid>"
  std::string key;            ///< from the name
  bool group = false;         ///< a group-mode table (owner "g<gid>")
  std::uint64_t owner_id = 0; ///< the uid or gid in the name
  // From stat(2), when it succeeded (0 otherwise).
  std::uint32_t file_uid = 0;
  std::uint32_t file_gid = 0;
  std::uint32_t file_mode = 0; ///< permission bits, e.g. 0600
  std::uint64_t file_size = 0;
};

namespace detail {

inline bool identifier_ok(std::string_view s, std::size_t max_length) noexcept {
  if (s.empty() || s.size() > max_length || s[0] == '.') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

/// "u<digits>" or "g<digits>" (no more than 10 digits): the owner part of a table's name.
inline bool owner_part_ok(std::string_view s) noexcept {
  if (s.size() < 2 || s.size() > 11 || (s[0] != 'u' && s[0] != 'g')) return false;
  return std::all_of(s.begin() + 1, s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// Fills `e` from domain / owner / key parts that have already been checked.
inline table_entry make_entry(std::string_view file_name, std::string_view domain,
                              std::string_view owner, std::string_view key) {
  table_entry e;
  // Appended into a reserved string: GCC 12 at -O3 misreports "/" + std::string(file_name) as
  // an overlapping memcpy (-Wrestrict).
  e.object_name.reserve(file_name.size() + 1);
  e.object_name += '/';
  e.object_name += file_name;
  e.path = std::string(shm_directory) + e.object_name;
  e.domain = std::string(domain);
  e.owner = std::string(owner);
  e.key = std::string(key);
  e.group = owner[0] == 'g';
  for (char c : owner.substr(1)) e.owner_id = e.owner_id * 10 + static_cast<std::uint64_t>(c - '0');
  return e;
}

} // namespace detail

/// Splits a file name "gpushare.<domain>.<owner>.<key>" into its parts; nullopt if it is not the
/// name of a table.
///
/// Domains and keys may contain '.', so a name can be read in more than one way:
/// "gpushare.a.u5.u1000.k" is domain "a", owner "u5", key "u1000.k" or domain "a.u5", owner
/// "u1000", key "k". This overload picks the shortest domain. Pass the domain you are looking for
/// to the other overload to read the name as that domain's, and compare with the domain in the
/// table's header once it is open.
inline std::optional<table_entry> parse_table_file_name(std::string_view file_name) {
  const std::string_view prefix = detail::object_prefix;
  if (file_name.substr(0, prefix.size()) != prefix) return std::nullopt;
  const std::string_view rest = file_name.substr(prefix.size());
  // Try each '.' as the end of the domain, shortest domain first.
  for (std::size_t dot = rest.find('.'); dot != std::string_view::npos;
       dot = rest.find('.', dot + 1)) {
    const std::string_view domain = rest.substr(0, dot);
    const std::size_t owner_end = rest.find('.', dot + 1);
    if (owner_end == std::string_view::npos) break;
    const std::string_view owner = rest.substr(dot + 1, owner_end - dot - 1);
    const std::string_view key = rest.substr(owner_end + 1);
    if (detail::identifier_ok(domain, detail::max_domain_length) && detail::owner_part_ok(owner) &&
        detail::identifier_ok(key, detail::max_key_length))
      return detail::make_entry(file_name, domain, owner, key);
  }
  return std::nullopt;
}

/// Reads `file_name` as the name of a table of `domain`; nullopt if it cannot be one.
inline std::optional<table_entry> parse_table_file_name(std::string_view file_name,
                                                        std::string_view domain) {
  const std::string head = std::string(detail::object_prefix) + std::string(domain) + ".";
  if (!detail::identifier_ok(domain, detail::max_domain_length) ||
      file_name.substr(0, head.size()) != head)
    return std::nullopt;
  const std::string_view rest = file_name.substr(head.size());
  const std::size_t owner_end = rest.find('.');
  if (owner_end == std::string_view::npos) return std::nullopt;
  const std::string_view owner = rest.substr(0, owner_end);
  const std::string_view key = rest.substr(owner_end + 1);
  if (!detail::owner_part_ok(owner) || !detail::identifier_ok(key, detail::max_key_length))
    return std::nullopt;
  return detail::make_entry(file_name, domain, owner, key);
}

/// Reads `file_name` as the name of a table of key `key`, whatever its domain and owner;
/// nullopt if it cannot be one.
inline std::optional<table_entry> parse_table_file_name_for_key(std::string_view file_name,
                                                                std::string_view key) {
  const std::string_view prefix = detail::object_prefix;
  if (!detail::identifier_ok(key, detail::max_key_length) ||
      file_name.size() < prefix.size() + key.size() + 1 ||
      file_name.substr(0, prefix.size()) != prefix ||
      file_name.substr(file_name.size() - key.size() - 1) != "." + std::string(key))
    return std::nullopt;
  const std::string_view middle = // "<domain>.<owner>"
      file_name.substr(prefix.size(), file_name.size() - prefix.size() - key.size() - 1);
  const std::size_t dot = middle.rfind('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const std::string_view domain = middle.substr(0, dot);
  const std::string_view owner = middle.substr(dot + 1);
  if (!detail::identifier_ok(domain, detail::max_domain_length) || !detail::owner_part_ok(owner))
    return std::nullopt;
  return detail::make_entry(file_name, domain, owner, key);
}

namespace detail {

/// Lists /dev/shm, keeping the regular files `read` turns into table entries, sorted by name.
template <class Read> std::vector<table_entry> list_table_files(Read read) {
  const std::string dir(shm_directory);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) throw detail::system_failure(errc::system_error, "cannot list " + dir, errno);
  std::vector<table_entry> found;
  while (const dirent* ent = ::readdir(d)) {
    std::optional<table_entry> e = read(std::string_view(ent->d_name));
    if (!e) continue;
    struct stat st {};
    if (::stat(e->path.c_str(), &st) == 0) {
      if (!S_ISREG(st.st_mode)) continue;
      e->file_uid = st.st_uid;
      e->file_gid = st.st_gid;
      e->file_mode = st.st_mode & 07777u; // mode_t is unsigned int on Linux: no cast needed
      e->file_size = static_cast<std::uint64_t>(st.st_size);
    } else if (errno == ENOENT) {
      continue; // removed while we were listing
    }
    found.push_back(std::move(*e));
  }
  ::closedir(d);
  std::sort(found.begin(), found.end(), [](const table_entry& a, const table_entry& b) {
    return a.object_name < b.object_name;
  });
  return found;
}

} // namespace detail

/// Every table object in /dev/shm (of every user), sorted by name; only those whose name reads as
/// a table of `domain` when one is given. Throws errc::system_error if /dev/shm cannot be read.
inline std::vector<table_entry> list_tables(std::optional<std::string_view> domain = std::nullopt) {
  return detail::list_table_files([&](std::string_view file_name) {
    return domain ? parse_table_file_name(file_name, *domain) : parse_table_file_name(file_name);
  });
}

/// Every table object in /dev/shm for key `key`, of any domain, table mode and owner, sorted by
/// name: processes that use one key in different tables are not arbitrated against each other.
/// Throws errc::system_error if /dev/shm cannot be read.
inline std::vector<table_entry> list_tables_for_key(std::string_view key) {
  return detail::list_table_files(
      [&](std::string_view file_name) { return parse_table_file_name_for_key(file_name, key); });
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

} // namespace v0
} // namespace gpushare
