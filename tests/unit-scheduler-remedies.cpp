// SPDX-License-Identifier: Apache-2.0
// Remedies against a holder that keeps the device (issue 23, item 4) and against strict priority
// starving a lower class (the compute guarantee), in the project's simulation
// (tests/sim/scheduler_sim.hpp). The multi-process tests are in mp-remedies.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/scenarios.hpp"

using namespace sim;

namespace {
/// The p-th percentile (0..100) of the waits of a session that began in [a, b).
u64 wait_percentile(const session_result& r, double p, u64 a, u64 b) {
  std::vector<u64> w;
  for (const wait_record& x : r.waits)
    if (x.start >= a && x.start < b) w.push_back(x.end - x.start);
  if (w.empty()) return 0;
  std::sort(w.begin(), w.end());
  const auto k = static_cast<std::size_t>(p / 100.0 * static_cast<double>(w.size() - 1));
  return w[k];
}
} // namespace

TEST_CASE("strict priority starves a busy lower class; a compute guarantee keeps its share") {
  // The default stays strict: a busy higher class takes all of the device (0.0% for the lower
  // class, as a new user found). A guarantee gives the lower class its share back at the price
  // the issue names: a higher-class request waits up to one lower guard each time.
  for (const u64 low_guard : {1 * ms, 10 * ms, 50 * ms}) {
    for (const std::uint32_t guarantee : {0u, 100'000u, 250'000u}) {
      scenario sc;
      sc.duration = 6 * sec;
      sc.warmup = 1 * sec;
      session_spec high = busy("high", 1, 1 * ms, prio::high);
      high.work.pause_min = high.work.pause_max = 200 * us; // requests with host work between
      session_spec low = busy("low", 1, low_guard, prio::low);
      low.guarantee_ppm = guarantee;
      sc.sessions = {high, low};
      const result r = simulate(sc);
      const double low_run = r.device_fraction_in(1, sc.warmup, sc.duration);
      const u64 p99 = wait_percentile(r.sessions[0], 99, sc.warmup, sc.duration);
      const u64 worst = r.sessions[0].max_wait;
      CAPTURE(low_guard);
      CAPTURE(guarantee);
      MESSAGE("lower guards of " << low_guard / 1e6 << " ms, guarantee " << guarantee / 1e4
                                 << "%: the lower class ran " << low_run * 100
                                 << "% of the time; the higher class's waits p99 " << p99 / 1e6
                                 << " ms, worst " << worst / 1e6 << " ms");
      CHECK(r.overlaps == 0);
      if (guarantee == 0) {
        CHECK(low_run < 0.2); // strict: it runs only in the higher class's gaps
      } else {
        CHECK(low_run >= guarantee / 1e6 - 0.01);
        // A higher-class request waits at most one lower guard (and a little CPU time).
        CHECK(worst <= low_guard + 1 * ms);
      }
    }
  }
}

TEST_CASE("a compute guarantee is a floor, not a cap, and holds among equal sessions too") {
  scenario sc;
  sc.duration = 4 * sec;
  sc.warmup = 1 * sec;
  session_spec a = busy("a");
  session_spec b = busy("b", 9); // share 9: a would get 10% without a guarantee
  a.guarantee_ppm = 300'000;
  sc.sessions = {a, b};
  const result r = simulate(sc);
  MESSAGE("share 1 of 10 with a 30% guarantee: " << r.fraction(0) * 100 << "%");
  CHECK(r.fraction(0) >= 0.29);
  CHECK(r.fraction(0) <= 0.40); // it is not held above what it is owed for long
}

TEST_CASE("compute guarantees over seeded random mixes: each busy guaranteed session gets it") {
  // 2-4 busy sessions of random classes, shares, guard lengths and quanta; some with a
  // guarantee, together at most 80%, on a CPU whose wake-ups take up to 0.5 ms. Property: each
  // guaranteed session gets its guarantee, within 2 points, less what switching costs it: a turn
  // its guarantee wins is one guard long, and each costs a wake-up (guard / (guard + wake-up)).
  for (u64 seed = 1; seed <= 40; ++seed) {
    rng g{seed * 6151};
    scenario sc;
    sc.seed = seed;
    sc.duration = 4 * sec;
    sc.warmup = 1 * sec;
    const int n = static_cast<int>(g.uniform(2, 4));
    std::uint32_t left = 800'000;
    u64 longest = 0;
    for (int k = 0; k < n; ++k) {
      session_spec s = busy(std::string("g").append(std::to_string(k)),
                            static_cast<std::uint32_t>(g.uniform(1, 4)), g.uniform(100, 3000) * us,
                            static_cast<int>(g.uniform(0, 3)));
      s.quantum = g.uniform(1, 6) * ms;
      if (g.chance(0.6) && left >= 50'000) {
        s.guarantee_ppm = static_cast<std::uint32_t>(g.uniform(5, left / 10'000)) * 10'000;
        left -= s.guarantee_ppm;
      }
      longest = std::max(longest, s.work.guard_max);
      sc.sessions.push_back(s);
    }
    sc.cpu.wake_latency_max = g.uniform(0, 500) * us;
    const result r = simulate(sc);
    CAPTURE(seed);
    CHECK(r.overlaps == 0);
    for (std::size_t k = 0; k < sc.sessions.size(); ++k) {
      CAPTURE(k);
      const double got = r.device_fraction_in(k, sc.warmup, sc.duration);
      const double guard = static_cast<double>(sc.sessions[k].work.guard_min);
      const double switching = guard / (guard + static_cast<double>(sc.cpu.wake_latency_max));
      CHECK(got >= sc.sessions[k].guarantee_ppm / 1e6 * switching - 0.02);
    }
  }
}

TEST_CASE("max_guard: a holder stuck in one guard loses the device at its bound") {
  for (const u64 bound : {u64{0}, 100 * ms}) {
    scenario sc;
    sc.duration = 4 * sec;
    session_spec stuck = busy("stuck");
    stuck.work.stuck_every = 500; // its 500th guard lasts 2 s (stopped in a debugger, say)
    stuck.work.stuck_len = 2 * sec;
    stuck.max_guard = bound;
    sc.sessions = {stuck, busy("peer")};
    const result r = simulate(sc);
    CAPTURE(bound);
    MESSAGE("bound " << bound / 1e6 << " ms: the peer waited at most "
                     << r.sessions[1].max_wait / 1e6 << " ms; the stuck session's books "
                     << r.sessions[0].books_device_ns / 1e6 << " ms of "
                     << r.sessions[0].all_guard_ns / 1e6 << " ms run");
    if (bound == 0) {
      CHECK(r.sessions[1].max_wait >= 1900 * ms); // exclusive: it waits the whole stuck guard
    } else {
      CHECK(r.sessions[1].max_wait <= bound + 6 * ms); // the bound, from the last boundary
      CHECK(r.sessions[1].max_wait >= bound - 6 * ms);
    }
    // The stuck guard's time is accounted when it ends, revoked or not.
    CHECK(r.sessions[0].books_device_ns == r.sessions[0].all_guard_ns);
    CHECK(r.clean_end);
  }
}
