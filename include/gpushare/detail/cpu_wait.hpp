// SPDX-License-Identifier: Apache-2.0
// How much of its time the calling thread spends runnable but waiting for a CPU, from Linux's
// per-thread scheduler statistics (/proc/thread-self/schedstat: "<on-CPU ns> <run-queue wait ns>
// <timeslices>"). The scheduler keeps the device for a descheduled session a while (the
// reservation, scheduler.hpp) only when its threads measurably wait for a CPU: from the table
// alone, a session descheduled between two guards and one doing host work between two guards
// look the same, and keeping the device idle for the second only wastes it (issue 23, case 2).
// A thread that sleeps (waits for a request, for I/O) is not runnable and does not count.
#pragma once

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// Samples are at least this far apart per thread (a pread of a /proc file costs microseconds).
inline constexpr std::uint64_t cpu_wait_sample_period_ns = 5'000'000; // 5 ms

/// Parses "<a> <b> ..." (schedstat): the second number, the run-queue wait in ns.
inline std::optional<std::uint64_t> parse_run_delay(const char* text) noexcept {
  char* end = nullptr;
  errno = 0;
  (void)std::strtoull(text, &end, 10);
  if (end == text || errno != 0) return std::nullopt;
  const char* second = end;
  const unsigned long long v = std::strtoull(second, &end, 10);
  if (end == second || errno != 0) return std::nullopt;
  return static_cast<std::uint64_t>(v);
}

/// The calling thread's schedstat, opened once per thread (and again after a fork).
class thread_schedstat {
public:
  thread_schedstat() = default;
  thread_schedstat(const thread_schedstat&) = delete;
  thread_schedstat& operator=(const thread_schedstat&) = delete;
  ~thread_schedstat() { close_fd(); }

  /// The share of wall time (ppm) this thread waited for a CPU since its previous sample, or
  /// nullopt if the previous sample is less than cpu_wait_sample_period_ns old (or none was
  /// taken, or the kernel offers no schedstat: then never).
  std::optional<std::uint32_t> sample(std::uint64_t now) noexcept {
    if (disabled_) return std::nullopt;
    if (pid_ != ::getpid()) { // first use, or a forked child: the fd names another thread
      close_fd();
      pid_ = ::getpid();
      open_fd();
      if (disabled_) return std::nullopt;
      last_ns_ = 0;
    }
    if (last_ns_ != 0 && now - last_ns_ < cpu_wait_sample_period_ns) return std::nullopt;
    const std::optional<std::uint64_t> delay = read_delay();
    if (!delay) return std::nullopt;
    std::optional<std::uint32_t> ppm;
    if (last_ns_ != 0 && now > last_ns_ && *delay >= last_delay_) {
      const std::uint64_t waited = *delay - last_delay_, wall = now - last_ns_;
      ppm = static_cast<std::uint32_t>(waited >= wall ? 1'000'000 : waited * 1'000'000 / wall);
    }
    last_ns_ = now;
    last_delay_ = *delay;
    return ppm;
  }

private:
  void open_fd() noexcept {
    fd_ = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) { // kernels before 3.17 have no thread-self
      const std::string path =
          "/proc/self/task/" + std::to_string(::syscall(SYS_gettid)) + "/schedstat";
      fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    }
    disabled_ = fd_ < 0;
  }
  void close_fd() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  std::optional<std::uint64_t> read_delay() noexcept {
    char buf[96];
    ssize_t n;
    do {
      n = ::pread(fd_, buf, sizeof buf - 1, 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) {
      disabled_ = true;
      return std::nullopt;
    }
    buf[n] = '\0';
    return parse_run_delay(buf);
  }

  int fd_ = -1;
  pid_t pid_ = 0;
  bool disabled_ = false;
  std::uint64_t last_ns_ = 0;
  std::uint64_t last_delay_ = 0;
};

/// The calling thread's CPU-wait share since its previous sample (see thread_schedstat::sample).
inline std::optional<std::uint32_t> sample_cpu_wait(std::uint64_t now) noexcept {
  thread_local thread_schedstat stat;
  return stat.sample(now);
}

} // namespace detail
} // namespace v0
} // namespace gpushare
