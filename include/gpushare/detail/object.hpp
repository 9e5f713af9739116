// SPDX-License-Identifier: Apache-2.0
// Creating, opening and mapping the shared table object (mapped_table).
//
// Init protocol (see docs/design.md, section 4):
//   creator:  shm_open(O_CREAT|O_EXCL) -> OFD-lock the init byte -> fchmod -> pwrite the 40-byte
//             prefix (magic, layout, init_state = INIT, every size) -> posix_fallocate the full
//             size -> mmap -> write the rest of the header -> init_state = REDY -> unlock.
//   opener:   shm_open -> if init_state == REDY: validate every header field, done. Otherwise the
//             creator is still at work while it holds the init lock: wait (bounded). Once the lock
//             is free, the object must be one our creator leaves behind (0 bytes, or our prefix
//             at 40 bytes or at exactly the table size it names); anything else is refused and
//             never deleted. If such an unfinished creation stays so, with the lock free, for
//             `abandon_grace`, its creator died: take the init lock (so the creator, if merely
//             slow, notices it lost), check again, unlink the name, and start over (someone will
//             create it afresh). open_existing() never deletes: it reports the abandoned creation.
//   trust:    before any of that, every opener fstats the object and refuses (permission_denied)
//             one it must not trust: not a regular file, more than one link, or an owner and mode
//             other than its access mode allows (see check_trust() and docs/design.md, section 1).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include <gpushare/detail/crash_point.hpp>
#include <gpushare/detail/fork_guard.hpp>
#include <gpushare/detail/layout.hpp>
#include <gpushare/detail/liveness.hpp>
#include <gpushare/detail/object_header.hpp>
#include <gpushare/detail/object_name.hpp>
#include <gpushare/detail/object_trust.hpp>
#include <gpushare/detail/posix.hpp>
#include <gpushare/error.hpp>
#include <gpushare/types.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

inline constexpr std::uint64_t abandon_grace_ns = 100'000'000; // 100 ms

/// Maps `size` bytes of the table through a *new* open file description of the same file.
///
/// Why: a mapping holds a reference to the open file description it was made from, and OFD locks
/// live until the description's last reference goes. Were the table mapped through the
/// descriptor that holds a session's liveness lock, a forked child (which inherits the mapping)
/// would keep its parent's session looking alive after the parent died. Through a description
/// that never holds a lock, the child's inherited mapping keeps nothing alive.
inline void* map_lockless(int fd, std::size_t size, const std::string& name, bool writable = true) {
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  const int map_fd = ::open(proc.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (map_fd < 0)
    throw system_failure(errc::system_error, "cannot reopen table '" + name + "' via " + proc,
                         errno);
  void* base =
      ::mmap(nullptr, size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, map_fd, 0);
  const int err = errno;
  ::close(map_fd); // the mapping keeps its own reference
  if (base == MAP_FAILED)
    throw system_failure(errc::system_error, "cannot map table '" + name + "'", err);
  return base;
}

/// Does `fd` still refer to the object named `name`? (It may have been unlinked and replaced.)
inline bool names_same_file(int fd, const std::string& name) {
  struct stat mine {
  }, named{};
  const std::string path = object_path(name);
  return ::fstat(fd, &mine) == 0 && ::stat(path.c_str(), &named) == 0 &&
         mine.st_ino == named.st_ino && mine.st_dev == named.st_dev;
}

/// What open_existing() does with a creation it proves abandoned.
enum class abandoned_creation {
  keep,   ///< leave it in place and report it (errc::no_such_table): what observers do
  remove, ///< unlink it, then report it removed: what `gpushare clean` does
};

/// create_params::creator_slot when the creator claims no slot.
inline constexpr std::uint32_t no_creator_slot = 0xffffffffu;

struct create_params {
  table_dir dir; ///< where (check_table_dir(); the default is /dev/shm)
  std::string domain;
  std::string key;
  table_access access = table_access::user;
  std::uint64_t capacity = unlimited_capacity;
  std::uint32_t slot_count = default_slot_count;
  std::uint64_t open_timeout_ns = 5'000'000'000ull;
  /// A session's join: the slot whose liveness lock the creator takes while it still holds the
  /// init lock, so that its new table never looks unused to a cleaner (no_creator_slot: none).
  std::uint32_t creator_slot = no_creator_slot;
};

/// An open, mapped, validated table object. Owns the descriptor (whose open file description
/// carries this process's OFD locks) and the mapping.
class mapped_table {
public:
  mapped_table() = default;
  mapped_table(mapped_table&& o) noexcept { *this = std::move(o); }
  mapped_table& operator=(mapped_table&& o) noexcept {
    if (this != &o) {
      unmap();
      fd_ = std::move(o.fd_);
      base_ = std::exchange(o.base_, nullptr);
      size_ = std::exchange(o.size_, 0);
      view_ = std::exchange(o.view_, {});
      name_ = std::move(o.name_);
      created_ = o.created_;
      creator_slot_ = std::exchange(o.creator_slot_, no_creator_slot);
      intent_ = o.intent_;
      expected_ = o.expected_;
    }
    return *this;
  }
  ~mapped_table() { unmap(); }

  /// Opens the table `params` names, creating it if it does not exist.
  static mapped_table open_or_create(const create_params& params);
  /// Opens an existing table by its object name ("/gpushare...."); never creates one.
  /// A creation proven abandoned is reported, and removed only with abandoned_creation::remove.
  /// With open_intent::observer the table is mapped read-only and nothing is ever written,
  /// locked or unlinked; with anything but open_intent::participant, abandoned_creation::keep is
  /// forced (only a participant may remove its own abandoned creation).
  static mapped_table open_existing(const std::string& name, std::uint64_t timeout_ns,
                                    abandoned_creation on_abandoned = abandoned_creation::keep,
                                    open_intent intent = open_intent::participant);

  int fd() const noexcept { return fd_.get(); }
  const table_view& view() const noexcept { return view_; }
  const std::string& name() const noexcept { return name_; }
  bool created() const noexcept { return created_; }
  /// The slot this process claimed while creating the table (create_params::creator_slot), or
  /// no_creator_slot: its liveness lock is held on this descriptor.
  std::uint32_t creator_slot() const noexcept { return creator_slot_; }
  /// Who opened it: an observer's mapping is read-only.
  open_intent intent() const noexcept { return intent_; }
  /// Forget the descriptor without closing it (used in a forked child, where it is closed).
  void abandon_fd() noexcept { (void)fd_.release(); }

private:
  enum class attach_result { ready, initialising, removed };

  /// Since when one unfinished object (by device and inode) has had its init lock free.
  struct unready_watch {
    std::uint64_t since_ns = 0; ///< the first probe that found it free; 0: not watching
    dev_t dev = 0;
    ino_t ino = 0;
  };

  void unmap() noexcept {
    if (base_) ::munmap(base_, size_);
    base_ = nullptr;
  }
  bool create_in(unique_fd fd, const create_params& p);
  void give_dir_group(int fd, const table_dir& dir);
  attach_result attach(unique_fd fd, unready_watch& watch, abandoned_creation on_abandoned);
  std::uint32_t map_to_attach(int fd, struct stat& st, std::size_t& file_size);
  void validate_ready(std::size_t file_size) const;
  static bool steal_and_unlink(int fd, const std::string& name);

  unique_fd fd_;
  void* base_ = nullptr;
  std::size_t size_ = 0;
  table_view view_;
  std::string name_;
  bool created_ = false;
  std::uint32_t creator_slot_ = no_creator_slot;
  open_intent intent_ = open_intent::participant;
  std::optional<table_access> expected_; ///< the access open_or_create asked for
};

inline std::string copy_name_to(char* dst, std::size_t cap, std::string_view src) {
  const std::size_t n = std::min(src.size(), cap - 1);
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
  return std::string(src.substr(0, n));
}

/// Reads a NUL-terminated string of at most `cap` bytes from shared memory (never past `cap`).
inline std::string read_bounded(const char* src, std::size_t cap) {
  std::size_t n = 0;
  while (n < cap && src[n] != '\0') ++n;
  return std::string(src, n);
}

/// Unlinks `name`, an abandoned creation, if this process wins the init lock, the name still
/// refers to `fd`'s file, and that file, looked at again under the lock, is still one of our
/// unfinished shapes. Returns whether it unlinked the name.
inline bool mapped_table::steal_and_unlink(int fd, const std::string& name) {
  if (try_lock_byte(fd, init_lock_byte) != 0) return false; // someone else is on it
  // The init lock stays held until our descriptor closes, so a late creator sees it lost.
  if (!names_same_file(fd, name)) return false; // replaced meanwhile: never unlink a newer one
  if (!inspect_unready(fd).ours()) return false;
  return unlink_object(name) == 0;
}

/// Writes the header fields of a table being created by this process, after its prefix and before
/// init_state = REDY.
inline void write_new_header(table_header& h, mode_t mode, const create_params& p) {
  h.creator_pid = ::getpid();
  h.access_mode = mode;
  h.created_unix_ns = realtime_ns();
  h.monotonic_offset_ns = monotonic_offset_ns();
  copy_name_to(h.key, key_capacity, p.key);
  copy_name_to(h.domain, domain_capacity, p.domain);
  h.lock.store(0, std::memory_order_relaxed); // free (fallocate zeroed it; say so anyway)
  h.capacity = p.capacity == 0 ? unlimited_capacity : p.capacity;
}

/// A group-mode table created in table directory `dir` takes the directory's group, whatever
/// the creator's primary group (a setgid directory gives it already): the group its name says.
/// Unlinks the creation and throws errc::permission_denied when the creator is not in it.
inline void mapped_table::give_dir_group(int fd, const table_dir& dir) {
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_gid == dir.gid) return;
  if (::fchown(fd, static_cast<uid_t>(-1), dir.gid) == 0) return;
  const int err = errno;
  unlink_object(name_);
  if (err == EPERM)
    throw error(errc::permission_denied,
                "cannot create group-mode table '" + name_ +
                    "': it must have the group of table "
                    "directory '" +
                    dir.path + "', " + describe_group(dir.gid) + ", and this process (" +
                    describe_caller() +
                    ") is not in it: join it (Kubernetes: supplementalGroups: [" +
                    std::to_string(dir.gid) + "])");
  throw system_failure(errc::system_error, "cannot set the group of table '" + name_ + "'", err);
}

inline bool mapped_table::create_in(unique_fd fd, const create_params& p) {
  if (try_lock_byte(fd.get(), init_lock_byte) != 0) return false; // declared dead already
  // A peer may have judged us dead (we stalled between creating and locking), taken and dropped
  // the init lock and unlinked the name: then this file is an orphan nobody can open. Start over.
  if (!names_same_file(fd.get(), name_)) return false;
  crash_point("create.locked");
  const mode_t mode = p.access == table_access::group ? 0660 : 0600;
  if (p.access == table_access::group && !p.dir.shm()) give_dir_group(fd.get(), p.dir);
  // fchmod rather than umask: umask is process-wide and open applied it to our mode.
  if (::fchmod(fd.get(), mode) != 0) {
    const int err = errno;
    unlink_object(name_);
    throw system_failure(errc::system_error, "cannot set the mode of table '" + name_ + "'", err);
  }
  const std::size_t size = table_size(p.slot_count);
  auto sizing_failed = [&](int err) {
    unlink_object(name_);
    const std::string dir = object_dir(name_);
    if (err == ENOSPC)
      return error(errc::no_space, "no space in " + dir + " for table '" + name_ + "' (" +
                                       std::to_string(size) + " bytes): free space there (`df -h " +
                                       dir +
                                       "`; `gpushare clean` removes unused tables) or enlarge "
                                       "its filesystem");
    return system_failure(errc::system_error, "cannot size table '" + name_ + "'", err);
  };
  // The prefix first, before the object grows: from here until it is ready, the object is our
  // prefix at 40 bytes or at the full size, so an opener can prove it ours (inspect_unready()).
  const prefix_bytes prefix = creation_prefix(p.slot_count);
  if (const ssize_t n = ::pwrite(fd.get(), prefix.data(), prefix.size(), 0);
      n != static_cast<ssize_t>(prefix.size()))
    throw sizing_failed(n < 0 ? errno : ENOSPC);
  crash_point("create.prefixed");
  // posix_fallocate, not ftruncate alone: on a full /dev/shm it fails here with ENOSPC instead of
  // a SIGBUS on first touch of an unbacked page later. It keeps the prefix, and tmpfs grows the
  // file all at once or not at all.
  if (const int rc = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(size)); rc != 0)
    throw sizing_failed(rc);
  crash_point("create.sized");
  void* base = nullptr;
  try {
    base = map_lockless(fd.get(), size, name_);
  } catch (...) {
    unlink_object(name_);
    throw;
  }
  base_ = base;
  size_ = size;
  auto* h = static_cast<table_header*>(base);
  crash_point("create.initialising"); // the prefix (magic, sizes, INIT) is already written
  write_new_header(*h, mode, p);
  // A joining creator claims its slot before the init lock goes: a cleaner, which removes only
  // tables with no lock byte held, can then never remove the table between its creation and the
  // join, and a join racing a cleaner that runs in a loop wins once it creates (issue 28's CI).
  if (p.creator_slot < p.slot_count && try_lock_byte(fd.get(), slot_lock_byte(p.creator_slot)) == 0)
    creator_slot_ = p.creator_slot;
  h->prefix.init_state.store(init_state_ready, std::memory_order_release);
  crash_point("create.ready");
  unlock_byte(fd.get(), init_lock_byte);
  view_ = {h, reinterpret_cast<slot_record*>(h + 1), p.slot_count};
  fd_ = std::move(fd);
  created_ = true;
  return true;
}

inline void mapped_table::validate_ready(std::size_t file_size) const {
  validate_table_header(*static_cast<const table_header*>(base_), file_size, name_,
                        "; " + removal_hint(name_));
}

/// Stats `fd`, refuses it unless it may be trusted, and maps it (if it holds at least a prefix) in
/// place of any earlier mapping; returns its init state (init_state_fresh when it holds no prefix),
/// with what fstat said in `st` and the size mapped in `file_size`.
inline std::uint32_t mapped_table::map_to_attach(int fd, struct stat& st, std::size_t& file_size) {
  std::uint32_t state = init_state_fresh;
  // A creator stores REDY only once the object has its full size, but a size read before that
  // store may be from before posix_fallocate (our 40-byte prefix). So once REDY is seen, the size
  // is read again, and the object mapped again if it grew meanwhile (a few times at most: only a
  // foreign writer keeps resizing a ready table, and validation then refuses it).
  for (int look = 0; look < 3; ++look) {
    if (::fstat(fd, &st) != 0)
      throw system_failure(errc::system_error, "cannot stat table '" + name_ + "'", errno);
    // First of all: whose object is it? Nothing is read from, locked in or removed from an
    // object the caller must not trust (docs/design.md, section 1).
    check_trust(st, name_, intent_, expected_);
    crash_point("attach.stat");
    if (look > 0 && static_cast<std::size_t>(st.st_size) == file_size) break;
    file_size = static_cast<std::size_t>(st.st_size);
    state = init_state_fresh;
    if (file_size >= sizeof(table_prefix)) {
      void* base = map_lockless(fd, file_size, name_, intent_ != open_intent::observer);
      unmap();
      base_ = base;
      size_ = file_size;
      state = static_cast<const table_prefix*>(base)->init_state.load(std::memory_order_acquire);
    }
    if (state != init_state_ready) break;
  }
  return state;
}

inline mapped_table::attach_result mapped_table::attach(unique_fd fd, unready_watch& watch,
                                                        abandoned_creation on_abandoned) {
  struct stat st {};
  std::size_t file_size = 0;
  const std::uint32_t state = map_to_attach(fd.get(), st, file_size);
  if (state == init_state_ready) {
    validate_ready(file_size);
    auto* h = static_cast<table_header*>(base_);
    view_ = {h, reinterpret_cast<slot_record*>(h + 1), h->prefix.slot_count};
    fd_ = std::move(fd);
    return attach_result::ready;
  }
  // Not ready. While a creator is at work (judge_creation: its init lock held, or we cannot
  // tell), wait. Its object may have any shape meanwhile (an older gpushare wrote its magic last).
  if (judge_creation(false, probe_byte(fd.get(), init_lock_byte)) == creation::in_progress) {
    watch.since_ns = 0;
    return attach_result::initialising;
  }
  // Judged after the probe, so a creator that finished in between reads as ready.
  const unready_object u = inspect_unready(fd.get());
  if (u.what == unready_object::kind::ready) return attach_result::initialising; // look again
  const std::string path = object_path(name_);
  if (!u.ours())
    throw error(
        u.code,
        "'" + path + "' is " +
            (u.code == errc::table_incompatible ? u.why : "not a gpushare table (" + u.why + ")") +
            "; gpushare leaves it as it is: " + removal_hint(name_) +
            ", or use another key or GPUSHARE_DOMAIN");
  // The grace period counts for this very file: a name unlinked and created anew meanwhile starts
  // it again.
  const std::uint64_t now = monotonic_ns();
  if (watch.since_ns == 0 || watch.dev != st.st_dev || watch.ino != st.st_ino)
    watch = {now, st.st_dev, st.st_ino};
  if (now - watch.since_ns < abandon_grace_ns) return attach_result::initialising;
  // Ours, unfinished, and its init lock free for the whole grace period: the creator died.
  if (on_abandoned == abandoned_creation::keep || intent_ != open_intent::participant)
    throw error(errc::no_such_table,
                "table '" + name_ + "' does not exist yet: '" + path +
                    "' is a creation abandoned by its creator (" + u.why +
                    "); it was left in place, and the next gpushare::session or "
                    "gpushare::table::open of its key recreates it (`gpushare clean` removes it)");
  crash_point("attach.abandoned"); // judged abandoned; its creator may finish it even now
  if (!steal_and_unlink(fd.get(), name_)) return attach_result::initialising; // a peer is on it
  watch.since_ns = 0;
  return attach_result::removed;
}

inline mapped_table mapped_table::open_or_create(const create_params& p) {
  // No fork() while we may hold the init lock (creating, or removing an abandoned creation): a
  // child would inherit it, and our creation would look in progress after we died.
  const fork_registry::no_fork_scope no_fork;
  mapped_table t;
  t.name_ = table_object_name(p.dir, p.domain, p.key, p.access);
  t.expected_ = p.access;
  if (p.slot_count == 0 || p.slot_count > max_slot_count)
    throw error(errc::invalid_argument, "slot count " + std::to_string(p.slot_count) +
                                            " is out of range (1.." +
                                            std::to_string(max_slot_count) + ")");
  const std::uint64_t deadline = monotonic_ns() + p.open_timeout_ns;
  const mode_t mode = p.access == table_access::group ? 0660 : 0600;
  unready_watch unready;
  for (;;) {
    int fd = open_object(t.name_, O_RDWR | O_CREAT | O_EXCL, mode);
    if (fd >= 0) {
      crash_point("create.opened"); // created the name, not yet holding its init lock
      if (t.create_in(unique_fd(fd), p)) return t;
      continue; // a peer judged our creation abandoned; start over
    }
    if (errno != EEXIST) break;
    fd = open_object(t.name_, O_RDWR);
    if (fd < 0) {
      if (errno == ENOENT) continue; // unlinked between our two calls
      break;
    }
    switch (t.attach(unique_fd(fd), unready, abandoned_creation::remove)) {
    case attach_result::ready: return t;
    case attach_result::removed: continue; // an abandoned creation: create the table afresh
    case attach_result::initialising: break;
    }
    if (monotonic_ns() > deadline)
      throw error(errc::table_busy, "table '" + t.name_ + "' is still being initialised after " +
                                        std::to_string(p.open_timeout_ns / 1'000'000) +
                                        " ms; if this persists, " + removal_hint(t.name_));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  throw open_or_create_failure(t.name_, p.access, errno);
}

inline mapped_table mapped_table::open_existing(const std::string& name, std::uint64_t timeout_ns,
                                                abandoned_creation on_abandoned,
                                                open_intent intent) {
  const fork_registry::no_fork_scope no_fork; // we may take the init lock (steal_and_unlink)
  mapped_table t;
  t.name_ = canonical_object_name(name);
  t.intent_ = intent;
  if (intent != open_intent::participant) on_abandoned = abandoned_creation::keep;
  if (name_is_path(t.name_)) (void)check_table_dir(object_dir(t.name_));
  const int flags = intent == open_intent::observer ? O_RDONLY : O_RDWR;
  const std::uint64_t deadline = monotonic_ns() + timeout_ns;
  unready_watch unready;
  for (;;) {
    crash_point("open_existing.open");
    switch (t.attach(open_table_object(t.name_, flags), unready, on_abandoned)) {
    case attach_result::ready: return t;
    case attach_result::removed: // only with abandoned_creation::remove
      throw error(errc::no_such_table,
                  "table '" + t.name_ + "' was abandoned by its creator and has been removed");
    case attach_result::initialising: break;
    }
    if (monotonic_ns() > deadline)
      throw error(errc::table_busy, "table '" + t.name_ + "' is still being initialised");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

} // namespace detail
} // namespace v0
} // namespace gpushare
