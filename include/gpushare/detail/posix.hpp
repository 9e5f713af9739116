// SPDX-License-Identifier: Apache-2.0
// Small POSIX helpers: an owning file descriptor, clocks, process facts.
#pragma once

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// An owning file descriptor (closed on destruction, movable).
class unique_fd {
public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(o.release()) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }

  int get() const noexcept { return fd_.load(std::memory_order_relaxed); }
  explicit operator bool() const noexcept { return get() >= 0; }
  int release() noexcept { return fd_.exchange(-1, std::memory_order_relaxed); }
  void reset(int fd = -1) noexcept {
    if (const int old = fd_.exchange(fd, std::memory_order_relaxed); old >= 0) ::close(old);
  }

private:
  // Atomic (relaxed: one thread owns it) because a forked child releases a session's descriptor
  // in its fork handler (fork_guard.hpp), and ThreadSanitizer, which carries the parent's
  // threads' accesses into the child, reported that write against a parent thread's read.
  std::atomic<int> fd_{-1};
};

inline std::uint64_t monotonic_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

/// How far this process's CLOCK_MONOTONIC is offset from the host's: its time namespace's
/// offset (`unshare -T --monotonic`, CRIU restores), from /proc/self/timens_offsets. 0 where that
/// file does not exist (a kernel without time namespaces, or no /proc).
inline std::int64_t monotonic_offset_ns() noexcept {
  std::FILE* f = std::fopen("/proc/self/timens_offsets", "re");
  if (!f) return 0;
  std::int64_t offset = 0;
  char clock[32];
  long long sec = 0;
  long nsec = 0;
  while (std::fscanf(f, "%31s %lld %ld", clock, &sec, &nsec) == 3)
    if (std::string_view(clock) == "monotonic" || std::string_view(clock) == "1")
      offset = static_cast<std::int64_t>(sec) * 1'000'000'000 + nsec;
  std::fclose(f);
  return offset;
}

inline std::uint64_t realtime_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

/// Field 22 of /proc/self/stat (start time in clock ticks since boot): shown next to the pid so a
/// human can tell a reused pid apart. Never used for liveness. 0 when unavailable.
inline std::uint64_t process_start_ticks() noexcept {
  std::FILE* f = std::fopen("/proc/self/stat", "re");
  if (!f) return 0;
  char buf[1024];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // The command name (field 2) may contain spaces and ')': skip to the last ')'.
  const char* p = nullptr;
  for (std::size_t i = 0; i < n; ++i)
    if (buf[i] == ')') p = buf + i;
  if (!p) return 0;
  int field = 2;
  std::uint64_t value = 0;
  for (++p; *p && field < 22; ++p)
    if (*p == ' ') ++field;
  while (*p >= '0' && *p <= '9') value = value * 10 + static_cast<std::uint64_t>(*p++ - '0');
  return value;
}

/// pread of up to `size` bytes at `offset` into `buf`, retried on EINTR and continued after a
/// short read until `size` bytes or the end of the file: the bytes read, or -1 with errno set.
inline ssize_t pread_full(int fd, void* buf, std::size_t size, off_t offset) noexcept {
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n =
        ::pread(fd, static_cast<char*>(buf) + got, size - got, offset + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break; // end of file
    got += static_cast<std::size_t>(n);
  }
  return static_cast<ssize_t>(got);
}

/// Clamp a std::chrono duration to whole nanoseconds in [0, max].
template <class Rep, class Period>
std::uint64_t to_ns(std::chrono::duration<Rep, Period> d) noexcept {
  if (d <= d.zero()) return 0;
  if (d >= std::chrono::duration_cast<std::chrono::duration<Rep, Period>>(
               std::chrono::nanoseconds::max()))
    return static_cast<std::uint64_t>(std::chrono::nanoseconds::max().count());
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

} // namespace detail
} // namespace v0
} // namespace gpushare
