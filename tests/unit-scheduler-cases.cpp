// SPDX-License-Identifier: Apache-2.0
// The scheduler cases an independent simulation found (issue 23, item 2), each as a named scenario
// of the project's own simulation (tests/sim/scheduler_sim.hpp) with the figure it must reach.
// Each printed its "before" figure with the scheduler it was found in; see the comment of each.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/scenarios.hpp"

using namespace sim;

namespace {
/// A session that runs `guard` then does `pause` of host work, over and over.
session_spec periodic(std::string name, u64 guard, u64 pause, int priority = prio::normal) {
  session_spec s = busy(std::move(name), 1, guard, priority);
  s.work.pause_min = s.work.pause_max = pause;
  return s;
}
/// Guard time of `s` per unit of wall time when nothing delays it.
double demand(const session_spec& s) {
  const double g = static_cast<double>(s.work.guard_min + s.work.guard_max) / 2;
  const double p = static_cast<double>(s.work.pause_min + s.work.pause_max) / 2;
  return g / (g + p);
}
} // namespace

// ---------------------------------------------------------------------------------------------
// 1. Credit from nowhere: a newcomer's credit is bounded by one quantum
// ---------------------------------------------------------------------------------------------

TEST_CASE("case 1: a newcomer joining a session that ran alone for seconds gets no banked credit") {
  // Before: the lone session waited 294 ms and the newcomer took 96% of the next 500 ms (the
  // issue measured 299 ms and 96%): the class floor rose only from sessions contending at that
  // instant, so it stayed at 0 while the lone session ran on its lease, and the newcomer was
  // placed 300 ms of virtual time behind it.
  scenario sc;
  sc.duration = 4 * sec;
  sc.warmup = 3 * sec;
  session_spec lone = periodic("lone", 1 * ms, 9 * ms); // demand 10%
  session_spec late = busy("newcomer");
  late.start = 3 * sec + 5 * ms; // during the lone session's host work: the device is free
  sc.sessions = {lone, late};
  const result r = simulate(sc);
  const u64 a = late.start, b = a + 500 * ms;
  const u64 lone_wait = r.sessions[0].max_wait_in(a, b);
  const double lone_share = r.device_fraction_in(0, a, b);
  MESSAGE("after the newcomer joined: the lone session waited at most "
          << lone_wait / 1e6 << " ms and ran " << lone_share * 100 << "% of the time");
  CHECK(r.overlaps == 0);
  CHECK(lone_wait <= 5 * ms + 1 * ms + d::idle_grace_at_guard_ns); // one quantum and a guard
  CHECK(lone_share >= demand(lone) - 0.02); // its whole demand (below its share)
}

TEST_CASE("case 1: a session moved into a class whose only member is between guards") {
  // Before: the member waited up to 379 ms and got 2.9% against its 20% demand: change_class
  // placed the mover at the class floor, which had not moved while the member ran alone.
  scenario sc;
  sc.duration = 4 * sec;
  sc.warmup = 3 * sec;
  session_spec member = periodic("member", 1 * ms, 4 * ms, prio::high); // demand 20%
  session_spec mover = busy("mover", 1, 1 * ms, prio::normal);
  sc.sessions = {member, mover};
  gpushare::settings_change up;
  up.priority = prio::high;
  sc.changes.push_back({3 * sec, 1, up});
  const result r = simulate(sc);
  const u64 a = 3 * sec, b = a + 500 * ms;
  const u64 wait = r.sessions[0].max_wait_in(a, b);
  const double share = r.device_fraction_in(0, a, b);
  MESSAGE("after the move: the member waited at most " << wait / 1e6 << " ms and ran "
                                                       << share * 100 << "% of the time");
  CHECK(wait <= 5 * ms + 1 * ms + d::idle_grace_at_guard_ns);
  CHECK(share >= demand(member) - 0.02);
}

// ---------------------------------------------------------------------------------------------
// 2. The reservation kept the device idle through ordinary host work
// ---------------------------------------------------------------------------------------------

TEST_CASE("case 2: a session's host work between bursts does not keep the device from a peer") {
  // Before: busy 55%: reserved_for's busy test left out the gap in progress, so a session owed
  // time (here: its demand is below its share, so it is owed forever) had the device kept idle
  // for it through its 8 ms of host work.
  for (const int variant : {0, 1}) {
    scenario sc;
    sc.duration = 3 * sec;
    session_spec bursty = busy("bursty");
    bursty.work.per_iteration = 5; // 5 x 1 ms guards, then 8 ms of host work, no yield
    bursty.work.iteration_pause = 8 * ms;
    bursty.work.yields = false;
    if (variant == 1) { // the same with guards of mixed lengths
      bursty.work.guard_min = 500 * us;
      bursty.work.guard_max = 1500 * us;
    }
    sc.sessions = {bursty, busy("peer")};
    const result r = simulate(sc);
    CAPTURE(variant);
    MESSAGE("variant " << variant << ": device busy " << r.busy() * 100 << "%, bursty "
                       << r.fraction(0) * 100 << "% of device time, worst idle in one wait "
                       << r.worst_wait_idle / 1e6 << " ms");
    CHECK(r.busy() >= 0.97);
    CHECK(r.idle_excess_ns == 0); // idle while someone waits: within design.md's allowance
  }
}

// ---------------------------------------------------------------------------------------------
// 3. A lower class gets the gaps a higher-class holder leaves idle beyond its grace
// ---------------------------------------------------------------------------------------------

TEST_CASE("case 3: a lower class gets the gaps of a higher-class holder that idles") {
  // Before: 0% for the lower class in both, with the device 20% and 25% busy: a renewed quantum
  // reset the holder's idle budget before it was ever spent.
  struct variant {
    const char* name;
    std::uint32_t mode;
    u64 quantum, guard, pause;
  };
  for (const variant v :
       {variant{"at_yield, 0.5 ms guards, 2 ms host work", d::handover_at_yield, 5 * ms, 500 * us,
                2 * ms},
        variant{"at_guard, 100 us quantum", d::handover_at_guard, 100 * us, 100 * us, 300 * us}}) {
    scenario sc;
    sc.duration = 3 * sec;
    session_spec high = periodic("high", v.guard, v.pause, prio::high);
    high.mode = v.mode;
    high.quantum = v.quantum;
    sc.sessions = {high, busy("low", 1, 1 * ms, prio::low)};
    const result r = simulate(sc);
    CAPTURE(v.name);
    const double high_run = r.device_fraction_in(0, sc.warmup, sc.duration);
    const double low_run = r.device_fraction_in(1, sc.warmup, sc.duration);
    MESSAGE(v.name << ": the lower class ran " << low_run * 100 << "% of the time, the higher "
                   << high_run * 100 << "% (demand " << demand(high) * 100 << "%), device busy "
                   << r.busy() * 100 << "%");
    CHECK(r.priority_inversions == 0);
    CHECK(low_run >= 0.7); // the gaps: most of the 75-80% the higher class leaves idle
    CHECK(r.busy() >= 0.95);
    // The price, as for any lower-class work: the higher class waits at most one lower guard
    // (1 ms) at the end of each gap.
    CHECK(high_run >=
          static_cast<double>(v.guard) / static_cast<double>(v.guard + v.pause + 1 * ms) - 0.01);
  }
}

// ---------------------------------------------------------------------------------------------
// 4. Pauses as long as guards
// ---------------------------------------------------------------------------------------------

TEST_CASE("case 4: a session whose pauses are as long as its guards gets min(demand, share)") {
  // Before: 2.3% against 37.5% and 3.7% against 50% (the issue: 2.3% and 3.9%): the idle grace
  // ended its turn after a few gaps, it waited a whole turn of its peer, and the catch-up that
  // should have given it the device back needed a busy last turn. Now it hands each gap to the
  // peer as it begins and gets the device back at the peer's next boundary while it is behind:
  // it waits at most one of the peer's guards per guard of its own, and gets min(demand, share)
  // when the peer's guards fill its pauses. A pause the peer's guards do not fill exactly costs
  // it the difference (30 us guards, 50 us pauses next to 30 us guards: two peer guards per
  // pause, 33% instead of 37.5%), and a peer with long guards costs it most of its demand
  // (1 ms guards: 3% and 10%): exclusive arbitration cannot do better without idling the device
  // for it, which the peer's share forbids. (That was issue 23's reading; issue 40 (C8) showed the
  // trade: its pause hold keeps the device idle for it within a bound, unit-scheduler-pause-hold.
  // These are the figures with no hold.)
  struct variant {
    u64 guard, pause, peer_guard;
  };
  for (const variant v : {variant{30 * us, 50 * us, 30 * us}, variant{100 * us, 100 * us, 100 * us},
                          variant{30 * us, 30 * us, 30 * us}, variant{30 * us, 50 * us, 1 * ms},
                          variant{100 * us, 100 * us, 1 * ms}}) {
    scenario sc;
    sc.duration = 3 * sec;
    session_spec p = periodic("pauser", v.guard, v.pause);
    p.pause_hold_ppm = 0;
    sc.sessions = {p, busy("peer", 1, v.peer_guard)};
    const result r = simulate(sc);
    CAPTURE(v.guard);
    CAPTURE(v.pause);
    CAPTURE(v.peer_guard);
    const double got = r.device_fraction_in(0, sc.warmup, sc.duration);
    const double want = std::min(demand(p), 0.5);
    // At most one peer guard of waiting per guard of its own.
    const double bound =
        static_cast<double>(v.guard) / static_cast<double>(v.guard + v.pause + v.peer_guard);
    MESSAGE((v.guard / 1e3) << " us guards, " << v.pause / 1e3 << " us pauses, peer's guards "
                            << v.peer_guard / 1e3 << " us: the pauser ran " << got * 100
                            << "% of the time against min(demand, share) = " << want * 100
                            << "% (bound " << bound * 100 << "%); device busy " << r.busy() * 100
                            << "%");
    CHECK(got >= std::min(want, bound) - 0.01);
    if (v.peer_guard == v.pause) CHECK(got >= want - 0.02); // the peer fills its pauses
    CHECK(r.busy() >= 0.95);
  }
}

// ---------------------------------------------------------------------------------------------
// 5. Priority inversion with multi-threaded higher classes and slow wake-ups
// ---------------------------------------------------------------------------------------------

TEST_CASE("case 5: no lower-class guard starts while a multi-threaded higher class waits") {
  // Before: 4 lower guards over these 300 seeds (2 in one higher-class wait): with wake-ups of
  // 0.5 to 1 ms, try_take's idle takeover ignored the holder's own woken threads, and a holder
  // that had spent its idle budget handed over to the lower class before it looked at its own
  // waiting threads.
  u64 inversions = 0;
  for (u64 seed = 1; seed <= 300; ++seed) {
    rng g{seed * 31};
    scenario sc;
    sc.seed = seed;
    sc.duration = 2 * sec;
    session_spec high = busy("high", 1, g.uniform(50, 800) * us, prio::high);
    high.work.guard_max = high.work.guard_min + g.uniform(0, 800) * us;
    high.work.pause_min = g.uniform(0, 300) * us;
    high.work.pause_max = high.work.pause_min + g.uniform(0, 3000) * us;
    high.threads = static_cast<int>(g.uniform(2, 4));
    high.stagger = g.uniform(0, 1000) * us;
    if (g.chance(0.3)) {
      high.mode = d::handover_at_yield;
      high.work.per_iteration = static_cast<int>(g.uniform(2, 5));
    }
    session_spec low = busy("low", 1, g.uniform(100, 2000) * us, prio::low);
    if (g.chance(0.5)) low.threads = 2;
    sc.sessions = {high, low};
    sc.cpu.wake_latency_max = g.uniform(500, 1000) * us;
    const result r = simulate(sc);
    CAPTURE(seed);
    CHECK(r.priority_inversions == 0);
    CHECK(r.overlaps == 0);
    inversions += r.priority_inversions;
  }
  MESSAGE("lower guards started while a higher thread waited, over 300 seeds: " << inversions);
}

// ---------------------------------------------------------------------------------------------
// 6. A watcher woken early keeps its watch
// ---------------------------------------------------------------------------------------------

TEST_CASE("case 6: a waiter woken by a signal does not abandon the watch of an idle holder") {
  // Before: 7.4 and 7.7 ms of idle beyond the allowance in one wait (12.2 and 15.3 ms idle) in
  // the first scenario: a watcher woken early found its own watch_until in the header, took it
  // for another's and slept 100 ms, and the holder's exits woke nobody because a watch seemed
  // armed. (That scenario now passes for another reason too: the holder hands its gaps over as
  // they begin, case 4.)
  for (const u64 pause_max : {10 * ms, 20 * ms}) {
    scenario sc;
    sc.duration = 3 * sec;
    session_spec holder = periodic("holder", 300 * us, 0);
    holder.work.pause_min = 50 * us;
    holder.work.pause_max = pause_max;
    sc.sessions = {holder, busy("waiter")};
    sc.cpu.spurious_wake_max = 2 * ms; // signals, settings changes
    const result r = simulate(sc);
    CAPTURE(pause_max);
    MESSAGE("host work up to " << pause_max / 1e6 << " ms: worst idle in one wait "
                               << r.worst_wait_idle / 1e6 << " ms; excess over the allowance "
                               << r.idle_excess_ns / 1e6 << " ms");
    CHECK(r.idle_excess_ns == 0);
    CHECK(r.overlaps == 0);
  }
  // The watch itself: a busy higher-class holder with a rare 10 ms gap, watched by a lower-class
  // waiter that signals wake every millisecond or so. With the watch kept, the waiter takes the
  // gap once the grace is spent; an abandoned watch let the gap run on (worst 0.9-1.1 ms).
  for (u64 seed = 1; seed <= 3; ++seed) {
    scenario sc;
    sc.seed = seed;
    sc.duration = 4 * sec;
    session_spec holder = busy("holder", 1, 1 * ms, prio::high);
    holder.work.per_iteration = 200; // 200 ms of guards, then 10 ms of host work
    holder.work.iteration_pause = 10 * ms;
    holder.work.yields = false;
    sc.sessions = {holder, busy("waiter", 1, 1 * ms, prio::low)};
    sc.cpu.spurious_wake_max = 1 * ms;
    const result r = simulate(sc);
    CAPTURE(seed);
    MESSAGE("a rare gap of a busy holder: worst idle in one wait " << r.worst_wait_idle / 1e6
                                                                   << " ms");
    CHECK(r.worst_wait_idle <= d::idle_grace_at_guard_ns + 50 * us);
  }
}

// ---------------------------------------------------------------------------------------------
// 7. The device is never granted to a session its cap holds back while another can run
// ---------------------------------------------------------------------------------------------

TEST_CASE("case 7: a capped multi-threaded session is not granted the device while paced") {
  // Before: idle beyond the allowance in 6 of the first 46 seeds (up to 8.0 ms): best_claim did
  // not look at pacing, a capped session's registered threads woke only to pause, and the
  // device sat unstarted for the 10 ms start grace.
  u64 worst = 0;
  for (u64 seed = 1; seed <= 200; ++seed) {
    rng g{seed * 17};
    scenario sc;
    sc.seed = seed;
    sc.duration = 2 * sec;
    session_spec capped = busy("capped", 1, g.uniform(100, 1500) * us);
    capped.limit_ppm = static_cast<std::uint32_t>(g.uniform(10, 60)) * 10'000;
    capped.threads = static_cast<int>(g.uniform(2, 4));
    capped.stagger = g.uniform(0, 1000) * us;
    session_spec peer = busy("peer", 1, g.uniform(100, 1500) * us);
    if (g.chance(0.5)) peer.work.pause_max = g.uniform(0, 2000) * us;
    sc.sessions = {capped, peer};
    sc.cpu.wake_latency_max = g.uniform(0, 1000) * us;
    const result r = simulate(sc);
    CAPTURE(seed);
    CHECK(caps_hold(sc, r, 1 * sec));
    CHECK(r.idle_excess_ns == 0);
    worst = std::max(worst, r.idle_excess_ns);
  }
  MESSAGE("worst idle beyond the allowance over 200 seeds: " << worst / 1e6 << " ms");
}

// ---------------------------------------------------------------------------------------------
// 8. A quantum is bounded in wall time
// ---------------------------------------------------------------------------------------------

TEST_CASE("case 8: guards that account little device time still hand over in wall time") {
  // Before: guards reporting 0 device time (set_device_time(0), captures) starved an equal peer
  // for the whole run; at 10% of wall time, the peer waited 50 ms and got 9%.
  for (const std::uint32_t ppm : {0u, 100'000u, 500'000u}) {
    scenario sc;
    sc.duration = 3 * sec;
    session_spec odd = busy("accounts-little");
    odd.work.accounted_ppm = ppm;
    sc.sessions = {odd, busy("peer")};
    const result r = simulate(sc);
    CAPTURE(ppm);
    const double peer = r.device_fraction_in(1, sc.warmup, sc.duration);
    const u64 wait = r.sessions[1].max_wait;
    MESSAGE("accounted " << ppm / 1e4 << "% of wall time: the peer ran " << peer * 100
                         << "% of the time, waited at most " << wait / 1e6 << " ms");
    // A turn lasts at most a quantum of wall time and a guard when it accounts less than half of
    // it (issue 40, C10: the peer waited 11 ms at 0% and 10%), at most two quanta otherwise.
    CHECK(wait <= (ppm < 500'000 ? 1 : 2) * 5 * ms + 1 * ms);
    CHECK(peer >= 0.30);
  }
}

TEST_CASE("the at_yield backstop has an absolute cap, and is never shorter than a quantum") {
  d::slot_record s{};
  s.settings.handover_mode = d::handover_at_yield;
  s.settings.quantum_ns = 5 * ms;
  CHECK(d::yield_backstop(s) == d::yield_backstop_min_ns); // 16 x 5 ms = 80 ms, at least 100 ms
  s.settings.quantum_ns = 20 * ms;
  CHECK(d::yield_backstop(s) == 320 * ms);
  s.settings.quantum_ns = 100 * ms; // 16 quanta would be 1.6 s: the cap
  CHECK(d::yield_backstop(s) == d::yield_backstop_max_ns);
  s.settings.quantum_ns = 10 * sec;        // before: 160 s
  CHECK(d::yield_backstop(s) == 10 * sec); // one quantum: the cap never cuts a quantum short
}
