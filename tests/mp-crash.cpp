// SPDX-License-Identifier: Apache-2.0
// SIGKILL at the worst moments: while holding reservations, while holding the table lock, in the
// middle of joining, leaving and creating. Survivors must carry on within a second, every byte of
// the dead must come back, and the totals must equal the sums over the live slots.
#include <doctest/doctest.h>

#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;

constexpr std::uint64_t MiB = 1ull << 20;

namespace {
/// The table's totals equal the sums over its live sessions.
void check_totals_consistent(const table_snapshot& s) {
  std::uint64_t reserved = 0, committed = 0;
  for (const auto& i : s.sessions) {
    reserved += i.reserved;
    committed += std::max(i.reserved + i.external, i.memory_guarantee);
  }
  CHECK(s.reserved_total == reserved);
  CHECK(s.committed_total == committed);
}

/// Runs a child that joins as "victim" with a 20 MiB guarantee, reserves 30 MiB, then does
/// `then` with SIGKILL armed at `point`; returns its pid after it has died.
pid_t kill_victim_at(const test::unique_table& t, const char* point,
                     const std::function<void(session&)>& then) {
  const pid_t pid = test::spawn([&] {
    session_options o = t.options("victim");
    o.memory_guarantee = memory_amount::of_bytes(20 * MiB);
    session s(t.key(), o);
    auto r = s.reserve(30 * MiB, 0ms);
    test::die_at(point);
    then(s);
    return 42; // the crash point was not reached
  });
  return pid;
}
} // namespace

TEST_CASE("SIGKILL while holding reservations: every byte comes back within a second") {
  test::unique_table t("crash-hold", 100 * MiB);
  session survivor = t.join("survivor");
  auto mine = survivor.reserve(10 * MiB, 0ms);
  const pid_t victim = test::spawn_holding([&](const std::function<void()>& hold) {
    session s = t.join("victim");
    auto a = s.reserve(40 * MiB, 0ms);
    auto b = s.reserve(50 * MiB, 0ms);
    hold();
  });
  CHECK_FALSE(survivor.try_reserve(1 * MiB).has_value()); // full
  ::kill(victim, SIGKILL);
  const auto killed = test::now_ns();
  CHECK(test::wait_exit(victim) == 128 + SIGKILL);
  auto r = survivor.reserve(90 * MiB, 1s); // all of the victim's 90 MiB
  CHECK(test::now_ns() - killed < 1'000'000'000ull);
  auto snap = survivor.snapshot();
  REQUIRE(snap.sessions.size() == 1);
  CHECK(snap.sessions[0].name == "survivor");
  CHECK(snap.reserved_total == 100 * MiB);
  check_totals_consistent(snap);
}

TEST_CASE("SIGKILL while holding the table lock: the next locker repairs the totals") {
  test::unique_table t("crash-lock", 100 * MiB);
  session survivor = t.join("survivor");
  auto mine = survivor.reserve(10 * MiB, 0ms);
  // Dies inside reserve's critical section, after its slot and the totals changed, lock held.
  const pid_t victim =
      kill_victim_at(t, "reserve.locked", [](session& s) { auto r = s.reserve(25 * MiB, 0ms); });
  CHECK(test::wait_exit(victim) == 128 + SIGKILL);
  const auto start = test::now_ns();
  auto r = survivor.reserve(90 * MiB, 1s); // takes the dead owner's lock, repairs, proceeds
  CHECK(test::now_ns() - start < 1'000'000'000ull);
  auto snap = survivor.snapshot();
  CHECK(snap.lock_repairs == 1);
  CHECK(snap.sessions.size() == 1);
  CHECK(snap.reserved_total == 100 * MiB);
  CHECK(snap.committed_total == 100 * MiB);
  check_totals_consistent(snap);
}

TEST_CASE("SIGKILL in the middle of joining leaves no trace") {
  for (const char* point : {"join.claimed", "join.locked"}) {
    CAPTURE(point);
    test::unique_table t(std::string("crash-join-") + (point + 5), 100 * MiB);
    session survivor = t.join("survivor");
    const pid_t victim = test::spawn([&] {
      test::die_at(point);
      session_options o = t.options("victim");
      o.memory_guarantee = memory_amount::of_bytes(50 * MiB);
      session s(t.key(), o);
      return 42;
    });
    CHECK(test::wait_exit(victim) == 128 + SIGKILL);
    const auto start = test::now_ns();
    auto r = survivor.reserve(100 * MiB, 1s); // the half-joined guarantee is not held
    CHECK(test::now_ns() - start < 1'000'000'000ull);
    auto snap = survivor.snapshot();
    CHECK(snap.sessions.size() == 1);
    CHECK(snap.reserved_total == 100 * MiB);
    check_totals_consistent(snap);
    session after = t.join("after"); // slots are reusable
    CHECK(after.joined());
  }
}

TEST_CASE("SIGKILL while leaving (lock held, slot cleared) is repaired") {
  test::unique_table t("crash-leave", 100 * MiB);
  session survivor = t.join("survivor");
  const pid_t victim = kill_victim_at(t, "leave.cleared", [](session& s) { s.leave(); });
  CHECK(test::wait_exit(victim) == 128 + SIGKILL);
  auto r = survivor.reserve(100 * MiB, 1s);
  auto snap = survivor.snapshot();
  CHECK(snap.sessions.size() == 1);
  CHECK(snap.lock_repairs == 1);
  check_totals_consistent(snap);
}

TEST_CASE("a holder killed while another process waits for memory: the waiter proceeds") {
  test::unique_table t("crash-waiter", 100 * MiB);
  const pid_t victim = test::spawn_holding([&](const std::function<void()>& hold) {
    session s = t.join("victim");
    auto r = s.reserve(80 * MiB, 0ms);
    hold();
  });
  session waiter = t.join("waiter");
  std::thread killer([&] {
    test::eventually([&] { return waiter.info().waiting_for_memory == 1; });
    ::kill(victim, SIGKILL);
  });
  const auto start = test::now_ns();
  auto r = waiter.reserve(60 * MiB, 3s); // the dead holder never releases: liveness re-check
  const auto waited = test::now_ns() - start;
  killer.join();
  CHECK(test::wait_exit(victim) == 128 + SIGKILL);
  CHECK(waited < 1'000'000'000ull);
  CHECK(r.size() == 60 * MiB);
  check_totals_consistent(waiter.snapshot());
}

TEST_CASE("a creator killed mid-initialisation: the table is recreated, nobody hangs") {
  for (const char* point :
       {"create.locked", "create.prefixed", "create.sized", "create.initialising"}) {
    CAPTURE(point);
    test::unique_table t(std::string("crash-create-") + (point + 7), 100 * MiB);
    const pid_t creator = test::spawn([&] {
      test::die_at(point);
      session s = t.join("creator");
      return 42;
    });
    CHECK(test::wait_exit(creator) == 128 + SIGKILL);
    const auto start = test::now_ns();
    session s = t.join("next");
    CHECK(test::now_ns() - start < 1'000'000'000ull);
    auto r = s.reserve(100 * MiB, 0ms); // a fresh, working table
    auto snap = s.snapshot();
    CHECK(snap.capacity == 100 * MiB);
    CHECK(snap.sessions.size() == 1);
  }
}

TEST_CASE("a stopped lock holder gives a clear table_busy error, not a hang") {
  // Not a crash: SIGSTOP inside the critical section. The lock waits are bounded; a stopped
  // holder is reported (after the 10 s lock timeout) rather than waited on forever.
  test::unique_table t("stopped", 100 * MiB);
  session survivor = t.join("survivor");
  test::shared_block<std::atomic<int>> ready;
  const pid_t victim = test::spawn([&] {
    session s = t.join("victim");
    static std::atomic<int>* flag = &ready[0];
    gpushare::detail::crash_point_hook = [](const char* w) {
      if (std::string_view(w) == "reserve.locked") {
        *flag = 1;
        ::raise(SIGSTOP);
      }
    };
    auto r = s.reserve(1 * MiB, 0ms);
    return 0;
  });
  REQUIRE(test::eventually([&] { return ready[0].load() == 1; }));
  const auto start = test::now_ns();
  try {
    (void)survivor.reserve(1 * MiB, 0ms);
    FAIL("expected table_busy");
  } catch (const gpushare::error& e) {
    CHECK(e.code() == errc::table_busy);
    CHECK(std::string(e.what()).find("stopped or hung") != std::string::npos);
  }
  const auto waited = test::now_ns() - start;
  CHECK(waited >= 9'000'000'000ull);
  CHECK(waited < 30'000'000'000ull);
  ::kill(victim, SIGCONT);
  CHECK(test::wait_exit(victim) == 0);
  auto r = survivor.reserve(1 * MiB, 0ms); // all is well once it resumes
  check_totals_consistent(survivor.snapshot());
}

TEST_CASE("SIGKILL inside a guard's exit (lock held, device being handed over): waiters proceed") {
  for (const char* point : {"guard.exit", "guard.waiting"}) {
    CAPTURE(point);
    test::unique_table t(std::string("crash-guard-") + (point + 6), 100 * MiB);
    test::shared_block<std::atomic<int>> holding(1);
    session survivor = t.join("survivor");
    const pid_t victim = test::spawn([&] {
      session s = t.join("victim");
      if (std::string_view(point) == "guard.waiting") {
        // Dies while registering as a waiter (lock held) behind the survivor's guard.
        while (holding[0].load() == 0) ::usleep(100);
        test::die_at(point);
        scoped_kernel k(s);
        return 42;
      }
      scoped_kernel k(s);
      holding[0] = 1;
      while (holding[0].load() != 2) ::usleep(100);
      test::die_at(point);
      return 41; // the guard's destructor runs exit_guard -> dies at the crash point
    });
    if (std::string_view(point) == "guard.waiting") {
      scoped_kernel mine(survivor);
      holding[0] = 1;
      CHECK(test::wait_exit(victim) == 128 + SIGKILL);
    } else {
      REQUIRE(test::eventually([&] { return holding[0].load() == 1; }));
      holding[0] = 2;
      CHECK(test::wait_exit(victim) == 128 + SIGKILL);
    }
    const auto start = test::now_ns();
    {
      scoped_kernel k(survivor);
      CHECK(test::now_ns() - start < 1'000'000'000ull);
    }
    auto snap = survivor.snapshot();
    CHECK(snap.sessions.size() == 1);
    CHECK(snap.lock_repairs == 1);
    CHECK(snap.sessions[0].waiting_for_device == 0);
    check_totals_consistent(snap);
  }
}
