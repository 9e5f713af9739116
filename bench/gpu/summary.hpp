// SPDX-License-Identifier: Apache-2.0
// The final table: one row per headline figure, with the unmanaged baseline and gpushare side by
// side, each the median over the repeats with its range, and the goal it is judged by.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "config.hpp"
#include "figures.hpp"
#include "share.hpp"

namespace bench {

struct row {
  std::string scenario;
  std::string metric;
  std::string unmanaged;           ///< figure key, or "" for none
  std::string gpushare;            ///< figure key, or "" for none
  std::string goal;                ///< "" for a figure reported without a goal
  std::function<bool(double)> met; ///< judges the gpushare median
  int decimals = 2;
};

/// The headline rows for the scenarios this run measured.
inline std::vector<row> summary_rows(const config& cfg) {
  std::vector<row> rows;
  const auto at_most = [](double limit) { return [limit](double x) { return x <= limit; }; };
  const auto at_least = [](double limit) { return [limit](double x) { return x >= limit; }; };
  if (cfg.runs("qos")) {
    rows.push_back({"qos", "inference p50 / solo", "qos.p50_ratio.unmanaged",
                    "qos.p50_ratio.gpushare", "", nullptr, 2});
    rows.push_back({"qos", "inference p99 / solo", "qos.p99_ratio.unmanaged",
                    "qos.p99_ratio.gpushare", "<= 1.10", at_most(1.10), 3});
    rows.push_back({"qos", "training throughput kept", "qos.training_kept.unmanaged",
                    "qos.training_kept.gpushare", "", nullptr, 3});
    rows.push_back({"qos", "training ceiling (1 - inference busy)", "",
                    "qos.training_ceiling.gpushare", "", nullptr, 2});
    rows.push_back({"qos", "training kept / its ceiling", "", "qos.training_of_ceiling.gpushare",
                    ">= 0.90", at_least(0.90), 2});
    rows.push_back({"qos", "inference p99, ms", "qos.p99_ms.unmanaged", "qos.p99_ms.gpushare", "",
                    nullptr, 2});
  }
  if (cfg.runs("share"))
    for (const auto& sp : share::splits()) {
      const std::string base = std::string("share.") + sp.key;
      // On a GPU the table's device time is the guards' CUDA-event time; simulated, their wall
      // time on the simulated device.
      rows.push_back({"share " + std::string(sp.label),
                      cfg.simulated_runtime ? "max split error, pp (CUDA events, cudasim)"
                      : cfg.gpu             ? "max split error, pp (CUDA events)"
                                            : "max split error, pp (guard time, simulated)",
                      "", base + ".error_pp_events.gpushare", "<= 2", at_most(2), 1});
      rows.push_back({"share " + std::string(sp.label), "max split error, pp (work done)",
                      base + ".error_pp_work.unmanaged", base + ".error_pp_work.gpushare", "<= 2",
                      at_most(2), 1});
    }
  if (cfg.runs("overhead"))
    for (const char* kind : {"small", "small_batched", "large"}) {
      const std::string base = std::string("overhead.") + kind;
      const std::string name = std::string(kind) == "small"           ? "small kernels"
                               : std::string(kind) == "small_batched" ? "small, guard/200"
                                                                      : "large kernels";
      rows.push_back({"overhead", name + ", launches/s", base + ".per_s.unmanaged",
                      base + ".per_s.gpushare", "", nullptr, 0});
      rows.push_back({"overhead", name + ", with / without", "", base + ".ratio.gpushare",
                      ">= 0.99", at_least(0.99), 3});
      // Host time per launch in the launch loop: a bare cudaLaunchKernel beside a launch with
      // its guard; the difference is what a guard adds (issue 41's goal: at most 1 us).
      rows.push_back({"overhead", name + ", host us per launch", base + ".host_us.unmanaged",
                      base + ".host_us.gpushare", "", nullptr, 2});
      const bool per_launch = std::string(kind) == "small"; // GPU-bound otherwise
      rows.push_back({"overhead", name + ", host us added per launch", "",
                      base + ".host_us_added.gpushare", per_launch ? "<= 1" : "",
                      per_launch ? at_most(1.0) : std::function<bool(double)>(), 2});
    }
  if (cfg.runs("handover")) {
    rows.push_back(
        {"handover", "idle GPU: start p99, us", "handover.solo.p99_us", "", "", nullptr, 0});
    for (int g : cfg.guard_steps) {
      const std::string base = "handover.g" + std::to_string(g);
      const std::string name = "guard " + std::to_string(g) + " step" + (g == 1 ? "" : "s");
      rows.push_back({"handover", name + ": length, ms", "", base + ".guard_ms", "", nullptr, 2});
      rows.push_back({"handover", name + ": start p50, us", base + ".p50_us.unmanaged",
                      base + ".p50_us.gpushare", "", nullptr, 0});
      rows.push_back({"handover", name + ": start p99, us", base + ".p99_us.unmanaged",
                      base + ".p99_us.gpushare", "", nullptr, 0});
    }
  }
  if (cfg.runs("memory")) {
    const int n = cfg.memory_jobs;
    rows.push_back({"memory", "jobs failed out-of-memory (of " + std::to_string(n) + ")",
                    "memory.out_of_memory.unmanaged", "memory.out_of_memory.gpushare", "0",
                    [](double x) { return x == 0; }, 0});
    rows.push_back({"memory", "jobs completed (of " + std::to_string(n) + ")",
                    "memory.completed.unmanaged", "memory.completed.gpushare", std::to_string(n),
                    [n](double x) { return x == n; }, 0});
  }
  return rows;
}

/// One figure over the repeats.
struct spread {
  std::vector<double> values; ///< one per repeat that has it
  double median = NAN, min = NAN, max = NAN;
};

inline spread gather(const std::vector<figures>& repeats, const std::string& key) {
  spread s;
  if (key.empty()) return s;
  for (const figures& f : repeats)
    if (const auto v = f.get(key); v && !std::isnan(*v)) s.values.push_back(*v);
  if (s.values.empty()) return s;
  s.median = median(s.values);
  s.min = *std::min_element(s.values.begin(), s.values.end());
  s.max = *std::max_element(s.values.begin(), s.values.end());
  return s;
}

inline std::string cell(const spread& s, int decimals, bool has_key) {
  if (!has_key) return "-";
  if (s.values.empty()) return "n/a";
  char buf[96];
  if (s.values.size() > 1 && s.max > s.min)
    std::snprintf(buf, sizeof buf, "%.*f [%.*f-%.*f]", decimals, s.median, decimals, s.min,
                  decimals, s.max);
  else
    std::snprintf(buf, sizeof buf, "%.*f", decimals, s.median);
  return buf;
}

/// Whether every repeat's figures were measured in conditions good enough to trust them.
inline bool trustworthy(const std::vector<figures>& repeats) {
  for (const figures& f : repeats)
    if (!f.trustworthy()) return false;
  return true;
}

/// The verdict for a row: "yes", "NO", "-" (no goal), "n/a" (no figure) or "n/t" (figures
/// not trustworthy: not judged).
inline std::string verdict(const row& r, const spread& gpushare, bool trusted) {
  if (!r.met) return "-";
  if (gpushare.values.empty()) return "n/a";
  if (!trusted) return "n/t";
  return r.met(gpushare.median) ? "yes" : "NO";
}

/// Prints the final table for `results` (scenario -> one figures per repeat).
inline void print_summary(const config& cfg,
                          const std::map<std::string, std::vector<figures>>& results, int repeats) {
  std::printf("\n=== gpushare GPU benchmark: summary (%s; median [min-max] over %d repeat%s) ===\n",
              cfg.simulated_runtime
                  ? "cudasim, SIMULATED CUDA RUNTIME: these figures check the harness, they are "
                    "not GPU measurements"
              : cfg.gpu ? "GPU"
                        : "SIMULATED GPU: these figures check the harness, they are not GPU "
                          "measurements",
              repeats, repeats == 1 ? "" : "s");
  std::printf("%-12s %-40s %-24s %-24s %-8s %s\n", "scenario", "metric", "unmanaged", "gpushare",
              "goal", "met?");
  for (const row& r : summary_rows(cfg)) {
    const std::string scenario = r.scenario.substr(0, r.scenario.find(' '));
    const auto it = results.find(scenario);
    static const std::vector<figures> none;
    const std::vector<figures>& reps = it == results.end() ? none : it->second;
    const spread u = gather(reps, r.unmanaged), g = gather(reps, r.gpushare);
    std::printf("%-12s %-40s %-24s %-24s %-8s %s\n", r.scenario.c_str(), r.metric.c_str(),
                cell(u, r.decimals, !r.unmanaged.empty()).c_str(),
                cell(g, r.decimals, !r.gpushare.empty()).c_str(),
                r.goal.empty() ? "-" : r.goal.c_str(), verdict(r, g, trustworthy(reps)).c_str());
  }
  std::string untrusted;
  for (const auto& [name, reps] : results)
    if (!trustworthy(reps)) untrusted += (untrusted.empty() ? "" : ", ") + name;
  if (!untrusted.empty())
    std::printf("WARNING: the %s figures are NOT trustworthy: other work kept the CPUs busy while "
                "they were measured (see the WARNING after each). Their goals are not judged "
                "(n/t). Run the benchmark again on a machine that is not busy with other work.\n",
                untrusted.c_str());
}

} // namespace bench
