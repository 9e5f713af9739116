// SPDX-License-Identifier: Apache-2.0
// Kernel-held liveness: one OFD byte lock per slot on the table's file.
//
// Why OFD locks: the kernel drops them when the last descriptor of the open file description is
// closed, which happens when the process dies, however it dies (SIGKILL included). They do not
// depend on pids, so pid reuse and pid namespaces cannot fool them. Unlike classic POSIX record
// locks, closing some other descriptor of the same file in the same process does not drop them,
// and two sessions of one process (each with its own open file description) exclude each other.
#pragma once

#include <fcntl.h>

#include <cerrno>
#include <cstdint>

#include <gpushare/detail/layout.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

inline flock byte_range(short type, off_t byte) noexcept {
  flock fl{};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = byte;
  fl.l_len = 1;
  fl.l_pid = 0; // required to be 0 for OFD locks
  return fl;
}

/// Tries to take the exclusive lock on `byte` without blocking. Returns 0 on success, EAGAIN if
/// another open file description holds it, or another errno.
inline int try_lock_byte(int fd, off_t byte) noexcept {
  flock fl = byte_range(F_WRLCK, byte);
  if (::fcntl(fd, F_OFD_SETLK, &fl) == 0) return 0;
  return (errno == EACCES || errno == EAGAIN) ? EAGAIN : errno;
}

inline void unlock_byte(int fd, off_t byte) noexcept {
  flock fl = byte_range(F_UNLCK, byte);
  (void)::fcntl(fd, F_OFD_SETLK, &fl);
}

enum class holder { none, other, unknown };

/// Is `byte` locked by an open file description other than `fd`'s? (Locks held through `fd`
/// itself never conflict with it, so never ask about your own slot.)
inline holder probe_byte(int fd, off_t byte) noexcept {
  flock fl = byte_range(F_WRLCK, byte);
  if (::fcntl(fd, F_OFD_GETLK, &fl) != 0) return holder::unknown;
  return fl.l_type == F_UNLCK ? holder::none : holder::other;
}

/// What a table object is, as far as its init state and one probe of its init lock tell.
enum class creation { ready, in_progress, creator_gone };

/// The one rule for "is this an unfinished creation?", used by every opener (mapped_table::attach)
/// and reader (copy_snapshot). Ready once its init state says so. Otherwise a creator is at work
/// while the init lock is held, and also while the probe cannot tell (holder::unknown, fcntl
/// failed): an object that may be in progress is never judged abandoned, and the caller's
/// timeout bounds the wait. Only a free init lock means the creator is gone; what then becomes
/// of the object is the caller's (attach waits a grace period and proves the bytes ours before it
/// removes anything; copy_snapshot reports no such table).
constexpr creation judge_creation(bool ready, holder init_lock) noexcept {
  if (ready) return creation::ready;
  return init_lock == holder::none ? creation::creator_gone : creation::in_progress;
}

/// A slot is live while its owner holds the slot's lock byte.
inline bool slot_owner_alive(int fd, std::uint32_t slot) noexcept {
  // An unknown answer (fcntl failed) counts as alive: reclaiming a live session is far worse
  // than keeping a dead one a little longer.
  return probe_byte(fd, slot_lock_byte(slot)) != holder::none;
}

} // namespace detail
} // namespace v0
} // namespace gpushare
