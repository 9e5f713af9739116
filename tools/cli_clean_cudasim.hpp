// SPDX-License-Identifier: Apache-2.0
// `gpushare clean --cudasim [NAME...]`: remove the simulated runtime's state objects
// (/dev/shm/<CUDASIM_STATE>) that no running program uses. cudasim's programs hold a shared
// flock() on the object while they run; removal happens only under the exclusive one, after
// checking that the name still refers to the object locked (cudasim/src/state_id.hpp).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cli_args.hpp"
#include "cli_format.hpp"
#include "cli_status.hpp"
#include "cudasim/src/state_id.hpp"

namespace gpushare::cli {

/// What `clean --cudasim` did with the objects it looked at.
struct sim_clean_counts {
  std::size_t states = 0, removed = 0, failed = 0;
};

/// The object name of a state given as NAME, /NAME or /dev/shm/NAME; usage_error for others.
inline std::string sim_state_name(const std::string& given) {
  std::string name = given;
  if (name.starts_with("/dev/shm/"))
    name.erase(0, 9);
  else if (name.starts_with("/"))
    name.erase(0, 1);
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    throw usage_error("'" + given + "' is not a cudasim state name (CUDASIM_STATE: a name " +
                      "without '/', or /dev/shm/NAME)");
  return name;
}

/// The caller's objects in /dev/shm that begin with cudasim's magic, sorted by name.
inline std::vector<std::string> list_sim_states() {
  std::vector<std::string> out;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr)
    throw runtime_failure(std::string("cannot list /dev/shm: ") + std::strerror(errno));
  while (const dirent* e = ::readdir(dir)) {
    struct stat st {};
    if (::fstatat(::dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != ::geteuid() || st.st_size < 12)
      continue;
    const int fd =
        ::openat(::dirfd(dir), e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    std::uint64_t magic = 0;
    if (::pread(fd, &magic, sizeof magic, 0) == sizeof magic && magic == cudasim::state_magic)
      out.emplace_back(e->d_name);
    ::close(fd);
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

/// The first 12 bytes of an object: a cudasim state's magic and version (zeros if shorter).
struct sim_header {
  std::uint64_t magic = 0;
  std::uint32_t version = 0;
};

inline sim_header read_sim_header(int fd) {
  sim_header h;
  if (::pread(fd, &h.magic, 8, 0) != 8 || ::pread(fd, &h.version, 4, 8) != 4) return {};
  return h;
}

/// Why the object open as `fd` must be kept ("" when it may go): not a state (`is_state` false),
/// another owner's, in use, made by a version whose programs did not lock it. `force` lets in-use
/// and such old states go, and, for an object the user named, one whose creator died before writing
/// it (all zeros and unlocked: cudasim's creator locks it first); `note` says which. Leaves the
/// exclusive lock taken when the object may go.
inline std::string sim_keep_reason(int fd, const struct stat& st, bool force, bool named,
                                   bool& is_state, std::string& note) {
  const sim_header head = read_sim_header(fd);
  const bool unfinished = head.magic == 0 && head.version == 0;
  if (!S_ISREG(st.st_mode) || (head.magic != cudasim::state_magic && !(named && unfinished)))
    return "not a cudasim state (gpushare's own tables are cleaned without --cudasim)";
  if (st.st_uid != ::geteuid())
    return "owned by uid " + std::to_string(st.st_uid) + " (only its owner removes it)";
  const bool locked = ::flock(fd, LOCK_EX | LOCK_NB) != 0;
  if (unfinished) {
    if (locked || !force)
      return locked ? "not a cudasim state yet (a program is creating it)"
                    : "empty: a cudasim state whose creator died before writing it, or not a "
                      "cudasim state; --force removes it";
    is_state = true;
    note = " (--force: an empty state whose creator died)";
    return {};
  }
  is_state = true;
  if (locked) {
    if (!force) return "a running program uses it";
    note = " (--force: a running program uses it and goes on with the removed state, no longer "
           "shared with programs that start later)";
  } else if (head.version < cudasim::first_locking_version) {
    if (!force)
      return "made by an older cudasim version (state version " + std::to_string(head.version) +
             "), whose programs do not say whether they use it; --force removes it";
    note = " (--force: made by an older cudasim version)";
  }
  return {};
}

/// Examines the state `name` and removes it (or says it would) unless it must be kept; one line
/// of report. `named`: the user gave the name (see sim_keep_reason).
inline std::string clean_sim_state(const std::string& name, bool force, bool dry_run, bool named,
                                   sim_clean_counts& n) {
  const std::string path = "/dev/shm/" + name;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return "skipped " + path + ": no such object\n";
    struct stat st {};
    if (err == EACCES && ::lstat(path.c_str(), &st) == 0 && st.st_uid != ::geteuid())
      return "kept " + path + ": owned by uid " + std::to_string(st.st_uid) +
             ", which this user may not open (only its owner, or root, removes it)\n";
    return "kept " + path + ": cannot open it: " + std::strerror(err) + "\n";
  }
  struct stat st {};
  struct stat now {};
  std::string note;
  bool is_state = false;
  const std::string keep = ::fstat(fd, &st) != 0
                               ? std::string("cannot examine it: ") + std::strerror(errno)
                               : sim_keep_reason(fd, st, force, named, is_state, note);
  if (is_state) ++n.states;
  std::string out;
  if (!keep.empty()) {
    out = "kept " + path + ": " + keep + "\n";
  } else if (::stat(path.c_str(), &now) != 0 || now.st_ino != st.st_ino ||
             now.st_dev != st.st_dev) {
    out = "skipped " + path + ": it was removed meanwhile\n";
  } else if (dry_run) {
    ++n.removed;
    out = "would remove " + path + (note.empty() ? " (no program uses it)" : note) + "\n";
  } else if (::shm_unlink(("/" + name).c_str()) == 0) {
    ++n.removed;
    out = "removed " + path + (note.empty() ? " (no program uses it)" : note) + "\n";
  } else {
    ++n.failed;
    out = "failed to remove " + path + ": " + std::strerror(errno) + "\n";
  }
  ::close(fd); // drops the exclusive lock after the name is gone
  return out;
}

/// `gpushare clean --cudasim [--dry-run] [--force] [NAME...]`.
inline int run_clean_cudasim(const parsed_args& a) {
  if (a.has("--domain") || a.has("--all-domains"))
    throw usage_error("--cudasim cleans simulated-device states, which belong to no domain: "
                      "drop --domain/--all-domains");
  const bool force = a.has("--force"), dry_run = a.has("--dry-run");
  std::vector<std::string> names;
  for (const std::string& given : a.positionals) names.push_back(sim_state_name(given));
  const bool listed = names.empty();
  if (listed) names = list_sim_states();
  sim_clean_counts n;
  std::string out;
  for (const std::string& name : names) out += clean_sim_state(name, force, dry_run, !listed, n);
  out += (dry_run ? "would remove " : "removed ") + std::to_string(n.removed) + " of " +
         plural(n.states, "cudasim state") + (dry_run ? " (dry run: nothing was removed)" : "");
  if (listed && n.states == 0) out += " (none of yours in /dev/shm)";
  out += "\n";
  write_stdout(out);
  return n.failed > 0 ? 1 : 0;
}

} // namespace gpushare::cli
