// SPDX-License-Identifier: Apache-2.0
// The one grammar of a table's object name, "/gpushare.<domain>.<owner>.<key>" (owner "u<uid>"
// or "g<gid>") for a POSIX shm object, "<dir>/gpushare.<domain>.<owner>.<key>" for a table in a
// table directory (detail/table_dir.hpp): building it (table_object_name), reading it back
// (read_object_name and the readers built on it: name_has_owner for the trust check, the
// table_entry readers for discovery.hpp), and the file behind it (object_path), which
// list_table_files() lists.
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
#include <gpushare/detail/table_dir.hpp>
#include <gpushare/error.hpp>
#include <gpushare/table_types.hpp>
#include <gpushare/types.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

inline constexpr const char* object_prefix = "gpushare.";

/// The name of a table in `dir`: "/gpushare.<domain>.u<uid>.<key>" for a user-private table in
/// /dev/shm, "/gpushare.<domain>.g<gid>.<key>" for a group-shared one; in another directory the
/// same file name after the directory's path. The uid (or gid) in the name keeps users (or groups)
/// from ever colliding; the domain separates groups of processes of one user. A group-shared
/// table carries the caller's effective gid in /dev/shm and the directory's group elsewhere.
inline std::string table_object_name(const table_dir& dir, std::string_view domain,
                                     std::string_view key, table_access access) {
  validate_domain(domain);
  validate_key(key);
  const bool group = access == table_access::group;
  const std::string owner_id =
      std::to_string(group ? (dir.shm() ? ::getegid() : dir.gid) : ::geteuid());
  // Appended piece by piece into a reserved string: GCC 12 at -O3 misreports the equivalent
  // "/" + std::string(...) + ... chain as an overlapping memcpy (-Wrestrict).
  std::string name;
  name.reserve(dir.path.size() + std::strlen(object_prefix) + domain.size() + owner_id.size() +
               key.size() + 4);
  name += dir.path;
  name += '/';
  name += object_prefix;
  name += domain;
  name += group ? ".g" : ".u";
  name += owner_id;
  name += '.';
  name += key;
  return name;
}

/// The POSIX shm name of a table (in /dev/shm).
inline std::string table_object_name(std::string_view domain, std::string_view key,
                                     table_access access) {
  return table_object_name(table_dir{}, domain, key, access);
}

/// Whether `name` names a table in a table directory ("<dir>/gpushare....") rather than a POSIX
/// shm object ("/gpushare....").
inline bool name_is_path(std::string_view name) noexcept {
  return name.size() > 1 && name.find('/', 1) != std::string_view::npos;
}

/// The file behind the object `name`: glibc's shm_open puts "/gpushare...." in /dev/shm; a name
/// in a table directory is its own path.
inline std::string object_path(const std::string& name) {
  return name_is_path(name) ? name : std::string(object_directory) + name;
}

/// The directory of the object `name`, as a user names it ("/dev/shm" for a shm name).
inline std::string object_dir(const std::string& name) {
  return name_is_path(name) ? name.substr(0, name.rfind('/')) : std::string(object_directory);
}

/// The file name of the object `name` (what follows its last '/').
inline std::string_view object_file_name(std::string_view name) noexcept {
  const std::size_t slash = name.rfind('/');
  return slash == std::string_view::npos ? name : name.substr(slash + 1);
}

/// The name of a table object given to open it, checked and canonical: "/gpushare.<...>" (a POSIX
/// shm object; "/dev/shm/gpushare.<...>" is read as that) or "<dir>/gpushare.<...>" in a table
/// directory, whose path must be normalised (normalize_table_dir()). Throws
/// errc::invalid_argument for anything else; the directory itself is not examined here.
inline std::string canonical_object_name(const std::string& name) {
  const std::string_view file = object_file_name(name);
  const std::size_t head = std::strlen(object_prefix);
  if (name.empty() || name[0] != '/' || file.size() <= head ||
      file.substr(0, head) != object_prefix)
    throw error(errc::invalid_argument,
                "'" + name +
                    "' is not the name of a table: tables are named "
                    "/gpushare.<domain>.<owner>.<key> in /dev/shm and <dir>/gpushare.<domain>."
                    "<owner>.<key> in a table directory (`gpushare status` lists them)");
  if (!name_is_path(name)) return name;
  const std::string dir = object_dir(name);
  const std::string norm = normalize_table_dir(dir);
  if (norm.empty()) return "/" + std::string(file); // /dev/shm/gpushare.... is the shm object
  if (norm != dir)
    throw error(errc::invalid_argument, "table name '" + name + "': write its directory as '" +
                                            norm + "' (an absolute path without '//')");
  return name;
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
  const std::string_view file = object_file_name(name);
  const std::size_t head = std::strlen(object_prefix); // "gpushare."
  if (file.size() <= head || file.substr(0, head) != object_prefix) return false;
  return read_object_name(file.substr(head), [&](auto domain, auto owner, auto key) {
    return !domain.empty() && owner == part && !key.empty(); // a domain and a key around it
  });
}

/// "u<digits>" or "g<digits>" (no more than 10 digits): the owner part of a table's name.
inline bool owner_part_ok(std::string_view s) noexcept {
  if (s.size() < 2 || s.size() > 11 || (s[0] != 'u' && s[0] != 'g')) return false;
  return std::all_of(s.begin() + 1, s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// Fills `e` from domain / owner / key parts that have already been checked.
/// `dir`: the table directory's normalised path ("" for /dev/shm).
inline table_entry make_entry(std::string_view dir, std::string_view file_name,
                              std::string_view domain, std::string_view owner,
                              std::string_view key) {
  table_entry e;
  // Appended into a reserved string: GCC 12 at -O3 misreports "/" + std::string(file_name) as
  // an overlapping memcpy (-Wrestrict).
  e.object_name.reserve(dir.size() + file_name.size() + 1);
  e.object_name += dir;
  e.object_name += '/';
  e.object_name += file_name;
  e.path = object_path(e.object_name);
  e.domain = std::string(domain);
  e.owner = std::string(owner);
  e.key = std::string(key);
  e.group = owner[0] == 'g';
  for (char c : owner.substr(1)) e.owner_id = e.owner_id * 10 + static_cast<std::uint64_t>(c - '0');
  return e;
}

/// The first reading of the file name `file_name` ("gpushare.<domain>.<owner>.<key>", no '/')
/// whose parts are valid and that `accept` takes, as a table_entry; nullopt if there is none.
/// `dir`: the directory it was found in, normalised ("" for /dev/shm).
template <class Accept>
std::optional<table_entry> read_table_file_name(std::string_view file_name, Accept&& accept,
                                                std::string_view dir = {}) {
  const std::string_view prefix = object_prefix;
  if (file_name.substr(0, prefix.size()) != prefix) return std::nullopt;
  std::optional<table_entry> found;
  read_object_name(file_name.substr(prefix.size()), [&](auto domain, auto owner, auto key) {
    if (!identifier_ok(domain, max_domain_length) || !owner_part_ok(owner) ||
        !identifier_ok(key, max_key_length) || !accept(domain, key))
      return false;
    found = make_entry(dir, file_name, domain, owner, key);
    return true;
  });
  return found;
}

/// Lists the table directory `dir` (normalised; "" for /dev/shm), keeping the regular files
/// `read(file_name, dir)` turns into table entries, sorted by name.
template <class Read>
std::vector<table_entry> list_table_files(Read read, std::string_view table_dir_path = {}) {
  const std::string dir =
      table_dir_path.empty() ? std::string(object_directory) : std::string(table_dir_path);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      throw error(errc::bad_directory, "table directory '" + dir + "' does not exist");
    if (err == EACCES)
      throw error(errc::permission_denied, "cannot list table directory '" + dir +
                                               "': permission denied (" + describe_caller() +
                                               "); join its group or run as its owner");
    throw detail::system_failure(errc::system_error, "cannot list " + dir, err);
  }
  std::vector<table_entry> found;
  while (const dirent* ent = ::readdir(d)) {
    std::optional<table_entry> e = read(std::string_view(ent->d_name), table_dir_path);
    if (!e) continue;
    struct stat st {};
    // lstat: a symbolic link named like a table is not one (every open refuses links), and its
    // target's owner is not the link's (root's `clean --force` judged a member's link by it).
    if (::lstat(e->path.c_str(), &st) == 0) {
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
                                                               std::string_view key,
                                                               std::string_view dir = {}) {
  if (!identifier_ok(key, max_key_length)) return std::nullopt;
  return read_table_file_name(
      file_name, [&](auto, auto k) { return k == key; }, dir);
}

/// Every table object in the table directory `dir` ("" for /dev/shm) for key `key`, sorted by
/// name (gpushare::list_tables_for_key).
inline std::vector<table_entry> list_table_files_for_key(std::string_view key,
                                                         std::string_view dir = {}) {
  return list_table_files(
      [&](std::string_view file_name, std::string_view d) {
        return read_table_file_name_for_key(file_name, key, d);
      },
      dir);
}

} // namespace detail
} // namespace v0
} // namespace gpushare
