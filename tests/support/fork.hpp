// SPDX-License-Identifier: Apache-2.0
// Forked children for multi-process tests: start one, wait for it (with or without a limit), stop
// one (and know that it stopped), run one with its stderr captured, and start one that sets
// something up and then holds it until it is killed (the shape that mp-crash, mp-protocol-waits,
// unit-session and the CLI tests share).
#pragma once

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

#include "shared_block.hpp"

namespace test {

/// Forks a child running `fn`; the child's exit status is fn's return value (an exception: 99).
inline pid_t spawn(const std::function<int()>& fn) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 99;
    try {
      rc = fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "test child %d threw: %s\n", static_cast<int>(::getpid()), e.what());
    } catch (...) {
      std::fprintf(stderr, "test child %d threw a non-std exception\n",
                   static_cast<int>(::getpid()));
    }
    std::_Exit(rc); // no atexit handlers, no doctest teardown in the child
  }
  return pid;
}

/// The exit code in a waitpid() status, or 128 + the signal that killed the process.
inline int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

/// Waits for `pid`; returns its exit code, or 128 + signal if it was killed.
inline int wait_exit(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return exit_code_of(status);
}

/// Waits at most `limit` for `pid`; returns its exit code, or -1 if it had not ended by then (it
/// is then killed and reaped): a hang shows up as -1, not as a stuck test.
inline int wait_exit_within(pid_t pid, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return exit_code_of(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGKILL);
  wait_exit(pid);
  return -1;
}

/// Stops `pid` with SIGSTOP and returns once every one of its threads has stopped (true), or
/// false if they had not within `limit`. kill() returns before the stop lands: until the thread
/// chosen to take the signal runs, the process's other threads go on (a watcher woken at that
/// moment answers a request: seen under load). Reads /proc/<pid>/task/*/stat, so that the
/// process need not be a child of this one.
inline bool stop_process(pid_t pid,
                         std::chrono::milliseconds limit = std::chrono::milliseconds(10000)) {
  if (::kill(pid, SIGSTOP) != 0) return false;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  const auto end = std::chrono::steady_clock::now() + limit;
  do {
    bool all = true;
    bool any = false;
    if (DIR* d = ::opendir(tasks.c_str())) {
      while (const dirent* e = ::readdir(d)) {
        if (e->d_name[0] == '.') continue;
        char state = '?';
        if (std::FILE* f = std::fopen((tasks + "/" + e->d_name + "/stat").c_str(), "r")) {
          // "<tid> (<comm>) <state> ...": the state follows the last ')'.
          char line[512] = {};
          const std::size_t n = std::fread(line, 1, sizeof line - 1, f);
          std::fclose(f);
          const std::string text(line, n);
          const std::size_t close = text.rfind(')');
          if (close != std::string::npos && close + 2 < text.size()) state = text[close + 2];
        }
        any = true;
        if (state != 'T' && state != 't') all = false;
      }
      ::closedir(d);
    }
    if (any && all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } while (std::chrono::steady_clock::now() < end);
  return false;
}

/// Kills `pid` with SIGKILL and waits for it; its exit code (128 + SIGKILL unless it had ended).
inline int kill_and_wait(pid_t pid) {
  ::kill(pid, SIGKILL);
  return wait_exit(pid);
}

/// Forks a child that runs `fn`, which sets something up and then calls the `hold` it is given:
/// that tells the parent it is ready and waits, with fn's locals alive, to be killed. Returns the
/// child's pid once it holds; throws (after killing it) if it does not within `limit`.
inline pid_t spawn_holding(const std::function<void(const std::function<void()>& hold)>& fn,
                           std::chrono::milliseconds limit = std::chrono::milliseconds(10000)) {
  shared_block<std::atomic<int>> ready;
  const pid_t pid = spawn([&] {
    fn([&] {
      ready[0] = 1;
      for (;;) ::pause();
    });
    return 0;
  });
  const auto end = std::chrono::steady_clock::now() + limit;
  while (ready[0].load() != 1) {
    if (std::chrono::steady_clock::now() >= end) {
      kill_and_wait(pid);
      throw std::runtime_error("a child did not get ready in time");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pid;
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

} // namespace test
