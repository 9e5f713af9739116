// SPDX-License-Identifier: Apache-2.0
// Helpers for gpushare's tests: unique table keys that clean up after themselves, forked
// children with results, and a tiny shared-memory scratch area for multi-process checks.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
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

namespace test {

/// A table key unique to this test run; the table object is unlinked when it goes out of scope.
class unique_table {
public:
  explicit unique_table(const std::string& what, std::uint64_t capacity = 0) {
    static std::atomic<int> counter{0};
    key_ = "test-" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    opts_.capacity = capacity;
    opts_.domain = "gpusharetest";
  }
  ~unique_table() {
    for (auto access : {gpushare::table_access::user, gpushare::table_access::group})
      ::shm_unlink(gpushare::detail::table_object_name("gpusharetest", key_, access).c_str());
  }
  unique_table(const unique_table&) = delete;
  unique_table& operator=(const unique_table&) = delete;

  const std::string& key() const { return key_; }
  std::string object_name() const {
    return gpushare::detail::table_object_name("gpusharetest", key_, gpushare::table_access::user);
  }
  /// Options for a session of this table (domain and capacity preset).
  gpushare::session_options options(const std::string& name = "test") const {
    gpushare::session_options o = opts_;
    o.name = name;
    return o;
  }
  gpushare::session join(const std::string& name = "test") const {
    return gpushare::session(key_, options(name));
  }
  gpushare::table open() const {
    return gpushare::table::open(key_, gpushare::open_mode::open_or_create, opts_);
  }

private:
  std::string key_;
  gpushare::session_options opts_;
};

/// Anonymous shared memory that forked children can write results into.
template <class T> class shared_block {
public:
  explicit shared_block(std::size_t n = 1) : n_(n) {
    void* p =
        ::mmap(nullptr, sizeof(T) * n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    p_ = static_cast<T*>(p);
    for (std::size_t i = 0; i < n; ++i) new (p_ + i) T{};
  }
  ~shared_block() { ::munmap(p_, sizeof(T) * n_); }
  shared_block(const shared_block&) = delete;
  shared_block& operator=(const shared_block&) = delete;
  T& operator[](std::size_t i) { return p_[i]; }
  T* get() { return p_; }

private:
  T* p_;
  std::size_t n_;
};

/// Forks a child running `fn`; the child's exit status is fn's return value (an exception: 99).
inline pid_t spawn(const std::function<int()>& fn) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 99;
    try {
      rc = fn();
    } catch (...) {
    }
    std::_Exit(rc); // no atexit handlers, no doctest teardown in the child
  }
  return pid;
}

/// Waits for `pid`; returns its exit code, or 128 + signal if it was killed.
inline int wait_exit(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

/// Runs `fn` in a forked child whose stderr is captured; returns what it wrote, and its exit code
/// in `*code` when given (0 when `fn` returns, 99 when it throws).
inline std::string child_stderr(const std::function<void()>& fn, int* code = nullptr) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = spawn([&] {
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    fn();
    return 0;
  });
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    out.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  const int rc = wait_exit(pid);
  if (code != nullptr) *code = rc;
  return out;
}

/// Makes this (child) process die by SIGKILL when it reaches crash point `where`.
inline void die_at(const char* where) {
  static const char* target = nullptr;
  target = where;
  gpushare::detail::crash_point_hook = [](const char* w) {
    if (std::string_view(w) == target) ::kill(::getpid(), SIGKILL);
  };
}

inline std::uint64_t now_ns() { return gpushare::detail::monotonic_ns(); }

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

/// What a program run through the shell printed and how it ended.
struct command_result {
  int exit_code = -1; ///< its exit status, or 128 + the signal that killed it
  std::string output; ///< what it wrote to stdout (add 2>&1 to the command for stderr too)
};

/// Runs `command` with /bin/sh and reads all its output.
inline command_result run_command(const std::string& command) {
  command_result r;
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char chunk[4096];
  for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, pipe)) > 0;)
    r.output.append(chunk, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
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
