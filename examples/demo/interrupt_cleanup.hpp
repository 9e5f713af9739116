// SPDX-License-Identifier: Apache-2.0
// Removing a demo's tables when it is interrupted (Ctrl-C, SIGTERM, SIGHUP, or SIGPIPE when its
// reader goes away). Without this they would stay in /dev/shm until `gpushare clean` removes them.
// Only the demo's parent removes them: a worker that inherited the handler just dies of the signal
// as usual.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>

namespace demo {
namespace interrupt_detail {

inline constexpr int max_paths = 8;
inline char paths[max_paths][300];
inline std::atomic<int> count{0};
inline pid_t owner = 0;

inline void on_signal(int sig) {
  if (::getpid() == owner)
    for (int i = 0; i < count.load() && i < max_paths; ++i) ::unlink(paths[i]); // signal-safe
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

} // namespace interrupt_detail

/// Removes the table with shm object name `object_name` ("/gpushare....") if this process is
/// interrupted. Call it in the demo's parent.
inline void remove_on_interrupt(const std::string& object_name) {
  namespace d = interrupt_detail;
  const int i = d::count.load();
  if (i >= d::max_paths) return;
  std::snprintf(d::paths[i], sizeof d::paths[i], "/dev/shm%s", object_name.c_str());
  d::count.store(i + 1);
  if (d::owner != 0) return;
  d::owner = ::getpid();
  struct sigaction action = {};
  action.sa_handler = d::on_signal;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::sigaction(sig, &action, nullptr);
}

} // namespace demo
