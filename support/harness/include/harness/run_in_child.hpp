// SPDX-License-Identifier: Apache-2.0
// Running a function in a forked child and reading back its plain-bytes result: how a program
// that must stay free of CUDA (it forks workers later) asks CUDA questions. Even
// cudaGetDeviceCount initialises the driver, and a CUDA context does not survive fork.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <optional>
#include <type_traits>

namespace demo {

/// Runs `fn` (returning a trivially copyable T) in a child process and returns its result, or
/// nullopt when the child could not be started, failed, or gave no answer in `timeout_ms` (a hung
/// driver: the child is then killed).
template <class T, class F> std::optional<T> run_in_child(F&& fn, int timeout_ms = 60'000) {
  static_assert(std::is_trivially_copyable_v<T>);
  int fds[2];
  if (::pipe(fds) != 0) return std::nullopt;
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const T found = fn();
    const ssize_t n = ::write(fds[1], &found, sizeof found);
    std::_Exit(n == static_cast<ssize_t>(sizeof found) ? 0 : 1);
  }
  ::close(fds[1]);
  T r{};
  std::size_t got = 0;
  auto* bytes = reinterpret_cast<char*>(&r);
  pollfd p{fds[0], POLLIN, 0};
  while (pid > 0 && got < sizeof r) {
    if (::poll(&p, 1, timeout_ms) <= 0) break;
    const ssize_t n = ::read(fds[0], bytes + got, sizeof r - got);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fds[0]);
  if (pid > 0) {
    if (got < sizeof r) ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  if (got < sizeof r) return std::nullopt;
  return r;
}

} // namespace demo
