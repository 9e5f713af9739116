// SPDX-License-Identifier: Apache-2.0
// Naming, creating, opening and validating the shared table object.
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
#include <array>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include <gpushare/detail/crash_point.hpp>
#include <gpushare/detail/fork_guard.hpp>
#include <gpushare/detail/layout.hpp>
#include <gpushare/detail/liveness.hpp>
#include <gpushare/detail/posix.hpp>
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
inline std::string object_path(const std::string& name) { return "/dev/shm" + name; }

/// "rm /dev/shm/<name>" advice for error messages.
inline std::string removal_hint(const std::string& name) {
  return "stop the processes using it, then remove it with `rm " + object_path(name) + "`";
}

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

/// The fields of a table_prefix, as plain integers (the prefix's init_state is an atomic).
struct prefix_fields {
  std::uint64_t magic = 0;
  std::uint32_t layout_version = 0;
  std::uint32_t init_state = 0;
  std::uint32_t header_size = 0;
  std::uint32_t slot_size = 0;
  std::uint32_t slot_count = 0;
  std::uint32_t lock_size = 0;
  std::uint64_t total_size = 0;
};

using prefix_bytes = std::array<unsigned char, sizeof(table_prefix)>;

/// Calls op(offset in table_prefix, field) for every field of `f` (const or not): the one list
/// of where each field lies, for encode_prefix() and decode_prefix().
template <class Fields, class Op> void for_each_prefix_field(Fields& f, Op&& op) {
  op(offsetof(table_prefix, magic), f.magic);
  op(offsetof(table_prefix, layout_version), f.layout_version);
  op(offsetof(table_prefix, init_state), f.init_state);
  op(offsetof(table_prefix, header_size), f.header_size);
  op(offsetof(table_prefix, slot_size), f.slot_size);
  op(offsetof(table_prefix, slot_count), f.slot_count);
  op(offsetof(table_prefix, lock_size), f.lock_size);
  op(offsetof(table_prefix, total_size), f.total_size);
}

/// The bytes of a table_prefix holding `f`, laid out as the table_prefix struct lays them out.
inline prefix_bytes encode_prefix(const prefix_fields& f) noexcept {
  prefix_bytes b{};
  for_each_prefix_field(f, [&b](std::size_t offset, const auto& value) {
    std::memcpy(b.data() + offset, &value, sizeof value);
  });
  return b;
}

inline prefix_fields decode_prefix(const prefix_bytes& b) noexcept {
  prefix_fields f;
  for_each_prefix_field(f, [&b](std::size_t offset, auto& value) {
    std::memcpy(&value, b.data() + offset, sizeof value);
  });
  return f;
}

/// The prefix a creator writes first, before it sizes the object: gpushare's magic, this layout,
/// init_state INIT and every size of a table of `slot_count` slots. With it, an unfinished
/// creation proves whose it is (see inspect_unready()).
inline prefix_bytes creation_prefix(std::uint32_t slot_count) noexcept {
  prefix_fields f;
  f.magic = table_magic;
  f.layout_version = table_layout_version;
  f.init_state = init_state_initialising;
  f.header_size = sizeof(table_header);
  f.slot_size = sizeof(slot_record);
  f.slot_count = slot_count;
  f.lock_size = table_lock_size;
  f.total_size = table_size(slot_count);
  return encode_prefix(f);
}

/// What an object that is not a ready table is (judged with the init lock free).
struct unready_object {
  enum class kind {
    ready,       ///< it became ready meanwhile: look again
    empty,       ///< 0 bytes: what shm_open(O_CREAT) leaves before the creator writes
    prefix_only, ///< exactly our creation prefix: the creator died before posix_fallocate
    sized,       ///< our creation prefix at exactly the size it names: died before REDY
    foreign,     ///< anything else: not provably ours, so refused and never deleted
  };
  kind what = kind::foreign;
  errc code = errc::table_corrupt; ///< foreign: table_corrupt, or table_incompatible
  std::uint64_t size = 0;          ///< the object's size in bytes
  std::string why;                 ///< what the object is, for a message

  /// Could only gpushare's creator have left this (once the init lock is free)?
  bool ours() const noexcept {
    return what == kind::empty || what == kind::prefix_only || what == kind::sized;
  }
};

/// Judges the object behind `fd` from its size and first 40 bytes (fstat, then pread: a creator
/// that progresses in between only moves it from one of our shapes to the next, or to ready).
/// Ours are exactly the shapes our creator leaves: 0 bytes (before its pwrite), the creation
/// prefix alone (before posix_fallocate, which tmpfs does all at once or not at all), or the
/// creation prefix at exactly the table size it names (before init_state = REDY).
inline unready_object inspect_unready(int fd) {
  unready_object u;
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw system_failure(errc::system_error, "cannot stat a table object", errno);
  u.size = static_cast<std::uint64_t>(st.st_size);
  const std::string bytes = std::to_string(u.size) + " bytes";
  if (u.size == 0) {
    u.what = unready_object::kind::empty;
    u.why = "0 bytes: its creator died before writing anything";
    return u;
  }
  if (u.size < sizeof(table_prefix)) {
    u.why = bytes + ", smaller than a table's " + std::to_string(sizeof(table_prefix)) +
            "-byte header prefix";
    return u;
  }
  prefix_bytes b{};
  const ssize_t n = ::pread(fd, b.data(), b.size(), 0);
  if (n < 0) throw system_failure(errc::system_error, "cannot read a table object", errno);
  if (static_cast<std::size_t>(n) != b.size()) {
    u.why = bytes + ", of which only " + std::to_string(n) + " could be read";
    return u;
  }
  const prefix_fields f = decode_prefix(b);
  if (f.init_state == init_state_ready) {
    u.what = unready_object::kind::ready;
    return u;
  }
  if (f.magic != table_magic) {
    const bool zero = std::all_of(b.begin(), b.end(), [](unsigned char c) { return c == 0; });
    u.why = bytes + (zero ? " whose first " + std::to_string(b.size()) + " bytes are zero"
                          : " that do not start with gpushare's magic");
    return u;
  }
  if (f.init_state != init_state_initialising) {
    char state[16];
    std::snprintf(state, sizeof state, "0x%08x", f.init_state);
    u.why = bytes + " with gpushare's magic but an unknown init state " + state;
    return u;
  }
  if (f.layout_version != table_layout_version || f.header_size != sizeof(table_header) ||
      f.slot_size != sizeof(slot_record) || f.lock_size != table_lock_size) {
    u.code = errc::table_incompatible;
    u.why = "an unfinished table of layout version " + std::to_string(f.layout_version) +
            " (header " + std::to_string(f.header_size) + ", slot " + std::to_string(f.slot_size) +
            ", lock " + std::to_string(f.lock_size) +
            " bytes); this gpushare (" GPUSHARE_VERSION_STRING ") uses layout " +
            std::to_string(table_layout_version);
    return u;
  }
  if (f.slot_count == 0 || f.slot_count > max_slot_count ||
      f.total_size != table_size(f.slot_count)) {
    u.why = bytes + " whose unfinished header claims " + std::to_string(f.slot_count) +
            " slots in " + std::to_string(f.total_size) + " bytes";
    return u;
  }
  if (u.size == sizeof(table_prefix)) {
    u.what = unready_object::kind::prefix_only;
    u.why = bytes + ": its creator died before sizing it";
  } else if (u.size == f.total_size) {
    u.what = unready_object::kind::sized;
    u.why = bytes + ": its creator died before it was ready";
  } else {
    u.why = bytes + " whose unfinished header names a table of " + std::to_string(f.total_size) +
            " bytes";
  }
  return u;
}

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

/// Does the object name "/gpushare.<domain>.<owner>.<key>" read, in some way, as having owner
/// part `kind` `id` ("u1000", "g100")? Domains and keys may contain '.', so a name can have more
/// than one reading; any will do, since the owner is then checked against the file itself.
inline bool name_has_owner(std::string_view name, char kind, std::uint64_t id) {
  const std::string part = std::string(".") + kind + std::to_string(id) + ".";
  const std::size_t head = std::strlen(object_prefix) + 1; // "/gpushare."
  if (name.size() <= head) return false;
  for (std::size_t at = name.find(part, head); at != std::string_view::npos;
       at = name.find(part, at + 1))
    if (at > head && at + part.size() < name.size()) return true; // a domain and a key around it
  return false;
}

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
                        (!self || !expected || st.st_gid == egid) &&
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
            (self && expected ? " (" + std::to_string(egid) + ")" : std::string()) +
            " with no other permissions";
  throw error(errc::permission_denied,
              "refusing to open table '" + name + "': '" + object_path(name) + "' has " +
                  describe_owner(st) + (S_ISREG(st.st_mode) ? "" : ", not a regular file") + " (" +
                  want + ", and be a regular file with one link); the name is taken by uid " +
                  std::to_string(st.st_uid) +
                  ", and /dev/shm lets only that user or root remove it: use another "
                  "GPUSHARE_DOMAIN, or ask root to remove it");
}

/// shm_open(name, flags) of an existing table object, with the errors a reader gets: no such
/// table (invalid_argument), another user's (permission_denied), anything else (system_error).
inline unique_fd open_table_object(const std::string& name, int flags) {
  const int fd = ::shm_open(name.c_str(), flags, 0);
  if (fd >= 0) return unique_fd(fd);
  const int err = errno;
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

/// What open_existing() does with a creation it proves abandoned.
enum class abandoned_creation {
  keep,   ///< leave it in place and report it (errc::no_such_table): what observers do
  remove, ///< unlink it, then report it removed: what `gpushare clean` does
};

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
  attach_result attach(unique_fd fd, unready_watch& watch, abandoned_creation on_abandoned);
  void validate_ready(std::size_t file_size) const;
  static bool steal_and_unlink(int fd, const std::string& name);

  unique_fd fd_;
  void* base_ = nullptr;
  std::size_t size_ = 0;
  table_view view_;
  std::string name_;
  bool created_ = false;
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
  return ::shm_unlink(name.c_str()) == 0;
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
  auto sizing_failed = [&](int err) {
    ::shm_unlink(name_.c_str());
    if (err == ENOSPC)
      return error(errc::no_space, "no space in /dev/shm for table '" + name_ + "' (" +
                                       std::to_string(size) +
                                       " bytes): free space there (`df -h /dev/shm`; `gpushare "
                                       "clean` removes unused tables) or enlarge the tmpfs");
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
    ::shm_unlink(name_.c_str());
    throw;
  }
  base_ = base;
  size_ = size;
  auto* h = static_cast<table_header*>(base);
  crash_point("create.initialising"); // the prefix (magic, sizes, INIT) is already written
  h->creator_pid = ::getpid();
  h->access_mode = mode;
  h->created_unix_ns = realtime_ns();
  h->monotonic_offset_ns = monotonic_offset_ns();
  copy_name_to(h->key, key_capacity, p.key);
  copy_name_to(h->domain, domain_capacity, p.domain);
  h->lock.store(0, std::memory_order_relaxed); // free (fallocate zeroed it; say so anyway)
  h->capacity = p.capacity == 0 ? unlimited_capacity : p.capacity;
  h->prefix.init_state.store(init_state_ready, std::memory_order_release);
  crash_point("create.ready");
  unlock_byte(fd.get(), init_lock_byte);
  view_ = {h, reinterpret_cast<slot_record*>(h + 1), p.slot_count};
  fd_ = std::move(fd);
  created_ = true;
  return true;
}

/// Checks the header of a ready table of `file_size` bytes against this build: magic, layout
/// version, structure sizes, slot count, total size, and the creator's time namespace. Throws
/// errc::table_corrupt or errc::table_incompatible naming `name`; `advice` ("; stop its users
/// ...", or empty) follows the corruption and layout messages. Used on a mapping
/// (mapped_table::validate_ready) and on a private copy (copy_snapshot), so both refuse the same.
inline void validate_table_header(const table_header& h, std::size_t file_size,
                                  const std::string& name, const std::string& advice) {
  const table_prefix& pre = h.prefix;
  auto fail = [&](errc code, const std::string& why) {
    throw error(code, "table '" + name + "' " + why + advice);
  };
  if (pre.magic != table_magic) fail(errc::table_corrupt, "is not a gpushare table (bad magic)");
  if (pre.layout_version != table_layout_version)
    fail(errc::table_incompatible,
         "has layout version " + std::to_string(pre.layout_version) + " but this gpushare (" +
             GPUSHARE_VERSION_STRING ") uses layout " + std::to_string(table_layout_version) +
             " (processes of different gpushare versions cannot share a table; use another "
             "GPUSHARE_DOMAIN or upgrade them together)");
  if (pre.header_size != sizeof(table_header) || pre.slot_size != sizeof(slot_record) ||
      pre.lock_size != table_lock_size)
    fail(errc::table_incompatible, "was created with other structure sizes (header " +
                                       std::to_string(pre.header_size) + ", slot " +
                                       std::to_string(pre.slot_size) + ", lock " +
                                       std::to_string(pre.lock_size) + ")");
  if (pre.slot_count == 0 || pre.slot_count > max_slot_count)
    fail(errc::table_corrupt, "claims " + std::to_string(pre.slot_count) + " slots (allowed: 1.." +
                                  std::to_string(max_slot_count) + ")");
  if (pre.total_size != table_size(pre.slot_count) || file_size != pre.total_size)
    fail(errc::table_corrupt, "has size " + std::to_string(file_size) + " but its header says " +
                                  std::to_string(pre.total_size) + " (expected " +
                                  std::to_string(table_size(pre.slot_count)) +
                                  "): truncated or damaged");
  // Timestamps in the table (when the holder was granted the device, went idle, a waiter started
  // waiting...) are written by one process and compared with another's CLOCK_MONOTONIC: across
  // time namespaces with different offsets a waiter would wait for a grace period to end
  // thousands of seconds away, or forever. Refused, clearly, rather than translated.
  const std::int64_t theirs = h.monotonic_offset_ns;
  if (const std::int64_t mine = monotonic_offset_ns(); theirs != mine) {
    auto seconds = [](std::int64_t ns) {
      char buf[48];
      std::snprintf(buf, sizeof buf, "%+.3f s", static_cast<double>(ns) / 1e9);
      return std::string(buf);
    };
    throw error(errc::table_incompatible,
                "table '" + name + "' was created in a time namespace whose monotonic clock is " +
                    "offset by " + seconds(theirs) + " from the host's, and this process's by " +
                    seconds(mine) +
                    " (`unshare -T`, a restored checkpoint): processes whose monotonic clocks "
                    "differ cannot share a table, since they compare each other's timestamps; run "
                    "them in one time namespace, or give each namespace its own GPUSHARE_DOMAIN");
  }
}

inline void mapped_table::validate_ready(std::size_t file_size) const {
  validate_table_header(*static_cast<const table_header*>(base_), file_size, name_,
                        "; " + removal_hint(name_));
}

inline mapped_table::attach_result mapped_table::attach(unique_fd fd, unready_watch& watch,
                                                        abandoned_creation on_abandoned) {
  struct stat st {};
  std::size_t file_size = 0;
  std::uint32_t state = init_state_fresh;
  // A creator stores REDY only once the object has its full size, but a size read before that
  // store may be from before posix_fallocate (our 40-byte prefix). So once REDY is seen, the size
  // is read again, and the object mapped again if it grew meanwhile (a few times at most: only a
  // foreign writer keeps resizing a ready table, and validation then refuses it).
  for (int look = 0; look < 3; ++look) {
    if (::fstat(fd.get(), &st) != 0)
      throw system_failure(errc::system_error, "cannot stat table '" + name_ + "'", errno);
    // First of all: whose object is it? Nothing is read from, locked in or removed from an
    // object the caller must not trust (docs/design.md, section 1).
    check_trust(st, name_, intent_, expected_);
    crash_point("attach.stat");
    if (look > 0 && static_cast<std::size_t>(st.st_size) == file_size) break;
    file_size = static_cast<std::size_t>(st.st_size);
    state = init_state_fresh;
    if (file_size >= sizeof(table_prefix)) {
      void* base = map_lockless(fd.get(), file_size, name_, intent_ != open_intent::observer);
      unmap();
      base_ = base;
      size_ = file_size;
      state = static_cast<const table_prefix*>(base)->init_state.load(std::memory_order_acquire);
    }
    if (state != init_state_ready) break;
  }
  if (state == init_state_ready) {
    validate_ready(file_size);
    auto* h = static_cast<table_header*>(base_);
    view_ = {h, reinterpret_cast<slot_record*>(h + 1), h->prefix.slot_count};
    fd_ = std::move(fd);
    return attach_result::ready;
  }
  // Not ready. While anyone holds the init lock (or we cannot tell), a creator is at work: wait.
  // Its object may have any shape meanwhile (an older gpushare wrote its magic last).
  if (probe_byte(fd.get(), init_lock_byte) != holder::none) {
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
  t.name_ = table_object_name(p.domain, p.key, p.access);
  t.expected_ = p.access;
  if (p.slot_count == 0 || p.slot_count > max_slot_count)
    throw error(errc::invalid_argument, "slot count " + std::to_string(p.slot_count) +
                                            " is out of range (1.." +
                                            std::to_string(max_slot_count) + ")");
  const std::uint64_t deadline = monotonic_ns() + p.open_timeout_ns;
  const mode_t mode = p.access == table_access::group ? 0660 : 0600;
  unready_watch unready;
  for (;;) {
    int fd = ::shm_open(t.name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd >= 0) {
      crash_point("create.opened"); // created the name, not yet holding its init lock
      if (t.create_in(unique_fd(fd), p)) return t;
      continue; // a peer judged our creation abandoned; start over
    }
    if (errno != EEXIST) break;
    fd = ::shm_open(t.name_.c_str(), O_RDWR | O_CLOEXEC, 0);
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
  const int err = errno;
  if (err == EACCES) {
    // The name carries our own uid (or gid), so whoever owns this object took our name.
    struct stat st {};
    const std::string path = object_path(t.name_);
    if (::stat(path.c_str(), &st) == 0)
      throw error(errc::permission_denied,
                  "permission denied opening table '" + t.name_ + "': '" + path + "' has " +
                      describe_owner(st) + "; the name is taken by uid " +
                      std::to_string(st.st_uid) +
                      ", and /dev/shm lets only that user or root remove it: use another "
                      "GPUSHARE_DOMAIN, or ask root to remove it" +
                      (p.access == table_access::group
                           ? std::string()
                           : " (to share a table with a group, set GPUSHARE_TABLE_MODE=group in "
                             "every process of the group)"));
    throw error(errc::permission_denied,
                "permission denied opening table '" + t.name_ +
                    "': it belongs to another user or group; share it by setting "
                    "GPUSHARE_TABLE_MODE=group in every process of the group, or pick another "
                    "GPUSHARE_DOMAIN");
  }
  if (err == ENOSPC)
    throw error(errc::no_space, "no space in /dev/shm to create table '" + t.name_ + "'");
  throw system_failure(errc::system_error, "cannot open table '" + t.name_ + "'", err);
}

inline mapped_table mapped_table::open_existing(const std::string& name, std::uint64_t timeout_ns,
                                                abandoned_creation on_abandoned,
                                                open_intent intent) {
  const fork_registry::no_fork_scope no_fork; // we may take the init lock (steal_and_unlink)
  mapped_table t;
  t.name_ = name;
  t.intent_ = intent;
  if (intent != open_intent::participant) on_abandoned = abandoned_creation::keep;
  const int flags = (intent == open_intent::observer ? O_RDONLY : O_RDWR) | O_CLOEXEC;
  const std::uint64_t deadline = monotonic_ns() + timeout_ns;
  unready_watch unready;
  for (;;) {
    switch (t.attach(open_table_object(name, flags), unready, on_abandoned)) {
    case attach_result::ready: return t;
    case attach_result::removed: // only with abandoned_creation::remove
      throw error(errc::no_such_table,
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
