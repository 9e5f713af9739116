// SPDX-License-Identifier: Apache-2.0
// The start-up lock across processes (docs/design.md, "The start-up lock"): one holder at a
// time, released by ready(), by leaving, by a SIGKILL (the holder's session is reclaimed) and by
// `evict`; a stopped holder keeps it and waiters time out naming it.
#include <doctest/doctest.h>

#include <cstring>

#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;

namespace {

/// What a child reports back.
struct report {
  std::atomic<int> step{0};
  std::atomic<int> code{-1}; ///< errc of its hold_startup (0: it got the lock)
  std::atomic<std::int64_t> waited_ms{-1};
  char message[768] = {};
};

/// A child that joins as `name`, waits up to `timeout` for the start-up lock and records how it
/// went in `r`; if it got it, it calls ready() and exits.
pid_t waiter(const test::unique_table& t, const std::string& name,
             std::chrono::milliseconds timeout, report& r) {
  return test::spawn([&, name, timeout] {
    session s = t.join(name);
    r.step = 1;
    const auto start = std::chrono::steady_clock::now();
    try {
      startup_hold h = hold_startup(s, timeout);
      r.code = 0;
      h.ready();
    } catch (const error& e) {
      r.code = static_cast<int>(e.code());
      std::strncpy(r.message, e.what(), sizeof r.message - 1);
    }
    r.waited_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
    return 0;
  });
}

/// A child that takes the start-up lock as `name` and holds it (and its session) until killed.
pid_t holder(const test::unique_table& t, const std::string& name) {
  return test::spawn_holding([&t, name](const std::function<void()>& hold) {
    session s = t.join(name);
    startup_hold h = hold_startup(s, 10s);
    hold();
  });
}

void wait_for_waiters(session& s, std::uint32_t n) {
  const auto end = std::chrono::steady_clock::now() + 20s;
  while (s.snapshot().startup_waiters < n && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(5ms);
}

} // namespace

TEST_CASE("a holder killed by SIGKILL: its start-up lock passes to a waiter") {
  test::unique_table t("su-kill");
  const pid_t h = holder(t, "killed-holder");
  session obs = t.join("observer");
  REQUIRE(obs.snapshot().startup.has_value());
  CHECK(obs.snapshot().startup->name == "killed-holder");
  CHECK(obs.snapshot().startup->pid == h);
  test::shared_block<report> r;
  const pid_t w = waiter(t, "waiter", 30s, r[0]);
  wait_for_waiters(obs, 1);
  CHECK(obs.snapshot().startup_waiters == 1);
  test::kill_and_wait(h);
  REQUIRE(test::wait_exit_within(w, 30s) == 0);
  CHECK(r[0].code == 0);
  CHECK(r[0].waited_ms < 20000); // a generous bound: the reclaim runs every 100 ms
  CHECK_FALSE(obs.snapshot().startup.has_value());
  CHECK(obs.snapshot().startup_takes == 2);
}

TEST_CASE("a stopped holder keeps the start-up lock: a waiter times out naming it") {
  test::unique_table t("su-stop");
  const pid_t h = holder(t, "stopped-holder");
  REQUIRE(test::stop_process(h));
  test::shared_block<report> r(2);
  const pid_t w = waiter(t, "impatient", 300ms, r[0]);
  REQUIRE(test::wait_exit_within(w, 30s) == 0);
  CHECK(r[0].code == static_cast<int>(errc::timeout));
  const std::string m = r[0].message;
  CHECK(m.find("'stopped-holder'") != std::string::npos);
  CHECK(m.find("pid " + std::to_string(h)) != std::string::npos);
  CHECK(m.find("gpushare evict") != std::string::npos);
  CHECK(r[0].waited_ms >= 300);
  ::kill(h, SIGCONT);
  // continued, it still holds it (it never called ready()): a waiter gets it once it is killed
  const pid_t w2 = waiter(t, "patient", 30s, r[1]);
  session obs = t.join("observer");
  wait_for_waiters(obs, 1);
  CHECK(obs.snapshot().startup->name == "stopped-holder");
  test::kill_and_wait(h);
  REQUIRE(test::wait_exit_within(w2, 30s) == 0);
  CHECK(r[1].code == 0);
}

TEST_CASE("evicting a stopped holder releases its start-up lock") {
  test::unique_table t("su-evict");
  const pid_t h = holder(t, "stuck-engine");
  REQUIRE(test::stop_process(h));
  test::shared_block<report> r;
  const pid_t w = waiter(t, "next-engine", 30s, r[0]);
  session obs = t.join("observer");
  wait_for_waiters(obs, 1);
  const session_id stuck = obs.snapshot().startup->id;
  table tab = t.open();
  const session_info gone = tab.evict(stuck);
  CHECK(gone.name == "stuck-engine");
  CHECK(gone.holds_startup);
  REQUIRE(test::wait_exit_within(w, 30s) == 0);
  CHECK(r[0].code == 0);
  CHECK(r[0].waited_ms < 20000);
  ::kill(h, SIGCONT);
  test::kill_and_wait(h);
}

TEST_CASE("ready() passes the lock on while the first engine keeps running") {
  test::unique_table t("su-ready");
  session a = t.join("first");
  startup_hold h = hold_startup(a, 5s);
  CHECK(h.held());
  CHECK(a.info().holds_startup);
  CHECK(a.snapshot().sessions[0].holds_startup);
  test::shared_block<report> r;
  const pid_t w = waiter(t, "second", 30s, r[0]);
  wait_for_waiters(a, 1);
  CHECK(r[0].code == -1); // still waiting
  h.ready();
  CHECK_FALSE(h.held());
  REQUIRE(test::wait_exit_within(w, 30s) == 0);
  CHECK(r[0].code == 0);
  CHECK(a.joined()); // the first keeps running
  CHECK_FALSE(a.info().holds_startup);
}

TEST_CASE("a session holds the start-up lock once and leaving releases it") {
  test::unique_table t("su-once");
  session a = t.join("a");
  startup_hold h = hold_startup(a, 1s);
  try {
    (void)hold_startup(a, 1s);
    FAIL("a second hold of the same session must throw");
  } catch (const error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK(std::string(e.what()).find("already holds") != std::string::npos);
  }
  session b = t.join("b");
  CHECK_THROWS_AS((void)hold_startup(b, 50ms), error);
  CHECK_FALSE(try_hold_startup(b, 0ms).has_value()); // only tries
  CHECK_FALSE(try_hold_startup(b, 30ms).has_value());
  CHECK(b.snapshot().startup_waiters == 0); // a waiter that gave up counts no more
  a.leave();
  CHECK_FALSE(h.held());
  std::optional<startup_hold> hb = try_hold_startup(b, 5s);
  REQUIRE(hb.has_value());
  CHECK(hb->held());
  h.ready(); // a stale hold's ready() must not release b's
  CHECK(hb->held());
}

TEST_CASE("N processes racing for the start-up lock: never two holders, all get it") {
  constexpr int n = 6;
  test::unique_table t("su-race");
  struct record {
    std::atomic<int> inside{0};
    std::atomic<int> overlaps{0};
    std::atomic<int> got{0};
    std::atomic<int> go{0};
  };
  test::shared_block<record> rec;
  std::vector<pid_t> kids;
  for (int k = 0; k < n; ++k)
    kids.push_back(test::spawn([&, k] {
      session s = t.join("racer-" + std::to_string(k));
      while (rec[0].go.load() == 0) std::this_thread::sleep_for(1ms);
      for (int round = 0; round < 3; ++round) {
        startup_hold h = hold_startup(s, 60s);
        if (rec[0].inside.fetch_add(1) != 0) rec[0].overlaps.fetch_add(1);
        std::this_thread::sleep_for(2ms);
        rec[0].inside.fetch_sub(1);
        rec[0].got.fetch_add(1);
        if (round == 2) return 0; // the last round releases by its destructor
        h.ready();
      }
      return 0;
    }));
  rec[0].go = 1;
  for (pid_t p : kids) CHECK(test::wait_exit_within(p, 90s) == 0);
  CHECK(rec[0].overlaps == 0);
  CHECK(rec[0].got == 3 * n);
  session obs = t.join("observer");
  CHECK(obs.snapshot().startup_takes == 3 * n);
  CHECK(obs.snapshot().startup_waiters == 0);
}
