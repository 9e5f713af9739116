// SPDX-License-Identifier: Apache-2.0
// Compute arbitration across processes, measured on the CPU: each "kernel" is ~1 ms of spinning
// inside a scoped_kernel. Bounds are generous for a noisy 2-core machine but tight enough that a
// wrong algorithm (no exclusion, shares ignored, priority ignored, cap ignored) fails them.
#include <doctest/doctest.h>

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;

namespace {
void spin_for(std::uint64_t ns) {
  const std::uint64_t end = test::now_ns() + ns;
  while (test::now_ns() < end) {
  }
}

struct control {
  std::atomic<int> stop{0};
  std::atomic<int> started{0};
  std::atomic<int> stop_one[4]{};
  std::atomic<long> guards[4]{}; ///< guards each busy worker has started
};

/// Pins the calling process to CPU `cpu` (an index into the CPUs it may use). Returns false if
/// the machine does not let it.
bool pin_to_cpu(int cpu) {
  cpu_set_t allowed;
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return false;
  for (int c = 0, seen = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &allowed)) continue;
    if (seen++ != cpu) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(c, &one);
    return ::sched_setaffinity(0, sizeof one, &one) == 0;
  }
  return false;
}

/// A busy process: guards of `guard_ns` of spinning, back to back, until told to stop. With
/// `cpu` >= 0 it runs pinned to that CPU.
pid_t busy_worker(const test::unique_table& t, session_options o, control& c, int index,
                  std::uint64_t guard_ns = 1'000'000, int cpu = -1) {
  return test::spawn([&t, o, &c, index, guard_ns, cpu] {
    if (cpu >= 0 && !pin_to_cpu(cpu)) return 3;
    session s(t.key(), o);
    c.started++;
    while (!c.stop.load() && !c.stop_one[index].load()) {
      scoped_kernel k(s);
      c.guards[index]++;
      spin_for(guard_ns);
    }
    return 0;
  });
}

/// A process whose guards of `guard_ns` of spinning are each followed by `pause_ns` of host work
/// (spinning outside the guard), until told to stop.
pid_t pausing_worker(const test::unique_table& t, session_options o, control& c,
                     std::uint64_t guard_ns, std::uint64_t pause_ns) {
  return test::spawn([&t, o, &c, guard_ns, pause_ns] {
    session s(t.key(), o);
    c.started++;
    while (!c.stop.load()) {
      {
        scoped_kernel k(s);
        spin_for(guard_ns);
      }
      spin_for(pause_ns);
    }
    return 0;
  });
}

/// Nanoseconds the main thread of `pid` has spent runnable but waiting for a CPU (the second field
/// of /proc/<pid>/schedstat); 0 where the kernel offers no schedstat.
std::uint64_t cpu_wait_ns(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/schedstat");
  std::uint64_t on_cpu = 0, waiting = 0;
  return in >> on_cpu >> waiting ? waiting : 0;
}

/// Device time per session name, from one snapshot.
std::map<std::string, std::uint64_t> device_time(const test::unique_table& t) {
  std::map<std::string, std::uint64_t> m;
  for (const auto& s : t.open().snapshot().sessions) m[s.name] = s.device_ns;
  return m;
}

/// Device time each session used during `window`, after `warmup`.
std::map<std::string, double> measure(const test::unique_table& t,
                                      std::chrono::milliseconds window) {
  const auto before = device_time(t);
  std::this_thread::sleep_for(window);
  const auto after = device_time(t);
  std::map<std::string, double> used;
  for (const auto& [name, ns] : after)
    used[name] = static_cast<double>(ns - (before.count(name) ? before.at(name) : 0));
  return used;
}

double share_of(const std::map<std::string, double>& used, const std::string& name) {
  double total = 0;
  for (const auto& [n, v] : used) total += v;
  return total > 0 ? used.at(name) / total : 0;
}

session_options named(const test::unique_table& t, const std::string& name, std::uint32_t share,
                      int prio = priority::normal) {
  session_options o = t.options(name);
  o.share = share;
  o.priority = prio;
  return o;
}

void stop_all(control& c, std::vector<pid_t>& pids) {
  c.stop = 1;
  for (pid_t p : pids) CHECK(test::wait_exit(p) == 0);
  pids.clear();
}
} // namespace

TEST_CASE("mutual exclusion: no two guards of different processes ever overlap") {
  test::unique_table t("cmp-excl");
  struct shared {
    std::atomic<int> inside{0};
    std::atomic<int> overlaps{0};
    std::atomic<int> entered{0};
  };
  test::shared_block<shared> sh;
  constexpr int procs = 4, guards = 300;
  std::vector<pid_t> pids;
  for (int p = 0; p < procs; ++p)
    pids.push_back(test::spawn([&, p] {
      session s = t.join("p" + std::to_string(p));
      for (int g = 0; g < guards; ++g) {
        scoped_kernel k(s);
        if (sh[0].inside.fetch_add(1) != 0) sh[0].overlaps++;
        sh[0].entered++;
        spin_for(20'000);
        sh[0].inside.fetch_sub(1);
        if (g % 50 == 0) s.yield();
      }
      return 0;
    }));
  for (pid_t p : pids) CHECK(test::wait_exit(p) == 0);
  CHECK(sh[0].entered.load() == procs * guards);
  CHECK(sh[0].overlaps.load() == 0);
  const auto snap = t.open().snapshot();
  CHECK(snap.sessions.empty());
  CHECK_FALSE(snap.holder.has_value());
}

TEST_CASE("weighted shares: 3:1, then 1:1:2, within 5 percentage points") {
  SUBCASE("3:1") {
    test::unique_table t("cmp-31");
    test::shared_block<control> c;
    std::vector<pid_t> pids{busy_worker(t, named(t, "three", 3), c[0], 0),
                            busy_worker(t, named(t, "one", 1), c[0], 1)};
    REQUIRE(test::eventually([&] { return c[0].started.load() == 2; }));
    std::this_thread::sleep_for(200ms);
    const auto used = measure(t, 2000ms);
    MESSAGE("3:1 split: three " << share_of(used, "three") << ", one " << share_of(used, "one"));
    CHECK(share_of(used, "three") == doctest::Approx(0.75).epsilon(0.05 / 0.75));
    CHECK(share_of(used, "one") == doctest::Approx(0.25).epsilon(0.05 / 0.25));

    // Work conservation: when the 3-share process stops, the other gets the device.
    c[0].stop_one[0] = 1;
    CHECK(test::wait_exit(pids[0]) == 0);
    std::this_thread::sleep_for(100ms);
    const auto alone = measure(t, 1000ms);
    const double busy = alone.at("one") / 1e9;
    MESSAGE("alone, 'one' used " << busy * 100 << "% of the device");
    CHECK(busy >= 0.90);
    c[0].stop = 1;
    CHECK(test::wait_exit(pids[1]) == 0);
  }
  SUBCASE("1:1:2") {
    test::unique_table t("cmp-112");
    test::shared_block<control> c;
    std::vector<pid_t> pids{busy_worker(t, named(t, "a", 1), c[0], 0),
                            busy_worker(t, named(t, "b", 1), c[0], 1),
                            busy_worker(t, named(t, "c", 2), c[0], 2)};
    REQUIRE(test::eventually([&] { return c[0].started.load() == 3; }));
    std::this_thread::sleep_for(200ms);
    const auto used = measure(t, 2000ms);
    MESSAGE("1:1:2 split: " << share_of(used, "a") << " " << share_of(used, "b") << " "
                            << share_of(used, "c"));
    CHECK(std::abs(share_of(used, "a") - 0.25) <= 0.05);
    CHECK(std::abs(share_of(used, "b") - 0.25) <= 0.05);
    CHECK(std::abs(share_of(used, "c") - 0.50) <= 0.05);
    stop_all(c[0], pids);
  }
}

TEST_CASE("weighted shares hold when the busy workers compete for one CPU: 3:1 and 1:1:2") {
  // Both (all three) workers are pinned to the same CPU, so the CPU scheduler deschedules each of
  // them between two guards, for milliseconds at a time. A session that stays busy must keep its
  // share anyway: it keeps the virtual time it is owed (the credit rule, docs/design.md).
  struct scenario {
    const char* name;
    std::vector<std::uint32_t> shares;
  };
  for (const scenario& sc : {scenario{"3:1", {3, 1}}, scenario{"1:1:2", {1, 1, 2}}}) {
    CAPTURE(sc.name);
    test::unique_table t("cmp-cpu");
    test::shared_block<control> c;
    std::vector<pid_t> pids;
    std::uint32_t total = 0;
    for (std::size_t k = 0; k < sc.shares.size(); ++k) {
      total += sc.shares[k];
      pids.push_back(busy_worker(t, named(t, test::numbered("w", k), sc.shares[k]), c[0],
                                 static_cast<int>(k), 1'000'000, 0));
    }
    REQUIRE(test::eventually([&] { return c[0].started.load() == int(sc.shares.size()); }));
    std::this_thread::sleep_for(300ms); // past the start: measure a steady state
    const auto used = measure(t, 3000ms);
    std::string split;
    for (std::size_t k = 0; k < sc.shares.size(); ++k) {
      const std::string name = test::numbered("w", k);
      const double expected = double(sc.shares[k]) / total;
      split += ' ';
      split += std::to_string(share_of(used, name));
      CHECK(std::abs(share_of(used, name) - expected) <= 0.02);
    }
    MESSAGE(std::string(sc.name) << " on one CPU:" << split);
    stop_all(c[0], pids);
  }
}

TEST_CASE("priority: a high-priority waiter gets the device at the next guard boundary") {
  test::unique_table t("cmp-prio");
  test::shared_block<control> c;
  constexpr int requests = 150;
  struct request {
    std::uint64_t waited_ns;
    long low_guards; ///< low-priority guards that started while this request waited
  };
  test::shared_block<request> log(requests);
  std::vector<pid_t> pids{busy_worker(t, named(t, "low", 1, priority::low), c[0], 0)};
  REQUIRE(test::eventually([&] { return c[0].started.load() == 1; }));
  const pid_t high = test::spawn([&] {
    session s(t.key(), named(t, "high", 1, priority::high));
    for (int i = 0; i < requests; ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(1500 + (i * 7919) % 2500));
      const long before = c[0].guards[0].load();
      scoped_kernel k(s);
      log[i].low_guards = c[0].guards[0].load() - before;
      log[i].waited_ns = static_cast<std::uint64_t>(k.waited().count());
      spin_for(100'000);
    }
    return 0;
  });
  CHECK(test::wait_exit(high) == 0);
  std::vector<long> overtaken;
  std::vector<std::uint64_t> waited;
  for (int i = 0; i < requests; ++i) {
    overtaken.push_back(log[i].low_guards);
    waited.push_back(log[i].waited_ns);
  }
  std::sort(overtaken.begin(), overtaken.end());
  std::sort(waited.begin(), waited.end());
  MESSAGE("high-priority wait behind 1 ms low-priority guards: p50 "
          << waited[requests / 2] / 1e6 << " ms, p90 " << waited[requests * 9 / 10] / 1e6
          << " ms, max " << waited.back() / 1e6 << " ms (wall time: depends on the CPU); low "
          << "guards started during a wait: p90 " << overtaken[requests * 9 / 10] << ", max "
          << overtaken.back());
  // What the library controls: once the high-priority request waits, no low-priority guard
  // starts. The one that may start is the one admitted before the request registered (between
  // reading the counter and taking the table lock). Wall-clock waits depend on how fast the CPU
  // wakes the process: docs/benchmarks.md measures them.
  CHECK(overtaken[requests * 9 / 10] <= 1);
  // The low-priority process kept running while the high one idled between requests...
  const auto used = measure(t, 300ms);
  CHECK(used.at("low") / 0.3e9 >= 0.8); // ...and has the device to itself now
  stop_all(c[0], pids);
}

TEST_CASE("hard cap: a capped session alone stays at its limit although the device is idle") {
  test::unique_table t("cmp-cap");
  test::shared_block<control> c;
  session_options o = named(t, "capped", 1);
  o.compute_limit_ppm = 300'000; // 30%
  std::vector<pid_t> pids{busy_worker(t, o, c[0], 0)};
  REQUIRE(test::eventually([&] { return c[0].started.load() == 1; }));
  std::this_thread::sleep_for(200ms);
  const auto used = measure(t, 1000ms);
  const double fraction = used.at("capped") / 1e9;
  MESSAGE("capped at 30%: used " << fraction * 100 << "%");
  CHECK(fraction <= 0.30 + 0.02);
  CHECK(fraction >= 0.25); // and it does get (nearly) its 30%
  stop_all(c[0], pids);
  // (The throttle shows in its statistics while it runs; checked in unit-scheduler.)
}

TEST_CASE("yield points: an at_yield session hands over at iteration ends, not mid-iteration") {
  test::unique_table t("cmp-yield");
  struct event {
    std::atomic<int> who{-1};
    std::atomic<int> guard_in_iteration{-1};
  };
  constexpr int max_events = 4000, per_iteration = 4;
  test::shared_block<event> log(max_events);
  test::shared_block<std::atomic<int>> next(1);
  test::shared_block<control> c;
  auto worker = [&](int who, handover_point mode) {
    return test::spawn([&, who, mode] {
      session_options o = t.options(std::string("w").append(std::to_string(who)));
      o.handover = mode;
      o.quantum = 1500us; // used up after two of the four 1 ms guards of an iteration
      session s(t.key(), o);
      c[0].started++;
      while (!c[0].stop.load()) {
        for (int g = 0; g < per_iteration; ++g) {
          scoped_kernel k(s);
          const int e = next[0]++;
          if (e < max_events) {
            log[e].who = who;
            log[e].guard_in_iteration = g;
          }
          spin_for(1'000'000);
        }
        s.yield();
      }
      return 0;
    });
  };
  std::vector<pid_t> pids{worker(0, handover_point::at_yield), worker(1, handover_point::at_yield)};
  REQUIRE(test::eventually([&] { return c[0].started.load() == 2; }));
  std::this_thread::sleep_for(1000ms);
  stop_all(c[0], pids);
  const int n = std::min(next[0].load(), max_events);
  int switches = 0, mid_iteration = 0;
  for (int e = 1; e < n; ++e) {
    if (log[e].who.load() == log[e - 1].who.load()) continue;
    ++switches;
    if (log[e - 1].guard_in_iteration.load() != per_iteration - 1) ++mid_iteration;
    if (log[e].guard_in_iteration.load() != 0) ++mid_iteration;
  }
  MESSAGE(n << " guards, " << switches << " handovers, " << mid_iteration << " mid-iteration");
  CHECK(switches >= 20);     // it did hand over (at the yields)...
  CHECK(mid_iteration == 0); // ...and only there
}

TEST_CASE("crash: a holder killed while others wait, and a killed waiter, hang nobody") {
  test::unique_table t("cmp-crash");
  test::shared_block<std::atomic<int>> holding(1);
  const pid_t holder = test::spawn([&] {
    session s = t.join("holder");
    scoped_kernel k(s);
    holding[0] = 1;
    ::pause();
    return 0;
  });
  REQUIRE(test::eventually([&] { return holding[0].load() == 1; }));
  // A waiter that is killed while waiting must not disturb anything.
  const pid_t doomed_waiter = test::spawn([&] {
    session s = t.join("doomed-waiter");
    scoped_kernel k(s);
    return 0;
  });
  session me = t.join("survivor");
  REQUIRE(test::eventually([&] {
    for (const auto& s : t.open().snapshot().sessions)
      if (s.name == "doomed-waiter" && s.waiting_for_device == 1) return true;
    return false;
  }));
  ::kill(doomed_waiter, SIGKILL);
  CHECK(test::wait_exit(doomed_waiter) == 128 + SIGKILL);
  std::thread killer([&] {
    std::this_thread::sleep_for(50ms);
    ::kill(holder, SIGKILL);
  });
  const auto start = test::now_ns();
  {
    scoped_kernel k(me); // the holder never releases: its death must hand the device over
    const auto waited = test::now_ns() - start;
    CHECK(waited < 1'000'000'000ull);
    CHECK(waited >= 40'000'000ull);
  }
  killer.join();
  CHECK(test::wait_exit(holder) == 128 + SIGKILL);
  const auto snap = me.snapshot();
  CHECK(snap.sessions.size() == 1);
  CHECK(snap.sessions[0].waiting_for_device == 0);
  scoped_kernel again(me); // and the device is usable again
  CHECK(me.info().active_guards == 1);
}

TEST_CASE("reconfiguration: changing a running session's share changes the measured split") {
  test::unique_table t("cmp-reconf");
  test::shared_block<control> c;
  std::vector<pid_t> pids{busy_worker(t, named(t, "x", 1), c[0], 0),
                          busy_worker(t, named(t, "y", 1), c[0], 1)};
  REQUIRE(test::eventually([&] { return c[0].started.load() == 2; }));
  std::this_thread::sleep_for(200ms);
  const auto before = measure(t, 1000ms);
  CHECK(std::abs(share_of(before, "x") - 0.5) <= 0.07);
  auto tab = t.open();
  const auto ids = tab.find("x");
  REQUIRE(ids.size() == 1);
  settings_change change;
  change.share = 4;
  tab.configure(ids[0], change);
  std::this_thread::sleep_for(200ms);
  const auto after = measure(t, 1500ms);
  MESSAGE("x: " << share_of(before, "x") << " at share 1, " << share_of(after, "x")
                << " at share 4 (expected 0.8)");
  CHECK(std::abs(share_of(after, "x") - 0.8) <= 0.05);
  stop_all(c[0], pids);
}

TEST_CASE("compute guarantee: a busy low-priority process keeps its guaranteed share") {
  // Strict priority (the default) gives a busy lower class nothing next to a busy higher one; a
  // compute guarantee gives it its share back, the higher class waiting at most one of its
  // guards each time.
  for (const std::uint32_t guarantee : {0u, 200'000u}) {
    CAPTURE(guarantee);
    test::unique_table t("cmp-guarantee");
    test::shared_block<control> c;
    session_options low = named(t, "low", 1, priority::low);
    low.compute_guarantee_ppm = guarantee;
    std::vector<pid_t> pids{busy_worker(t, named(t, "high", 1, priority::high), c[0], 0),
                            busy_worker(t, low, c[0], 1)};
    REQUIRE(test::eventually([&] { return c[0].started.load() == 2; }));
    std::this_thread::sleep_for(300ms);
    const std::uint64_t waited_before = cpu_wait_ns(pids[0]);
    const auto used = measure(t, 2000ms);
    const double low_share = used.at("low") / 2e9;
    // Next to CPU hogs the higher class is descheduled now and then, and the lower class may use
    // the device while the higher one waits for a CPU (work conservation): bounded by that wait.
    const double high_waited = static_cast<double>(cpu_wait_ns(pids[0]) - waited_before) / 2e9;
    MESSAGE("guarantee " << guarantee / 1e4 << "%: the low class used " << low_share * 100
                         << "% of the device; the high class waited for a CPU " << high_waited * 100
                         << "% of the time");
    if (guarantee == 0) // (0% idle, 0-4% with two CPU hogs, measured)
      CHECK(low_share < 0.05 + high_waited);
    else
      CHECK(low_share == doctest::Approx(0.20).epsilon(0.03 / 0.20));
    stop_all(c[0], pids);
  }
}

TEST_CASE("pause hold: a process with short pauses next to long guards gets its share") {
  // Issue 40, C8: 100 us guards with 100 us of host work between them, next to a busy process
  // with 1 ms guards, equal shares. Handing each pause over cost the pausing process one of the
  // peer's guards each time (about 10% of the device time, simulated 9.6%); its pause hold (the
  // default, 2x) keeps the device through them while it is below its share (simulated: 50%).
  double shares[2] = {}, hold_waited = 0;
  for (const std::uint32_t hold : {0u, 2'000'000u}) {
    CAPTURE(hold);
    test::unique_table t("cmp-hold");
    test::shared_block<control> c;
    session_options po = named(t, "pauser", 1);
    po.pause_hold_ppm = hold;
    control& k = c[0];
    std::vector<pid_t> pids{busy_worker(t, named(t, "peer", 1), k, 0),
                            pausing_worker(t, po, k, 100'000, 100'000)};
    REQUIRE(test::eventually([&] { return k.started.load() == 2; }));
    std::this_thread::sleep_for(300ms);
    const std::uint64_t waited_before = cpu_wait_ns(pids[1]);
    const auto used = measure(t, 2000ms);
    const double waited = static_cast<double>(cpu_wait_ns(pids[1]) - waited_before) / 2e9;
    shares[hold == 0 ? 0 : 1] = share_of(used, "pauser");
    MESSAGE("pause hold " << hold / 1e6 << "x: the pausing process had "
                          << share_of(used, "pauser") * 100 << "% of the device time used; it "
                          << "waited for a CPU " << waited * 100 << "% of the time");
    if (hold != 0) {
      CHECK(share_of(used, "pauser") >= 0.40 - waited); // its share, less its CPU waits
      hold_waited = waited;
    }
    stop_all(k, pids);
  }
  // Far more than with no hold (idle: 9.7-9.8% and 50.0%, as simulated; beside two CPU hogs:
  // 10-23% and 26-49%). Waiting for a CPU stretches its pauses past the longest pause held.
  CHECK(shares[1] >= shares[0] + 0.15 - hold_waited);
}
