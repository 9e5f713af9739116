// SPDX-License-Identifier: Apache-2.0
// Hostile peers: a process with write access to the table scribbling over futex words, counters,
// indices and settings while honest sessions work. gpushare does not defend the table against a
// peer that may write it (docs/design.md, trust model), but it must not crash, hang beyond its
// bounded waits, or index outside the mapping because of what it reads there.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include <doctest/doctest.h>

#include "test_util.hpp"

namespace {

using namespace std::chrono_literals;
constexpr std::uint64_t MiB = 1ull << 20;

/// The table mapped directly, as a rogue peer would see it.
gpushare::detail::table_core map_raw(const test::unique_table& t) {
  return gpushare::detail::table_core(
      gpushare::detail::mapped_table::open_existing(t.object_name(), 1'000'000'000));
}

} // namespace

TEST_CASE("a rogue writer toggling futex words and waiter counts neither hangs nor corrupts") {
  test::unique_table t("hostile-wake", 64 * MiB);
  auto a = t.join("a");
  auto b = t.join("b");
  test::shared_block<std::atomic<int>> stop(1);
  // The rogue: bumps every futex word (spurious wake-ups) and sets the waiter hint to 0 or to
  // nonsense, as fast as it can.
  const pid_t rogue = test::spawn([&] {
    auto raw = map_raw(t);
    std::mt19937 rng(7);
    while (stop[0].load() == 0) {
      auto& h = raw.header();
      h.memory_wake.fetch_add(1);
      gpushare::detail::futex_wake(&h.memory_wake);
      h.device_waiters.store(rng() % 2 ? 0u : rng());
      for (std::uint32_t i = 0; i < raw.slot_count(); ++i) {
        raw.slot(i).grant_word.fetch_add(1);
        gpushare::detail::futex_wake(&raw.slot(i).grant_word);
      }
    }
    return 0;
  });

  // Honest work meanwhile: b waits for memory a holds; both take guards.
  auto held = a.reserve(48 * MiB);
  std::optional<gpushare::reservation> got;
  std::thread waiter([&] { got = b.reserve(32 * MiB, 20s); }); // fits once a releases
  std::this_thread::sleep_for(100ms);
  held.release();
  waiter.join();
  REQUIRE(got.has_value());
  CHECK(got->size() == 32 * MiB);
  const auto start = std::chrono::steady_clock::now();
  std::thread ta([&] {
    for (int i = 0; i < 200; ++i) {
      gpushare::scoped_kernel g(a);
    }
  });
  std::thread tb([&] {
    for (int i = 0; i < 200; ++i) {
      gpushare::scoped_kernel g(b);
      b.yield();
    }
  });
  ta.join();
  tb.join();
  const auto took = std::chrono::steady_clock::now() - start;
  stop[0] = 1;
  CHECK(test::wait_exit(rogue) == 0);
  // Every guard completed (each wait is bounded by the 100 ms re-check even when the hints lie).
  CHECK(a.info().guards == 200);
  CHECK(b.info().guards == 200);
  MESSAGE("400 guards beside the rogue writer took "
          << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
  // The budget is intact: only b's 32 MiB is reserved.
  const auto snap = t.open().snapshot();
  CHECK(snap.reserved_total == 32 * MiB);
  CHECK(test::sum_reserved(snap) == 32 * MiB);
}

TEST_CASE(
    "out-of-range holder, priorities, shares and limits written into the table are survived") {
  test::unique_table t("hostile-range", 64 * MiB);
  auto a = t.join("a");
  auto b = t.join("b");
  {
    auto raw = map_raw(t);
    auto& h = raw.header();
    h.holder = 999'999; // no such slot
    h.holder_generation = 12345;
    auto& sa = raw.slot(a.id().slot);
    sa.settings.priority = 1'000'000; // outside 0..7
    sa.settings.share = 0;            // would divide by zero
    sa.settings.compute_limit_ppm = 0;
    sa.settings.quantum_ns = 0;
    auto& sb = raw.slot(b.id().slot);
    sb.settings.priority = -5;
    sb.settings.memory_limit = 0;
  }
  // Guards still work: the bogus holder is ignored, the bogus settings are clamped.
  for (int i = 0; i < 50; ++i) {
    { gpushare::scoped_kernel ga(a); }
    { gpushare::scoped_kernel gb(b); }
  }
  CHECK(a.info().guards == 50);
  CHECK(b.info().guards == 50);
  // b's limit of 0 refuses its reservations with a clear error instead of wrapping around.
  try {
    (void)b.reserve(1);
    FAIL("a reservation over a zero limit succeeded");
  } catch (const gpushare::error& e) {
    CHECK(e.code() == gpushare::errc::over_limit);
  }
  // The snapshot shows what is there, without crashing on it.
  const auto snap = t.open().snapshot();
  REQUIRE(snap.sessions.size() == 2);
  // A settings change through the table repairs the values.
  gpushare::settings_change c;
  c.priority = gpushare::priority::normal;
  c.share = 1;
  c.memory_limit = gpushare::memory_amount::of_bytes(8 * MiB);
  t.open().configure(b.id(), c);
  auto r = b.reserve(4 * MiB);
  CHECK(r.size() == 4 * MiB);
}

TEST_CASE("scribbled totals are rebuilt from the slots instead of refusing memory") {
  test::unique_table t("hostile-totals", 64 * MiB);
  auto a = t.join("a");
  auto r = a.reserve(16 * MiB);
  {
    auto raw = map_raw(t);
    auto& h = raw.header();
    h.reserved_total = ~0ull; // a 16 EiB "reservation"
    h.committed_total = ~0ull;
    h.live_sessions = 4000;
  }
  // A join (guarantee check) and a reservation both see the nonsense, rebuild the totals from
  // the slots, and go ahead.
  auto b = t.join("b");
  auto more = a.reserve(8 * MiB, 5s);
  const auto snap = t.open().snapshot();
  CHECK(snap.reserved_total == 24 * MiB);
  CHECK(snap.committed_total == 24 * MiB);
  CHECK(snap.sessions.size() == 2);
}

TEST_CASE("a lock holder killed after scribbling makes the next locker rebuild every total") {
  test::unique_table t("hostile-repair", 64 * MiB);
  auto a = t.join("a");
  auto r = a.reserve(16 * MiB);
  const pid_t victim = test::spawn([&] {
    auto raw = map_raw(t);
    auto& h = raw.header();
    gpushare::detail::table_core::guard g(raw); // takes the lock, scribbles, dies holding it
    h.reserved_total = 12345;
    h.committed_total = 0;
    h.live_sessions = 0;
    ::kill(::getpid(), SIGKILL);
    return 0;
  });
  CHECK(test::wait_exit(victim) == 128 + SIGKILL);
  const auto snap = t.open().snapshot(); // the next locker gets EOWNERDEAD and repairs
  CHECK(snap.reserved_total == 16 * MiB);
  CHECK(snap.committed_total == 16 * MiB);
  CHECK(snap.lock_repairs >= 1);
}
