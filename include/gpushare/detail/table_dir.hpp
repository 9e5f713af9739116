// SPDX-License-Identifier: Apache-2.0
// The table directory (GPUSHARE_DIR, session_options::directory, the CLI's --dir): where a table's
// file lives when not in /dev/shm. A table there is the same object as in /dev/shm (same layout,
// init, trust, liveness and removal protocols); only its name is a path, "<dir>/gpushare.<domain>.
// <owner>.<key>", and it is opened with open(2) as glibc's shm_open opens /dev/shm's files.
//
// The checks (docs/design.md, "Table directories"): an absolute path without "." or ".."; an
// existing directory; a filesystem whose OFD locks and shared mappings are the kernel's own (no
// network or FUSE filesystem: their locks and mappings are not coherent between clients, or depend
// on a daemon); nobody outside its owner and group may plant a file there (no write bit for
// others unless sticky, and never with the setgid bit, through which anyone's file would get the
// group). A group-mode table in a directory carries the directory's group in its name and on its
// file, so every member of that group names it alike whatever its own primary group (a pod's
// supplementalGroups): the multi-user convention is a setgid directory of a group, mode 2770.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <grp.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <gpushare/error.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// Where POSIX shared-memory objects appear as files on Linux: the default table directory.
inline constexpr std::string_view object_directory = "/dev/shm";

/// A checked table directory. `path` is empty for /dev/shm (tables are POSIX shm objects there).
struct table_dir {
  std::string path; ///< normalised: absolute, no trailing '/', no "//", "." or ".."
  gid_t gid = 0;    ///< the directory's group (what a group-mode table there carries)
  mode_t mode = 0;  ///< its permission bits (07777)
  bool shm() const noexcept { return path.empty(); }
  /// The directory as a user names it: "/dev/shm" for the default.
  std::string shown() const { return shm() ? std::string(object_directory) : path; }
};

/// Normalises `dir`, a table directory as given: "" or "/dev/shm" (with any trailing '/') is the
/// default (returns ""); otherwise an absolute path, returned without its trailing '/' and with
/// runs of '/' made one. Throws errc::invalid_argument, saying why, for a relative path, a "." or
/// ".." component, the root directory, or a path too long for a table name in it.
inline std::string normalize_table_dir(std::string_view dir) {
  auto bad = [&](const std::string& why) {
    return error(errc::invalid_argument,
                 "table directory '" + std::string(dir) + "' " + why +
                     "; give an absolute path of an existing directory, e.g. /run/gpushare");
  };
  if (dir.empty()) return {};
  if (dir.front() != '/') throw bad("is not an absolute path");
  std::string out;
  std::size_t i = 0;
  while (i < dir.size()) {
    while (i < dir.size() && dir[i] == '/') ++i;
    const std::size_t end = std::min(dir.find('/', i), dir.size());
    const std::string_view part = dir.substr(i, end - i);
    if (part == "." || part == "..") throw bad("has a '" + std::string(part) + "' component");
    if (!part.empty()) out.append("/").append(part);
    i = end;
  }
  if (out.empty()) throw bad("is the root directory");
  if (out.size() > 3000) throw bad("is too long (at most 3000 characters)");
  if (out == object_directory) return {};
  if (out.find('\n') != std::string::npos) throw bad("contains a newline");
  return out;
}

/// The name of a filesystem type (statfs f_type) on which tables must not live, or nullptr.
/// Network and cluster filesystems keep neither OFD locks nor shared mappings coherent between
/// machines (and some not even between processes of one); FUSE's depend on its daemon.
inline const char* unsupported_filesystem(std::int64_t type) noexcept {
  switch (static_cast<std::uint32_t>(type)) {
  case 0x6969u: return "nfs";
  case 0x517Bu: return "smb";
  case 0xFF534D42u: return "cifs";
  case 0xFE534D42u: return "smb2";
  case 0x00C36400u: return "ceph";
  case 0x0BD00BD0u: return "lustre";
  case 0x47504653u: return "gpfs";
  case 0x19830326u: return "beegfs";
  case 0x01021997u: return "9p";
  case 0x65735546u: return "fuse (sshfs, virtiofs, ...)";
  case 0x5346414Fu: return "afs";
  case 0x6B414653u: return "afs";
  case 0x73757245u: return "coda";
  case 0x01161970u: return "gfs2";
  case 0x7461636Fu: return "ocfs2";
  case 0x13661366u: return "orangefs";
  case 0x564Cu: return "ncp";
  default: return nullptr;
  }
}

/// Whether this process is in group `gid` (its effective or a supplementary group).
inline bool in_group(gid_t gid) {
  if (::getegid() == gid) return true;
  const int n = ::getgroups(0, nullptr);
  if (n <= 0) return false;
  std::vector<gid_t> groups(static_cast<std::size_t>(n));
  const int got = ::getgroups(n, groups.data());
  for (int i = 0; i < got; ++i)
    if (groups[static_cast<std::size_t>(i)] == gid) return true;
  return false;
}

/// "group gpushare (gid 990)" or "gid 990" when the group has no name here.
inline std::string describe_group(gid_t gid) {
  std::string name;
  if (const struct group* g = ::getgrgid(gid); g != nullptr && g->gr_name != nullptr)
    name = g->gr_name;
  const std::string id = "gid " + std::to_string(gid);
  return name.empty() ? id : "group " + name + " (" + id + ")";
}

/// "uid 1000, groups 1000 27 990": who this process is, for messages.
inline std::string describe_caller() {
  std::string s = "uid " + std::to_string(::geteuid()) + ", groups " + std::to_string(::getegid());
  const int n = ::getgroups(0, nullptr);
  std::vector<gid_t> groups(n > 0 ? static_cast<std::size_t>(n) : 0u);
  const int got = n > 0 ? ::getgroups(n, groups.data()) : 0;
  for (int i = 0; i < got; ++i)
    if (groups[static_cast<std::size_t>(i)] != ::getegid())
      s += " " + std::to_string(groups[static_cast<std::size_t>(i)]);
  return s;
}

/// "mode 2770, uid 0, group gpushare (gid 990)": a directory's owner and mode, for messages.
inline std::string describe_dir(const struct stat& st) {
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777u);
  return std::string("mode ") + mode + ", uid " + std::to_string(st.st_uid) + ", " +
         describe_group(st.st_gid);
}

/// Checks the table directory `dir` (normalize_table_dir() first) and returns it with its group
/// and mode. Throws errc::bad_directory, saying what is wrong and what to do, when it is missing,
/// not a directory, on an unsupported filesystem or open to others' files, and
/// errc::permission_denied when this process may not search it.
inline table_dir check_table_dir(std::string_view given) {
  table_dir d;
  d.path = normalize_table_dir(given);
  const std::string shown = d.shown();
  struct stat st {};
  if (::stat(shown.c_str(), &st) != 0) {
    const int err = errno;
    if (err == EACCES)
      throw error(errc::permission_denied,
                  "cannot reach table directory '" + shown + "': a directory above it does not " +
                      "let this process (" + describe_caller() + ") through");
    throw error(errc::bad_directory,
                "table directory '" + shown + "' " +
                    (err == ENOENT || err == ENOTDIR
                         ? std::string("does not exist")
                         : "cannot be examined (" + std::string(std::strerror(err)) + ")") +
                    ": create it (for several users: `mkdir -m 2770 " + shown + " && chgrp " +
                    "GROUP " + shown + "`), or unset GPUSHARE_DIR to use /dev/shm");
  }
  if (!S_ISDIR(st.st_mode))
    throw error(errc::bad_directory, "table directory '" + shown + "' is not a directory");
  d.gid = st.st_gid;
  d.mode = st.st_mode & 07777u;
  if (d.shm()) return d; // /dev/shm: the system's, 1777, as it has always been used
  struct statfs fs {};
  if (::statfs(shown.c_str(), &fs) == 0)
    if (const char* type = unsupported_filesystem(static_cast<std::int64_t>(fs.f_type)))
      throw error(errc::bad_directory,
                  "table directory '" + shown + "' is on a " + type +
                      " filesystem, where tables cannot live: their locks and shared memory "
                      "must be one machine's kernel's; use a local directory (a tmpfs such as "
                      "/dev/shm or /run, or a local disk)");
  const bool others_write = (d.mode & 0002u) != 0;
  const bool sticky = (d.mode & 01000u) != 0;
  const bool setgid = (d.mode & 02000u) != 0;
  if (others_write && (!sticky || setgid))
    throw error(errc::bad_directory, "table directory '" + shown + "' (" + describe_dir(st) +
                                         ") lets any user put files in it" +
                                         (setgid ? " that take its group" : " or replace others'") +
                                         ": remove the write bit for others (`chmod o-w " + shown +
                                         "`)");
  if (::access(shown.c_str(), X_OK) != 0)
    throw error(errc::permission_denied,
                "table directory '" + shown + "' (" + describe_dir(st) +
                    ") does not let this process (" + describe_caller() +
                    ") in: join its group (Kubernetes: supplementalGroups: [" +
                    std::to_string(st.st_gid) + "]) or run as its owner");
  return d;
}

} // namespace detail
} // namespace v0
} // namespace gpushare
