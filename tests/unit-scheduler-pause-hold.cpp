// SPDX-License-Identifier: Apache-2.0
// Pause hold (issue 40, C8 and C9; docs/design.md, "Pause hold"): a session below its share keeps
// the device through its short pauses when handing them over would cost it one of a peer's
// longer guards each, within its pause_hold bound on the idle this costs. Named scenarios with
// their figures, seeded random mixes of busy peers and pausing sessions, and the same mixes
// with no hold, for the trade (share against utilisation).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/scenarios.hpp"

using namespace sim;

namespace {

session_spec pauser(std::string name, u64 guard_min, u64 guard_max, u64 pause_min, u64 pause_max,
                    std::uint32_t share = 1) {
  session_spec s = busy(std::move(name), share, guard_min);
  s.work.guard_max = guard_max;
  s.work.pause_min = pause_min;
  s.work.pause_max = pause_max;
  return s;
}

double mean(u64 a, u64 b) { return static_cast<double>(a + b) / 2; }

/// Whether `s`'s pauses fit its pause hold: each within pause_hold_burst_ns, and their mean
/// within pause_hold times its mean guard (then holding through all of them is within bound).
bool hold_sustains(const session_spec& s) {
  const double ratio = static_cast<double>(s.pause_hold_ppm) / 1e6;
  return s.work.pause_max <= d::pause_hold_burst_ns &&
         mean(s.work.pause_min, s.work.pause_max) <=
             ratio * mean(s.work.guard_min, s.work.guard_max);
}

/// `sc` with every session's pause hold set to `ppm`.
scenario with_hold(scenario sc, std::uint32_t ppm) {
  for (session_spec& s : sc.sessions) s.pause_hold_ppm = ppm;
  return sc;
}

/// Busy peers and pausing sessions of one class, random shares, guards and pauses (pauses up to
/// 200 us, most within the default hold), on a CPU with or without wake-up latency.
scenario pause_mix(u64 seed, bool latency) {
  rng g{seed * 7727 + 3};
  scenario sc;
  sc.seed = seed;
  sc.duration = 4 * sec;
  sc.warmup = 500 * ms;
  const int n = static_cast<int>(g.uniform(2, 4));
  for (int k = 0; k < n; ++k) {
    const std::uint32_t share = static_cast<std::uint32_t>(g.uniform(1, 3));
    const std::string name = std::string("s").append(std::to_string(k));
    const u64 guard = g.uniform(30, 1000) * us;
    const u64 guard_max = guard + g.uniform(0, guard / us) * us;
    if (k == 0 || g.chance(0.5)) { // a pausing session (at least one)
      const u64 pause = g.uniform(20, 150) * us;
      sc.sessions.push_back(
          pauser(name, guard, guard_max, pause, pause + g.uniform(0, 50) * us, share));
    } else {
      session_spec b = busy(name, share, guard);
      b.work.guard_max = guard_max;
      sc.sessions.push_back(b);
    }
  }
  if (latency) sc.cpu.wake_latency_max = g.uniform(10, 200) * us;
  return sc;
}

} // namespace

TEST_CASE(
    "pause hold: a session with short pauses next to a peer with long guards gets its share") {
  // Before (issue 40, C8; no hold, as case 4 of unit-scheduler-cases): 3.0%, 9.6%, 28.0% and
  // 15.7% of the device time against 50%: each gap handed over cost one of the peer's 1 ms
  // guards. With the default hold (2x): 50% of the device time used, the device 55-92% busy.
  struct variant {
    u64 guard_min, guard_max, pause_min, pause_max, peer_guard;
    std::uint32_t peer_share;
  };
  for (const variant v : {variant{30 * us, 30 * us, 50 * us, 50 * us, 1 * ms, 1},
                          variant{100 * us, 100 * us, 100 * us, 100 * us, 1 * ms, 1},
                          variant{300 * us, 300 * us, 50 * us, 100 * us, 1 * ms, 1},
                          variant{30 * us, 300 * us, 50 * us, 100 * us, 1 * ms, 1},
                          variant{100 * us, 200 * us, 50 * us, 150 * us, 500 * us, 2},
                          variant{50 * us, 50 * us, 80 * us, 80 * us, 2 * ms, 3}}) {
    scenario sc;
    sc.duration = 3 * sec;
    sc.sessions = {pauser("pauser", v.guard_min, v.guard_max, v.pause_min, v.pause_max),
                   busy("peer", v.peer_share, v.peer_guard)};
    const result held = simulate(sc);
    const result none = simulate(with_hold(sc, 0));
    const double share = 1.0 / (1.0 + v.peer_share);
    const double wall = held.device_fraction_in(0, sc.warmup, sc.duration);
    CAPTURE(v.guard_min);
    CAPTURE(v.pause_min);
    CAPTURE(v.peer_guard);
    MESSAGE("guards " << v.guard_min / 1e3 << "-" << v.guard_max / 1e3 << " us, pauses "
                      << v.pause_min / 1e3 << "-" << v.pause_max / 1e3 << " us, peer's guards "
                      << v.peer_guard / 1e3 << " us, share " << share * 100 << "%: held "
                      << held.fraction(0) * 100 << "% of the device time used (busy "
                      << held.busy() * 100 << "%), no hold " << none.fraction(0) * 100 << "% (busy "
                      << none.busy() * 100 << "%)");
    REQUIRE(hold_sustains(sc.sessions[0]));
    CHECK(std::abs(held.fraction(0) - share) <= 0.02); // its share of the device time used
    CHECK(held.fraction(1) >= 1 - share - 0.02);       // and the peer its own
    CHECK(none.fraction(0) < share - 0.05);            // which it was far from with no hold
    // The bound: the idle it costs is at most pause_hold (2x) its device time, plus the gaps
    // every exclusive handover leaves (1%).
    CHECK(1 - held.busy() <= 2 * wall + 0.01);
    CHECK(held.overlaps == 0);
    CHECK(held.idle_excess_ns == 0);
  }
}

TEST_CASE("pause hold: pauses a peer's short guards fill, or pauses beyond the bound, cost no "
          "utilisation for nothing") {
  // A peer whose guards are no longer than the hold's longest pause fills the pauses: no hold
  // (busy as without it). Pauses beyond the bound (100 us after 30 us guards at 2x) are held
  // only as far as the bound allows: the pauser gets at least what it got with no hold, and
  // the idle stays within the bound.
  struct variant {
    u64 guard, pause, peer_guard;
  };
  for (const variant v : {variant{30 * us, 50 * us, 30 * us}, variant{100 * us, 100 * us, 100 * us},
                          variant{30 * us, 30 * us, 30 * us}, variant{30 * us, 100 * us, 1 * ms},
                          variant{50 * us, 190 * us, 1 * ms}}) {
    scenario sc;
    sc.duration = 3 * sec;
    sc.sessions = {pauser("pauser", v.guard, v.guard, v.pause, v.pause),
                   busy("peer", 1, v.peer_guard)};
    const result held = simulate(sc);
    const result none = simulate(with_hold(sc, 0));
    CAPTURE(v.guard);
    CAPTURE(v.pause);
    CAPTURE(v.peer_guard);
    MESSAGE((v.guard / 1e3) << " us guards, " << v.pause / 1e3 << " us pauses, peer's guards "
                            << v.peer_guard / 1e3 << " us: held " << held.fraction(0) * 100
                            << "% (busy " << held.busy() * 100 << "%), no hold "
                            << none.fraction(0) * 100 << "% (busy " << none.busy() * 100 << "%)");
    CHECK(held.fraction(0) >= none.fraction(0) - 0.005);
    if (v.peer_guard <= d::pause_hold_burst_ns) CHECK(held.busy() >= none.busy() - 0.005);
    const double wall = held.device_fraction_in(0, sc.warmup, sc.duration);
    CHECK(1 - held.busy() <= 2 * wall + 0.01);
    CHECK(held.idle_excess_ns == 0);
  }
}

TEST_CASE("pause hold, random mixes of busy and pausing sessions: every session within 2 points "
          "of its share of the device time used") {
  // Issue 40, C9: with no hold, random mixes were off by up to 35-42 points. Pauses up to 200 us
  // that the default hold sustains: each session gets its share of the device time used within
  // 2 points, with and without wake-up latency; the hold never leaves a session below what it
  // got with no hold.
  int sustained = 0, worst_seed = 0;
  double worst = 0, worst_none = 0;
  for (const bool latency : {false, true}) {
    for (u64 seed = 1; seed <= 40; ++seed) {
      const scenario sc = pause_mix(seed, latency);
      if (!std::all_of(sc.sessions.begin(), sc.sessions.end(), [](const session_spec& s) {
            return s.work.pause_max == 0 || hold_sustains(s);
          }))
        continue;
      ++sustained;
      const result r = simulate(sc);
      const result none = simulate(with_hold(sc, 0));
      CAPTURE(latency);
      CAPTURE(seed);
      CHECK(r.overlaps == 0);
      CHECK(r.idle_excess_ns == 0);
      for (std::size_t k = 0; k < sc.sessions.size(); ++k) {
        CAPTURE(k);
        const double off = std::abs(r.fraction(k) - expected_fraction(sc, k));
        CHECK(off <= 0.02);
        if (off > worst) {
          worst = off;
          worst_seed = static_cast<int>(seed);
        }
        worst_none = std::max(worst_none, std::abs(none.fraction(k) - expected_fraction(sc, k)));
      }
    }
  }
  MESSAGE(sustained << " mixes the hold sustains: worst " << worst * 100 << " points off (seed "
                    << worst_seed << "); with no hold, worst " << worst_none * 100 << " points");
  CHECK(sustained >= 30);
}

TEST_CASE("holds_through: each condition of the pause hold, and the debt's leak") {
  // Slot 0 holds, below its share; slot 1 (equal class, 1 ms guards) waits.
  std::vector<d::slot_record> slots(2);
  auto header = std::make_unique<d::table_header>();
  const d::table_view t{header.get(), slots.data(), 2};
  for (std::uint32_t i = 0; i < 2; ++i) {
    d::slot_settings st{};
    st.priority = prio::normal;
    st.share = 1;
    st.quantum_ns = 5 * ms;
    st.handover_mode = d::handover_at_guard;
    st.compute_limit_ppm = 1'000'000;
    st.pause_hold_ppm = d::default_pause_hold_ppm;
    d::join_slot(t, i, {}, st);
  }
  d::slot_record &hs = slots[0], &ws = slots[1];
  d::add_waiter(t, 1, 0);
  ws.stats.guards = 10;
  ws.stats.device_ns = 10 * ms;             // its guards: 1 ms
  ws.compute.vtime = d::quantum_vt(hs) + 1; // hs behind by more than a quantum
  CHECK(d::holds_through(hs, ws, 0, &t));
  CHECK(d::holds_through(hs, ws, d::pause_hold_burst_ns - 1, &t));
  CHECK_FALSE(d::holds_through(hs, ws, d::pause_hold_burst_ns, &t)); // the gap ran over
  hs.hold_debt_ns = d::pause_hold_burst_ns;                          // its debt spent
  CHECK_FALSE(d::holds_through(hs, ws, 0, &t));
  // Device time drains the debt by pause_hold (2x) of it: 100 us of guards, 200 us of debt.
  d::account_device_time(t, hs, 100 * us, false, 0);
  CHECK(hs.hold_debt_ns == 0);
  ws.compute.vtime = hs.compute.vtime + d::quantum_vt(hs) + 1; // (its guards moved it on)
  CHECK(d::holds_through(hs, ws, 0, &t));
  ws.compute.vtime = hs.compute.vtime + d::quantum_vt(hs); // behind by one quantum: not below
  CHECK_FALSE(d::holds_through(hs, ws, 0, &t));
  ws.compute.vtime = hs.compute.vtime + d::quantum_vt(hs) + 1;
  CHECK(d::holds_through(hs, ws, 0, &t));
  ws.stats.device_ns = 10 * d::pause_hold_burst_ns; // the waiter's guards fill a pause
  CHECK_FALSE(d::holds_through(hs, ws, 0, &t));
  ws.stats.device_ns = 10 * ms;
  hs.settings.pause_hold_ppm = 0; // none
  CHECK_FALSE(d::holds_through(hs, ws, 0, &t));
  hs.settings.pause_hold_ppm = d::default_pause_hold_ppm;
  hs.settings.handover_mode = d::handover_at_yield; // holds until its yield anyway
  CHECK_FALSE(d::holds_through(hs, ws, 0, &t));
  hs.settings.handover_mode = d::handover_at_guard;
  ws.settings.priority = prio::high; // another class: the class rules decide
  CHECK_FALSE(d::holds_through(hs, ws, 0, &t));
  ws.settings.priority = prio::normal;
  CHECK(d::holds_through(hs, ws, 0, &t));
}
