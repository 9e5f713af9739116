// SPDX-License-Identifier: Apache-2.0
// Scenario builders and checks shared by the scheduler simulation's tests (scheduler_sim.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "scheduler_sim.hpp"

namespace sim {

inline session_spec busy(std::string name, std::uint32_t share = 1, u64 guard = 1 * ms,
                         int priority = prio::normal) {
  session_spec s;
  s.name = std::move(name);
  s.share = share;
  s.priority = priority;
  s.work.guard_min = s.work.guard_max = guard;
  return s;
}

/// Device time `sc`'s sessions may use in any window of `window` at their cap, plus one guard
/// per thread (pacing is per thread: concurrent threads may each start one guard).
inline bool caps_hold(const scenario& sc, const result& r, u64 window) {
  for (std::size_t k = 0; k < sc.sessions.size(); ++k) {
    const session_spec& s = sc.sessions[k];
    if (s.limit_ppm >= 1'000'000) continue;
    const u64 allowed = d::mul_div(window + d::cap_burst_ns, s.limit_ppm, 1'000'000) +
                        static_cast<u64>(s.threads) * s.work.guard_max;
    for (u64 from = 0; from + window <= sc.duration; from += window / 10) {
      u64 used = 0;
      for (const interval& i : r.sessions[k].intervals) { // the device time it accounted
        const u64 a = std::max(i.start, from), b = std::min(i.end, from + window);
        if (b > a) used += d::mul_div(b - a, s.work.accounted_ppm, 1'000'000);
      }
      if (used > allowed) {
        MESSAGE("session " << s.name << " used " << used << " ns in [" << from << ", "
                           << from + window << "), allowed " << allowed);
        return false;
      }
    }
  }
  return true;
}

/// A random scenario: 2-4 sessions of random classes, shares, quanta, handover points, threads,
/// guard lengths, pauses and caps, on a CPU with random delays.
inline scenario random_scenario(u64 seed) {
  rng g{seed * 7919};
  scenario sc;
  sc.seed = seed;
  sc.duration = 2 * sec;
  const int n = static_cast<int>(g.uniform(2, 4));
  for (int k = 0; k < n; ++k) {
    session_spec s;
    s.name = std::string("s").append(std::to_string(k));
    s.priority = g.chance(0.7) ? prio::normal : (g.chance(0.5) ? prio::low : prio::high);
    s.share = static_cast<std::uint32_t>(g.uniform(1, 4));
    s.quantum = g.uniform(1, 5) * ms;
    if (g.chance(0.2)) {
      s.mode = d::handover_at_yield;
      s.work.per_iteration = static_cast<int>(g.uniform(2, 6));
      s.work.iteration_pause = g.chance(0.5) ? g.uniform(0, 3) * ms : 0;
    }
    s.threads = g.chance(0.8) ? 1 : static_cast<int>(g.uniform(2, 3));
    s.stagger = g.uniform(0, 700) * us;
    s.work.guard_min = g.uniform(20, 500) * us;
    s.work.guard_max = s.work.guard_min + g.uniform(0, 1500) * us;
    if (g.chance(0.4)) {
      s.work.pause_min = g.uniform(0, 100) * us;
      s.work.pause_max = s.work.pause_min + g.uniform(0, 300) * us;
    }
    if (g.chance(0.15)) s.limit_ppm = static_cast<std::uint32_t>(g.uniform(20, 70)) * 10'000;
    if (g.chance(0.2)) s.start = g.uniform(0, 500) * ms;
    if (g.chance(0.2)) s.stop = g.uniform(1000, 1900) * ms;
    sc.sessions.push_back(s);
  }
  sc.cpu.wake_latency_max = g.uniform(0, 2000) * us;
  if (g.chance(0.7)) {
    sc.cpu.timeslice = g.uniform(3, 20) * ms;
    sc.cpu.deschedule_max = g.uniform(0, 5000) * us;
  }
  return sc;
}

/// random_scenario(seed) with the workloads of issue 23's cases added at random (from a second
/// generator, so the first one's draws stay as they were): bursts of guards then host work
/// without a yield, guards that account only part of their wall time, compute guarantees, and
/// signals that wake sleeping threads without ending their wait.
inline scenario rich_scenario(u64 seed) {
  scenario sc = random_scenario(seed);
  rng g{seed * 104723 + 17};
  for (session_spec& s : sc.sessions) {
    if (s.mode == d::handover_at_guard && g.chance(0.15)) {
      s.work.per_iteration = static_cast<int>(g.uniform(3, 10));
      s.work.iteration_pause = g.uniform(1, 10) * ms;
      s.work.yields = false;
    }
    if (g.chance(0.1))
      s.work.accounted_ppm = static_cast<std::uint32_t>(g.uniform(0, 100)) * 10'000;
  }
  if (g.chance(0.3)) sc.cpu.spurious_wake_max = g.uniform(1, 5) * ms;
  // Some sessions of one class form a group (detail/group.hpp): one virtual time for them all.
  if (g.chance(0.3)) {
    const std::uint32_t share = static_cast<std::uint32_t>(g.uniform(1, 4));
    const int prio0 = sc.sessions[0].priority;
    for (session_spec& s : sc.sessions)
      if (s.priority == prio0 && g.chance(0.7)) {
        s.group = "grp";
        s.group_share = share;
      }
  }
  return sc;
}

/// Busy sessions in groups and alone: each group gets its group share as one session would,
/// however many members it has (1 to 4), split among them.
inline scenario grouped_busy_scenario(u64 seed) {
  rng g{seed * 15485863};
  scenario sc;
  sc.seed = seed;
  sc.duration = 5 * sec;
  sc.warmup = 500 * ms;
  sc.slot_count = 32; // up to 12 sessions, in odd slots
  const int entities = static_cast<int>(g.uniform(2, 3));
  for (int e = 0; e < entities; ++e) {
    const std::uint32_t share = static_cast<std::uint32_t>(g.uniform(1, 4));
    const int members = g.chance(0.3) ? 1 : static_cast<int>(g.uniform(1, 4));
    const bool grouped = members > 1 || g.chance(0.5);
    for (int m = 0; m < members; ++m) {
      session_spec s =
          busy(std::string("e").append(std::to_string(e)).append("m").append(std::to_string(m)),
               static_cast<std::uint32_t>(g.uniform(1, 4))); // ignored in a group
      if (grouped) {
        s.group = std::string("g").append(std::to_string(e));
        s.group_share = share;
      } else {
        s.share = share;
      }
      s.quantum = g.uniform(2, 6) * ms;
      s.work.guard_min = g.uniform(100, 800) * us;
      s.work.guard_max = s.work.guard_min + g.uniform(0, 600) * us;
      sc.sessions.push_back(s);
    }
  }
  return sc;
}

/// What group (or lone session) `name` of `sc` should get of the device: its share over the
/// sum of every group's and lone session's share.
inline double expected_entity_fraction(const scenario& sc, const std::string& entity) {
  double total = 0, mine = 0;
  std::vector<std::string> seen;
  for (const auto& s : sc.sessions) {
    const std::string id = s.group.empty() ? s.name : s.group;
    if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
    seen.push_back(id);
    const double share = s.group.empty() ? s.share : s.group_share;
    total += share;
    if (id == entity) mine = share;
  }
  return mine / total;
}

/// Busy sessions of one class with mixed guard lengths: their device time must follow shares.
inline scenario busy_scenario(u64 seed, bool noisy) {
  rng g{seed * 104729};
  scenario sc;
  sc.seed = seed;
  sc.duration = 5 * sec;
  sc.warmup = 500 * ms;
  const int n = static_cast<int>(g.uniform(2, 4));
  for (int k = 0; k < n; ++k) {
    session_spec s = busy(std::string("b").append(std::to_string(k)),
                          static_cast<std::uint32_t>(g.uniform(1, 4)));
    s.quantum = g.uniform(2, 6) * ms;
    s.work.guard_min = g.uniform(20, 800) * us;
    s.work.guard_max = s.work.guard_min + g.uniform(0, 1200) * us;
    sc.sessions.push_back(s);
  }
  if (noisy) { // each session keeps the CPU at least ~90% of the time: its share is reachable
    sc.cpu.wake_latency_max = g.uniform(100, 1000) * us;
    sc.cpu.timeslice = g.uniform(10, 30) * ms;
    sc.cpu.deschedule_max = g.uniform(500, 2000) * us;
  }
  return sc;
}

inline double expected_fraction(const scenario& sc, std::size_t k) {
  double total = 0;
  for (const auto& s : sc.sessions) total += s.share;
  return sc.sessions[k].share / total;
}

} // namespace sim
