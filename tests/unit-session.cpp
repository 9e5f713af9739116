// SPDX-License-Identifier: Apache-2.0
// Sessions and reservations within one process (several sessions of one process share a table
// exactly as sessions of different processes do: each has its own descriptor and liveness lock).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>

#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;

constexpr std::uint64_t MiB = 1ull << 20;

namespace {
errc code_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const gpushare::error& e) {
    return e.code();
  }
  FAIL("expected a gpushare::error");
  return errc::system_error;
}
} // namespace

TEST_CASE("a session joins, appears in the snapshot with its settings, and leaves") {
  test::unique_table t("join", 1024 * MiB);
  session_options o = t.options("alpha");
  o.priority = priority::high;
  o.share = 3;
  o.compute_limit_ppm = 300'000;
  o.memory_limit = memory_amount::of_bytes(512 * MiB);
  o.memory_guarantee = memory_amount::of_ppm(100'000); // 10% of 1 GiB
  {
    session s(t.key(), o);
    CHECK(s.joined());
    CHECK(s.name() == "alpha");
    auto snap = s.snapshot();
    REQUIRE(snap.sessions.size() == 1);
    const session_info& i = snap.sessions[0];
    CHECK(i.name == "alpha");
    CHECK(i.pid == ::getpid());
    CHECK(i.priority == priority::high);
    CHECK(i.share == 3);
    CHECK(i.compute_limit_ppm == 300'000);
    CHECK(i.memory_limit == 512 * MiB);
    CHECK(i.memory_guarantee == 1024 * MiB / 10);
    CHECK(snap.capacity == 1024 * MiB);
    CHECK(snap.committed_total == 1024 * MiB / 10); // the guarantee is committed
    CHECK(snap.available == 1024 * MiB - 1024 * MiB / 10);
    CHECK(snap.key == t.key());
    CHECK(snap.domain == "gpusharetest");
    CHECK(snap.object_name == t.object_name());
    CHECK(snap.slot_count >= 256);
  }
  auto snap = t.open().snapshot();
  CHECK(snap.sessions.empty());
  CHECK(snap.committed_total == 0);
}

TEST_CASE("reservations grow, shrink and release exactly") {
  test::unique_table t("reserve", 100 * MiB);
  session s = t.join();
  {
    reservation r = s.reserve(10 * MiB, 0ms);
    CHECK(r.size() == 10 * MiB);
    r.grow(5 * MiB, 0ms);
    CHECK(r.try_grow(5 * MiB));
    CHECK(r.size() == 20 * MiB);
    CHECK(s.info().reserved == 20 * MiB);
    r.shrink(8 * MiB);
    CHECK(s.info().reserved == 12 * MiB);
    r.shrink(1000 * MiB); // clamps to what it holds
    CHECK(r.size() == 0);
    CHECK(s.info().reserved == 0);
    r.grow(30 * MiB);
    reservation moved = std::move(r);
    CHECK(r.size() == 0);
    CHECK(moved.size() == 30 * MiB);
    CHECK(s.info().reserved == 30 * MiB);
    CHECK(s.info().peak == 30 * MiB);
  }
  const session_info i = s.info();
  CHECK(i.reserved == 0);
  CHECK(i.peak == 30 * MiB);
  CHECK(i.reservations_granted == 4); // reserve, grow, try_grow, grow
}

TEST_CASE("the sum of reservations never exceeds the capacity") {
  test::unique_table t("capacity", 100 * MiB);
  session a = t.join("a"), b = t.join("b");
  auto ra = a.reserve(60 * MiB, 0ms);
  CHECK_FALSE(b.try_reserve(41 * MiB).has_value());
  CHECK(code_of([&] { (void)b.reserve(41 * MiB, 20ms); }) == errc::timeout);
  auto rb = b.try_reserve(40 * MiB);
  REQUIRE(rb.has_value());
  CHECK_FALSE(a.try_reserve(1).has_value());
  auto snap = a.snapshot();
  CHECK(snap.reserved_total == 100 * MiB);
  CHECK(test::sum_reserved(snap) == snap.reserved_total);
  const session_info bi = b.info();
  CHECK(bi.reserve_waits == 1); // the 20 ms timeout counted as a wait
  CHECK(bi.reserve_wait_ns >= 15'000'000);
  CHECK(bi.reserve_wait_max_ns == bi.reserve_wait_ns);
}

TEST_CASE("over-limit and over-capacity requests fail at once with their own errors") {
  test::unique_table t("limits", 100 * MiB);
  session_options o = t.options("capped");
  o.memory_limit = memory_amount::of_bytes(30 * MiB);
  session s(t.key(), o);
  auto r = s.reserve(20 * MiB, 0ms);
  const auto start = test::now_ns();
  try {
    (void)s.reserve(11 * MiB, 10s); // would wait 10 s if it were treated as "not now"
    FAIL("expected over_limit");
  } catch (const gpushare::error& e) {
    CHECK(e.code() == errc::over_limit);
    const std::string msg = e.what();
    CHECK(msg.find("'capped'") != std::string::npos);
    CHECK(msg.find("30.00 MiB") != std::string::npos);
    CHECK(msg.find("11.00 MiB") != std::string::npos);
  }
  CHECK(test::now_ns() - start < 1'000'000'000ull);
  session other = t.join("other");
  CHECK(code_of([&] { (void)other.reserve(101 * MiB, 10s); }) == errc::exceeds_capacity);
  CHECK(code_of([&] { (void)r.try_grow(11 * MiB); }) == errc::over_limit);
}

namespace {
/// Runs `f` with stderr sent to a temporary file; returns what was written to it.
template <class F> std::string capture_stderr(F f) {
  std::fflush(stderr);
  char path[] = "/tmp/gpushare-test-stderr-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  const int saved = ::dup(2);
  ::dup2(fd, 2);
  try {
    f();
  } catch (...) {
    std::fflush(stderr);
    ::dup2(saved, 2);
    throw;
  }
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::string text;
  char buf[4096];
  ::lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(fd);
  ::unlink(path);
  return text;
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}
} // namespace

TEST_CASE("a leftover table's capacity: the joiner is told once, and an oversized request says "
          "why") {
  test::unique_table t("leftover", 100 * MiB);
  (void)t.open(); // "an earlier run" created it with 100 MiB
  session_options o = t.options("bigger");
  o.capacity = 800 * MiB;
  std::optional<session> first;
  const std::string said = capture_stderr([&] {
    first.emplace(t.key(), o);
    session second(t.key(), o); // same table, same request: not said again
  });
  CHECK(count_of(said, "asked for a table capacity of 800.00 MiB") == 1);
  CHECK(said.find(t.object_name()) != std::string::npos);
  CHECK(said.find("already existed with a capacity of 100.00 MiB") != std::string::npos);
  CHECK(said.find("created by pid " + std::to_string(::getpid())) != std::string::npos);
  CHECK(said.find(" UTC") != std::string::npos);
  CHECK(said.find("gpushare clean") != std::string::npos);
  CHECK(first->snapshot().capacity == 100 * MiB); // the table's capacity applies
  try {
    (void)first->reserve(200 * MiB, 10s);
    FAIL("expected exceeds_capacity");
  } catch (const gpushare::error& e) {
    CHECK(e.code() == errc::exceeds_capacity);
    const std::string msg = e.what();
    CHECK(msg.find("(100.00 MiB)") != std::string::npos);
    CHECK(msg.find("already existed when this session joined") != std::string::npos);
    CHECK(msg.find("created by pid " + std::to_string(::getpid())) != std::string::npos);
    CHECK(msg.find("this session asked for 800.00 MiB") != std::string::npos);
    CHECK(msg.find("gpushare clean") != std::string::npos);
  }
  // A session asking for the table's own capacity, or for none, is told nothing.
  session_options same = t.options("same");
  same.capacity = 100 * MiB;
  session_options none = t.options("none");
  none.capacity.reset();
  CHECK(capture_stderr([&] {
          session a(t.key(), same);
          session b(t.key(), none);
        }).empty());
}

TEST_CASE("a session that created its table says so when a request exceeds its capacity") {
  test::unique_table t("own-capacity", 100 * MiB);
  session s = t.join("creator");
  try {
    (void)s.reserve(200 * MiB, 10s);
    FAIL("expected exceeds_capacity");
  } catch (const gpushare::error& e) {
    CHECK(e.code() == errc::exceeds_capacity);
    const std::string msg = e.what();
    CHECK(msg.find("the capacity this session created the table with") != std::string::npos);
    CHECK(msg.find("already existed") == std::string::npos);
  }
}

TEST_CASE("a guarantee is always available to its session and never to others") {
  test::unique_table t("guarantee", 100 * MiB);
  session_options o = t.options("guaranteed");
  o.memory_guarantee = memory_amount::of_bytes(40 * MiB);
  session g(t.key(), o);
  session greedy = t.join("greedy");
  CHECK_FALSE(greedy.try_reserve(61 * MiB).has_value());
  auto rg = greedy.reserve(60 * MiB, 0ms);
  auto mine = g.reserve(40 * MiB, 0ms); // still there although greedy took everything else
  CHECK_FALSE(g.try_reserve(1).has_value());
  rg.release();
  auto more = g.reserve(10 * MiB, 0ms); // beyond its guarantee, from the free pool
  CHECK(g.snapshot().committed_total == 50 * MiB);

  session_options too_big = t.options("too-big");
  too_big.memory_guarantee = memory_amount::of_bytes(60 * MiB);
  CHECK(code_of([&] { session x(t.key(), too_big); }) == errc::guarantee_unavailable);
  session_options bad = t.options("bad");
  bad.memory_guarantee = memory_amount::of_ppm(500'000);
  bad.memory_limit = memory_amount::of_bytes(10 * MiB);
  CHECK(code_of([&] { session x(t.key(), bad); }) == errc::invalid_argument);
}

TEST_CASE("external usage counts against the limit and the capacity") {
  test::unique_table t("external", 100 * MiB);
  session_options o = t.options("ctx");
  o.memory_limit = memory_amount::of_bytes(50 * MiB);
  session s(t.key(), o);
  s.set_external_usage(30 * MiB);
  CHECK(code_of([&] { (void)s.reserve(21 * MiB, 0ms); }) == errc::over_limit);
  auto r = s.reserve(20 * MiB, 0ms);
  session other = t.join("other");
  CHECK_FALSE(other.try_reserve(51 * MiB).has_value());
  s.set_external_usage(0);
  CHECK(other.try_reserve(51 * MiB).has_value());
  CHECK(s.info().peak == 50 * MiB);
}

TEST_CASE("settings changed through the table are seen by the session") {
  test::unique_table t("configure", 100 * MiB);
  session s = t.join("victim");
  auto tab = t.open();
  const auto ids = tab.find("victim");
  REQUIRE(ids.size() == 1);
  CHECK(ids[0] == s.id());
  settings_change c;
  c.share = 7;
  c.priority = priority::critical;
  c.compute_limit_ppm = 250'000;
  c.memory_limit = memory_amount::of_ppm(200'000);
  tab.configure(ids[0], c);
  const session_info i = s.info();
  CHECK(i.share == 7);
  CHECK(i.priority == priority::critical);
  CHECK(i.compute_limit_ppm == 250'000);
  CHECK(i.memory_limit == 20 * MiB);
  CHECK(code_of([&] { (void)s.reserve(21 * MiB, 0ms); }) == errc::over_limit);

  settings_change bad;
  bad.share = 0;
  CHECK(code_of([&] { tab.configure(ids[0], bad); }) == errc::invalid_argument);
  CHECK(s.info().share == 7); // a rejected change changes nothing

  const session_id stale = s.id();
  s.leave();
  CHECK(code_of([&] { tab.configure(stale, c); }) == errc::invalid_argument);
}

TEST_CASE("sessions are movable, and moved-from or left sessions report session_closed") {
  test::unique_table t("move", 100 * MiB);
  session a = t.join("a");
  auto r = a.reserve(10 * MiB, 0ms);
  session b = std::move(a);
  CHECK_FALSE(a.joined());
  CHECK(code_of([&] { (void)a.reserve(1, 0ms); }) == errc::session_closed);
  CHECK(b.info().reserved == 10 * MiB);
  b.leave();
  CHECK(code_of([&] { (void)b.reserve(1, 0ms); }) == errc::session_closed);
  CHECK(t.open().snapshot().reserved_total == 0);
  r.release(); // a reservation outliving its session is a harmless no-op
  CHECK(t.open().snapshot().reserved_total == 0);
}

TEST_CASE("a waiting reservation is granted as soon as memory is released") {
  test::unique_table t("wake", 100 * MiB);
  session a = t.join("a"), b = t.join("b");
  auto ra = a.reserve(100 * MiB, 0ms);
  std::uint64_t granted_after_ns = 0;
  std::thread waiter([&] {
    const auto start = test::now_ns();
    auto rb = b.reserve(50 * MiB, 5s);
    granted_after_ns = test::now_ns() - start;
  });
  REQUIRE(test::eventually([&] { return b.info().waiting_for_memory == 1; }));
  std::this_thread::sleep_for(50ms);
  const auto released_at = test::now_ns();
  ra.shrink(50 * MiB);
  waiter.join();
  const auto waited_after_release = test::now_ns() - released_at;
  CHECK(granted_after_ns >= 50'000'000ull);
  // Woken by the futex, not by the 100 ms liveness re-check.
  CHECK(waited_after_release < 90'000'000ull);
  CHECK(b.info().waiting_for_memory == 0);
  CHECK(b.info().reserve_waits == 1);
}

TEST_CASE("a forked child's copy of a session is inert and does not end the parent's session") {
  test::unique_table t("fork", 100 * MiB);
  session s = t.join("parent");
  auto r = s.reserve(10 * MiB, 0ms);
  const pid_t child = test::spawn([&] {
    if (s.joined()) return 1;
    try {
      (void)s.reserve(1, 0ms);
      return 2;
    } catch (const gpushare::error& e) {
      if (e.code() != errc::session_closed) return 3;
    }
    s.leave(); // must not touch the parent's slot
    r.release();
    return 0;
  });
  CHECK(test::wait_exit(child) == 0);
  CHECK(s.info().reserved == 10 * MiB);
  auto snap = t.open().snapshot();
  REQUIRE(snap.sessions.size() == 1);
  CHECK(snap.sessions[0].reserved == 10 * MiB);
}

TEST_CASE("a session whose process is gone is reclaimed by the next peer that looks") {
  test::unique_table t("reclaim", 100 * MiB);
  const pid_t child = test::spawn_holding([&](const std::function<void()>& hold) {
    session s = t.join("doomed");
    auto r = s.reserve(70 * MiB, 0ms);
    hold();
  });
  session me = t.join("survivor");
  CHECK_FALSE(me.try_reserve(31 * MiB).has_value());
  ::kill(child, SIGKILL);
  CHECK(test::wait_exit(child) == 128 + SIGKILL);
  auto r = me.try_reserve(100 * MiB); // the dead session's 70 MiB come back on the spot
  REQUIRE(r.has_value());
  auto snap = me.snapshot();
  CHECK(snap.sessions.size() == 1);
  CHECK(snap.sessions_reclaimed == 1);
  CHECK(snap.reserved_total == 100 * MiB);
}

TEST_CASE("a forked child that outlives its parent does not keep the parent's session alive") {
  // The child inherits the parent's mapping of the table. The mapping is made through an open
  // file description that holds no liveness lock, so it must not keep the parent's slot alive.
  test::unique_table t("orphan", 100 * MiB);
  // [0] parent ready, [1] grandchild pid, [2] grandchild past fork() (its atfork handler, which
  // closes the inherited lock descriptor, has run by then)
  test::shared_block<std::atomic<int>> state(3);
  const pid_t parent = test::spawn([&] {
    session s = t.join("parent");
    auto r = s.reserve(60 * MiB, 0ms);
    const pid_t child = ::fork();
    if (child == 0) {
      state[2] = 1;
      ::pause(); // outlives its parent, holding the inherited mapping
      std::_Exit(0);
    }
    state[1] = child;
    state[0] = 1;
    ::pause();
    return 0;
  });
  REQUIRE(test::eventually([&] { return state[0].load() == 1 && state[2].load() == 1; }));
  session me = t.join("survivor");
  ::kill(parent, SIGKILL);
  CHECK(test::wait_exit(parent) == 128 + SIGKILL);
  auto r = me.try_reserve(100 * MiB); // the parent's 60 MiB come back while the child lives
  CHECK(r.has_value());
  CHECK(me.snapshot().sessions.size() == 1);
  ::kill(state[1].load(), SIGKILL); // (reparented to init, which reaps it)
}

TEST_CASE("a snapshot marks the session that holds the device") {
  test::unique_table t("holder");
  auto a = t.join("a");
  auto b = t.join("b");
  {
    gpushare::scoped_kernel guard(a);
    const auto snap = t.open().snapshot();
    REQUIRE(snap.sessions.size() == 2);
    for (const auto& s : snap.sessions) CHECK(s.holds_device == (s.id == a.id()));
    REQUIRE(snap.holder.has_value());
    CHECK(*snap.holder == a.id());
  }
  const auto after = t.open().snapshot(); // nobody waited: the device is free again
  CHECK_FALSE(after.holder.has_value());
  for (const auto& s : after.sessions) CHECK_FALSE(s.holds_device);
}
