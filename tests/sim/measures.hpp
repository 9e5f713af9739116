// SPDX-License-Identifier: Apache-2.0
// What the scheduler simulation (scheduler_sim.hpp) measures: each session's guards and waits,
// and the device's busy and idle time, with the windowed figures the tests check.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace sim {

using u64 = std::uint64_t;

/// Guard intervals of one session, for window checks.
struct interval {
  u64 start, end;
};

/// One wait for the device: when it began and ended (a guard's or a yield's).
struct wait_record {
  u64 start, end;
};

struct session_result {
  u64 device_ns = 0; ///< accounted device time in [warmup, duration]
  u64 guards = 0;    ///< guards started in [warmup, duration]
  u64 max_wait = 0;  ///< longest wait for the device that ended in [warmup, duration]
  u64 first_guard_after = UINT64_MAX;   ///< when its first guard started at or after `probe_at`
  u64 all_guards = 0, all_guard_ns = 0; ///< every guard it ran, and their time (the truth)
  u64 books_guards = 0, books_device_ns = 0; ///< what its slot said when it left (the books)
  std::vector<interval> intervals;
  std::vector<wait_record> waits;

  /// Guard wall time inside [a, b) (the truth, whatever was accounted).
  u64 busy_in(u64 a, u64 b) const {
    u64 t = 0;
    for (const interval& i : intervals) {
      const u64 x = std::max(i.start, a), y = std::min(i.end, b);
      if (y > x) t += y - x;
    }
    return t;
  }
  /// The longest wait that began in [a, b).
  u64 max_wait_in(u64 a, u64 b) const {
    u64 m = 0;
    for (const wait_record& w : waits)
      if (w.start >= a && w.start < b) m = std::max(m, w.end - w.start);
    return m;
  }
};

struct result {
  std::vector<session_result> sessions;
  u64 window = 0;              ///< duration - warmup
  u64 busy_ns = 0;             ///< time some guard ran, in [warmup, duration]
  u64 overlaps = 0;            ///< guards that started while another session's guard ran
  u64 priority_inversions = 0; ///< guards started while a thread of a higher class waited (not
                               ///< paced; the starter not owed its compute guarantee)
  u64 idle_excess_ns = 0;      ///< worst (idle during a wait) - (its allowance), when positive
  u64 worst_wait_idle = 0;     ///< the largest idle time seen during one wait
  u64 handovers = 0;
  u64 watcher_wakes = 0; ///< wakes of waiting threads that did not end their wait
  u64 guards_total = 0;
  u64 lease_guards = 0;   ///< guards that entered on their session's lease
  bool clean_end = false; ///< after everyone stopped: no waiters, empty mask, no holder

  double fraction(std::size_t k) const {
    u64 total = 0;
    for (const auto& s : sessions) total += s.device_ns;
    return total ? static_cast<double>(sessions[k].device_ns) / static_cast<double>(total) : 0;
  }
  double busy() const { return static_cast<double>(busy_ns) / static_cast<double>(window); }
  /// Session k's share of all guard wall time inside [a, b).
  double share_in(std::size_t k, u64 a, u64 b) const {
    u64 total = 0;
    for (const auto& s : sessions) total += s.busy_in(a, b);
    return total ? static_cast<double>(sessions[k].busy_in(a, b)) / static_cast<double>(total) : 0;
  }
  /// Session k's guard wall time as a fraction of [a, b).
  double device_fraction_in(std::size_t k, u64 a, u64 b) const {
    return static_cast<double>(sessions[k].busy_in(a, b)) / static_cast<double>(b - a);
  }
  /// Fraction of [a, b) during which some guard ran.
  double busy_in(u64 a, u64 b) const {
    std::vector<interval> all;
    for (const auto& s : sessions) all.insert(all.end(), s.intervals.begin(), s.intervals.end());
    std::sort(all.begin(), all.end(),
              [](const interval& x, const interval& y) { return x.start < y.start; });
    u64 t = 0, covered_to = a;
    for (const interval& i : all) {
      const u64 x = std::max(i.start, covered_to), y = std::min(i.end, b);
      if (y > x) t += y - x;
      covered_to = std::max(covered_to, std::min(i.end, b));
    }
    return static_cast<double>(t) / static_cast<double>(b - a);
  }
};

} // namespace sim
