// SPDX-License-Identifier: Apache-2.0
// The table's lock: a futex word in the shared mapping whose value names its owner by a *locker
// id*, a number that the owner proves alive by holding an OFD byte lock on the table's file.
//
// Why not a robust pthread mutex (layouts 1-3): its word holds the owner's thread id, and thread
// ids are per PID namespace: in two containers, one process's exit marks the other's lock as
// "owner died" and a third process enters while the real owner is still inside. glibc also keeps
// its robust-list pointers (addresses in the locking process) in the shared mutex, where anyone
// who can write the table can read and redirect them. This lock stores no thread id and no
// address: only a locker id, which means nothing outside the table.
//
// Locker ids. Every mapping that takes the lock (a session's, an observer's, the CLI's) claims a
// free id once, by taking the exclusive OFD lock on the id's byte (locker_byte(id)); the kernel
// drops that lock when the mapping's last descriptor closes, however the process ends. So "is the
// owner alive" is "is its byte locked", which no pid, tid or namespace can fool.
//
// The word: 0 = free; otherwise bits 0..30 = the owner's locker id, bit 31 = somebody may sleep on
// the word (the unlocker must wake one). Uncontended lock and unlock are one CAS each.
//
// Owner death. A waiter that has waited a while checks the owner: it tries to take a *shared* OFD
// lock on the owner's byte. Success proves no live mapping holds that id, and, while the shared
// lock is held, none can claim it (a claim needs the exclusive lock). So the word cannot come to
// name a live owner with that id in between (the ABA of id reuse), and a CAS from the dead
// owner's value to our id takes the lock over safely. Several waiters may try at once; the CAS
// picks one. The taker then repairs the state the dead owner may have left half-written.
// A stopped owner (SIGSTOP, a debugger, a cgroup freezer) is alive: waiters give up after their
// timeout with errc::table_busy and never take a live owner's lock.
#pragma once

#include <fcntl.h>
#include <time.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <string>

#include <gpushare/detail/futex.hpp>
#include <gpushare/detail/layout.hpp>
#include <gpushare/detail/liveness.hpp>
#include <gpushare/error.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

inline constexpr std::uint32_t lock_sleepers = 1u << 31;
inline constexpr std::uint32_t lock_owner_mask = ~lock_sleepers;

/// How long a waiter sleeps before its first look at the owner's liveness, and the longest gap
/// between two looks (it doubles in between). Critical sections last well under a microsecond,
/// so an owner still inside after 2 ms is dead, stopped or descheduled: rare enough that one
/// fcntl per look costs nothing, and a dead owner's lock is taken over within ~2-50 ms.
inline constexpr std::uint64_t lock_first_check_ns = 2'000'000;
inline constexpr std::uint64_t lock_max_check_ns = 50'000'000;
/// Spins (re-reads of the word) before a contended locker sleeps: a critical section is shorter
/// than a futex round trip when the owner is running on another CPU.
inline constexpr int lock_spins = 64;

inline std::uint64_t lock_clock_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

/// Claims a free locker id for the mapping behind `fd`: takes the exclusive OFD lock on its
/// byte, held until that open file description closes. `seed` spreads concurrent claimers.
/// Returns 0 if every id is taken (65,536 mappings of one table at once).
inline std::uint32_t claim_locker_id(int fd, std::uint32_t seed) noexcept {
  for (std::uint32_t k = 0; k < max_locker_ids; ++k) {
    const std::uint32_t id = 1 + (seed + k) % max_locker_ids;
    if (try_lock_byte(fd, locker_byte(id)) == 0) return id;
  }
  return 0;
}

enum class lock_outcome { acquired, owner_died };

/// If the owner named by `seen` is dead, takes the lock over from it (see the file comment) and
/// returns true; otherwise returns false and changes nothing.
inline bool take_over_if_dead(std::atomic<std::uint32_t>* word, std::uint32_t seen,
                              std::uint32_t me, int fd) noexcept {
  const std::uint32_t owner = seen & lock_owner_mask;
  const bool named = owner >= 1 && owner <= max_locker_ids;
  if (named) {
    flock fl = byte_range(F_RDLCK, locker_byte(owner));
    if (::fcntl(fd, F_OFD_SETLK, &fl) != 0) return false; // alive (or unknown: assume alive)
  }
  // The owner's id is free and stays free while we hold the shared lock: the word changes now
  // only by a sleeper setting bit 31 or by another taker.
  bool taken = false;
  std::uint32_t cur = word->load(std::memory_order_relaxed);
  while ((cur & lock_owner_mask) == owner) {
    if (word->compare_exchange_weak(cur, me | lock_sleepers, std::memory_order_acquire,
                                    std::memory_order_relaxed)) {
      taken = true;
      break;
    }
  }
  if (named) unlock_byte(fd, locker_byte(owner));
  return taken;
}

[[noreturn]] inline void throw_table_busy(const std::string& table_name, std::uint64_t timeout_ns,
                                          std::uint32_t owner, std::int32_t pid) {
  const std::string who =
      (pid > 0 ? "pid " + std::to_string(pid) + " as its PID namespace numbers it, " : "") +
      "locker " + std::to_string(owner);
  throw error(errc::table_busy, "the lock of table '" + table_name +
                                    "' has been held by a live process (" + who + ") for over " +
                                    std::to_string(timeout_ns / 1'000'000) +
                                    " ms (stopped or hung? a debugger, Ctrl-Z or a frozen "
                                    "container stops a process); resume or kill that process");
}

/// The contended path of lock_table().
inline lock_outcome lock_table_slow(std::atomic<std::uint32_t>* word, std::uint32_t me, int fd,
                                    std::uint64_t timeout_ns, const std::string& table_name,
                                    const std::atomic<std::int32_t>* holder_pid) {
  for (int i = 0; i < lock_spins; ++i) {
    std::uint32_t cur = word->load(std::memory_order_relaxed);
    if (cur == 0 && word->compare_exchange_weak(cur, me | lock_sleepers, std::memory_order_acquire,
                                                std::memory_order_relaxed))
      return lock_outcome::acquired;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  const std::uint64_t start = lock_clock_ns();
  const std::uint64_t deadline = start + timeout_ns;
  std::uint64_t gap = lock_first_check_ns;
  std::uint64_t next_check = start + gap;
  for (;;) {
    std::uint32_t cur = word->load(std::memory_order_relaxed);
    if (cur == 0) {
      // Taken with bit 31 set: we cannot know whether others sleep, so our unlock wakes one.
      if (word->compare_exchange_strong(cur, me | lock_sleepers, std::memory_order_acquire,
                                        std::memory_order_relaxed))
        return lock_outcome::acquired;
      continue;
    }
    if (!(cur & lock_sleepers) &&
        !word->compare_exchange_strong(cur, cur | lock_sleepers, std::memory_order_relaxed,
                                       std::memory_order_relaxed))
      continue;
    cur |= lock_sleepers;
    const std::uint64_t now = lock_clock_ns();
    if (now >= next_check) {
      // Never judge our own id: another thread of this mapping holds the lock, and the shared
      // lock probe through our own descriptor would downgrade our own id's byte.
      if ((cur & lock_owner_mask) != me && take_over_if_dead(word, cur, me, fd))
        return lock_outcome::owner_died;
      gap = gap * 2 > lock_max_check_ns ? lock_max_check_ns : gap * 2;
      next_check = now + gap;
    }
    if (now >= deadline)
      throw_table_busy(table_name, timeout_ns, cur & lock_owner_mask,
                       holder_pid ? holder_pid->load(std::memory_order_relaxed) : 0);
    const std::uint64_t until = next_check < deadline ? next_check : deadline;
    // Woken, timed out, interrupted by a signal or the word changed: all re-check by the clock,
    // so a signal storm neither stretches the deadline nor delays the liveness look.
    (void)futex_wait(word, cur, until - now);
  }
}

/// How many table locks this process has taken (any table, any thread): for the tests and the
/// benchmark that count the locks an operation takes (docs/benchmarks.md, "Table locks per
/// guard"). One relaxed add on a line of this process's own, beside the lock's shared word.
inline std::atomic<std::uint64_t> table_locks_taken{0};

/// Locks the table lock `word` as locker `me` (its id byte held through `fd`), waiting at most
/// `timeout_ns` for a live owner. Returns owner_died when it took the lock over from a dead owner:
/// the caller must repair the protected state before relying on it. Throws errc::table_busy when
/// a live owner keeps it longer than `timeout_ns` (a stopped or hung process), naming the
/// holder's pid as `holder_pid` (display only; may be null) says.
inline lock_outcome lock_table(std::atomic<std::uint32_t>* word, std::uint32_t me, int fd,
                               std::uint64_t timeout_ns, const std::string& table_name,
                               const std::atomic<std::int32_t>* holder_pid = nullptr) {
  std::uint32_t expected = 0;
  if (word->compare_exchange_strong(expected, me, std::memory_order_acquire,
                                    std::memory_order_relaxed)) {
    table_locks_taken.fetch_add(1, std::memory_order_relaxed);
    return lock_outcome::acquired;
  }
  const lock_outcome outcome = lock_table_slow(word, me, fd, timeout_ns, table_name, holder_pid);
  table_locks_taken.fetch_add(1, std::memory_order_relaxed);
  return outcome;
}

/// Unlocks `word`, held by locker `me`; wakes one sleeper if any may sleep. If the word no longer
/// names `me` (only possible if our id byte was lost and a waiter judged us dead), leaves it.
inline void unlock_table(std::atomic<std::uint32_t>* word, std::uint32_t me) noexcept {
  std::uint32_t cur = me;
  if (word->compare_exchange_strong(cur, 0, std::memory_order_release, std::memory_order_relaxed))
    return; // nobody sleeps: no syscall
  while ((cur & lock_owner_mask) == me) {
    if (word->compare_exchange_weak(cur, 0, std::memory_order_release, std::memory_order_relaxed)) {
      if (cur & lock_sleepers) futex_wake(word, 1);
      return;
    }
  }
}

} // namespace detail
} // namespace v0
} // namespace gpushare
