// SPDX-License-Identifier: Apache-2.0
// A simulated GPU for machines without one. It lives in shared memory that the demo's parent
// maps before forking, so every worker process uses the same "device". Like a GPU shared by
// processes with no arbitration, it runs one kernel at a time and time-slices between processes:
// a kernel runs in slices of at most `slice_ns`, each taken in turn under a first-come
// first-served ticket lock. A slice "executes" by sleeping until its end, which leaves the CPUs
// free for the processes that feed the device. Device memory is a counter with a capacity; an
// allocation beyond it fails, like cudaMalloc with cudaErrorMemoryAllocation.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>

namespace demo {

inline std::uint64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

/// Sleeps until the monotonic clock reads `deadline_ns`.
inline void sleep_until_ns(std::uint64_t deadline_ns) {
  const timespec ts{static_cast<time_t>(deadline_ns / 1'000'000'000u),
                    static_cast<long>(deadline_ns % 1'000'000'000u)};
  while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

struct sim_device {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t) &&
                std::atomic<std::uint32_t>::is_always_lock_free);

  std::atomic<std::uint32_t> next_ticket{0};
  std::atomic<std::uint32_t> serving{0}; ///< the ticket whose slice runs now (a futex word)
  std::atomic<std::uint64_t> memory_used{0};
  std::uint64_t memory_capacity = 0;
  std::uint64_t slice_ns = 2'000'000;

  /// Runs one kernel of `ns` device time; returns when it has finished, with the time its first
  /// slice started (when a GPU would have started the kernel).
  std::uint64_t run_kernel(std::uint64_t ns) {
    std::uint64_t started = 0;
    while (ns > 0) {
      const std::uint32_t ticket = next_ticket.fetch_add(1);
      for (std::uint32_t s = serving.load(); s != ticket; s = serving.load()) wait(s);
      const std::uint64_t slice = ns < slice_ns ? ns : slice_ns;
      const std::uint64_t slice_start = now_ns();
      if (started == 0) started = slice_start;
      sleep_until_ns(slice_start + slice);
      ns -= slice;
      serving.fetch_add(1);
      wake_all();
    }
    return started;
  }

  /// Takes `bytes` of device memory if they are free; false means out of memory.
  bool try_allocate(std::uint64_t bytes) {
    std::uint64_t used = memory_used.load();
    do {
      if (bytes > memory_capacity || used > memory_capacity - bytes) return false;
    } while (!memory_used.compare_exchange_weak(used, used + bytes));
    return true;
  }
  void free(std::uint64_t bytes) { memory_used.fetch_sub(bytes); }

private:
  // Shared (not private) futex operations, so a wake reaches waiters in other processes. The
  // wait is bounded: a lost wake-up costs at most 10 ms.
  void wait(std::uint32_t seen) {
    timespec timeout{0, 10'000'000};
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&serving), FUTEX_WAIT, seen, &timeout,
              nullptr, 0);
  }
  void wake_all() {
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&serving), FUTEX_WAKE, INT_MAX, nullptr,
              nullptr, 0);
  }
};

} // namespace demo
