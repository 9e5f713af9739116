// SPDX-License-Identifier: Apache-2.0
// The state behind gpushare::wait_interrupt (<gpushare/interrupt.hpp>): this thread's check, and
// the two calls the waits of a session make (detail/waits.hpp). Standard headers only.
#pragma once

#include <cstdint>
#include <functional>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// This thread's interruption check: none (nullptr) unless a wait_interrupt scope is alive.
struct interrupt_hook {
  const std::function<void()>* check = nullptr;
  std::uint64_t period_ns = 0;
};
inline thread_local interrupt_hook current_interrupt{};

/// A sleep of `ns`, capped at the check's period while one is installed.
inline std::uint64_t interruptible_sleep_ns(std::uint64_t ns) noexcept {
  const interrupt_hook& h = current_interrupt;
  return h.check != nullptr && h.period_ns < ns ? h.period_ns : ns;
}

/// Runs this thread's check, if any; it may throw, ending the wait that called it.
inline void interruption_point() {
  if (const std::function<void()>* check = current_interrupt.check) (*check)();
}

} // namespace detail
} // namespace v0
} // namespace gpushare
