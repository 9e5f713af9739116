// SPDX-License-Identifier: Apache-2.0
// Interruptible waits: a check that a session's blocking waits run while they wait.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <utility>

#include <gpushare/detail/interrupt.hpp>

namespace gpushare {
inline namespace v0 {

/// While alive, every wait of this thread for memory (session::reserve, reservation::grow) or
/// for the device (scoped_kernel, session::yield, the CUDA layer's guards) calls `check` after
/// each wake-up and at least every `period`. `check` may throw: the exception leaves the wait as
/// a timeout would, the waiter uncounted and nothing held, and reaches the caller unchanged.
/// That is how a language binding turns a signal (Ctrl-C) into its own exception:
///
///     gpushare::wait_interrupt on_signal([] { if (signal_pending()) throw interrupted(); });
///     auto r = s.reserve(1ull << 30); // ends by `interrupted` if a signal comes first
///
/// Thread-local and scoped: a nested scope replaces the outer check until it ends, then restores
/// it. Without a scope the waits are as before. The table's lock, held for microseconds and
/// taken on paths that cannot throw (releases, guard exits), does not call the check.
class wait_interrupt {
public:
  /// Installs `check` for this thread until destroyed (see the class comment).
  explicit wait_interrupt(std::function<void()> check,
                          std::chrono::nanoseconds period = std::chrono::milliseconds(50))
      : check_(std::move(check)), previous_(detail::current_interrupt) {
    const std::int64_t p = period.count();
    detail::current_interrupt = {check_ ? &check_ : nullptr,
                                 p < 1 ? 1 : static_cast<std::uint64_t>(p)};
  }
  ~wait_interrupt() { detail::current_interrupt = previous_; }
  wait_interrupt(const wait_interrupt&) = delete;
  wait_interrupt& operator=(const wait_interrupt&) = delete;

private:
  std::function<void()> check_;
  detail::interrupt_hook previous_;
};

} // namespace v0
} // namespace gpushare
