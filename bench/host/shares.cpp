// SPDX-License-Identifier: Apache-2.0
// fairness/shares: the device time busy processes achieve against their configured shares.
#include <benchmark/benchmark.h>

#include "support.hpp"

namespace {

using namespace bench_host;

// What the busy processes of fairness/shares share with the parent.
struct busy_control {
  std::atomic<std::uint32_t> started{0};
  std::atomic<std::uint32_t> stop{0};
};

// The device time each session (by name) used while the parent slept `window`.
std::map<std::string, double> device_ns_during(gpushare::table& table,
                                               std::chrono::milliseconds window) {
  std::map<std::string, std::uint64_t> before;
  for (const auto& s : table.snapshot().sessions) before[s.name] = s.device_ns;
  std::this_thread::sleep_for(window);
  std::map<std::string, double> used;
  for (const auto& s : table.snapshot().sessions)
    used[s.name] = static_cast<double>(s.device_ns - before[s.name]);
  return used;
}

constexpr std::chrono::milliseconds shares_window{2000}; // fairness/shares measures over this

// One row of the fairness table: a session, its configured share and what it got.
struct share_row {
  std::string name;
  std::uint32_t share = 1;
  double configured_pct = 0, achieved_pct = 0; // of the device time all of them used
  double window_pct = 0;                       // its device time as a part of the window
};

// Runs one process per entry of `shares` (1 ms spinning guards, back to back) for 200 ms of
// warm-up and then a 2 s window; returns configured and achieved percentages of device time, or
// an empty vector if a process failed.
std::vector<share_row>
run_shares(const std::string& what,
           const std::vector<std::pair<std::string, std::uint32_t>>& shares) {
  bench_table t(what);
  gpushare::table table = t.open();
  shared_block<busy_control> c;
  if (!c) return {};
  std::vector<pid_t> pids;
  for (const auto& [name, share] : shares) {
    gpushare::session_options o = t.options(name);
    o.share = share;
    const pid_t pid = spawn([&t, o, &c] {
      gpushare::session s(t.key(), o);
      count_up(c->started);
      while (c->stop.load(std::memory_order_relaxed) == 0) {
        gpushare::scoped_kernel k(s);
        spin_for(1'000'000);
      }
      return 0;
    });
    if (pid > 0) pids.push_back(pid);
  }
  bool ok =
      pids.size() == shares.size() &&
      wait_at_least_for(c->started, static_cast<std::uint32_t>(shares.size()), 10'000'000'000);
  std::map<std::string, double> used;
  if (ok) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    used = device_ns_during(table, shares_window);
  }
  c->stop = 1;
  for (pid_t pid : pids) ok = reap(pid) && ok;
  if (!ok) return {};
  double total_used = 0;
  std::uint32_t total_share = 0;
  for (const auto& [name, share] : shares) {
    total_used += used[name];
    total_share += share;
  }
  const double window_ns = std::chrono::duration<double, std::nano>(shares_window).count();
  std::vector<share_row> rows;
  for (const auto& [name, share] : shares)
    rows.push_back({name, share, 100.0 * share / total_share,
                    total_used > 0 ? 100.0 * used[name] / total_used : 0,
                    100.0 * used[name] / window_ns});
  return rows;
}

// fairness/shares: achieved vs configured shares, 3:1 then 1:1:2 (no timing). Target: <= 5 pp off.
void fairness_shares(benchmark::State& state) {
  std::vector<share_row> split31, split112;
  for (auto _ : state) {
    split31 = run_shares("shares31", {{"three", 3}, {"one", 1}});
    split112 = run_shares("shares112", {{"a", 1}, {"b", 1}, {"c", 2}});
  }
  if (split31.empty() || split112.empty()) {
    state.SkipWithError("a busy process failed");
    return;
  }
  double worst = 0, busy31 = 0, busy112 = 0;
  std::printf("\nfairness/shares: device time over 2 s, busy processes with 1 ms guards\n");
  std::printf("  %-6s %-8s %6s %14s %12s %10s %12s\n", "split", "session", "share", "configured %",
              "achieved %", "error pp", "of window %");
  for (const auto* split : {&split31, &split112})
    for (const share_row& r : *split) {
      const double error = r.achieved_pct - r.configured_pct;
      worst = std::max(worst, std::abs(error));
      (split == &split31 ? busy31 : busy112) += r.window_pct;
      std::printf("  %-6s %-8s %6u %14.1f %12.1f %+10.1f %12.1f\n",
                  split == &split31 ? "3:1" : "1:1:2", r.name.c_str(), r.share, r.configured_pct,
                  r.achieved_pct, error, r.window_pct);
    }
  std::fflush(stdout);
  state.counters["achieved_3of4_pct"] = split31[0].achieved_pct;
  state.counters["achieved_1of4_pct"] = split31[1].achieved_pct;
  state.counters["achieved_a_1of4_pct"] = split112[0].achieved_pct;
  state.counters["achieved_b_1of4_pct"] = split112[1].achieved_pct;
  state.counters["achieved_c_2of4_pct"] = split112[2].achieved_pct;
  state.counters["error_pp"] = worst;       // the largest |achieved - configured| of all five
  state.counters["busy_3to1_pct"] = busy31; // the device's busy part of each window
  state.counters["busy_112_pct"] = busy112;
}
BENCHMARK(fairness_shares)->Name("fairness/shares")->Iterations(1)->Unit(benchmark::kMillisecond);

} // namespace
