// SPDX-License-Identifier: Apache-2.0
// Parks the thread that reaches a crash point (gpushare::detail::crash_point_hook) until the test
// releases it: how the CUDA layer's tests hold an exit inside a protocol's window while another
// session acts (cuda-drain, cuda-batch).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string_view>
#include <thread>

#include <gpushare/cuda.hpp>

namespace cutest {

/// Parks the thread that reaches crash point `where` (only the thread `only`, once) until
/// release(); the test sees when it is parked.
struct parking {
  static inline std::mutex m;
  static inline std::condition_variable cv;
  static inline std::string_view where;
  static inline std::thread::id only;
  static inline bool parked = false, released = false, used = false;

  static void arm(std::string_view at, std::thread::id who) {
    std::lock_guard lock(m);
    where = at;
    only = who;
    parked = released = used = false;
    gpushare::detail::crash_point_hook = &hook;
  }
  static void hook(const char* w) {
    std::unique_lock lock(m);
    if (used || w != where || std::this_thread::get_id() != only) return;
    used = parked = true;
    cv.notify_all();
    cv.wait(lock, [] { return released; });
  }
  static bool wait_parked(std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    std::unique_lock lock(m);
    return cv.wait_for(lock, limit, [] { return parked; });
  }
  static void release() {
    {
      std::lock_guard lock(m);
      released = true;
    }
    cv.notify_all();
  }
  static void disarm() { gpushare::detail::crash_point_hook = nullptr; }
};

} // namespace cutest
