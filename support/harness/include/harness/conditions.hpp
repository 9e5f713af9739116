// SPDX-License-Identifier: Apache-2.0
// Were the measurement conditions good enough to trust a demo's figures? The demos time
// processes that sleep and wake up every millisecond or so. On a machine whose CPUs are busy
// with other work, those processes wait for a CPU at every wake-up, and the figures then show
// the machine's load rather than the scheduling: a solo request takes twice its nominal time,
// a worker gets no device time at all. Each demo measures its own conditions and, when they are
// off, says so instead of presenting its figures as findings.
//
// The measure of CPU load is each worker's run-queue wait: the time it was ready to run but
// waited for a CPU, from /proc/<pid>/schedstat (its second field, in ns), as a share of the wall
// time. It does not depend on how much the worker computes, only on how long it was kept
// waiting once it had something to do.
#pragma once

#include <sys/types.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace demo {

/// A process's CPU time and run-queue wait so far, in ns (from /proc/<pid>/schedstat; readable
/// until the process is reaped). nullopt when the kernel does not provide it.
struct cpu_sample {
  std::uint64_t run_ns = 0;  ///< time on a CPU
  std::uint64_t wait_ns = 0; ///< time ready to run but waiting for a CPU
};

inline std::optional<cpu_sample> read_cpu_sample(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/schedstat");
  cpu_sample s;
  if (!(in >> s.run_ns >> s.wait_ns)) return std::nullopt;
  return s;
}

/// The worst run-queue wait of some processes between two samples of each, as a percentage of
/// `wall_ns`: NaN when a sample is missing.
inline double worst_cpu_wait_pct(const std::vector<std::optional<cpu_sample>>& before,
                                 const std::vector<std::optional<cpu_sample>>& after,
                                 std::uint64_t wall_ns) {
  double worst = 0;
  if (before.size() != after.size() || before.empty() || wall_ns == 0) return NAN;
  for (std::size_t i = 0; i < before.size(); ++i) {
    if (!before[i] || !after[i] || after[i]->wait_ns < before[i]->wait_ns) return NAN;
    const double pct = 100.0 * static_cast<double>(after[i]->wait_ns - before[i]->wait_ns) /
                       static_cast<double>(wall_ns);
    worst = pct > worst ? pct : worst;
  }
  return worst;
}

/// The largest of several phases' CPU waits (%), or NaN when any could not be measured: a run's
/// conditions are those of its worst phase.
inline double worst_cpu_wait(const std::vector<double>& phases) {
  double worst = 0;
  for (const double x : phases) {
    if (std::isnan(x)) return NAN;
    worst = x > worst ? x : worst;
  }
  return worst;
}

/// The limits beyond which a demo's figures are not trustworthy.
/// - A worker that waits for a CPU more than 10% of the wall time loses, at about a thousand
///   wake-ups a second, a tenth of a millisecond or more per 1 ms kernel: the delays are then of
///   the size of what is measured. On an idle machine the wait is well under 1%.
/// - The inference request's solo service time, measured at the start of the QoS scenario,
///   against its nominal kernel time: on an idle machine it is within 10-20% (wake-ups, the
///   launch); more than 1.5x means the process could not keep its kernels going.
inline constexpr double max_cpu_wait_pct = 10;
inline constexpr double max_service_over_nominal = 1.5;

/// What a demo measured about its own conditions (NaN: not measured).
struct conditions {
  double cpu_wait_pct = NAN;         ///< the worst worker's run-queue wait, % of the wall time
  double service_over_nominal = NAN; ///< QoS: solo service time / nominal kernel time
};

struct verdict {
  bool trustworthy = true;
  std::vector<std::string> reasons; ///< why not, one sentence each
  std::vector<std::string> checked; ///< what was checked and found fine
};

inline std::string format_number(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

/// Judges measured conditions against the limits above. A figure that could not be measured
/// (NaN) is neither a reason nor a pass: it is reported as not checked.
inline verdict judge(const conditions& c) {
  verdict v;
  if (std::isnan(c.cpu_wait_pct)) {
    v.checked.push_back("CPU wait not checked (no /proc/<pid>/schedstat)");
  } else if (c.cpu_wait_pct > max_cpu_wait_pct) {
    v.trustworthy = false;
    v.reasons.push_back(std::string("the worker processes waited for a CPU up to ") +
                        format_number("%.0f", c.cpu_wait_pct) + "% of the time (the limit is " +
                        format_number("%.0f", max_cpu_wait_pct) +
                        "%): other work kept the CPUs busy, so the timings show the machine's "
                        "load, not the scheduling");
  } else {
    v.checked.push_back(std::string("workers waited for a CPU at most ") +
                        format_number("%.1f", c.cpu_wait_pct) + "% of the time (limit " +
                        format_number("%.0f", max_cpu_wait_pct) + "%)");
  }
  if (!std::isnan(c.service_over_nominal)) {
    if (c.service_over_nominal > max_service_over_nominal) {
      v.trustworthy = false;
      v.reasons.push_back(std::string("a request alone took ") +
                          format_number("%.2f", c.service_over_nominal) +
                          "x its nominal kernel time (the limit is " +
                          format_number("%.1f", max_service_over_nominal) +
                          "x): the process could not keep its kernels going");
    } else {
      v.checked.push_back(std::string("solo service time ") +
                          format_number("%.2f", c.service_over_nominal) +
                          "x the nominal kernel time (limit " +
                          format_number("%.1f", max_service_over_nominal) + "x)");
    }
  }
  return v;
}

/// Prints the verdict: a warning block when the figures are not trustworthy, else one line
/// saying what was checked. `indent` starts every line.
inline void print_verdict(const verdict& v, const char* indent = "  ") {
  if (v.trustworthy) {
    std::printf("%sconditions OK:", indent);
    for (std::size_t i = 0; i < v.checked.size(); ++i)
      std::printf("%s %s", i ? ";" : "", v.checked[i].c_str());
    std::printf("\n");
    return;
  }
  std::printf("%sWARNING: these figures are NOT trustworthy; they are not findings about "
              "gpushare:\n",
              indent);
  for (const std::string& r : v.reasons) std::printf("%s  - %s\n", indent, r.c_str());
  std::printf("%s  Run the demo again on a machine that is not busy with other work.\n", indent);
}

} // namespace demo
