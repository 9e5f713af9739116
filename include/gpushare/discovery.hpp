// SPDX-License-Identifier: Apache-2.0
// Finding the tables on this machine, and removing unused ones without racing joiners.
//
// Tables are POSIX shared-memory objects, which Linux shows as files in /dev/shm named
// "gpushare.<domain>.u<uid>.<key>" (or ".g<gid>." in group mode). list_tables() reads that
// directory; it opens nothing, so it works for tables this user may not open.
//
// Removal protocol (see docs/cli.md, "The clean protocol"): remove_unused_table() opens the table,
// takes its lock, checks under the lock that no slot lock (and no init lock) is held, and unlinks
// the name while still holding the lock. A joiner checks under the same lock, before it activates
// its slot, that the name still refers to the file it mapped (session_core::activate()); if the
// table was unlinked in between, it drops its claim and joins the table now under the name. A
// joiner that claimed its slot before the cleaner's check makes the table look live, so it is not
// removed. Either way no session ends up in an unlinked table.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gpushare/detail/liveness.hpp>
#include <gpushare/detail/shm.hpp>
#include <gpushare/detail/table_core.hpp>
#include <gpushare/error.hpp>

namespace gpushare {
inline namespace v0 {

/// Where POSIX shared-memory objects appear as files on Linux.
inline constexpr std::string_view shm_directory = "/dev/shm";

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

/// Every table object in /dev/shm (of every user), sorted by name; only those whose name reads as
/// a table of `domain` when one is given. Throws errc::system_error if /dev/shm cannot be read.
inline std::vector<table_entry> list_tables(std::optional<std::string_view> domain = std::nullopt) {
  const std::string dir(shm_directory);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) throw detail::system_failure(errc::system_error, "cannot list " + dir, errno);
  std::vector<table_entry> found;
  while (const dirent* ent = ::readdir(d)) {
    const std::string_view file_name = ent->d_name;
    std::optional<table_entry> e =
        domain ? parse_table_file_name(file_name, *domain) : parse_table_file_name(file_name);
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

/// What remove_unused_table() did.
enum class removal_status {
  removed,      ///< no live session: the name was unlinked
  would_remove, ///< dry run: it would have been removed (a table, or an abandoned creation)
  in_use,       ///< a session is live in it (or it is being created or joined): kept
  gone,         ///< the name no longer exists (removed meanwhile, or an abandoned creation that
                ///< this call removed)
  other_domain, ///< its header names another domain than removal_options::domain: kept
};

struct removal_options {
  bool dry_run = false; ///< check only; remove nothing
  /// Remove the table only if its header names this domain (a name alone can be ambiguous: see
  /// parse_table_file_name()).
  std::optional<std::string> domain;
  /// How long to wait for a table that is still being initialised (then errc::table_busy).
  std::chrono::milliseconds open_timeout{1000};
  /// Root's `gpushare clean --force` on a table of another owner: open it with
  /// detail::open_intent::clean_any_owner (the object must be what its name says: owned by the uid
  /// in its name, or of the gid in its name, with no more permissions than its mode allows, one
  /// link) and remove it only if it is a ready, valid table that no session uses, checked under
  /// its own lock. An abandoned creation or anything else that is not such a table is kept (and
  /// reported as the error open_existing() gives). Without it, the table must be the caller's
  /// (open_intent::participant), and the caller's own abandoned creations are removed.
  bool any_owner = false;
};

struct removal_result {
  removal_status status = removal_status::gone;
  std::uint32_t live_sessions = 0; ///< for in_use: slots whose liveness lock is held
  std::uint32_t dead_sessions = 0; ///< for removed / would_remove: sessions whose process died
};

namespace detail {

/// Is any of the lock bytes 0 .. slot_count held by another open file description? Byte 0 is the
/// init lock, byte 1 + i the liveness lock of slot i. One F_OFD_GETLK covers them all. An
/// unknown answer (fcntl failed) counts as held.
inline bool any_lock_byte_held(int fd, std::uint32_t slot_count) noexcept {
  flock fl = byte_range(F_WRLCK, init_lock_byte);
  fl.l_len = static_cast<off_t>(slot_count) + 1;
  if (::fcntl(fd, F_OFD_GETLK, &fl) != 0) return true;
  return fl.l_type != F_UNLCK;
}

inline std::uint32_t count_live_slots(int fd, std::uint32_t slot_count) noexcept {
  std::uint32_t live = 0;
  for (std::uint32_t i = 0; i < slot_count; ++i)
    if (probe_byte(fd, slot_lock_byte(i)) != holder::none) ++live;
  return live;
}

} // namespace detail

/// Removes the table `object_name` ("/gpushare....") if no session is live in it; a table with a
/// live session is never removed. With `o.dry_run`, checks the same way and removes nothing.
///
/// The check and the unlink happen under the table's lock, and joiners re-check the name under
/// that lock (see the top of this file), so a process that opened the table just before it was
/// removed joins the table that then exists under the name, never the removed one.
///
/// Throws what table::open_existing() throws for a table it cannot open: errc::permission_denied
/// (another user's or group's), errc::table_incompatible, errc::table_corrupt, errc::table_busy
/// (still being initialised after `o.open_timeout`, or its lock held by a stopped process).
inline removal_result remove_unused_table(const std::string& object_name,
                                          const removal_options& o = {}) {
  removal_result r;
  const std::string path = std::string(shm_directory) + object_name;
  if (::access(path.c_str(), F_OK) != 0 && errno == ENOENT) return r; // gone
  std::optional<detail::table_core> core;
  try {
    // A creation its creator abandoned (docs/design.md, section 4) is removed, except in a dry
    // run; open_existing() refuses, and never removes, anything that is not provably one.
    core.emplace(detail::mapped_table::open_existing(
        object_name, detail::to_ns(o.open_timeout),
        o.dry_run || o.any_owner ? detail::abandoned_creation::keep
                                 : detail::abandoned_creation::remove,
        o.any_owner ? detail::open_intent::clean_any_owner : detail::open_intent::participant));
  } catch (const error& e) {
    // Another owner's abandoned creation (or other object that is no ready table) is kept.
    if (o.any_owner && e.code() == errc::invalid_argument && ::access(path.c_str(), F_OK) == 0)
      throw;
    // invalid_argument: the name is missing, or it was an abandoned creation, which is now
    // removed (or, in a dry run, kept: then it would be removed).
    if (e.code() != errc::invalid_argument) throw;
    if (o.dry_run && ::access(path.c_str(), F_OK) == 0) r.status = removal_status::would_remove;
    return r;
  }
  if (o.domain &&
      detail::read_bounded(core->header().domain, detail::domain_capacity) != *o.domain) {
    r.status = removal_status::other_domain;
    return r;
  }
  {
    detail::table_core::guard g(*core);
    if (detail::any_lock_byte_held(core->fd(), core->slot_count())) {
      r.status = removal_status::in_use;
    } else if (!detail::names_same_file(core->fd(), object_name)) {
      return r; // replaced or removed by someone else meanwhile: not ours to remove
    } else {
      for (std::uint32_t i = 0; i < core->slot_count(); ++i)
        if (core->slot(i).state.load(std::memory_order_relaxed) == detail::slot_active)
          ++r.dead_sessions;
      if (o.dry_run) {
        r.status = removal_status::would_remove;
      } else {
        if (::shm_unlink(object_name.c_str()) != 0) {
          const int err = errno;
          if (err == ENOENT) return removal_result{};
          throw detail::system_failure(err == EACCES || err == EPERM ? errc::permission_denied
                                                                     : errc::system_error,
                                       "cannot remove table '" + object_name + "'", err);
        }
        r.status = removal_status::removed;
      }
    }
  }
  if (r.status == removal_status::in_use)
    r.live_sessions = detail::count_live_slots(core->fd(), core->slot_count());
  return r;
}

/// Unlinks the name `object_name` whatever the table holds, without opening it (it may be
/// corrupt, of another layout, or in use). Processes still using the table keep using it, but it
/// is then orphaned: processes that open the name later get a new table and are no longer
/// arbitrated with them. Returns false if the name did not exist. Throws errc::permission_denied
/// when this user may not remove it (/dev/shm lets only a file's owner remove it) and
/// errc::system_error for other failures.
inline bool remove_table_forcibly(const std::string& object_name) {
  if (::shm_unlink(object_name.c_str()) == 0) return true;
  const int err = errno;
  if (err == ENOENT) return false;
  throw detail::system_failure(err == EACCES || err == EPERM ? errc::permission_denied
                                                             : errc::system_error,
                               "cannot remove table '" + object_name + "'", err);
}

} // namespace v0
} // namespace gpushare
