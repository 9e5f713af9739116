// SPDX-License-Identifier: Apache-2.0
// wait_interrupt (<gpushare/interrupt.hpp>): a thread's check, called by its waits for memory and
// for the device, may end them by throwing; the waiter is then uncounted and nothing is held.
#include <doctest/doctest.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include <gpushare/interrupt.hpp>

#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t MiB = 1ull << 20;

struct interrupted : std::runtime_error {
  interrupted() : std::runtime_error("interrupted") {}
};

/// A check that counts its calls and throws `interrupted` from the `throw_at`-th on (0: never).
struct counting_check {
  int calls = 0;
  int throw_at = 0;
  std::function<void()> fn() {
    return [this] {
      ++calls;
      if (throw_at > 0 && calls >= throw_at) throw interrupted();
    };
  }
};

std::uint32_t memory_waiters(session& s) {
  std::uint32_t n = 0;
  for (const auto& i : s.snapshot().sessions) n += i.waiting_for_memory;
  return n;
}

std::uint32_t device_waiters(session& s) {
  std::uint32_t n = 0;
  for (const auto& i : s.snapshot().sessions) n += i.waiting_for_device;
  return n;
}

} // namespace

TEST_CASE("a check that throws ends a memory wait, uncounted, and a later reserve works") {
  test::unique_table t("interrupt-memory", 64 * MiB);
  session holder = t.join("holder");
  session waiter = t.join("waiter");
  std::optional<reservation> all = holder.reserve(64 * MiB, 1s);
  counting_check c;
  c.throw_at = 3;
  {
    wait_interrupt scope(c.fn(), 5ms);
    CHECK_THROWS_AS((void)waiter.reserve(16 * MiB), interrupted);
  }
  CHECK(c.calls == 3);
  CHECK(memory_waiters(holder) == 0);
  CHECK(waiter.info().waiting_for_memory == 0);
  CHECK(waiter.info().reserved == 0);
  all.reset();
  reservation r = waiter.reserve(16 * MiB, 5s);
  CHECK(r.size() == 16 * MiB);
  CHECK(waiter.info().reserved == 16 * MiB);
}

TEST_CASE("a check that throws ends a device wait, uncounted, and the next guard gets in") {
  test::unique_table t("interrupt-device", 64 * MiB);
  session holder = t.join("holder");
  session waiter = t.join("waiter");
  std::optional<scoped_kernel> held;
  held.emplace(holder);
  counting_check c;
  c.throw_at = 4;
  {
    wait_interrupt scope(c.fn(), 5ms);
    CHECK_THROWS_AS([&] { scoped_kernel g(waiter); }(), interrupted);
  }
  CHECK(c.calls == 4);
  CHECK(device_waiters(holder) == 0);
  CHECK(waiter.info().active_guards == 0);
  held.reset();
  scoped_kernel g(waiter, 5s);
  CHECK(waiter.info().active_guards == 1);
}

TEST_CASE("the check runs at least every period during a long wait") {
  test::unique_table t("interrupt-period", 64 * MiB);
  session holder = t.join("holder");
  session waiter = t.join("waiter");
  reservation all = holder.reserve(64 * MiB, 1s);
  counting_check c;
  {
    wait_interrupt scope(c.fn(), 10ms);
    CHECK_THROWS_AS((void)waiter.reserve(MiB, 500ms), gpushare::error);
  }
  // 500 ms of 10 ms sleeps: at least a few checks even on a loaded machine (without the cap, the
  // wait would sleep until its deadline and call the check about once).
  CHECK(c.calls >= 5);
  CHECK(memory_waiters(holder) == 0);
}

TEST_CASE("a nested scope replaces the outer check and restores it when it ends") {
  test::unique_table t("interrupt-nested", 64 * MiB);
  session holder = t.join("holder");
  session waiter = t.join("waiter");
  reservation all = holder.reserve(64 * MiB, 1s);
  counting_check outer;
  counting_check inner;
  inner.throw_at = 2;
  wait_interrupt outer_scope(outer.fn(), 5ms);
  {
    wait_interrupt inner_scope(inner.fn(), 5ms);
    CHECK_THROWS_AS((void)waiter.reserve(MiB), interrupted);
  }
  CHECK(inner.calls == 2);
  CHECK(outer.calls == 0);
  outer.throw_at = 1;
  CHECK_THROWS_AS((void)waiter.reserve(MiB), interrupted);
  CHECK(outer.calls == 1);
  CHECK(inner.calls == 2);
  CHECK(memory_waiters(holder) == 0);
}

TEST_CASE("without a scope waits are unchanged: no check, a timeout ends them") {
  CHECK(detail::current_interrupt.check == nullptr);
  {
    counting_check c;
    wait_interrupt scope(c.fn());
    CHECK(detail::current_interrupt.check != nullptr);
    CHECK(detail::current_interrupt.period_ns == 50'000'000);
  }
  CHECK(detail::current_interrupt.check == nullptr);
  CHECK(detail::interruptible_sleep_ns(7'000'000'000) == 7'000'000'000);
  test::unique_table t("interrupt-none", 64 * MiB);
  session holder = t.join("holder");
  session waiter = t.join("waiter");
  reservation all = holder.reserve(64 * MiB, 1s);
  try {
    (void)waiter.reserve(MiB, 100ms);
    FAIL("expected a timeout");
  } catch (const gpushare::error& e) {
    CHECK(e.code() == errc::timeout);
  }
  CHECK(memory_waiters(holder) == 0);
}

TEST_CASE("a check on another thread does not reach this one") {
  counting_check c;
  wait_interrupt scope(c.fn());
  bool other_has_check = true;
  std::thread([&] { other_has_check = detail::current_interrupt.check != nullptr; }).join();
  CHECK_FALSE(other_has_check);
}
