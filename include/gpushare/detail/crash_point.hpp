// SPDX-License-Identifier: Apache-2.0
// Named points inside the cross-process protocols where a test may kill the process.
//
// Crash tests set `crash_point_hook` in a forked child (for example to raise(SIGKILL) at
// "join.locked") and check that the survivors recover. In production the hook is null and each
// point costs one predictable branch.
#pragma once

namespace gpushare {
inline namespace v0 {
namespace detail {

inline void (*crash_point_hook)(const char* where) = nullptr;

inline void crash_point(const char* where) {
  if (crash_point_hook) crash_point_hook(where);
}

} // namespace detail
} // namespace v0
} // namespace gpushare
