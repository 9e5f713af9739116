// SPDX-License-Identifier: Apache-2.0
// Naming, creating, opening and validating the shared table object.
//
// Init protocol (see docs/design.md, "Creating a table"):
//   creator:  shm_open(O_CREAT|O_EXCL) -> OFD-lock the init byte -> fchmod -> posix_fallocate ->
//             mmap -> write header (init_state = INIT ... fields ... magic) -> init_state = REDY
//             -> unlock the init byte.
//   opener:   shm_open -> if init_state == REDY: validate every header field, done. Otherwise the
//             creator is still at work while it holds the init lock: wait (bounded). If the init
//             lock stays free and the table stays unready for `abandon_grace`, its creator died:
//             take the init lock (so the creator, if merely slow, notices it lost), unlink the
//             name, and start over (someone will create it afresh).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include <gpushare/detail/crash_point.hpp>
#include <gpushare/detail/layout.hpp>
#include <gpushare/detail/liveness.hpp>
#include <gpushare/detail/posix.hpp>
#include <gpushare/detail/robust_lock.hpp>
#include <gpushare/error.hpp>
#include <gpushare/options.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

inline constexpr const char* object_prefix = "gpushare.";
inline constexpr std::uint64_t abandon_grace_ns = 100'000'000; // 100 ms

/// The POSIX shm name of a table: "/gpushare.<domain>.u<uid>.<key>" for a user-private table,
/// "/gpushare.<domain>.g<gid>.<key>" for a group-shared one. The uid (or gid) in the name keeps
/// users (or groups) from ever colliding; the domain separates groups of processes of one user.
inline std::string table_object_name(std::string_view domain, std::string_view key,
                                     table_access access) {
  validate_domain(domain);
  validate_key(key);
  const std::string owner = access == table_access::group ? "g" + std::to_string(::getegid())
                                                          : "u" + std::to_string(::geteuid());
  return "/" + std::string(object_prefix) + std::string(domain) + "." + owner + "." +
         std::string(key);
}

/// "rm /dev/shm/<name>" advice for error messages.
inline std::string removal_hint(const std::string& name) {
  return "stop the processes using it, then remove it with `rm /dev/shm" + name + "`";
}

/// Maps `size` bytes of the table through a *new* open file description of the same file.
///
/// Why: a mapping holds a reference to the open file description it was made from, and OFD locks
/// live until the description's last reference goes. Were the table mapped through the
/// descriptor that holds a session's liveness lock, a forked child (which inherits the mapping)
/// would keep its parent's session looking alive after the parent died. Through a description
/// that never holds a lock, the child's inherited mapping keeps nothing alive.
inline void* map_lockless(int fd, std::size_t size, const std::string& name) {
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  const int map_fd = ::open(proc.c_str(), O_RDWR | O_CLOEXEC);
  if (map_fd < 0)
    throw system_failure(errc::system_error, "cannot reopen table '" + name + "' via " + proc,
                         errno);
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, map_fd, 0);
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
  const std::string path = "/dev/shm" + name;
  return ::fstat(fd, &mine) == 0 && ::stat(path.c_str(), &named) == 0 &&
         mine.st_ino == named.st_ino && mine.st_dev == named.st_dev;
}

struct create_params {
  std::string domain;
  std::string key;
  table_access access = table_access::user;
  std::uint64_t capacity = unlimited_capacity;
  std::uint32_t slot_count = default_slot_count;
  std::uint64_t open_timeout_ns = 5'000'000'000ull;
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
    }
    return *this;
  }
  ~mapped_table() { unmap(); }

  /// Opens the table `params` names, creating it if it does not exist.
  static mapped_table open_or_create(const create_params& params);
  /// Opens an existing table by its object name ("/gpushare...."); never creates one.
  static mapped_table open_existing(const std::string& name, std::uint64_t timeout_ns);

  int fd() const noexcept { return fd_.get(); }
  const table_view& view() const noexcept { return view_; }
  const std::string& name() const noexcept { return name_; }
  bool created() const noexcept { return created_; }
  /// Forget the descriptor without closing it (used in a forked child, where it is closed).
  void abandon_fd() noexcept { (void)fd_.release(); }

private:
  enum class attach_result { ready, initialising, retry };

  void unmap() noexcept {
    if (base_) ::munmap(base_, size_);
    base_ = nullptr;
  }
  bool create_in(unique_fd fd, const create_params& p);
  attach_result attach(unique_fd fd, std::uint64_t& unready_since_ns);
  void validate_ready(std::size_t file_size) const;
  static void steal_and_unlink(int fd, const std::string& name);

  unique_fd fd_;
  void* base_ = nullptr;
  std::size_t size_ = 0;
  table_view view_;
  std::string name_;
  bool created_ = false;
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

inline void mapped_table::steal_and_unlink(int fd, const std::string& name) {
  if (try_lock_byte(fd, init_lock_byte) != 0) return; // someone else is on it
  struct stat mine {
  }, named{};
  const std::string path = "/dev/shm" + name;
  if (::fstat(fd, &mine) == 0 && ::stat(path.c_str(), &named) == 0 && mine.st_ino == named.st_ino &&
      mine.st_dev == named.st_dev)
    ::shm_unlink(name.c_str());
  // The init lock stays held until our descriptor closes, so a late creator sees it lost.
}

inline bool mapped_table::create_in(unique_fd fd, const create_params& p) {
  if (try_lock_byte(fd.get(), init_lock_byte) != 0) return false; // declared dead already
  // A peer may have judged us dead (we stalled between creating and locking), taken and dropped
  // the init lock and unlinked the name: then this file is an orphan nobody can open. Start over.
  if (!names_same_file(fd.get(), name_)) return false;
  crash_point("create.locked");
  const mode_t mode = p.access == table_access::group ? 0660 : 0600;
  // fchmod rather than umask: umask is process-wide and shm_open applied it to our mode.
  if (::fchmod(fd.get(), mode) != 0) {
    const int err = errno;
    ::shm_unlink(name_.c_str());
    throw system_failure(errc::system_error, "cannot set the mode of table '" + name_ + "'", err);
  }
  const std::size_t size = table_size(p.slot_count);
  // posix_fallocate, not ftruncate alone: on a full /dev/shm it fails here with ENOSPC instead of
  // a SIGBUS on first touch of an unbacked page later.
  if (const int rc = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(size)); rc != 0) {
    ::shm_unlink(name_.c_str());
    if (rc == ENOSPC)
      throw error(errc::no_space, "no space in /dev/shm for table '" + name_ + "' (" +
                                      std::to_string(size) +
                                      " bytes): free space there (`df -h /dev/shm`; `gpushare "
                                      "clean` removes unused tables) or enlarge the tmpfs");
    throw system_failure(errc::system_error, "cannot size table '" + name_ + "'", rc);
  }
  crash_point("create.sized");
  void* base = nullptr;
  try {
    base = map_lockless(fd.get(), size, name_);
  } catch (...) {
    ::shm_unlink(name_.c_str());
    throw;
  }
  base_ = base;
  size_ = size;
  auto* h = static_cast<table_header*>(base);
  h->prefix.init_state.store(init_state_initialising, std::memory_order_relaxed);
  crash_point("create.initialising");
  h->prefix.header_size = sizeof(table_header);
  h->prefix.slot_size = sizeof(slot_record);
  h->prefix.slot_count = p.slot_count;
  h->prefix.mutex_size = sizeof(pthread_mutex_t);
  h->prefix.total_size = size;
  h->creator_pid = ::getpid();
  h->access_mode = mode;
  h->created_unix_ns = realtime_ns();
  copy_name_to(h->key, key_capacity, p.key);
  copy_name_to(h->domain, domain_capacity, p.domain);
  init_robust_mutex(&h->lock);
  h->capacity = p.capacity == 0 ? unlimited_capacity : p.capacity;
  h->prefix.magic = table_magic;
  h->prefix.layout_version = table_layout_version;
  h->prefix.init_state.store(init_state_ready, std::memory_order_release);
  crash_point("create.ready");
  unlock_byte(fd.get(), init_lock_byte);
  view_ = {h, reinterpret_cast<slot_record*>(h + 1), p.slot_count};
  fd_ = std::move(fd);
  created_ = true;
  return true;
}

inline void mapped_table::validate_ready(std::size_t file_size) const {
  const table_prefix& pre = static_cast<const table_header*>(base_)->prefix;
  auto fail = [&](errc code, const std::string& why) {
    throw error(code, "table '" + name_ + "' " + why + "; " + removal_hint(name_));
  };
  if (pre.magic != table_magic) fail(errc::table_corrupt, "is not a gpushare table (bad magic)");
  if (pre.layout_version != table_layout_version)
    fail(errc::table_incompatible,
         "has layout version " + std::to_string(pre.layout_version) + " but this gpushare (" +
             GPUSHARE_VERSION_STRING ") uses layout " + std::to_string(table_layout_version) +
             " (processes of different gpushare versions cannot share a table; use another "
             "GPUSHARE_DOMAIN or upgrade them together)");
  if (pre.header_size != sizeof(table_header) || pre.slot_size != sizeof(slot_record) ||
      pre.mutex_size != sizeof(pthread_mutex_t))
    fail(errc::table_incompatible, "was created with other structure sizes (header " +
                                       std::to_string(pre.header_size) + ", slot " +
                                       std::to_string(pre.slot_size) + ", mutex " +
                                       std::to_string(pre.mutex_size) + ")");
  if (pre.slot_count == 0 || pre.slot_count > max_slot_count)
    fail(errc::table_corrupt, "claims " + std::to_string(pre.slot_count) + " slots (allowed: 1.." +
                                  std::to_string(max_slot_count) + ")");
  if (pre.total_size != table_size(pre.slot_count) || file_size != pre.total_size)
    fail(errc::table_corrupt, "has size " + std::to_string(file_size) + " but its header says " +
                                  std::to_string(pre.total_size) + " (expected " +
                                  std::to_string(table_size(pre.slot_count)) +
                                  "): truncated or damaged");
}

inline mapped_table::attach_result mapped_table::attach(unique_fd fd,
                                                        std::uint64_t& unready_since_ns) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw system_failure(errc::system_error, "cannot stat table '" + name_ + "'", errno);
  const auto file_size = static_cast<std::size_t>(st.st_size);
  std::uint32_t state = init_state_fresh;
  std::uint64_t magic = 0;
  if (file_size >= sizeof(table_prefix)) {
    void* base = map_lockless(fd.get(), file_size, name_);
    unmap();
    base_ = base;
    size_ = file_size;
    const auto* pre = static_cast<const table_prefix*>(base);
    state = pre->init_state.load(std::memory_order_acquire);
    magic = pre->magic;
  }
  if (state == init_state_ready) {
    validate_ready(file_size);
    auto* h = static_cast<table_header*>(base_);
    view_ = {h, reinterpret_cast<slot_record*>(h + 1), h->prefix.slot_count};
    fd_ = std::move(fd);
    return attach_result::ready;
  }
  // Our creator sizes the object in one posix_fallocate, so while unready it is either empty or
  // full-sized. Anything in between is someone else's file: refuse it, never delete it.
  const bool partial = file_size != 0 && file_size < sizeof(table_prefix);
  if (partial || (state != init_state_fresh && state != init_state_initialising) ||
      (magic != 0 && magic != table_magic))
    throw error(errc::table_corrupt, "table '" + name_ +
                                         "' is not a gpushare table (unknown init state); " +
                                         removal_hint(name_));
  if (probe_byte(fd.get(), init_lock_byte) == holder::other) {
    unready_since_ns = 0; // its creator is alive and at work
    return attach_result::initialising;
  }
  const std::uint64_t now = monotonic_ns();
  if (unready_since_ns == 0) unready_since_ns = now;
  if (now - unready_since_ns < abandon_grace_ns) return attach_result::initialising;
  steal_and_unlink(fd.get(), name_); // creator died mid-init: recreate
  unready_since_ns = 0;
  return attach_result::retry;
}

inline mapped_table mapped_table::open_or_create(const create_params& p) {
  mapped_table t;
  t.name_ = table_object_name(p.domain, p.key, p.access);
  if (p.slot_count == 0 || p.slot_count > max_slot_count)
    throw error(errc::invalid_argument, "slot count " + std::to_string(p.slot_count) +
                                            " is out of range (1.." +
                                            std::to_string(max_slot_count) + ")");
  const std::uint64_t deadline = monotonic_ns() + p.open_timeout_ns;
  const mode_t mode = p.access == table_access::group ? 0660 : 0600;
  std::uint64_t unready_since = 0;
  for (;;) {
    int fd = ::shm_open(t.name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd >= 0) {
      if (t.create_in(unique_fd(fd), p)) return t;
      continue; // a peer judged our creation abandoned; start over
    }
    if (errno != EEXIST) break;
    fd = ::shm_open(t.name_.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
      if (errno == ENOENT) continue; // unlinked between our two calls
      break;
    }
    switch (t.attach(unique_fd(fd), unready_since)) {
    case attach_result::ready: return t;
    case attach_result::retry: continue;
    case attach_result::initialising: break;
    }
    if (monotonic_ns() > deadline)
      throw error(errc::table_busy, "table '" + t.name_ + "' is still being initialised after " +
                                        std::to_string(p.open_timeout_ns / 1'000'000) +
                                        " ms; if this persists, " + removal_hint(t.name_));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const int err = errno;
  if (err == EACCES)
    throw error(errc::permission_denied,
                "permission denied opening table '" + t.name_ +
                    "': it belongs to another user or group; share it by setting "
                    "GPUSHARE_TABLE_MODE=group in every process of the group, or pick another "
                    "GPUSHARE_DOMAIN");
  if (err == ENOSPC)
    throw error(errc::no_space, "no space in /dev/shm to create table '" + t.name_ + "'");
  throw system_failure(errc::system_error, "cannot open table '" + t.name_ + "'", err);
}

inline mapped_table mapped_table::open_existing(const std::string& name, std::uint64_t timeout_ns) {
  mapped_table t;
  t.name_ = name;
  const std::uint64_t deadline = monotonic_ns() + timeout_ns;
  std::uint64_t unready_since = 0;
  for (;;) {
    const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
      const int err = errno;
      if (err == ENOENT) throw error(errc::invalid_argument, "no table named '" + name + "'");
      if (err == EACCES)
        throw error(errc::permission_denied,
                    "permission denied opening table '" + name +
                        "': it belongs to another user or group; run as its owner, or have "
                        "its processes share it with GPUSHARE_TABLE_MODE=group and join "
                        "their group");
      throw system_failure(errc::system_error, "cannot open table '" + name + "'", err);
    }
    switch (t.attach(unique_fd(fd), unready_since)) {
    case attach_result::ready: return t;
    case attach_result::retry:
      throw error(errc::invalid_argument,
                  "table '" + name + "' was abandoned by its creator and has been removed");
    case attach_result::initialising: break;
    }
    if (monotonic_ns() > deadline)
      throw error(errc::table_busy, "table '" + name + "' is still being initialised");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

} // namespace detail
} // namespace v0
} // namespace gpushare
