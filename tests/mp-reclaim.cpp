// SPDX-License-Identifier: Apache-2.0
// Cooperative reclaim across processes (docs/design.md section 15): a waiting reserve of a higher
// class asks processes of lower classes holding reclaimable memory to give some back. Their
// handlers answer on a watcher thread or at yield() and guard exits; a process without a handler,
// stopped with SIGSTOP, killed with SIGKILL while asked, or of the waiter's own class is never
// made to give anything: the waiter waits, skips it at the deadline, or gets the dead's memory.
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;

constexpr std::uint64_t MiB = 1ull << 20;

namespace {

const session_info* find(const table_snapshot& s, const std::string& name) {
  for (const auto& i : s.sessions)
    if (i.name == name) return &i;
  return nullptr;
}

session_options with(const test::unique_table& t, const std::string& name, int priority,
                     std::chrono::milliseconds deadline = 2000ms) {
  session_options o = t.options(name);
  o.priority = priority;
  o.reclaim_deadline = deadline;
  return o;
}

/// How a holder process behaves when asked.
enum class holder_mode { watcher, none, yields };

/// A child process holding `bytes` of reclaimable memory in session `name` of class `priority`:
/// with a handler on a watcher thread that gives back what is asked (watcher), with no handler
/// (none), or with the handler run by its own loop of guards and yield() calls (yields). Sets
/// ready[slot] once it holds the memory; runs until killed.
pid_t holder(const test::unique_table& t, const std::string& name, int priority,
             std::uint64_t bytes, holder_mode mode, test::shared_block<std::atomic<int>>& ready,
             int index) {
  return test::spawn([&, name, priority, bytes, mode, index] {
    session s(t.key(), with(t, name, priority));
    reservation cache = s.reserve_reclaimable(bytes, 0ms);
    if (mode != holder_mode::none)
      s.on_reclaim([&cache](std::uint64_t asked) {
        const std::uint64_t give = std::min(asked, cache.size());
        cache.shrink(give);
        return give;
      });
    if (mode == holder_mode::watcher) s.watch_reclaim();
    ready[index] = 1;
    for (const auto end = std::chrono::steady_clock::now() + 60s;
         std::chrono::steady_clock::now() < end;) {
      if (mode == holder_mode::yields) {
        { scoped_kernel g(s); }
        s.yield();
      }
      std::this_thread::sleep_for(5ms);
    }
    return 0;
  });
}

void stop(pid_t pid) {
  ::kill(pid, SIGKILL);
  (void)test::wait_exit(pid);
}

} // namespace

TEST_CASE("reclaim: a low-class holder's watcher gives back what a high-class reserve lacks") {
  test::unique_table t("mp-reclaim-watch", 1024 * MiB);
  test::shared_block<std::atomic<int>> ready(1);
  const pid_t a = holder(t, "cache", priority::low, 800 * MiB, holder_mode::watcher, ready, 0);
  REQUIRE(test::eventually([&] { return ready[0].load() == 1; }));
  session b(t.key(), with(t, "urgent", priority::high));
  // 600 MiB: 376 MiB more than the table has free; the cache is asked for exactly that.
  const auto start = std::chrono::steady_clock::now();
  reservation r = b.reserve(600 * MiB, 20s);
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK(r.size() == 600 * MiB);
  // The answer is recorded right after the handler's release, which may wake the reserve first.
  CHECK(test::eventually([&] { return find(b.snapshot(), "cache")->reclaim.answered == 1; }));
  const table_snapshot snap = b.snapshot();
  const session_info* cache = find(snap, "cache");
  REQUIRE(cache != nullptr);
  CHECK(cache->reserved == 424 * MiB);
  CHECK(cache->reclaim.reclaimable == 424 * MiB);
  CHECK(cache->reclaim.requests == 1);
  CHECK(cache->reclaim.answered == 1);
  CHECK(cache->reclaim.given == 376 * MiB);
  CHECK(cache->reclaim.asked == 0);
  CHECK(snap.reclaim.requests == 1);
  CHECK(snap.reclaim.answered == 1);
  CHECK(snap.reclaim.skipped == 0);
  CHECK(snap.reclaim.grants == 1);
  CHECK(snap.reclaim.grant_max_ns > 0);
  CHECK(snap.reclaim.grant_max_ns <= static_cast<std::uint64_t>(waited.count()));
  CHECK(find(snap, "urgent")->reclaim.wanted == 0);
  stop(a);
}

TEST_CASE("reclaim: without a handler the reserve waits, the status shows who is asked, and the "
          "request is skipped at its deadline") {
  test::unique_table t("mp-reclaim-none", 1024 * MiB);
  test::shared_block<std::atomic<int>> ready(1);
  const pid_t a = holder(t, "deaf", priority::low, 800 * MiB, holder_mode::none, ready, 0);
  REQUIRE(test::eventually([&] { return ready[0].load() == 1; }));
  session b(t.key(), with(t, "urgent", priority::high, 300ms));
  std::thread waiter([&] {
    const auto e = test::thrown([&] { (void)b.reserve(600 * MiB, 1500ms); });
    CHECK((e && e->code() == errc::timeout));
  });
  session observer(t.key(), with(t, "observer", priority::high));
  CHECK(test::eventually([&] {
    const table_snapshot s = observer.snapshot();
    const session_info* deaf = find(s, "deaf");
    const session_info* urgent = find(s, "urgent");
    return deaf && urgent && deaf->reclaim.asked == 376 * MiB &&
           deaf->reclaim.asked_by_slot == urgent->id.slot && urgent->reclaim.wanted == 376 * MiB;
  }));
  waiter.join();
  const table_snapshot s = observer.snapshot();
  const session_info* deaf = find(s, "deaf");
  REQUIRE(deaf != nullptr);
  CHECK(deaf->reserved == 800 * MiB); // skipping takes nothing away
  CHECK(deaf->reclaim.skipped >= 1);
  CHECK(deaf->reclaim.answered == 0);
  CHECK(deaf->reclaim.asked == 0); // nobody waits: no request stands
  CHECK(s.reclaim.skipped >= 1);
  CHECK(s.reclaim.grants == 0);
  stop(a);
}

TEST_CASE("reclaim: a holder stopped with SIGSTOP is skipped and the next holder gives instead") {
  test::unique_table t("mp-reclaim-stop", 1024 * MiB);
  test::shared_block<std::atomic<int>> ready(2);
  // Both of the low class; "big" is the most above its guarantee, so it is asked first.
  const pid_t big = holder(t, "big", priority::low, 500 * MiB, holder_mode::watcher, ready, 0);
  const pid_t small = holder(t, "small", priority::low, 400 * MiB, holder_mode::watcher, ready, 1);
  REQUIRE(test::eventually([&] { return ready[0].load() == 1 && ready[1].load() == 1; }));
  REQUIRE(test::stop_process(big));
  session b(t.key(), with(t, "urgent", priority::high, 250ms));
  reservation r = b.reserve(400 * MiB, 20s); // 276 MiB lacking
  CHECK(test::eventually([&] { return find(b.snapshot(), "small")->reclaim.answered == 1; }));
  const table_snapshot s = b.snapshot();
  CHECK(find(s, "big")->reserved == 500 * MiB);
  CHECK(find(s, "big")->reclaim.skipped == 1);
  CHECK(find(s, "small")->reclaim.answered == 1);
  CHECK(find(s, "small")->reserved == 124 * MiB);
  CHECK(s.reclaim.skipped == 1);
  CHECK(s.reclaim.grants == 1);
  CHECK(s.reclaim.grant_max_ns >= 250'000'000); // it waited out big's deadline first
  REQUIRE(::kill(big, SIGCONT) == 0);
  stop(big);
  stop(small);
}

TEST_CASE("reclaim: a holder killed while asked gives its memory back by dying") {
  test::unique_table t("mp-reclaim-kill", 1024 * MiB);
  test::shared_block<std::atomic<int>> ready(1);
  const pid_t a = holder(t, "doomed", priority::low, 800 * MiB, holder_mode::none, ready, 0);
  REQUIRE(test::eventually([&] { return ready[0].load() == 1; }));
  session b(t.key(), with(t, "urgent", priority::high));
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    reservation r = b.reserve(600 * MiB, 20s);
    got = r.size() == 600 * MiB;
  });
  session observer(t.key(), with(t, "observer", priority::high));
  REQUIRE(test::eventually([&] {
    const table_snapshot now = observer.snapshot(); // find() points into it
    const session_info* d = find(now, "doomed");
    return d && d->reclaim.asked > 0;
  }));
  stop(a);
  waiter.join();
  CHECK(got.load());
  const table_snapshot s = observer.snapshot();
  CHECK(find(s, "doomed") == nullptr);
  CHECK(s.reclaim.grants == 1);
}

TEST_CASE("reclaim: a handler answers at yield() and guard exits without a watcher") {
  test::unique_table t("mp-reclaim-yield", 1024 * MiB);
  test::shared_block<std::atomic<int>> ready(1);
  const pid_t a = holder(t, "trainer", priority::low, 800 * MiB, holder_mode::yields, ready, 0);
  REQUIRE(test::eventually([&] { return ready[0].load() == 1; }));
  session b(t.key(), with(t, "urgent", priority::high));
  reservation r = b.reserve(600 * MiB, 20s);
  CHECK(test::eventually([&] { return find(b.snapshot(), "trainer")->reclaim.answered == 1; }));
  const table_snapshot s = b.snapshot();
  CHECK(find(s, "trainer")->reserved == 424 * MiB);
  stop(a);
}

TEST_CASE("reclaim: nobody of the waiter's own class is asked, and nothing when nothing waits") {
  test::unique_table t("mp-reclaim-equal", 1024 * MiB);
  test::shared_block<std::atomic<int>> ready(1);
  const pid_t a = holder(t, "peer", priority::normal, 800 * MiB, holder_mode::watcher, ready, 0);
  REQUIRE(test::eventually([&] { return ready[0].load() == 1; }));
  session b(t.key(), with(t, "same-class", priority::normal));
  CHECK_FALSE(b.try_reserve(600 * MiB).has_value()); // a try never asks
  const auto e = test::thrown([&] { (void)b.reserve(600 * MiB, 300ms); });
  CHECK((e && e->code() == errc::timeout));
  const table_snapshot s = b.snapshot();
  CHECK(s.reclaim.requests == 0);
  CHECK(find(s, "peer")->reserved == 800 * MiB);
  stop(a);
}

TEST_CASE("reclaim: chaos - holders answer, ignore, stop or die at random; every high reserve is "
          "served or times out, and the table stays exact") {
  for (std::uint32_t seed = 1; seed <= 3; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    test::unique_table t("mp-reclaim-chaos", 1024 * MiB);
    constexpr int n = 4;
    test::shared_block<std::atomic<int>> ready(n);
    std::vector<pid_t> pids;
    for (int i = 0; i < n; ++i) {
      const auto mode = static_cast<holder_mode>(rng() % 3);
      pids.push_back(holder(t, std::string("h").append(std::to_string(i)),
                            static_cast<int>(rng() % 3), 200 * MiB, mode, ready, i));
    }
    REQUIRE(test::eventually([&] {
      for (int i = 0; i < n; ++i)
        if (ready[i].load() != 1) return false;
      return true;
    }));
    session b(t.key(), with(t, "urgent", priority::high, 200ms));
    std::thread chaos([&] {
      for (int i = 0; i < n; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 150));
        const int what = static_cast<int>(rng() % 3);
        if (what == 0) ::kill(pids[i], SIGKILL);
        if (what == 1) ::kill(pids[i], SIGSTOP);
      }
    });
    const auto e = test::thrown([&] { (void)b.reserve(700 * MiB, 3s); });
    chaos.join();
    CHECK((!e || e->code() == errc::timeout));
    for (const pid_t p : pids) {
      ::kill(p, SIGCONT);
      stop(p);
    }
    // Every holder is gone: the table has everything back and no request stands.
    const table_snapshot s = b.snapshot();
    CHECK(s.reserved_total == 0);
    CHECK(s.committed_total == 0);
    for (const auto& i : s.sessions) CHECK(i.reclaim.asked == 0);
  }
}

TEST_CASE("reclaim: a forked child's copy of a session with a watcher is inert, and the parent's "
          "watcher still answers") {
  test::unique_table t("mp-reclaim-fork", 1024 * MiB);
  std::optional<session> s;
  s.emplace(t.key(), with(t, "parent", priority::low));
  reservation cache = s->reserve_reclaimable(800 * MiB, 0ms);
  s->on_reclaim([&cache](std::uint64_t asked) {
    const std::uint64_t give = std::min(asked, cache.size());
    cache.shrink(give);
    return give;
  });
  s->watch_reclaim();
  const pid_t child = test::spawn([&] {
    // The watcher thread does not exist here: the copy answers nothing and ends without joining
    // it (a std::thread destroyed while joinable would end the child with std::terminate).
    if (s->reclaim_requested() != 0 || s->answer_reclaim() != 0) return 1;
    (void)cache.release(); // the parent's bytes: nothing happens
    s.reset();
    return 0;
  });
  CHECK(test::wait_exit(child) == 0);
  session b(t.key(), with(t, "urgent", priority::high));
  reservation r = b.reserve(600 * MiB, 20s);
  CHECK(r.size() == 600 * MiB);
  CHECK(test::eventually([&] { return find(b.snapshot(), "parent")->reclaim.answered == 1; }));
  CHECK(find(b.snapshot(), "parent")->reserved == 424 * MiB);
  // The handler uses `cache`: the session leaves (which stops its watcher) before `cache` ends.
  s.reset();
}
