// SPDX-License-Identifier: Apache-2.0
// Helpers for gpushare's tests. The shared support (tests/support/) comes with it: tables and
// domains of one's own that clean up after themselves (domain.hpp), forked children (fork.hpp), a
// T in anonymous shared memory (shared_block.hpp), the process runner (process.hpp) and a JSON
// reader (json.hpp). Here: crash points, fake environments, thrown errors, leftover tables, string
// building, raw shared-memory objects and polling.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gpushare/gpushare.hpp>

#include "support/domain.hpp"
#include "support/fork.hpp"
#include "support/json.hpp"
#include "support/process.hpp"
#include "support/shared_block.hpp"

namespace test {

/// Makes this (child) process die by SIGKILL when it reaches crash point `where`.
inline void die_at(const char* where) {
  static const char* target = nullptr;
  target = where;
  gpushare::detail::crash_point_hook = [](const char* w) {
    if (std::string_view(w) == target) ::kill(::getpid(), SIGKILL);
  };
}

/// CLOCK_MONOTONIC in nanoseconds, the clock of the table's timestamps.
inline std::uint64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

/// A fake environment for resolve_options() and friends: `vars` and nothing else.
inline gpushare::env_lookup fake_env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

/// The gpushare::error `f` throws, or nullopt if it throws none.
inline std::optional<gpushare::error> thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const gpushare::error& e) {
    return e;
  }
  return std::nullopt;
}

/// Tables in /dev/shm named "gpushare.<prefix><pid>..." whose process <pid> has ended: what a
/// program that runs in its own domains (the demos: "demo", the GPU benchmark: "gb") must have
/// removed before it exited.
inline std::set<std::string> leftover_tables(const std::string& prefix) {
  std::set<std::string> names;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return names;
  const std::string full = "gpushare." + prefix;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name.rfind(full, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + full.size(), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) names.insert(name);
  }
  ::closedir(dir);
  return names;
}

/// Sum of `reserved` over the sessions of a snapshot (must equal reserved_total).
inline std::uint64_t sum_reserved(const gpushare::table_snapshot& s) {
  std::uint64_t sum = 0;
  for (const auto& i : s.sessions) sum += i.reserved;
  return sum;
}

// String building: pieces are appended to a string, not written as "x" + std::to_string(n). GCC
// 12 at -O3 misreports operator+(const char*, std::string&&) as an overlapping memcpy
// (-Wrestrict), which -Werror makes fatal in Release builds.

/// "<stem><n>", e.g. the session name "w3".
inline std::string numbered(std::string_view stem, std::integral auto n) {
  std::string s(stem);
  s += std::to_string(n);
  return s;
}

/// `s` in double quotes, as error messages quote a value.
inline std::string quoted(std::string_view s) {
  std::string q;
  q.reserve(s.size() + 2);
  q += '"';
  q += s;
  q += '"';
  return q;
}

/// Creates the shared-memory object `object_name` ("/gpushare....") holding exactly `bytes`, as
/// a program other than gpushare might. Returns false if it exists already or cannot be written.
inline bool place_object(const std::string& object_name, const std::vector<unsigned char>& bytes) {
  const int fd = ::shm_open(object_name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return done == bytes.size();
}

/// The bytes of the shared-memory object `object_name`, or nullopt if it does not exist.
inline std::optional<std::vector<unsigned char>> object_bytes(const std::string& object_name) {
  const int fd = ::shm_open(object_name.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  std::vector<unsigned char> bytes;
  unsigned char chunk[65536];
  for (ssize_t n; (n = ::read(fd, chunk, sizeof chunk)) > 0;)
    bytes.insert(bytes.end(), chunk, chunk + n);
  ::close(fd);
  return bytes;
}

/// Polls `pred` every millisecond until it holds or `timeout` passes.
inline bool eventually(const std::function<bool()>& pred,
                       std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

} // namespace test
