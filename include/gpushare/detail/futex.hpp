// SPDX-License-Identifier: Apache-2.0
// Futex wait/wake on 32-bit words in the shared mapping.
//
// Why not std::atomic::wait: libstdc++ uses FUTEX_PRIVATE_FLAG (and a per-process waiter table),
// so a wake in one process never reaches a waiter in another. These calls use the shared futex
// ops, keyed by the physical page, so they work across processes mapping the same object.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>

namespace gpushare {
inline namespace v0 {
namespace detail {

enum class wait_result { woken, value_changed, timed_out, interrupted };

/// Sleeps while `*word == expected`, at most `timeout_ns`. Every wait in gpushare is bounded:
/// a lost wake-up costs at most one timeout, after which the caller re-checks liveness.
inline wait_result futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                              std::uint64_t timeout_ns) noexcept {
  timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000ull),
              static_cast<long>(timeout_ns % 1'000'000'000ull)};
  const long rc = ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected,
                            &ts, nullptr, 0);
  if (rc == 0) return wait_result::woken;
  switch (errno) {
  case EAGAIN: return wait_result::value_changed;
  case ETIMEDOUT: return wait_result::timed_out;
  default: return wait_result::interrupted; // EINTR; callers loop and re-check
  }
}

/// Wakes up to `count` waiters on `word` (in any process). Returns how many were woken.
inline int futex_wake(std::atomic<std::uint32_t>* word, int count = INT_MAX) noexcept {
  const long rc = ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, count,
                            nullptr, nullptr, 0);
  return rc < 0 ? 0 : static_cast<int>(rc);
}

} // namespace detail
} // namespace v0
} // namespace gpushare
