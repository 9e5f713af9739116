// SPDX-License-Identifier: Apache-2.0
// Issue 13, accounting and clocks: an overcommitted table must not block joins or lowered
// guarantees (item 8), fractions over 100% are refused everywhere (item 10), a fork during a join
// or a creation leaves no lock to the child (item 11), a creation that becomes ready while judged
// abandoned is never removed (item 12), and processes whose monotonic clocks differ (time
// namespaces) never share a table (item 6).
#include <doctest/doctest.h>

#include <sched.h>

#include <fstream>

#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;

constexpr std::uint64_t MiB = 1ull << 20;

namespace {
settings_change guarantee(memory_amount m) {
  settings_change c;
  c.memory_guarantee = m;
  return c;
}
settings_change limit(memory_amount m) {
  settings_change c;
  c.memory_limit = m;
  return c;
}
} // namespace

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

// ---------------------------------------------------------------------------------------------
// Item 8: external usage overcommits the table
// ---------------------------------------------------------------------------------------------

TEST_CASE("an overcommitted table still accepts joins with guarantee 0 and lowered guarantees") {
  test::unique_table t("acct-overcommit", 10 * MiB);
  session_options o = t.options("big");
  o.memory_guarantee = memory_amount::of_bytes(4 * MiB);
  session big(t.key(), o);
  big.set_external_usage(12 * MiB); // reported, not reserved: the table is now overcommitted
  CHECK(big.snapshot().committed_total == 12 * MiB);

  // Another process joins with no guarantee: it adds no commitment, so it must be accepted.
  const pid_t joiner = test::spawn([&] {
    session s = t.join("small");
    return s.info().memory_guarantee == 0 ? 0 : 1;
  });
  CHECK(test::wait_exit(joiner) == 0);
  session here = t.join("here"); // and in this process
  CHECK(here.info().memory_guarantee == 0);

  // Lowering (or dropping) a guarantee never increases commitment: accepted, by the session and
  // by a configurer.
  big.configure(guarantee(memory_amount::of_bytes(2 * MiB)));
  CHECK(big.info().memory_guarantee == 2 * MiB);
  table tab = t.open();
  tab.configure(big.id(), guarantee(memory_amount::of_bytes(0)));
  CHECK(big.info().memory_guarantee == 0);
  // Raising a guarantee within what it already uses adds nothing either.
  big.configure(guarantee(memory_amount::of_bytes(8 * MiB)));
  CHECK(big.info().memory_guarantee == 8 * MiB);
  // What does increase commitment is still refused while the table is overcommitted.
  const auto e = test::thrown([&] {
    session_options g = t.options("greedy");
    g.memory_guarantee = memory_amount::of_bytes(1 * MiB);
    session s(t.key(), g);
  });
  REQUIRE(e);
  CHECK(e->code() == errc::guarantee_unavailable);
}

// ---------------------------------------------------------------------------------------------
// Item 10: fractions over 100% in settings changes
// ---------------------------------------------------------------------------------------------

TEST_CASE("a settings change with a fraction over 100% is refused everywhere, never truncated") {
  test::unique_table t("acct-fraction", 100 * MiB);
  session s = t.join("s");
  table tab = t.open();
  const std::uint64_t before = s.info().memory_limit;
  CHECK(before == 100 * MiB);
  for (const std::uint64_t ppm :
       {std::uint64_t{1'000'001}, std::uint64_t{2'000'000}, UINT64_MAX / 2}) {
    CAPTURE(ppm);
    const auto by_table =
        test::thrown([&] { tab.configure(s.id(), limit(memory_amount::of_ppm(ppm))); });
    REQUIRE(by_table);
    CHECK(by_table->code() == errc::invalid_argument);
    CHECK(std::string(by_table->what()).find("100%") != std::string::npos);
    const auto by_session =
        test::thrown([&] { s.configure(guarantee(memory_amount::of_ppm(ppm))); });
    REQUIRE(by_session);
    CHECK(by_session->code() == errc::invalid_argument);
    CHECK(s.info().memory_limit == before); // unchanged: not 0 bytes
    CHECK(s.info().memory_guarantee == 0);
  }
  // 100% exactly is fine, and resolves to the capacity.
  tab.configure(s.id(), limit(memory_amount::of_ppm(1'000'000)));
  CHECK(s.info().memory_limit == 100 * MiB);
  // The same value in session_options is refused too (as it was already).
  session_options o = t.options("opts");
  o.memory_limit = memory_amount::of_ppm(2'000'000);
  const auto e = test::thrown([&] { session x(t.key(), o); });
  REQUIRE(e);
  CHECK(e->code() == errc::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// Item 11: fork by another thread while a session joins (or a table is created)
// ---------------------------------------------------------------------------------------------

namespace {
test::shared_block<std::atomic<int>>* fork_flags = nullptr; // [0]: the join reached the point

/// In a child: joins `t` on a second thread that pauses 300 ms at crash point `point`; when it
/// gets there, the main thread forks a grandchild that sleeps; once fork() returns, this process
/// SIGKILLs itself, at once or after `linger` (time for a join that was not waited for to finish).
/// Returns the grandchild's pid through flags[1].
void fork_while_joining(const test::unique_table& t, const char* point,
                        std::chrono::milliseconds linger) {
  static const char* target = nullptr;
  target = point;
  detail::crash_point_hook = [](const char* w) {
    if (std::string_view(w) != target) return;
    (*fork_flags)[0] = 1;
    std::this_thread::sleep_for(300ms); // the window a fork by another thread falls into
  };
  std::thread joiner([&] {
    try {
      session s = t.join("parent");
      ::pause();
    } catch (...) {
    }
  });
  while ((*fork_flags)[0].load() == 0) std::this_thread::sleep_for(1ms);
  const pid_t grandchild = ::fork();
  if (grandchild == 0) {
    std::this_thread::sleep_for(20s);
    std::_Exit(0);
  }
  (*fork_flags)[1] = grandchild;
  // Die without leaving (the join has finished if fork() waited for it).
  std::this_thread::sleep_for(linger);
  ::kill(::getpid(), SIGKILL);
  joiner.join();
}
} // namespace

TEST_CASE("a fork by another thread while a session joins does not keep the dead parent's slot") {
  test::unique_table t("acct-fork-join", 100 * MiB);
  table tab = [&] {
    session first = t.join("creator"); // the table exists; the child only joins
    return t.open();
  }();
  test::shared_block<std::atomic<int>> flags(2);
  fork_flags = &flags;
  const pid_t parent = test::spawn([&] {
    // Before the fix, the join then activates and the grandchild inherited its liveness lock.
    fork_while_joining(t, "join.claimed", 400ms);
    return 1;
  });
  CHECK(test::wait_exit(parent) == 128 + SIGKILL);
  REQUIRE(flags[1].load() > 0);
  // The parent is dead; its grandchild lives on but must hold nothing of its session.
  const table_snapshot s = tab.snapshot(); // reclaims the dead first
  CHECK(s.sessions.empty());
  CHECK(s.committed_total == 0);
  ::kill(flags[1].load(), SIGKILL);
  test::wait_exit(flags[1].load());
}

TEST_CASE("a fork by another thread while a table is created leaves no init lock to the child") {
  test::unique_table t("acct-fork-create", 100 * MiB);
  test::shared_block<std::atomic<int>> flags(2);
  fork_flags = &flags;
  const pid_t parent = test::spawn([&] {
    // Before the fix, the creator dies inside its creation and the grandchild holds its init lock.
    fork_while_joining(t, "create.locked", 0ms);
    return 1;
  });
  CHECK(test::wait_exit(parent) == 128 + SIGKILL);
  REQUIRE(flags[1].load() > 0);
  // The table is ready (fork waited for the creation), or at worst an abandoned creation that
  // a joiner removes after the grace period: never one whose init lock the grandchild holds.
  session_options o = t.options("after");
  o.open_timeout = 2000ms;
  const auto e = test::thrown([&] { session s(t.key(), o); });
  CHECK_FALSE(e.has_value());
  if (e) MESSAGE(e->what());
  ::kill(flags[1].load(), SIGKILL);
  test::wait_exit(flags[1].load());
}

// ---------------------------------------------------------------------------------------------
// Item 12: a creation judged abandoned becomes ready before the judge takes the init lock
// ---------------------------------------------------------------------------------------------

TEST_CASE("a creation that becomes ready while judged abandoned is never removed: one table") {
  test::unique_table t("acct-steal-ready", 100 * MiB);
  // [0]: the creator has created the name and waits; [1]: the judge has judged it abandoned and
  // waits; [2]: go, creator; [3]: the creator's session is active (2: it counted the sessions);
  // [4]: go, judge (2: it joined and counted).
  test::shared_block<std::atomic<int>> f(5);
  static test::shared_block<std::atomic<int>>* flags = nullptr;
  flags = &f;
  const pid_t creator = test::spawn([&] {
    detail::crash_point_hook = [](const char* w) {
      if (std::string_view(w) != "create.opened") return;
      (*flags)[0] = 1; // a creator stalled between shm_open(O_CREAT) and taking its init lock
      while ((*flags)[2].load() == 0) std::this_thread::sleep_for(1ms);
    };
    session s = t.join("creator");
    detail::crash_point_hook = nullptr;
    (*flags)[3] = 1;
    while ((*flags)[4].load() != 2) std::this_thread::sleep_for(1ms); // until the judge joined
    const int n = static_cast<int>(s.snapshot().sessions.size());
    (*flags)[3] = 2;
    return n;
  });
  REQUIRE(test::eventually([&] { return f[0].load() == 1; }));
  const pid_t judge = test::spawn([&] {
    detail::crash_point_hook = [](const char* w) {
      if (std::string_view(w) != "attach.abandoned") return;
      (*flags)[1] = 1; // the empty object's init lock was free for the grace period
      while ((*flags)[4].load() == 0) std::this_thread::sleep_for(1ms);
    };
    session s = t.join("judge");
    detail::crash_point_hook = nullptr;
    const int n = static_cast<int>(s.snapshot().sessions.size());
    (*flags)[4] = 2;
    while ((*flags)[3].load() != 2) std::this_thread::sleep_for(1ms); // the creator looked too
    return n;
  });
  REQUIRE(test::eventually([&] { return f[1].load() == 1; }));
  f[2] = 1; // the creator takes its init lock and finishes: the table is ready
  REQUIRE(test::eventually([&] { return f[3].load() == 1; }));
  f[4] = 1; // now the judge takes the init lock of what it judged abandoned
  // Both joined one and the same table: each sees two sessions.
  CHECK(test::wait_exit(judge) == 2);
  CHECK(test::wait_exit(creator) == 2);
}

// ---------------------------------------------------------------------------------------------
// Item 6: time namespaces
// ---------------------------------------------------------------------------------------------

namespace {
/// In a child: enters a new time namespace (for its children) with CLOCK_MONOTONIC offset by
/// `offset_s` and runs `fn` in a grandchild there. Returns fn's exit code, or 77 when the
/// namespace cannot be made (not root, no kernel support).
int in_time_namespace(long long offset_s, const std::function<int()>& fn) {
  if (::unshare(CLONE_NEWTIME) != 0) return 77;
  {
    std::ofstream o("/proc/self/timens_offsets");
    o << "monotonic " << offset_s << " 0\n";
    o.flush();
    if (!o) return 77;
  }
  const pid_t g = test::spawn(fn);
  return test::wait_exit(g);
}
} // namespace

TEST_CASE("a process whose monotonic clock is offset (time namespace) is refused at once") {
  if (::geteuid() != 0) {
    std::printf("GPUSHARE_SKIP: needs root to make a time namespace (unshare -T)\n");
    return;
  }
  test::unique_table t("acct-timens", 100 * MiB);
  session host = t.join("host");
  auto r = host.reserve(10 * MiB, 0ms);
  for (const long long offset : {1000ll, -1000ll}) {
    CAPTURE(offset);
    const pid_t child = test::spawn([&] {
      return in_time_namespace(offset, [&] {
        const std::uint64_t start = test::now_ns();
        const auto joined = test::thrown([&] {
          session s = t.join("offset");
          // Before the fix: joined; a guard or a reservation here compares the host's
          // timestamps with this clock, and a waiter can block for ever.
        });
        const auto opened = test::thrown([&] { table x = t.open(); });
        if (!joined || joined->code() != errc::table_incompatible) return 1;
        if (std::string(joined->what()).find("time namespace") == std::string::npos) return 2;
        if (!opened || opened->code() != errc::table_incompatible) return 3;
        if (test::now_ns() - start > 4'000'000'000ull) return 4; // refused, not timed out
        // A table of its own in the namespace works, for everyone in that namespace.
        test::unique_table own("acct-timens-own", 10 * MiB);
        session a = own.join("a");
        const pid_t peer = test::spawn([&] {
          session b = own.join("b");
          return b.snapshot().sessions.size() == 2 ? 0 : 1;
        });
        return test::wait_exit(peer) == 0 ? 0 : 5;
      });
    });
    const int rc = test::wait_exit(child);
    if (rc == 77) {
      std::printf("GPUSHARE_SKIP: this kernel cannot make a time namespace with offset %lld s\n",
                  offset);
      continue;
    }
    CHECK(rc == 0);
  }
  // The host's table is untouched by the refused processes.
  const table_snapshot s = host.snapshot();
  CHECK(s.sessions.size() == 1);
  CHECK(s.reserved_total == 10 * MiB);
}
