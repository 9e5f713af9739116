// SPDX-License-Identifier: Apache-2.0
// Compute arbitration in a deterministic discrete-event simulation (tests/sim/scheduler_sim.hpp):
// properties over seeded random scenarios, and named scenarios for defects of earlier schedulers.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/scenarios.hpp"

using namespace sim;

// ---------------------------------------------------------------------------------------------
// Properties over seeded random scenarios
// ---------------------------------------------------------------------------------------------

TEST_CASE("simulation, random scenarios: exclusion, priority, caps, idle bound, clean end") {
  for (u64 seed = 1; seed <= 60; ++seed) {
    const scenario sc = random_scenario(seed);
    CAPTURE(seed);
    const result r = simulate(sc);
    CHECK(r.overlaps == 0);            // never two sessions' guards at once
    CHECK(r.priority_inversions == 0); // no lower-class guard starts while a higher class waits
    CHECK(caps_hold(sc, r, 1 * sec));  // a capped session stays within its cap over any second
    CHECK(r.idle_excess_ns == 0);      // the device idles only as long as the budget allows
    CHECK(r.clean_end);                // no waiter count, mask bit or holder is left behind
    CHECK(r.guards_total > 0);
    // The books: every guard and every nanosecond, entered on a lease or under the lock.
    for (const auto& sr : r.sessions) {
      CHECK(sr.books_guards == sr.all_guards);
      CHECK(sr.books_device_ns == sr.all_guard_ns);
    }
    // The highest class present makes progress (lower ones may legitimately wait for it).
    int top = prio::low;
    for (const auto& s : sc.sessions) top = std::max(top, s.priority);
    for (std::size_t k = 0; k < sc.sessions.size(); ++k)
      if (sc.sessions[k].priority == top && sc.sessions[k].start < sc.warmup &&
          sc.sessions[k].stop > sc.duration)
        CHECK(r.sessions[k].guards > 0);
  }
}

TEST_CASE("simulation, richer random scenarios (issue 23's workloads): the same properties") {
  // Bursts without yields, guards accounting part of their wall time and early wake-ups, mixed
  // into the random scenarios above (seeds 61-160).
  for (u64 seed = 61; seed <= 160; ++seed) {
    const scenario sc = rich_scenario(seed);
    CAPTURE(seed);
    const result r = simulate(sc);
    CHECK(r.overlaps == 0);
    CHECK(r.priority_inversions == 0);
    CHECK(caps_hold(sc, r, 1 * sec));
    CHECK(r.idle_excess_ns == 0);
    CHECK(r.clean_end);
    for (const auto& sr : r.sessions) {
      CHECK(sr.books_guards == sr.all_guards);
      CHECK(sr.books_device_ns == sr.all_guard_ns);
    }
  }
}

TEST_CASE("simulation, busy sessions with mixed guard lengths get their shares within 2 points") {
  for (bool noisy : {false, true}) {
    for (u64 seed = 1; seed <= 25; ++seed) {
      const scenario sc = busy_scenario(seed, noisy);
      CAPTURE(noisy);
      CAPTURE(seed);
      const result r = simulate(sc);
      CHECK(r.overlaps == 0);
      for (std::size_t k = 0; k < sc.sessions.size(); ++k) {
        CAPTURE(k);
        CHECK(std::abs(r.fraction(k) - expected_fraction(sc, k)) <= 0.02);
      }
      if (!noisy) CHECK(r.busy() >= 0.999); // busy sessions leave the device no idle time
    }
  }
}

TEST_CASE("simulation with groups: a group of busy members gets its group share as one session") {
  for (u64 seed = 1; seed <= 30; ++seed) {
    const scenario sc = grouped_busy_scenario(seed);
    CAPTURE(seed);
    const result r = simulate(sc);
    CHECK(r.overlaps == 0);
    CHECK(r.busy() >= 0.999);
    std::vector<std::string> entities;
    for (const auto& s : sc.sessions) {
      const std::string id = s.group.empty() ? s.name : s.group;
      if (std::find(entities.begin(), entities.end(), id) == entities.end()) entities.push_back(id);
    }
    for (const std::string& e : entities) {
      double got = 0;
      int members = 0;
      for (std::size_t k = 0; k < sc.sessions.size(); ++k)
        if ((sc.sessions[k].group.empty() ? sc.sessions[k].name : sc.sessions[k].group) == e) {
          got += r.fraction(k);
          ++members;
        }
      CAPTURE(e);
      CAPTURE(members);
      CHECK(std::abs(got - expected_entity_fraction(sc, e)) <= 0.02);
      // Every busy member runs: a group's members take turns within its share.
      for (std::size_t k = 0; k < sc.sessions.size(); ++k)
        if (sc.sessions[k].group == e) CHECK(r.sessions[k].guards > 0); // was 0 (quanta)
    }
  }
}

TEST_CASE("simulation: n equal busy sessions wait at most (n - 1) x (quantum + longest guard)") {
  for (int n = 2; n <= 6; ++n) {
    for (u64 seed = 1; seed <= 4; ++seed) {
      scenario sc;
      sc.seed = seed;
      sc.duration = 3 * sec;
      sc.warmup = 300 * ms;
      rng g{seed};
      u64 longest = 0;
      for (int k = 0; k < n; ++k) {
        session_spec s = busy(std::string("e").append(std::to_string(k)));
        s.work.guard_min = g.uniform(50, 500) * us;
        s.work.guard_max = s.work.guard_min + g.uniform(0, 1000) * us;
        longest = std::max(longest, s.work.guard_max);
        sc.sessions.push_back(s);
      }
      CAPTURE(n);
      CAPTURE(seed);
      const result r = simulate(sc);
      const u64 bound = static_cast<u64>(n - 1) * (5 * ms + longest);
      for (std::size_t k = 0; k < sc.sessions.size(); ++k) {
        CAPTURE(k);
        CHECK(r.sessions[k].max_wait <= bound);
        CHECK(std::abs(r.fraction(k) - 1.0 / n) <= 0.02);
      }
    }
  }
}

TEST_CASE("simulation, metamorphic: scaling all times or permuting slots leaves fractions alone") {
  for (u64 seed = 1; seed <= 10; ++seed) {
    const scenario base = busy_scenario(seed, false);
    const result r0 = simulate(base);
    CAPTURE(seed);
    for (u64 factor : {2u, 5u}) {
      scenario scaled = base;
      scaled.duration *= factor;
      scaled.warmup *= factor;
      for (auto& s : scaled.sessions) {
        s.quantum *= factor;
        s.work.guard_min *= factor;
        s.work.guard_max *= factor;
      }
      const result r = simulate(scaled);
      for (std::size_t k = 0; k < base.sessions.size(); ++k)
        CHECK(std::abs(r.fraction(k) - r0.fraction(k)) <= 0.01);
    }
    scenario permuted = base;
    permuted.slot_of.clear();
    for (std::size_t k = 0; k < base.sessions.size(); ++k)
      permuted.slot_of.push_back(static_cast<std::uint32_t>(13 - 3 * k)); // reversed, spread
    const result r = simulate(permuted);
    for (std::size_t k = 0; k < base.sessions.size(); ++k)
      CHECK(std::abs(r.fraction(k) - r0.fraction(k)) <= 0.01);
  }
}

// ---------------------------------------------------------------------------------------------
// Named scenarios: each was a defect of an earlier scheduler
// ---------------------------------------------------------------------------------------------

TEST_CASE("simulation: busy sessions descheduled by the CPU keep 3:1 and 1:1:2") {
  // The collapse towards 1:1 under CPU contention: a busy session descheduled between two guards
  // was treated as a newcomer and lost the credit it had earned.
  for (u64 seed = 1; seed <= 5; ++seed) {
    for (const std::vector<std::uint32_t>& shares :
         {std::vector<std::uint32_t>{3, 1}, std::vector<std::uint32_t>{1, 1, 2}}) {
      scenario sc;
      sc.seed = seed;
      sc.duration = 6 * sec;
      sc.warmup = 500 * ms;
      for (std::size_t k = 0; k < shares.size(); ++k)
        sc.sessions.push_back(busy(std::string("w").append(std::to_string(k)), shares[k]));
      sc.cpu = {1 * ms, 12 * ms, 3 * ms}; // a CPU shared with other busy processes
      const result r = simulate(sc);
      CAPTURE(seed);
      for (std::size_t k = 0; k < shares.size(); ++k) {
        CAPTURE(k);
        CHECK(std::abs(r.fraction(k) - expected_fraction(sc, k)) <= 0.02);
      }
    }
  }
}

TEST_CASE("simulation: shares hold when virtual time starts near 2^64 (months of device time)") {
  // Issue 13, item 9: the class floor never decreased and vtime saturated at 2^64 - 1, where
  // every session is equal: 3:1 became 1:1 after ~213 days busy at share 1.
  for (const u64 start : {u64{1} << 62, UINT64_MAX - 1'000 * ms, UINT64_MAX}) {
    scenario sc;
    sc.duration = 3 * sec;
    sc.warmup = 500 * ms;
    sc.initial_floor = start;
    sc.sessions = {busy("three", 3), busy("one", 1)};
    const result r = simulate(sc);
    CAPTURE(start);
    CHECK(r.overlaps == 0);
    CHECK(std::abs(r.fraction(0) - 0.75) <= 0.02);
    CHECK(std::abs(r.fraction(1) - 0.25) <= 0.02);
    CHECK(r.clean_end);
  }
}

TEST_CASE("simulation: a holder with short pauses does not keep an idle device from a busy peer") {
  struct pattern {
    u64 guard, pause;
  };
  for (const pattern p : {pattern{10 * us, 150 * us}, pattern{2 * us, 190 * us}}) {
    scenario sc;
    sc.duration = 3 * sec;
    session_spec pauser = busy("pauser", 1, p.guard);
    pauser.work.pause_min = pauser.work.pause_max = p.pause;
    sc.sessions = {pauser, busy("peer")};
    const result r = simulate(sc);
    CAPTURE(p.guard);
    MESSAGE("guards of " << p.guard / 1000.0 << " us with pauses of " << p.pause / 1000.0
                         << " us: device busy " << r.busy() * 100 << "%, peer's longest wait "
                         << r.sessions[1].max_wait / 1e6 << " ms");
    CHECK(r.busy() >= 0.90); // was 11.8% and 2.0%
    // The peer waits at most one quantum of the pauser's, plus its idle budget and a guard.
    CHECK(r.sessions[1].max_wait <= 5 * ms + d::idle_grace_at_guard_ns + 1 * ms);
    CHECK(r.sessions[0].guards > 1000); // and the pauser still runs
  }
}

TEST_CASE(
    "simulation: a lone session runs on its lease, and a newcomer ends it at the next boundary") {
  for (const std::uint32_t mode : {d::handover_at_guard, d::handover_at_yield}) {
    scenario sc;
    sc.duration = 3 * sec;
    sc.warmup = 1300 * ms;
    session_spec lone = busy("lone", 1, 1 * ms);
    lone.work.pause_min = 20 * us;
    lone.work.pause_max = 80 * us;
    lone.mode = mode;
    if (mode == d::handover_at_yield) lone.work.per_iteration = 4;
    session_spec late = busy("late");
    late.start = 1 * sec;
    sc.sessions = {lone, late};
    const result r = simulate(sc, late.start);
    CAPTURE(mode);
    const u64 first_wait = r.sessions[1].first_guard_after - late.start;
    const double late_share =
        static_cast<double>(r.sessions[1].device_ns) /
        static_cast<double>(r.sessions[0].device_ns + r.sessions[1].device_ns);
    MESSAGE("mode " << mode << ": " << r.lease_guards << " of " << r.guards_total
                    << " guards on a lease; the newcomer's first wait " << first_wait / 1e6
                    << " ms, later ones at most " << r.sessions[1].max_wait / 1e6 << " ms; it got "
                    << late_share * 100 << "%");
    CHECK(r.lease_guards > 500); // alone for a second: on the lease, no lock
    CHECK(r.overlaps == 0);
    CHECK(r.clean_end);
    // The newcomer waits, as without a lease, for at most a quantum and the guards that end it
    // (an at_yield holder: its iteration of 4 guards), plus the idle grace.
    CHECK(first_wait <= 5 * ms + 4 * (1 * ms + 80 * us) + d::idle_grace_at_guard_ns);
    CHECK(late_share == doctest::Approx(0.5).epsilon(0.04));
    for (const auto& sr : r.sessions) {
      CHECK(sr.books_guards == sr.all_guards);
      CHECK(sr.books_device_ns == sr.all_guard_ns);
    }
  }
}

TEST_CASE("simulation: a higher class holder with pauses lets the lower class use the gaps") {
  scenario sc;
  sc.duration = 3 * sec;
  session_spec high = busy("high", 1, 500 * us, prio::high);
  high.work.pause_min = high.work.pause_max = 150 * us;
  sc.sessions = {high, busy("low", 1, 1 * ms, prio::low)};
  const result r = simulate(sc);
  MESSAGE("high with pauses: low gets " << r.fraction(1) * 100 << "%, device busy "
                                        << r.busy() * 100 << "%");
  CHECK(r.fraction(1) >= 0.10); // was 0% while the device idled 23% of the time
  // A higher class may keep the device idle between its guards up to a quarter of its device
  // time (its host work between requests must not cost it a lower guard each time); beyond
  // that, here 30%, the lower class gets gaps (issue 23, case 3): 84% busy, low 25%.
  CHECK(r.busy() >= 0.80);
  CHECK(r.priority_inversions == 0);
  // The high class still waits at most one low-class guard.
  CHECK(r.sessions[0].max_wait <= 1 * ms + d::watch_period_ns);
}

TEST_CASE("simulation: overlapping guards of several threads do not hold the device forever") {
  SUBCASE("against a higher class") {
    scenario sc;
    sc.duration = 3 * sec;
    session_spec two = busy("two-threads", 1, 1 * ms, prio::normal);
    two.threads = 2;
    two.stagger = 500 * us; // its guards always overlap: it never has none running
    session_spec high = busy("high", 1, 200 * us, prio::high);
    high.work.pause_min = high.work.pause_max = 3 * ms;
    sc.sessions = {two, high};
    const result r = simulate(sc);
    MESSAGE("high waits at most " << r.sessions[1].max_wait / 1e6 << " ms; high got "
                                  << r.sessions[1].guards << " guards");
    CHECK(r.priority_inversions == 0);
    CHECK(r.sessions[1].max_wait <= 1 * ms); // the running guards drain: at most one guard
    CHECK(r.sessions[1].guards > 500);       // was 0: it waited the whole run
  }
  SUBCASE("against an equal peer") {
    scenario sc;
    sc.duration = 3 * sec;
    session_spec two = busy("two-threads");
    two.threads = 2;
    two.stagger = 500 * us;
    sc.sessions = {two, busy("peer")};
    const result r = simulate(sc);
    MESSAGE("peer's share of accounted device time: " << r.fraction(1) * 100 << "%");
    CHECK(std::abs(r.fraction(1) - 0.5) <= 0.03); // was 0%
  }
}

TEST_CASE("simulation: an at_yield holder that never yields is held to its backstop") {
  for (u64 pause : {u64{0}, 10 * ms}) {
    scenario sc;
    sc.duration = 5 * sec;
    session_spec lazy = busy("never-yields");
    lazy.mode = d::handover_at_yield; // and it never calls yield()
    lazy.work.pause_max = pause;      // host work of up to `pause` after each guard
    sc.sessions = {lazy, busy("peer")};
    const result r = simulate(sc);
    CAPTURE(pause);
    MESSAGE("peer's share next to a holder that never yields (pauses up to "
            << pause / 1e6 << " ms): " << r.fraction(1) * 100 << "%, longest wait "
            << r.sessions[1].max_wait / 1e6 << " ms");
    CHECK(std::abs(r.fraction(1) - 0.5) <= 0.05); // was 0%
    // It waits at most the backstop (16 quanta, at least 100 ms) and one more guard.
    CHECK(r.sessions[1].max_wait <=
          std::max(16 * lazy.quantum, d::yield_backstop_min_ns) + pause + 1 * ms);
  }
}

TEST_CASE("simulation: a priority change reaches its new split within about two quanta") {
  struct move {
    int from, to; ///< session 0's class before and after; session 1 stays normal
  };
  for (const move m : {move{prio::low, prio::normal}, move{prio::high, prio::normal}}) {
    scenario sc;
    sc.duration = 3 * sec;
    sc.warmup = 1500 * ms; // measure from the change on
    sc.sessions = {busy("moved", 1, 1 * ms, m.from), busy("stays")};
    gpushare::settings_change to;
    to.priority = m.to;
    sc.changes.push_back({1 * sec, 0, to});
    const u64 probe = 1 * sec;
    const result r = simulate(sc, probe);
    CAPTURE(m.from);
    // The session that was starved runs within about two quanta (plus a guard) of the change.
    const std::size_t starved = m.from < m.to ? 0 : 1;
    CHECK(r.sessions[starved].first_guard_after <= probe + 2 * 5 * ms + 1 * ms);
    MESSAGE("moved from class " << m.from << ": split after the change " << r.fraction(0) << " / "
                                << r.fraction(1));
    CHECK(std::abs(r.fraction(0) - 0.5) <= 0.02); // was 100% (or 0%) for seconds
  }
}

TEST_CASE("simulation: a capped session stays at its cap, with one thread or several") {
  for (int threads : {1, 3}) {
    scenario sc;
    sc.duration = 4 * sec;
    session_spec capped = busy("capped", 1, 700 * us);
    capped.limit_ppm = 300'000;
    capped.threads = threads;
    capped.stagger = 100 * us;
    sc.sessions = {capped};
    const result r = simulate(sc);
    CAPTURE(threads);
    CHECK(caps_hold(sc, r, 1 * sec));
    const double used =
        static_cast<double>(r.sessions[0].device_ns) / static_cast<double>(r.window);
    MESSAGE(threads << " thread(s) capped at 30%: used " << used * 100 << "%");
    CHECK(used >= 0.25);
  }
}

TEST_CASE("simulation: a waiter is woken far less often than once per holder guard") {
  // The watch: one waiter re-checks a holder that runs short guards once per watch period,
  // instead of being woken at every guard exit.
  scenario sc;
  sc.duration = 2 * sec;
  session_spec shorty = busy("short-guards", 1, 20 * us);
  shorty.quantum = 1 * sec; // holds for long: its peer waits through ~50,000 guards
  sc.sessions = {shorty, busy("peer")};
  sc.sessions[1].quantum = 1 * sec;
  const result r = simulate(sc);
  MESSAGE(r.guards_total << " guards (" << r.lease_guards << " on a lease), " << r.watcher_wakes
                         << " wake-ups of a waiter");
  CHECK(r.watcher_wakes * 10 <= r.guards_total);
  CHECK(r.idle_excess_ns == 0);
}

TEST_CASE(
    "simulation: a turn is not handed back before it ran a guard, however short its quantum") {
  // Before: a turn started with its quantum already used (the overrun carried over from its last
  // turn is a whole quantum when the quantum is shorter than a guard) and was handed back at its
  // first guard entry, and the wake-up it had waited for was charged to it as wall time, so two
  // busy sessions passed the device back and forth without running anything: with 1 us quanta,
  // 2 us guards and 20 us wake-ups, waits of 426 us (99th percentile) and 829 us (longest) for
  // guards of 2 us, where one wake-up and one guard of the peer is the bound. (The same shape on
  // real processes: the host benchmark's cross-process hand-over, 11-16 us before at the median,
  // 150-228 us.)
  for (const u64 quantum : {1 * us, 2 * us, 50 * us}) {
    for (const u64 wake : {5 * us, 20 * us, 100 * us}) {
      CAPTURE(quantum);
      CAPTURE(wake);
      scenario sc;
      sc.seed = quantum + wake;
      sc.duration = 500 * ms;
      sc.warmup = 50 * ms;
      session_spec a = busy("a", 1, 2 * us);
      session_spec b = busy("b", 1, 2 * us);
      a.quantum = b.quantum = quantum;
      sc.sessions = {a, b};
      sc.cpu.wake_latency_max = wake;
      const result r = simulate(sc);
      CHECK(r.overlaps == 0);
      for (std::size_t k = 0; k < 2; ++k) {
        CAPTURE(k);
        u64 longest = 0;
        for (const auto& w : r.sessions[k].waits) longest = std::max(longest, w.end - w.start);
        // The peer's turn: its wake-up, then at most a quantum and a guard (two guards when the
        // quantum is shorter), then this session's own wake-up.
        CHECK(longest <= 2 * wake + quantum + 4 * us);
        CHECK(std::abs(r.fraction(k) - 0.5) <= 0.02);
      }
      // At least one guard per wake-up paid.
      CHECK(r.busy() >= 0.9 * (2.0 * us) / static_cast<double>(2 * us + wake));
    }
  }
}

TEST_CASE("simulation, threads, leases, pauses and wake-ups mixed: no lower guard starts while a "
          "higher class waits") {
  // Issue 40, C7: an independent simulation saw lower-class guards start while a higher class
  // waited in about 2% of random mixes of multi-threaded sessions, leases, pauses and wake-up
  // latency. This mix draws each of them often (1-4 threads a session, every class, pauses up
  // to 7 ms so that sessions run alone on their lease, wake-ups up to 2 ms, signals): none in
  // 300 seeds here, nor in 1,500 of these and 1,500 of rich_scenario's when this was written.
  u64 lease_guards = 0;
  for (u64 seed = 1; seed <= 300; ++seed) {
    rng g{seed * 31337 + 5};
    scenario sc;
    sc.seed = seed;
    const int n = static_cast<int>(g.uniform(2, 4));
    for (int k = 0; k < n; ++k) {
      const u64 c = g.uniform(0, 2);
      session_spec s = busy(std::string("s").append(std::to_string(k)),
                            static_cast<std::uint32_t>(g.uniform(1, 4)), g.uniform(20, 800) * us,
                            c == 0   ? prio::low
                            : c == 1 ? prio::normal
                                     : prio::high);
      s.quantum = g.uniform(1, 5) * ms;
      s.threads = static_cast<int>(g.uniform(1, 4));
      s.stagger = g.uniform(0, 700) * us;
      s.work.guard_max = s.work.guard_min + g.uniform(0, 1000) * us;
      if (g.chance(0.8)) {
        const u64 scale = g.chance(0.5) ? 1 : 10;
        s.work.pause_min = g.uniform(0, 200) * us * scale;
        s.work.pause_max = s.work.pause_min + g.uniform(0, 500) * us * scale;
      }
      if (g.chance(0.2)) {
        s.mode = d::handover_at_yield;
        s.work.per_iteration = static_cast<int>(g.uniform(2, 6));
      }
      sc.sessions.push_back(s);
    }
    sc.cpu.wake_latency_max = g.uniform(0, 2000) * us;
    if (g.chance(0.5)) {
      sc.cpu.timeslice = g.uniform(3, 20) * ms;
      sc.cpu.deschedule_max = g.uniform(0, 3000) * us;
    }
    if (g.chance(0.3)) sc.cpu.spurious_wake_max = g.uniform(1, 5) * ms;
    const result r = simulate(sc);
    CAPTURE(seed);
    CHECK(r.priority_inversions == 0);
    CHECK(r.overlaps == 0);
    CHECK(r.idle_excess_ns == 0);
    CHECK(r.clean_end);
    lease_guards += r.lease_guards;
  }
  CHECK(lease_guards > 1000); // leases were drawn: sessions ran alone between others' pauses
}
