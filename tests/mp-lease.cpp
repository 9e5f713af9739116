// SPDX-License-Identifier: Apache-2.0
// The lease (docs/design.md section 11, "The lease"): an uncontended holder's guards enter and
// exit without the table lock. Its books stay exact, a peer's guard never overlaps a lease guard
// (the Dekker race between a guard entering on the lease and a peer ending it), and a settings
// change ends the lease.
#include <doctest/doctest.h>

#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;

namespace {
constexpr std::uint64_t MiB = 1ull << 20;

session_info info_of(const table_snapshot& snap, session_id id) {
  for (const auto& i : snap.sessions)
    if (i.id == id) return i;
  FAIL("session not in the snapshot");
  return {};
}
} // namespace

TEST_CASE("a lone session's guards run on its lease, and its books stay exact") {
  test::unique_table t("lease-books", 16 * MiB);
  auto a = t.join("a");
  constexpr int n = 1000;
  const std::uint64_t locks_before = detail::table_locks_taken.load();
  for (int k = 0; k < n; ++k) {
    scoped_kernel g(a);
    g.set_device_time(1ms);
  }
  // The first guard takes the lock to enter and to exit (which grants the lease); no other does.
  CHECK(detail::table_locks_taken.load() - locks_before == 2);
  auto snap = t.open().snapshot();
  session_info i = info_of(snap, a.id());
  CHECK(i.guards == n);
  CHECK(i.guards_on_lease >= n - 1); // all but the first, which took the lock and the lease
  CHECK(i.device_ns == n * 1'000'000ull);
  CHECK(i.active_guards == 0);
  CHECK_FALSE(snap.holder.has_value()); // idle on its lease: free to anyone who asks
  {
    scoped_kernel g(a); // a guard still running on the lease when a peer arrives
    CHECK(info_of(t.open().snapshot(), a.id()).active_guards == 1);
    g.set_device_time(1ms);
  }
  // A peer (another process) takes the device: the lease ends, the books are folded.
  const pid_t peer = test::spawn([&] {
    auto b = t.join("b");
    scoped_kernel g(b);
    return 0;
  });
  CHECK(test::wait_exit(peer) == 0);
  i = a.info();
  CHECK(i.guards == n + 1);
  CHECK(i.device_ns == (n + 1) * 1'000'000ull);
  CHECK(i.guards_on_lease >= n);
}

TEST_CASE("a peer's guards never overlap lease guards (guards entering while the lease ends)") {
  test::unique_table t("lease-race", 16 * MiB);
  struct shared {
    std::atomic<int> token, stop;
    std::atomic<std::uint64_t> overlaps, guards_a, guards_b, lease_a;
  };
  test::shared_block<shared> sh;
  auto inside = [&](int me, std::uint64_t spin) {
    int none = 0;
    if (!sh[0].token.compare_exchange_strong(none, me)) sh[0].overlaps.fetch_add(1);
    const auto end = test::now_ns() + spin;
    while (test::now_ns() < end) {
    }
    int mine = me;
    if (!sh[0].token.compare_exchange_strong(mine, 0)) sh[0].overlaps.fetch_add(1);
  };
  // A: guards of 0-20 us back to back, with tiny pauses: on its lease whenever B is away.
  const pid_t a = test::spawn([&] {
    auto s = t.join("a");
    std::mt19937 rng(1);
    while (sh[0].stop.load() == 0) {
      {
        scoped_kernel g(s);
        inside(1, rng() % 20'000);
      }
      sh[0].guards_a.fetch_add(1);
      if (rng() % 4 == 0) std::this_thread::yield();
    }
    sh[0].lease_a = s.info().guards_on_lease;
    return 0;
  });
  // B: now and then a guard, so A's lease is granted and ended over and over.
  const pid_t b = test::spawn([&] {
    auto s = t.join("b");
    std::mt19937 rng(2);
    while (sh[0].stop.load() == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
      {
        scoped_kernel g(s);
        inside(2, rng() % 20'000);
      }
      sh[0].guards_b.fetch_add(1);
    }
    return 0;
  });
  std::this_thread::sleep_for(2s);
  sh[0].stop = 1;
  CHECK(test::wait_exit(a) == 0);
  CHECK(test::wait_exit(b) == 0);
  MESSAGE("A: " << sh[0].guards_a.load() << " guards (" << sh[0].lease_a.load()
                << " on its lease), B: " << sh[0].guards_b.load() << " guards");
  CHECK(sh[0].overlaps.load() == 0);
  CHECK(sh[0].guards_b.load() > 50);
  CHECK(sh[0].lease_a.load() > 0);
  CHECK(sh[0].guards_a.load() > sh[0].lease_a.load()); // and it lost the lease to B, often
}

TEST_CASE("a settings change ends the lease: a compute limit applies to the next guards") {
  test::unique_table t("lease-settings", 16 * MiB);
  auto a = t.join("a");
  for (int k = 0; k < 10; ++k) scoped_kernel g(a);
  const std::uint64_t on_lease = a.info().guards_on_lease;
  CHECK(on_lease >= 9);
  settings_change c;
  c.compute_limit_ppm = 500'000;
  t.open().configure(a.id(), c);
  // Guards of 2 ms (as device time) for 300 ms of wall time: paced to about half of it.
  const auto start = test::now_ns();
  std::uint64_t device = 0;
  while (test::now_ns() - start < 300'000'000) {
    scoped_kernel g(a);
    g.set_device_time(2ms);
    device += 2'000'000;
  }
  const double used = static_cast<double>(device) / static_cast<double>(test::now_ns() - start);
  MESSAGE("device time " << used * 100 << "% of wall time under a 50% limit");
  CHECK(used < 0.70); // without the limit (still on the lease): thousands of percent
  CHECK(a.info().guards_on_lease == on_lease); // no lease under a compute limit
}

// ---------------------------------------------------------------------------------------------
// leave() against a lease operation in flight in another thread (issue 40, A1-A2). A test hook
// (detail::crash_point_hook) parks one thread right after its lease operation saw the session
// joined; another thread then calls leave(). Before the fix leave() returned at once, a new
// session took the freed slot, and the parked operation's lock-free update then landed on it.
// ---------------------------------------------------------------------------------------------
namespace {
/// Parks the armed thread at the crash point `point` until release().
struct parking {
  static inline std::atomic<const char*> point{nullptr};
  static inline std::atomic<int> parked{0}, released{0};
  static inline thread_local bool armed = false;
  explicit parking(const char* where) {
    point = where;
    parked = 0;
    released = 0;
    detail::crash_point_hook = [](const char* at) {
      if (!armed || std::strcmp(at, point.load()) != 0) return;
      armed = false;
      parked = 1;
      while (released.load() == 0) std::this_thread::sleep_for(1ms);
    };
  }
  ~parking() {
    release();
    detail::crash_point_hook = nullptr;
  }
  parking(const parking&) = delete;
  parking& operator=(const parking&) = delete;
  void release() { released = 1; }
};

/// The scenario of both test cases: `guard_thread` parks in its lease operation, then another
/// thread leaves `a`. Returns whether leave() returned while the operation was parked (the bug).
/// When it did, session `b` joins at once (into a's slot, the pid's first free one) and enters
/// a guard on its own lease before the parked operation goes on; otherwise only after.
struct leave_race {
  test::unique_table& t;
  std::optional<session> b;
  std::optional<scoped_kernel> b_guard;
  void b_on_lease() {
    b.emplace(t.join("b"));
    { scoped_kernel warm(*b); } // its exit grants b the lease
    b_guard.emplace(*b);        // on the lease: counted in the slot's lease_guards
  }
  bool run(session& a, parking& p, std::thread& guard_thread) {
    REQUIRE(test::eventually([&] { return parking::parked.load() == 1; }));
    std::atomic<bool> left{false};
    std::thread leaver([&] {
      a.leave();
      left = true;
    });
    const bool left_while_parked = test::eventually([&] { return left.load(); }, 300ms);
    if (left_while_parked) b_on_lease();
    p.release();
    guard_thread.join();
    leaver.join();
    if (!left_while_parked) b_on_lease();
    return left_while_parked;
  }
};
} // namespace

TEST_CASE("a guard's lease exit that comes after leave() never lands on the slot's next owner") {
  test::unique_table t("lease-late-exit", 16 * MiB);
  auto a = t.join("a");
  { scoped_kernel warm(a); } // a holds the lease
  const session_id a_id = a.id();
  parking p("lease.exit.checked");
  std::thread guard_thread([&] {
    scoped_kernel g(a); // on the lease; its exit parks after checking that a is joined
    parking::armed = true;
  });
  leave_race race{t, {}, {}};
  CHECK_FALSE(race.run(a, p, guard_thread)); // leave() waited for the exit in flight
  REQUIRE(race.b->id().slot == a_id.slot);
  // b's own guard runs: the late exit of a's guard took nothing off b's count.
  session_info i = info_of(t.open().snapshot(), race.b->id());
  CHECK(i.active_guards == 1);
  race.b_guard.reset();
  i = info_of(t.open().snapshot(), race.b->id());
  CHECK(i.active_guards == 0);
  CHECK(i.guards == 2); // b's two guards, and nothing of a's
}

TEST_CASE("a guard's lease entry that comes after leave() leaves no phantom guard in the slot") {
  test::unique_table t("lease-late-entry", 16 * MiB);
  auto a = t.join("a");
  { scoped_kernel warm(a); } // a holds the lease
  const session_id a_id = a.id();
  parking p("lease.enter.checked");
  std::thread guard_thread([&] {
    parking::armed = true;
    scoped_kernel g(a); // parks in its lease entry after checking that a is joined
  });
  leave_race race{t, {}, {}};
  CHECK_FALSE(race.run(a, p, guard_thread)); // leave() waited for the entry in flight
  REQUIRE(race.b->id().slot == a_id.slot);
  race.b_guard.reset();
  // No guard of b runs now: a's late entry did not count itself on b's lease.
  const session_info i = info_of(t.open().snapshot(), race.b->id());
  CHECK(i.active_guards == 0);
  CHECK(i.guards == 2);
  // and a peer gets the device at once
  auto c = t.join("c");
  CHECK_NOTHROW([&] { scoped_kernel g(c, 2s); }());
}
