// SPDX-License-Identifier: Apache-2.0
// The table's lock: a process-shared, robust pthread mutex living in the shared mapping.
//
// When the owner dies while holding it, the kernel marks it and the next locker gets EOWNERDEAD.
// That locker must repair the protected state *before* calling pthread_mutex_consistent (marking
// it consistent first would publish half-written totals; unlocking without marking it makes the
// mutex permanently unusable). lock_robust() therefore reports owner_died and leaves the
// decision to the caller, which repairs and then calls mark_consistent().
#pragma once

#include <pthread.h>
#include <time.h>

#include <cerrno>
#include <cstdint>
#include <string>

#include <gpushare/error.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

inline void init_robust_mutex(pthread_mutex_t* m) {
  pthread_mutexattr_t attr;
  int rc = ::pthread_mutexattr_init(&attr);
  if (rc == 0) rc = ::pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  if (rc == 0) rc = ::pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  if (rc == 0) rc = ::pthread_mutex_init(m, &attr);
  ::pthread_mutexattr_destroy(&attr);
  if (rc != 0) throw system_failure(errc::system_error, "cannot initialise the table lock", rc);
}

enum class lock_outcome { acquired, owner_died };

/// Locks `m`, waiting at most `timeout_ns`. Throws errc::table_busy on timeout (a live holder
/// that never lets go: stopped or hung) and errc::table_corrupt if the mutex is unrecoverable.
inline lock_outcome lock_robust(pthread_mutex_t* m, std::uint64_t timeout_ns,
                                const std::string& table_name) {
  int rc = ::pthread_mutex_trylock(m); // fast path: no clock read when uncontended
  if (rc == EBUSY) {
    // ThreadSanitizer (GCC 12's) does not intercept pthread_mutex_clocklock: it would see our
    // unlocks without the locks and report them. Its builds use pthread_mutex_timedlock on the
    // realtime clock instead (a wall-clock step can then shorten or stretch this one bounded
    // wait; that is acceptable in a test build, not in the library's normal builds).
#if defined(__SANITIZE_THREAD__)
    constexpr clockid_t lock_clock = CLOCK_REALTIME;
#else
    constexpr clockid_t lock_clock = CLOCK_MONOTONIC;
#endif
    timespec deadline{};
    ::clock_gettime(lock_clock, &deadline);
    deadline.tv_sec += static_cast<time_t>(timeout_ns / 1'000'000'000ull);
    deadline.tv_nsec += static_cast<long>(timeout_ns % 1'000'000'000ull);
    if (deadline.tv_nsec >= 1'000'000'000L) {
      deadline.tv_sec += 1;
      deadline.tv_nsec -= 1'000'000'000L;
    }
    do {
#if defined(__SANITIZE_THREAD__)
      rc = ::pthread_mutex_timedlock(m, &deadline);
#else
      rc = ::pthread_mutex_clocklock(m, lock_clock, &deadline);
#endif
    } while (rc == EINTR);
  }
  switch (rc) {
  case 0: return lock_outcome::acquired;
  case EOWNERDEAD: return lock_outcome::owner_died;
  case ETIMEDOUT:
    throw error(errc::table_busy, "the lock of table '" + table_name +
                                      "' has been held by a live process for over " +
                                      std::to_string(timeout_ns / 1'000'000) +
                                      " ms (stopped or hung?); resume or kill that process");
  case ENOTRECOVERABLE:
    throw error(errc::table_corrupt, "the lock of table '" + table_name +
                                         "' is unrecoverable; once its users have stopped, remove "
                                         "it with `rm /dev/shm/" +
                                         table_name.substr(1) + "`");
  default: throw system_failure(errc::system_error, "cannot lock table '" + table_name + "'", rc);
  }
}

inline void mark_consistent(pthread_mutex_t* m) noexcept { ::pthread_mutex_consistent(m); }
inline void unlock_robust(pthread_mutex_t* m) noexcept { ::pthread_mutex_unlock(m); }

} // namespace detail
} // namespace v0
} // namespace gpushare
