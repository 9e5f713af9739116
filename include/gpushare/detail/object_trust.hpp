// SPDX-License-Identifier: Apache-2.0
// Whose table object a process may trust (docs/design.md, section 1): who opens it
// (open_intent), the check of the object's owner, mode and links against its name (check_trust),
// and shm_open of an existing object with the errors a reader gets (open_table_object), or a
// creator (open_or_create_failure).
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <optional>
#include <string>

#include <gpushare/detail/object_name.hpp>
#include <gpushare/detail/posix.hpp>
#include <gpushare/detail/table_dir.hpp>
#include <gpushare/error.hpp>
#include <gpushare/types.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// Who opens a table, which decides whose object it may be (check_trust()).
enum class open_intent {
  /// A process that takes part in the table (joins, locks, writes, and may remove an abandoned
  /// creation of its own): the object must be the caller's. User mode: owned by the effective uid,
  /// no group or other permission bits, and the name says "u<euid>". Group mode: its group is the
  /// gid its name says (the caller's effective gid when it creates), no other permission bits.
  participant,
  /// A reader of any owner's table (root's `gpushare status`/`top`/`metrics`): the object must
  /// be what its name says (user mode: owned by the uid in its name, no group or other bits;
  /// group mode: its group is the gid in its name, no other bits), whoever the caller is. It is
  /// opened O_RDONLY and mapped PROT_READ: such a mapped_table can never write the table, take
  /// its lock or any lock byte, or unlink anything (a write through its view faults).
  observer,
  /// Root's `gpushare clean --force` on another user's table: checked as an observer's (the
  /// object is what its name says), but opened read-write so that the cleaner can take the
  /// table's lock and verify, under it, that the table is unused. Never removes an abandoned
  /// creation (abandoned_creation::keep is forced).
  clean_any_owner,
};

/// "uid 65534, gid 65534, mode 0666, 2 links": the owner and mode of an object, for messages.
inline std::string describe_owner(const struct stat& st) {
  char mode[8];
  const unsigned bits = st.st_mode & 07777u; // mode_t is unsigned: no cast (-Wuseless-cast)
  std::snprintf(mode, sizeof mode, "%04o", bits);
  return "uid " + std::to_string(st.st_uid) + ", gid " + std::to_string(st.st_gid) + ", mode " +
         mode + ", " + std::to_string(st.st_nlink) + (st.st_nlink == 1 ? " link" : " links");
}

/// Refuses (errc::permission_denied) an object that `intent` must not trust: see open_intent.
/// `expected` is the access mode the caller asks for (open_or_create); nullopt when any access
/// mode the object and its name agree on will do (open_existing).
inline void check_trust(const struct stat& st, const std::string& name, open_intent intent,
                        std::optional<table_access> expected) {
  const unsigned mode = st.st_mode & 07777u;
  // 0 links: unlinked since we opened it (a cleaner, a remover); the join protocol deals with
  // that (it re-checks the name under the table lock). More than one: a link made elsewhere.
  const bool regular = S_ISREG(st.st_mode) && st.st_nlink <= 1;
  const bool self = intent == open_intent::participant;
  const uid_t euid = ::geteuid();
  const gid_t egid = ::getegid();
  // User mode: owned by the uid of the name (the caller's, for a participant), 0600 or less.
  const bool user_ok = (mode & 077u) == 0 && name_has_owner(name, 'u', st.st_uid) &&
                       (!self || st.st_uid == euid) &&
                       (!expected || *expected == table_access::user);
  // Group mode: of the gid of the name (the caller's egid when it creates), 0660 or less.
  const bool group_ok = (mode & 007u) == 0 && name_has_owner(name, 'g', st.st_gid) &&
                        (!self || !expected || st.st_gid == egid || in_group(st.st_gid)) &&
                        (!expected || *expected == table_access::group);
  if (regular && (user_ok || group_ok)) return;
  std::string want;
  if (!expected || *expected == table_access::user)
    want = "a user-mode table must be owned by the uid in its name" +
           (self ? " (" + std::to_string(euid) + ")" : std::string()) +
           " with no group or other permissions";
  if (!expected || *expected == table_access::group)
    want += std::string(want.empty() ? "a" : ", a") +
            " group-mode table must have the gid in its name" +
            (self && expected && !name_is_path(name) ? " (" + std::to_string(egid) + ")"
                                                     : std::string()) +
            " with no other permissions";
  throw error(errc::permission_denied,
              "refusing to open table '" + name + "': '" + object_path(name) + "' has " +
                  describe_owner(st) + (S_ISREG(st.st_mode) ? "" : ", not a regular file") + " (" +
                  want + ", and be a regular file with one link); the name is taken by uid " +
                  std::to_string(st.st_uid) + ": use another GPUSHARE_DOMAIN, or ask root " +
                  "or that user to remove it");
}

/// Opens the file of the table object `name` as glibc's shm_open opens a /dev/shm object, and a
/// table directory's the same way: open(2) with O_NOFOLLOW (a symbolic link is refused, ELOOP),
/// O_CLOEXEC and O_NOCTTY, and O_NONBLOCK: another user who swaps a FIFO in under the name (a
/// rename that lands between a listing's check and this open) would otherwise block the open
/// until a writer came, which never happens, and hang whoever reads (`gpushare status`, the
/// exporter's workers; issue 42). The caller's fstat then refuses what is not a regular file;
/// on a regular file O_NONBLOCK changes nothing. Returns the descriptor, or -1 with errno.
inline int open_object(const std::string& name, int flags, mode_t mode = 0) {
  return ::open(object_path(name).c_str(), flags | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
                mode);
}

/// Removes the name of the table object `name` (shm_unlink, or unlink in a table directory).
inline int unlink_object(const std::string& name) { return ::unlink(object_path(name).c_str()); }

/// shm_open(name, flags) of an existing table object, with the errors a reader gets: no such
/// table (no_such_table), another user's (permission_denied), anything else (system_error).
inline unique_fd open_table_object(const std::string& name, int flags) {
  const int fd = open_object(name, flags);
  if (fd >= 0) return unique_fd(fd);
  const int err = errno;
  if (err == ELOOP)
    throw error(errc::permission_denied, "refusing to open table '" + name + "': '" +
                                             object_path(name) + "' is a symbolic link");
  if (err == EACCES && name_is_path(name))
    throw error(errc::permission_denied,
                "permission denied opening table '" + name + "' in table directory '" +
                    object_dir(name) + "': this process (" + describe_caller() +
                    ") is not in the group of the table or of the directory; join it "
                    "(Kubernetes: supplementalGroups) or run as the table's owner");
  if (err == ENOENT)
    throw error(errc::no_such_table,
                "no table named '" + name +
                    "' (a table exists once a session of its key has joined; `gpushare status` "
                    "lists the tables there are)");
  if (err == EACCES)
    throw error(errc::permission_denied,
                "permission denied opening table '" + name +
                    "': it belongs to another user or group; run as its owner, or have its "
                    "processes share it with GPUSHARE_TABLE_MODE=group and join their group");
  throw system_failure(errc::system_error, "cannot open table '" + name + "'", err);
}

/// The error for a failed shm_open(`name`) of open_or_create(), errno `err`.
inline error open_or_create_failure(const std::string& name, table_access access, int err) {
  if (err == ELOOP)
    return error(errc::permission_denied, "refusing to open table '" + name + "': '" +
                                              object_path(name) + "' is a symbolic link");
  if (err == EACCES && name_is_path(name)) {
    struct stat dir {};
    const std::string d = object_dir(name);
    if (::stat(d.c_str(), &dir) == 0 && ::access(d.c_str(), W_OK) != 0)
      return error(errc::permission_denied,
                   "permission denied creating table '" + name + "': table directory '" + d +
                       "' (" + describe_dir(dir) + ") does not let this process (" +
                       describe_caller() + ") create files: join " + describe_group(dir.st_gid) +
                       " (Kubernetes: supplementalGroups: [" + std::to_string(dir.st_gid) +
                       "]), or use a directory of your own");
  }
  if (err == EACCES) {
    // The name carries our own uid (or gid), so whoever owns this object took our name.
    struct stat st {};
    const std::string path = object_path(name);
    if (::stat(path.c_str(), &st) == 0)
      return error(errc::permission_denied,
                   "permission denied opening table '" + name + "': '" + path + "' has " +
                       describe_owner(st) + "; the name is taken by uid " +
                       std::to_string(st.st_uid) +
                       ": use another GPUSHARE_DOMAIN, or ask root or that user to remove it" +
                       (access == table_access::group
                            ? std::string()
                            : " (to share a table with a group, set GPUSHARE_TABLE_MODE=group in "
                              "every process of the group)"));
    return error(errc::permission_denied,
                 "permission denied opening table '" + name +
                     "': it belongs to another user or group; share it by setting "
                     "GPUSHARE_TABLE_MODE=group in every process of the group, or pick another "
                     "GPUSHARE_DOMAIN");
  }
  if (err == ENOSPC)
    return error(errc::no_space,
                 "no space in " + object_dir(name) + " to create table '" + name + "'");
  return system_failure(errc::system_error, "cannot open table '" + name + "'", err);
}

} // namespace detail
} // namespace v0
} // namespace gpushare
