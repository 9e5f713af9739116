// SPDX-License-Identifier: Apache-2.0
// Idle guarantees lent across processes (docs/design.md section 15): a process with a watcher
// borrows another session's idle guarantee as reclaimable memory; when the guaranteed session
// reserves, the loan is called back and it gets its memory within its deadline, whether the
// borrower answers or is stopped with SIGSTOP (its loan is then written off, and its own later
// release absorbs what was written off). A process without a watcher is never lent anything.
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;

constexpr std::uint64_t MiB = 1ull << 20;

namespace {

session_info info(const table_snapshot& s, const std::string& name) {
  for (const auto& i : s.sessions)
    if (i.name == name) return i;
  FAIL("no session " << name);
  return {};
}

/// The child's progress, written by it and read by the test.
enum child_state { starting = 0, holding = 1, not_lent = 2, released = 3 };

/// A child borrower: holds 256 MiB of its own, then tries to add 512 MiB of reclaimable cache
/// (lent out of the lender's idle guarantee when it has a watcher, refused otherwise). Its handler
/// gives back what it is asked. When `go[0]` becomes 1 it releases the cache. Runs until killed.
pid_t borrower(const test::unique_table& t, bool watcher,
               test::shared_block<std::atomic<int>>& state,
               test::shared_block<std::atomic<int>>& go) {
  return test::spawn([&, watcher] {
    session_options o = t.options("cache");
    o.priority = priority::low;
    session s(t.key(), o);
    reservation own = s.reserve(256 * MiB, 0ms);
    // The watcher starts before the cache exists (only a session that answers at once is lent
    // anything), so the handler and this thread share `cache` under a mutex.
    std::mutex m;
    std::optional<reservation> cache;
    s.on_reclaim([&cache, &m](std::uint64_t asked) {
      const std::lock_guard<std::mutex> l(m);
      if (!cache) return std::uint64_t{0};
      const std::uint64_t give = std::min(asked, cache->size());
      cache->shrink(give);
      return give;
    });
    if (watcher) s.watch_reclaim();
    std::optional<reservation> lent = s.try_reserve_reclaimable(512 * MiB);
    const bool got = lent.has_value();
    {
      const std::lock_guard<std::mutex> l(m);
      cache = std::move(lent);
    }
    state[0] = got ? holding : not_lent;
    for (const auto end = std::chrono::steady_clock::now() + 60s;
         std::chrono::steady_clock::now() < end; std::this_thread::sleep_for(5ms))
      if (go[0].load() == 1 && state[0].load() != released) {
        const std::lock_guard<std::mutex> l(m);
        if (cache) (void)cache->release();
        state[0] = released;
      }
    return 0;
  });
}

/// The lender: guaranteed 768 MiB of the table's 1 GiB, holding nothing yet.
session lender(const test::unique_table& t, std::chrono::milliseconds deadline) {
  session_options o = t.options("lender");
  o.priority = priority::normal;
  o.memory_guarantee = memory_amount::of_bytes(768 * MiB);
  o.reclaim_deadline = deadline;
  return session(t.key(), o);
}

void stop(pid_t pid) {
  ::kill(pid, SIGCONT);
  ::kill(pid, SIGKILL);
  (void)test::wait_exit(pid);
}

} // namespace

TEST_CASE("loans: a borrower's watcher gives back what the guaranteed session reserves") {
  test::unique_table t("mp-loans-answer", 1024 * MiB);
  session a = lender(t, 2000ms);
  test::shared_block<std::atomic<int>> state(1), go(1);
  const pid_t b = borrower(t, true, state, go);
  REQUIRE(test::eventually([&] { return state[0].load() != starting; }));
  REQUIRE(state[0].load() == holding);
  table_snapshot s = a.snapshot();
  CHECK(info(s, "cache").reserved == 768 * MiB);
  CHECK(info(s, "cache").reclaim.borrowed == 512 * MiB);
  CHECK(info(s, "cache").reclaim.loans == 1);
  CHECK(s.loans.lent == 512 * MiB);
  CHECK(s.loans.idle_guarantees == 768 * MiB);
  CHECK(s.loans.held == 768 * MiB);
  CHECK(s.committed_total == 1024 * MiB); // the loan is not a commitment
  // 600 MiB of its guarantee: 344 MiB more than the card has beside what is held.
  reservation r = a.reserve(600 * MiB, 20s);
  CHECK(r.size() == 600 * MiB);
  CHECK(test::eventually([&] { return info(a.snapshot(), "cache").reclaim.answered == 1; }));
  s = a.snapshot();
  CHECK(info(s, "cache").reserved == (256 + 168) * MiB);
  CHECK(info(s, "cache").reclaim.borrowed == 168 * MiB);
  CHECK(info(s, "cache").reclaim.write_offs == 0);
  CHECK(s.loans.calls == 1);
  CHECK(s.loans.write_offs == 0);
  CHECK(s.loans.held <= 1024 * MiB);
  CHECK(s.reclaim.grants == 1);
  stop(b);
}

TEST_CASE("loans: a borrower stopped with SIGSTOP has its loan written off at the deadline, and "
          "its own release later takes nothing twice") {
  test::unique_table t("mp-loans-stop", 1024 * MiB);
  session a = lender(t, 300ms);
  test::shared_block<std::atomic<int>> state(1), go(1);
  const pid_t b = borrower(t, true, state, go);
  REQUIRE(test::eventually([&] { return state[0].load() != starting; }));
  REQUIRE(state[0].load() == holding);
  REQUIRE(test::stop_process(b));
  const auto start = std::chrono::steady_clock::now();
  reservation r = a.reserve(600 * MiB, 20s);
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK(r.size() == 600 * MiB);
  CHECK(waited >= 300ms); // it waited out the deadline, and no longer than needed to look again
  table_snapshot s = a.snapshot();
  CHECK(info(s, "cache").reserved == (256 + 168) * MiB);
  CHECK(info(s, "cache").reclaim.borrowed == 168 * MiB);
  CHECK(info(s, "cache").reclaim.write_offs == 1);
  CHECK(s.loans.write_offs == 1);
  CHECK(s.loans.written_off == 344 * MiB);
  CHECK(s.reserved_total == (256 + 168 + 600) * MiB);
  // Resumed, the borrower releases its whole cache: 344 MiB of it were gone already.
  REQUIRE(::kill(b, SIGCONT) == 0);
  go[0] = 1;
  REQUIRE(test::eventually([&] { return state[0].load() == released; }));
  s = a.snapshot();
  CHECK(info(s, "cache").reserved == 256 * MiB);
  CHECK(info(s, "cache").reclaim.borrowed == 0);
  CHECK(s.reserved_total == (256 + 600) * MiB);
  CHECK(s.loans.lent == 0);
  CHECK(s.loans.held == (256 + 600) * MiB);
  stop(b);
}

TEST_CASE("loans: a session without a watcher or declining loans is lent nothing, and a loan "
          "stays reclaimable while the table has no room for it") {
  test::unique_table t("mp-loans-refused", 1024 * MiB);
  session a = lender(t, 2000ms);
  test::shared_block<std::atomic<int>> state(1), go(1);
  const pid_t b = borrower(t, false, state, go);
  REQUIRE(test::eventually([&] { return state[0].load() != starting; }));
  CHECK(state[0].load() == not_lent);
  CHECK(a.snapshot().loans.loans == 0);
  stop(b);
  // In this process: a session with a watcher borrows, then cannot make the loan fixed.
  session_options o = t.options("self");
  session c(t.key(), o);
  reservation own = c.reserve(256 * MiB, 0ms);
  c.on_reclaim([](std::uint64_t) { return std::uint64_t{0}; });
  c.watch_reclaim();
  c.accept_loans(false); // declined (as `gpushare run` does): nothing lent
  CHECK_FALSE(c.try_reserve_reclaimable(100 * MiB).has_value());
  c.accept_loans(true);
  std::optional<reservation> cache = c.try_reserve_reclaimable(100 * MiB);
  REQUIRE(cache.has_value());
  CHECK(info(c.snapshot(), "self").reclaim.borrowed == 100 * MiB);
  const auto e = test::thrown([&] { cache->set_reclaimable(false); });
  REQUIRE(e.has_value());
  CHECK(e->code() == errc::guarantee_unavailable);
  CHECK(std::string(e->what()).find("on loan") != std::string::npos);
  CHECK(cache->reclaimable());
  (void)cache->release();
  c.leave();
}
