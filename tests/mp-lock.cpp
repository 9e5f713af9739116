// SPDX-License-Identifier: Apache-2.0
// The table lock (detail/table_lock.hpp) across processes: mutual exclusion with lockers killed
// and stopped at random, in the same or in different PID namespaces (where every locker can be
// pid 1, so thread ids collide); a dead owner taken over, a stopped one never; waits bounded by
// the clock under signal storms.
#include <doctest/doctest.h>

#include <sched.h>
#include <sys/time.h>

#include <random>

#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;
namespace gd = gpushare::detail;

namespace {

constexpr std::uint64_t MiB = 1ull << 20;

gd::table_core map_raw(const test::unique_table& t) {
  return gd::table_core(gd::mapped_table::open_existing(t.object_name(), 1'000'000'000));
}

/// Takes the table lock of `core` with a timeout; nullopt when it timed out (table_busy).
std::optional<gd::lock_outcome> lock_for(gd::table_core& core, std::uint64_t timeout_ns) {
  try {
    return gd::lock_table(&core.header().lock, core.locker_id(), core.fd(), timeout_ns,
                          core.name());
  } catch (const gpushare::error& e) {
    if (e.code() == errc::table_busy) return std::nullopt;
    throw;
  }
}

void unlock(gd::table_core& core) { gd::unlock_table(&core.header().lock, core.locker_id()); }

/// Whether this process may create PID namespaces (root, and not forbidden by a sandbox).
bool can_unshare_pid() {
  static const bool ok = [] {
    const pid_t pid = ::fork();
    if (pid == 0) std::_Exit(::unshare(CLONE_NEWPID) == 0 ? 0 : 1);
    return test::wait_exit(pid) == 0;
  }();
  return ok;
}

/// Runs `fn` in a new process that is pid 1 of a new PID namespace (or, with `new_ns` false, an
/// ordinary child). Returns its pid as seen from here, or -1 if the namespace cannot be made.
/// Its exit status comes back through reap().
struct locker_process {
  pid_t pid = -1;  ///< the process running fn, as seen from here (signal this one)
  pid_t reap = -1; ///< the process to wait for (the intermediate one when in a namespace)
};

locker_process start_locker(bool new_ns, const std::function<int()>& fn) {
  if (!new_ns) {
    const pid_t pid = test::spawn(fn);
    return {pid, pid};
  }
  test::shared_block<std::atomic<pid_t>> inner;
  const pid_t mid = ::fork();
  if (mid == 0) {
    if (::unshare(CLONE_NEWPID) != 0) std::_Exit(77);
    const pid_t child = test::spawn(fn); // pid 1 of the new namespace
    inner[0].store(child);
    std::_Exit(test::wait_exit(child));
  }
  if (!test::eventually([&] { return inner[0].load() != 0; }, 10s)) return {-1, mid};
  return {inner[0].load(), mid};
}

} // namespace

TEST_CASE("the lock word names the holder's locker id, whose byte the holder keeps locked") {
  test::unique_table t("lock-word", 16 * MiB);
  auto s = t.join("a");
  auto a = map_raw(t);
  auto b = map_raw(t);
  const std::uint32_t ida = a.locker_id(), idb = b.locker_id();
  CHECK(ida >= 1);
  CHECK(ida <= gd::max_locker_ids);
  CHECK(idb != ida);           // two mappings in one process are two lockers
  CHECK(a.locker_id() == ida); // claimed once
  CHECK(gd::probe_byte(b.fd(), gd::locker_byte(ida)) == gd::holder::other);
  REQUIRE(lock_for(a, 1'000'000'000) == gd::lock_outcome::acquired);
  CHECK(a.header().lock.load() == ida); // uncontended: the id alone, no thread id, no address
  // The other mapping of this same (live) process waits and times out; it never takes over.
  CHECK_FALSE(lock_for(b, 50'000'000).has_value());
  CHECK((a.header().lock.load() & gd::lock_owner_mask) == ida);
  unlock(a);
  CHECK(a.header().lock.load() == 0);
  REQUIRE(lock_for(b, 1'000'000'000) == gd::lock_outcome::acquired);
  unlock(b);
}

TEST_CASE("two threads of one mapping exclude each other and never take over from each other") {
  test::unique_table t("lock-threads", 16 * MiB);
  auto s = t.join("a");
  auto core = map_raw(t);
  std::atomic<int> inside{0}, overlaps{0}, takeovers{0};
  auto work = [&] {
    for (int i = 0; i < 20000; ++i) {
      const auto o = lock_for(core, 10'000'000'000);
      if (!o) continue;
      if (*o == gd::lock_outcome::owner_died) ++takeovers;
      if (inside.fetch_add(1) != 0) ++overlaps;
      if (i % 1000 == 0) std::this_thread::sleep_for(3ms); // past the first liveness look
      inside.fetch_sub(1);
      unlock(core);
    }
  };
  std::thread t1(work), t2(work);
  t1.join();
  t2.join();
  CHECK(overlaps.load() == 0);
  CHECK(takeovers.load() == 0);
  CHECK(core.header().lock.load() == 0);
}

TEST_CASE("a stopped holder keeps the lock even when a locker with its thread id dies "
          "(PID namespaces)") {
  if (!can_unshare_pid()) {
    std::printf("GPUSHARE_SKIP: needs root (CAP_SYS_ADMIN) to create PID namespaces\n");
    return;
  }
  test::unique_table t("lock-pidns", 16 * MiB);
  auto keeper = t.join("keeper");
  test::shared_block<std::atomic<int>> flags(4);
  // A: pid 1 of its namespace, takes the lock and is stopped inside it.
  const locker_process a = start_locker(true, [&] {
    auto core = map_raw(t);
    if (lock_for(core, 5'000'000'000) != gd::lock_outcome::acquired) return 1;
    flags[0] = ::getpid();
    while (flags[1].load() == 0) std::this_thread::sleep_for(1ms); // stopped here
    unlock(core);
    return 0;
  });
  REQUIRE(a.pid > 0);
  REQUIRE(test::eventually([&] { return flags[0].load() != 0; }));
  CHECK(flags[0].load() == 1); // A is pid 1 in its namespace
  REQUIRE(test::stop_process(a.pid));
  // B: also pid 1 (of another namespace): blocks on the lock, then is SIGKILLed while waiting.
  const locker_process b = start_locker(true, [&] {
    auto core = map_raw(t);
    flags[2] = ::getpid();
    (void)lock_for(core, 30'000'000'000);
    return 0;
  });
  REQUIRE(b.pid > 0);
  REQUIRE(test::eventually([&] { return flags[2].load() != 0; }));
  CHECK(flags[2].load() == 1);        // the same thread id as A's
  std::this_thread::sleep_for(100ms); // B is asleep on the lock
  ::kill(b.pid, SIGKILL);
  test::wait_exit(b.reap);
  // B': pid 1 too, times out on the lock and exits normally with the table still mapped.
  const locker_process b2 = start_locker(true, [&] {
    auto core = map_raw(t);
    return lock_for(core, 100'000'000).has_value() ? 1 : 0;
  });
  CHECK(test::wait_exit(b2.reap) == 0);
  // C, in yet another namespace: A is alive (stopped), so C must not get in.
  const locker_process c = start_locker(true, [&] {
    auto core = map_raw(t);
    return lock_for(core, 500'000'000).has_value() ? 1 : 0;
  });
  CHECK(test::wait_exit(c.reap) == 0);
  ::kill(a.pid, SIGCONT);
  flags[1] = 1;
  CHECK(test::wait_exit(a.reap) == 0);
  CHECK(keeper.snapshot().lock_repairs == 0); // nobody took A's lock over
  auto me = map_raw(t);
  CHECK(lock_for(me, 1'000'000'000) == gd::lock_outcome::acquired);
  unlock(me);
}

TEST_CASE("a holder killed inside is taken over, also by a waiter under a signal storm") {
  test::unique_table t("lock-dead", 16 * MiB);
  auto keeper = t.join("keeper");
  for (const bool storm : {false, true}) {
    CAPTURE(storm);
    test::shared_block<std::atomic<int>> held;
    const pid_t victim = test::spawn([&] {
      auto core = map_raw(t);
      if (lock_for(core, 5'000'000'000) != gd::lock_outcome::acquired) return 1;
      held[0] = 1;
      for (;;) std::this_thread::sleep_for(1s);
    });
    REQUIRE(test::eventually([&] { return held[0].load() == 1; }));
    const pid_t waiter = test::spawn([&] {
      if (storm) { // SIGALRM every millisecond, without SA_RESTART
        struct sigaction sa {};
        sa.sa_handler = [](int) {};
        ::sigaction(SIGALRM, &sa, nullptr);
        itimerval it{{0, 1000}, {0, 1000}};
        ::setitimer(ITIMER_REAL, &it, nullptr);
      }
      auto core = map_raw(t);
      held[0] = 2;
      const auto o = lock_for(core, 20'000'000'000);
      if (!o) return 2;
      unlock(core);
      return *o == gd::lock_outcome::owner_died ? 0 : 3;
    });
    REQUIRE(test::eventually([&] { return held[0].load() == 2; }));
    std::this_thread::sleep_for(20ms);
    const auto killed = test::now_ns();
    ::kill(victim, SIGKILL);
    test::wait_exit(victim);
    CHECK(test::wait_exit(waiter) == 0);
    // Taken over within the liveness looks (≤ 50 ms apart), not at the 20 s timeout.
    CHECK(test::now_ns() - killed < 5'000'000'000ull);
  }
  CHECK(keeper.snapshot().lock_repairs == 0); // raw lockers: nobody ran the table's repair
}

TEST_CASE("a stopped holder: a waiter under a signal storm gives up at its timeout, by the clock") {
  test::unique_table t("lock-storm", 16 * MiB);
  auto keeper = t.join("keeper");
  test::shared_block<std::atomic<int>> held;
  const pid_t holder = test::spawn([&] {
    auto core = map_raw(t);
    if (lock_for(core, 5'000'000'000) != gd::lock_outcome::acquired) return 1;
    held[0] = 1;
    while (held[0].load() != 2) std::this_thread::sleep_for(1ms);
    unlock(core);
    return 0;
  });
  REQUIRE(test::eventually([&] { return held[0].load() == 1; }));
  REQUIRE(test::stop_process(holder));
  test::shared_block<std::atomic<std::uint64_t>> waited;
  const pid_t waiter = test::spawn([&] {
    struct sigaction sa {};
    sa.sa_handler = [](int) {};
    ::sigaction(SIGALRM, &sa, nullptr);
    itimerval it{{0, 500}, {0, 500}};
    ::setitimer(ITIMER_REAL, &it, nullptr);
    auto core = map_raw(t);
    const auto start = test::now_ns();
    const bool got = lock_for(core, 300'000'000).has_value();
    waited[0] = test::now_ns() - start;
    return got ? 1 : 0;
  });
  CHECK(test::wait_exit(waiter) == 0);        // timed out: a stopped holder is alive
  CHECK(waited[0].load() >= 300'000'000ull);  // not before its timeout
  CHECK(waited[0].load() < 5'000'000'000ull); // and not restarted by every signal
  held[0] = 2;
  ::kill(holder, SIGCONT);
  CHECK(test::wait_exit(holder) == 0);
}

namespace {

/// Lockers hammer the lock; each marks the critical section with a token a second locker inside
/// would find set. The driver SIGKILLs (and replaces) and SIGSTOPs/SIGCONTs lockers at random.
struct overlap_stats {
  std::atomic<std::uint64_t> token;    ///< who is inside (0: nobody)
  std::atomic<std::uint64_t> overlaps; ///< entries that found someone else inside
  std::atomic<std::uint64_t> entries;
  std::atomic<std::uint64_t> takeovers; ///< entries after taking over from a dead owner
  std::atomic<std::uint64_t> timeouts;  ///< waits that gave up (a stopped holder)
  std::atomic<std::uint64_t> next_tag;
};

int overlap_locker(const test::unique_table& t, overlap_stats& st) {
  auto core = map_raw(t);
  const std::uint64_t me = st.next_tag.fetch_add(1) + 1;
  for (;;) {
    const auto o = lock_for(core, 200'000'000);
    if (!o) {
      st.timeouts.fetch_add(1);
      continue;
    }
    st.entries.fetch_add(1);
    if (*o == gd::lock_outcome::owner_died) {
      st.takeovers.fetch_add(1);
      st.token.store(me); // whatever the dead owner left there is stale
    } else {
      std::uint64_t none = 0;
      if (!st.token.compare_exchange_strong(none, me)) {
        st.overlaps.fetch_add(1);
        st.token.store(me);
      }
    }
    for (int i = 0; i < 200; ++i)
      std::atomic_signal_fence(std::memory_order_seq_cst); // a short stay inside
    std::uint64_t mine = me;
    if (!st.token.compare_exchange_strong(mine, 0)) st.overlaps.fetch_add(1);
    unlock(core);
  }
}

void run_overlap_chaos(bool in_namespaces, int events_wanted) {
  test::unique_table t(in_namespaces ? "lock-chaos-ns" : "lock-chaos", 16 * MiB);
  auto keeper = t.join("keeper");
  test::shared_block<overlap_stats> st;
  constexpr int n = 4;
  std::vector<locker_process> lockers;
  for (int i = 0; i < n; ++i)
    lockers.push_back(start_locker(in_namespaces, [&] { return overlap_locker(t, *st.get()); }));
  for (const auto& l : lockers) REQUIRE(l.pid > 0);
  std::mt19937 rng(12345);
  int kills = 0, stops = 0;
  for (int e = 0; e < events_wanted; ++e) {
    std::this_thread::sleep_for(std::chrono::microseconds(500 + rng() % 3000));
    auto& l = lockers[rng() % n];
    if (rng() % 2 == 0) {
      ::kill(l.pid, SIGKILL);
      test::wait_exit(l.reap);
      l = start_locker(in_namespaces, [&] { return overlap_locker(t, *st.get()); });
      REQUIRE(l.pid > 0);
      ++kills;
    } else {
      ::kill(l.pid, SIGSTOP);
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
      ::kill(l.pid, SIGCONT);
      ++stops;
    }
  }
  for (auto& l : lockers) {
    ::kill(l.pid, SIGKILL);
    test::wait_exit(l.reap);
  }
  MESSAGE("kills " << kills << ", stops " << stops << ", entries " << st[0].entries.load()
                   << ", takeovers " << st[0].takeovers.load() << ", timeouts "
                   << st[0].timeouts.load());
  CHECK(st[0].overlaps.load() == 0);
  CHECK(st[0].entries.load() > 1000);
  CHECK(st[0].takeovers.load() >= 1); // some kills landed inside
  auto me = map_raw(t);
  CHECK(lock_for(me, 5'000'000'000).has_value()); // the lock is free or taken over, not stuck
  unlock(me);
}

} // namespace

TEST_CASE("mutual exclusion holds with lockers killed and stopped at random") {
  run_overlap_chaos(false, 300);
}

TEST_CASE("mutual exclusion holds with lockers in different PID namespaces, killed and stopped") {
  if (!can_unshare_pid()) {
    std::printf("GPUSHARE_SKIP: needs root (CAP_SYS_ADMIN) to create PID namespaces\n");
    return;
  }
  run_overlap_chaos(true, 300);
}
