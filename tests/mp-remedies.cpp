// SPDX-License-Identifier: Apache-2.0
// A holder stopped or hung inside a guard (issue 23, item 4): liveness cannot free it (it is
// alive), so without a remedy every peer waits as long as it stays stopped, high priority
// included. The remedies: an operator evicts the session (table::evict, `gpushare evict`), or a
// guard bound (max_guard, per session or as the table's default) revokes its hold. And the one
// count behind the guard-timeout message: a holder stopped inside a guard entered on its lease
// is named as stopped, not as "between its guards".
#include <doctest/doctest.h>

#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;
namespace d = gpushare::detail;

constexpr std::uint64_t MiB = 1ull << 20;

namespace {

const session_info* find(const table_snapshot& s, const std::string& name) {
  for (const auto& i : s.sessions)
    if (i.name == name) return &i;
  return nullptr;
}

/// What a child reports back.
struct report {
  std::atomic<int> step{0};
  std::atomic<int> code{-1};
  std::atomic<int> revoked{-1};
  char message[512] = {};
};

/// A child that joins as `name` (with `o`), reserves 10 MiB, enters a guard and stops itself
/// there (SIGSTOP). Once continued it ends the guard, records whether the guard was revoked,
/// and tries another guard, recording the errc it gets (0: none).
pid_t stopped_in_guard(const test::unique_table& t, session_options o, report& r,
                       bool on_lease = false) {
  const pid_t pid = test::spawn([&, o] {
    session s(t.key(), o);
    auto held = s.reserve(10 * MiB, 0ms);
    if (on_lease) {
      scoped_kernel warm(s);
    } // its next guard enters on its lease
    {
      scoped_kernel k(s);
      r.step = 1;
      ::raise(SIGSTOP); // stopped inside its guard: alive, so liveness never frees the device
      r.revoked = k.revoked() ? 1 : 0;
    }
    const auto e = test::thrown([&] { scoped_kernel again(s, 2s); });
    r.code = e ? static_cast<int>(e->code()) : 0;
    if (e) std::snprintf(r.message, sizeof r.message, "%s", e->what());
    r.step = 2;
    return 0;
  });
  REQUIRE(test::eventually([&] { return r.step.load() == 1; }));
  int status = 0;
  REQUIRE(::waitpid(pid, &status, WUNTRACED) == pid);
  REQUIRE(WIFSTOPPED(status));
  return pid;
}

} // namespace

TEST_CASE("evict: a session stopped inside its guard is ended, a peer's guard proceeds") {
  test::unique_table t("remedy-evict", 100 * MiB);
  test::shared_block<report> r;
  const pid_t a = stopped_in_guard(t, t.options("stopped"), r[0]);
  session b = t.join("b");
  std::atomic<bool> entered{false};
  std::thread waiter([&] {
    scoped_kernel k(b); // blocked behind the stopped holder
    entered = true;
  });
  std::this_thread::sleep_for(300ms);
  CHECK_FALSE(entered.load()); // exclusive: nothing else gets in
  auto table = t.open();
  const table_snapshot before = table.snapshot();
  const session_info* ai = find(before, "stopped");
  REQUIRE(ai != nullptr);
  CHECK(ai->active_guards == 1);
  CHECK(before.reserved_total == 10 * MiB);
  const session_info gone = table.evict(ai->id);
  CHECK(gone.name == "stopped");
  CHECK(gone.holds_device); // as it was when evicted
  CHECK(gone.active_guards == 1);
  CHECK(test::eventually([&] { return entered.load(); }, 2000ms)); // the peer gets the device
  waiter.join();
  const table_snapshot after = table.snapshot();
  CHECK(find(after, "stopped") == nullptr);
  CHECK(after.reserved_total == 0); // its reservation came back
  CHECK(after.evictions == 1);
  REQUIRE(after.last_eviction.has_value());
  CHECK(after.last_eviction->name == "stopped");
  CHECK(after.last_eviction->id == ai->id);
  CHECK(after.last_eviction->by_uid == ::geteuid());
  CHECK(after.last_eviction->unix_ns > 0);
  // Continued, the evicted process learns it at its next call.
  ::kill(a, SIGCONT);
  CHECK(test::wait_exit(a) == 0);
  CHECK(r[0].code.load() == static_cast<int>(errc::session_closed));
  const std::string message = r[0].message;
  CAPTURE(message);
  CHECK(message.find("evicted") != std::string::npos);
  // A session that is not live cannot be evicted (twice, or a stale id).
  const auto e = test::thrown([&] { (void)table.evict(ai->id); });
  REQUIRE(e.has_value());
  CHECK(e->code() == errc::invalid_argument);
}

TEST_CASE("max_guard: a holder stopped inside its guard loses the device at its bound") {
  test::unique_table t("remedy-bound", 100 * MiB);
  test::shared_block<report> r;
  session_options o = t.options("stopped");
  o.max_guard = 200ms;
  // The bound counts from the holder's last guard boundary, which comes after this instant: on a
  // loaded machine the holder's start and b's join take a while, so b's own wait may be shorter.
  const auto start = test::now_ns();
  const pid_t a = stopped_in_guard(t, o, r[0]);
  session b = t.join("b");
  {
    scoped_kernel k(b, 5s); // before: a timeout after 5 s
    const auto since_start = test::now_ns() - start;
    CAPTURE(since_start);
    CHECK(since_start >= 190'000'000ull); // not before the bound (10 ms for the clocks' reads)
    CHECK(since_start < 3'000'000'000ull);
  }
  const table_snapshot snap = b.snapshot();
  const session_info* ai = find(snap, "stopped");
  REQUIRE(ai != nullptr);
  CHECK(ai->revocations == 1);
  CHECK(ai->max_guard_ns == 200'000'000ull);
  CHECK(snap.revocations == 1);
  CHECK(ai->active_guards == 1); // its guard still runs (stopped)
  ::kill(a, SIGCONT);
  CHECK(test::wait_exit(a) == 0);
  CHECK(r[0].revoked.load() == 1); // the guard reports it lost exclusivity
  CHECK(r[0].code.load() == 0);    // and the session goes on: its next guard gets the device
  const table_snapshot later = b.snapshot();
  CHECK(later.revocations == 1);
}

TEST_CASE("max_guard: the table's default applies to sessions without their own bound") {
  test::unique_table t("remedy-default", 100 * MiB);
  session keeper = t.join("keeper");
  auto table = t.open();
  table_defaults defaults;
  defaults.max_guard = 200ms;
  table.configure_defaults(defaults);
  CHECK(table.snapshot().default_max_guard_ns == 200'000'000ull);
  test::shared_block<report> r;
  const pid_t a = stopped_in_guard(t, t.options("stopped"), r[0], /*on_lease=*/true);
  {
    scoped_kernel k(keeper, 5s);
    CHECK(k.waited() < 2s);
  }
  ::kill(a, SIGCONT);
  CHECK(test::wait_exit(a) == 0);
  CHECK(r[0].revoked.load() == 1);
  // Bad bounds are refused, naming the range.
  defaults.max_guard = 10us;
  const auto e = test::thrown([&] { table.configure_defaults(defaults); });
  REQUIRE(e.has_value());
  CHECK(e->code() == errc::invalid_argument);
  CHECK(std::string(e->what()).find("1ms to 1h") != std::string::npos);
}

TEST_CASE("a guard timeout names a holder stopped inside a guard it entered on its lease") {
  // Before: "held by session ... between its guards": the message counted only the guards
  // entered under the lock, the status line counted lease guards too ("stopped or hung?").
  test::unique_table t("remedy-message", 100 * MiB);
  test::shared_block<report> r;
  const pid_t a = stopped_in_guard(t, t.options("sleeper"), r[0], /*on_lease=*/true);
  session b = t.join("b");
  const auto e = test::thrown([&] { scoped_kernel k(b, 300ms); });
  REQUIRE(e.has_value());
  CHECK(e->code() == errc::timeout);
  const std::string what = e->what();
  CAPTURE(what);
  CHECK(what.find("'sleeper'") != std::string::npos);
  CHECK(what.find("inside a guard") != std::string::npos);
  CHECK(what.find("between its guards") == std::string::npos);
  ::kill(a, SIGKILL);
  CHECK(test::wait_exit(a) == 128 + SIGKILL);
}
