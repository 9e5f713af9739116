// SPDX-License-Identifier: Apache-2.0
// The one grammar of a table's object name, "/gpushare.<domain>.<owner>.<key>" (owner "u<uid>"
// or "g<gid>"): building it (table_object_name), reading it back (read_object_name and the
// readers built on it: name_has_owner for the trust check, the table_entry readers for
// discovery.hpp), and the file behind it in /dev/shm (object_path), which list_table_files()
// lists.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gpushare/detail/parse.hpp>
#include <gpushare/error.hpp>
#include <gpushare/table_types.hpp>
#include <gpushare/types.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

inline constexpr const char* object_prefix = "gpushare.";
/// Where POSIX shared-memory objects appear as files on Linux (gpushare::shm_directory).
inline constexpr std::string_view object_directory = "/dev/shm";

/// The POSIX shm name of a table: "/gpushare.<domain>.u<uid>.<key>" for a user-private table,
/// "/gpushare.<domain>.g<gid>.<key>" for a group-shared one. The uid (or gid) in the name keeps
/// users (or groups) from ever colliding; the domain separates groups of processes of one user.
inline std::string table_object_name(std::string_view domain, std::string_view key,
                                     table_access access) {
  validate_domain(domain);
  validate_key(key);
  const bool group = access == table_access::group;
  const std::string owner_id = std::to_string(group ? ::getegid() : ::geteuid());
  // Appended piece by piece into a reserved string: GCC 12 at -O3 misreports the equivalent
  // "/" + std::string(...) + ... chain as an overlapping memcpy (-Wrestrict).
  std::string name;
  name.reserve(std::strlen(object_prefix) + domain.size() + owner_id.size() + key.size() + 4);
  name += '/';
  name += object_prefix;
  name += domain;
  name += group ? ".g" : ".u";
  name += owner_id;
  name += '.';
  name += key;
  return name;
}

/// The file behind the object `name` ("/gpushare...."): glibc's shm_open puts it in /dev/shm.
inline std::string object_path(const std::string& name) {
  return std::string(object_directory) + name;
}

/// "rm /dev/shm/<name>" advice for error messages.
inline std::string removal_hint(const std::string& name) {
  return "stop the processes using it, then remove it with `rm " + object_path(name) + "`";
}

/// Calls accept(domain, owner, key) for each reading of `rest`, the part of a name after
/// "gpushare.", as "<domain>.<owner>.<key>", shortest domain first, until one returns true;
/// returns whether one did. Domains and keys may contain '.', an owner may not, so a name can have
/// more than one reading: "a.u5.u1000.k" is domain "a", owner "u5", key "u1000.k", or domain
/// "a.u5", owner "u1000", key "k". The parts are not checked here; `accept` checks what it needs.
template <class Accept> bool read_object_name(std::string_view rest, Accept&& accept) {
  for (std::size_t dot = rest.find('.'); dot != std::string_view::npos;
       dot = rest.find('.', dot + 1)) {
    const std::size_t owner_end = rest.find('.', dot + 1);
    if (owner_end == std::string_view::npos) break;
    if (accept(rest.substr(0, dot), rest.substr(dot + 1, owner_end - dot - 1),
               rest.substr(owner_end + 1)))
      return true;
  }
  return false;
}

/// Does the object name "/gpushare.<domain>.<owner>.<key>" read, in some way, as having owner
/// part `kind` `id` ("u1000", "g100")? Domains and keys may contain '.', so a name can have more
/// than one reading; any will do, since the owner is then checked against the file itself.
inline bool name_has_owner(std::string_view name, char kind, std::uint64_t id) {
  const std::string part = kind + std::to_string(id);
  const std::size_t head = std::strlen(object_prefix) + 1; // "/gpushare."
  if (name.size() <= head) return false;
  return read_object_name(name.substr(head), [&](auto domain, auto owner, auto key) {
    return !domain.empty() && owner == part && !key.empty(); // a domain and a key around it
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
  e.path = std::string(object_directory) + e.object_name;
  e.domain = std::string(domain);
  e.owner = std::string(owner);
  e.key = std::string(key);
  e.group = owner[0] == 'g';
  for (char c : owner.substr(1)) e.owner_id = e.owner_id * 10 + static_cast<std::uint64_t>(c - '0');
  return e;
}

/// The first reading of the file name `file_name` ("gpushare.<domain>.<owner>.<key>", no '/')
/// whose parts are valid and that `accept` takes, as a table_entry; nullopt if there is none.
template <class Accept>
std::optional<table_entry> read_table_file_name(std::string_view file_name, Accept&& accept) {
  const std::string_view prefix = object_prefix;
  if (file_name.substr(0, prefix.size()) != prefix) return std::nullopt;
  std::optional<table_entry> found;
  read_object_name(file_name.substr(prefix.size()), [&](auto domain, auto owner, auto key) {
    if (!identifier_ok(domain, max_domain_length) || !owner_part_ok(owner) ||
        !identifier_ok(key, max_key_length) || !accept(domain, key))
      return false;
    found = make_entry(file_name, domain, owner, key);
    return true;
  });
  return found;
}

/// Lists /dev/shm, keeping the regular files `read` turns into table entries, sorted by name.
template <class Read> std::vector<table_entry> list_table_files(Read read) {
  const std::string dir(object_directory);
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

/// Reads `file_name` as the name of a table of key `key`, whatever its domain and owner
/// (gpushare::parse_table_file_name_for_key).
inline std::optional<table_entry> read_table_file_name_for_key(std::string_view file_name,
                                                               std::string_view key) {
  if (!identifier_ok(key, max_key_length)) return std::nullopt;
  return read_table_file_name(file_name, [&](auto, auto k) { return k == key; });
}

/// Every table object in /dev/shm for key `key`, sorted by name (gpushare::list_tables_for_key).
inline std::vector<table_entry> list_table_files_for_key(std::string_view key) {
  return list_table_files(
      [&](std::string_view file_name) { return read_table_file_name_for_key(file_name, key); });
}

} // namespace detail
} // namespace v0
} // namespace gpushare
