// SPDX-License-Identifier: Apache-2.0
// Removing a demo's tables when it is interrupted (Ctrl-C, SIGTERM, SIGHUP, or SIGPIPE when its
// reader goes away). Without this they would stay in /dev/shm until `gpushare clean` removes them.
// Only the demo's parent removes them: a worker that inherited the handler just dies of the signal
// as usual. The parent also erases its progress line (progress.hpp) if one is showing.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "progress.hpp"

namespace demo {
namespace interrupt_detail {

inline constexpr int max_paths = 64;
inline char paths[max_paths][300];
/// A slot's path is complete and its table exists while its flag is set; the handler reads only
/// such slots, so a slot being rewritten (flag clear) is never half-read.
inline std::atomic<int> in_use[max_paths];
inline pid_t owner = 0;

inline void on_signal(int sig) {
  if (::getpid() == owner) {
    for (int i = 0; i < max_paths; ++i)
      if (in_use[i].load(std::memory_order_acquire) != 0) ::unlink(paths[i]); // signal-safe
    if (progress_line_shown.load()) {
      const ssize_t erased = ::write(STDERR_FILENO, "\r\x1b[K", 4); // signal-safe
      static_cast<void>(erased);
    }
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

inline void install_handler() {
  namespace d = interrupt_detail;
  if (d::owner != 0) return;
  d::owner = ::getpid();
  struct sigaction action = {};
  action.sa_handler = d::on_signal;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::sigaction(sig, &action, nullptr);
}

} // namespace interrupt_detail

/// Removes the table with shm object name `object_name` ("/gpushare....") if this process is
/// interrupted, until forget_on_interrupt() is called for it. Call it in the demo's parent. At
/// most 64 names are watched at once; beyond that a name is not watched.
inline void remove_on_interrupt(const std::string& object_name) {
  namespace d = interrupt_detail;
  d::install_handler();
  for (int i = 0; i < d::max_paths; ++i) {
    if (d::in_use[i].load(std::memory_order_relaxed) != 0) continue;
    std::snprintf(d::paths[i], sizeof d::paths[i], "/dev/shm%s", object_name.c_str());
    d::in_use[i].store(1, std::memory_order_release);
    return;
  }
}

/// Stops watching `object_name` (its table has been removed).
inline void forget_on_interrupt(const std::string& object_name) {
  namespace d = interrupt_detail;
  const std::string path = "/dev/shm" + object_name;
  for (int i = 0; i < d::max_paths; ++i)
    if (d::in_use[i].load(std::memory_order_relaxed) != 0 && path == d::paths[i])
      d::in_use[i].store(0, std::memory_order_release);
}

} // namespace demo
