// SPDX-License-Identifier: Apache-2.0
// The fair-share scenario (the `fair_share` demo, and the second half of `showcase`): three
// workers that always have work, configured with shares 1:1:2. Three phases, each as long:
//   1. without gpushare: the device time-slices between them, whatever their shares;
//   2. with gpushare: device time in proportion to the shares (25% / 25% / 50%);
//   3. with gpushare and the share-2 worker capped at 30% of the device: it gets 30%, the
//      others split the rest (35% / 35% / 30%).
// With gpushare the achieved split comes from the table: the difference between two snapshots'
// device_ns of each session. Without gpushare each worker counts the kernel time it completed.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "conditions.hpp"
#include "context.hpp"
#include "processes.hpp"
#include "progress.hpp"
#include "report.hpp"
#include "worker.hpp"

namespace demo::fair_share {

struct params {
  std::uint64_t phase_ns = 2'000'000'000;
  int kernels = 4; ///< per iteration, each in its own guarded region
  std::uint64_t kernel_ns = 1'000'000;
  std::uint32_t cap_ppm = 300'000; ///< phase 3's compute limit on the share-2 worker
};

inline constexpr int workers = 3;
inline constexpr std::array<const char*, workers> names = {"worker-a", "worker-b", "worker-c"};
inline constexpr std::array<std::uint32_t, workers> shares = {1, 1, 2};
inline constexpr int capped = 2; ///< the share-2 worker

struct phase_result {
  std::array<double, workers> expected{}; ///< percent of the device time (0: not applicable)
  std::array<double, workers> achieved{}; ///< percent of the device time used by the three
  double capped_of_wall = 0;              ///< percent of the wall time used by the capped one
  double busy = 0;                        ///< percent of the wall time the device was used
  double cpu_wait_pct = NAN;              ///< the worst worker's run-queue wait, % of the wall time
};

struct result {
  phase_result without_gpushare, with_shares, with_cap;
  conditions measured; ///< of the whole run
  verdict trust;       ///< judged from `measured`
};

struct board {
  start_gate gate;
  std::array<std::atomic<std::uint64_t>, workers> device_ns{}; ///< own accounting
};

inline void worker(const run_context& run, const params& p, board& b, int index, bool with_gpushare,
                   std::uint32_t cap_ppm) {
  worker_device dev(run, with_gpushare
                             ? std::optional(run.options(names[index], gpushare::priority::normal,
                                                         shares[index], cap_ppm))
                             : std::nullopt);
  const auto iteration = [&] {
    for (int k = 0; k < p.kernels; ++k) {
      const region r = dev.guard();
      dev.kernel(p.kernel_ns);
    }
    dev.sync();
    b.device_ns[index].fetch_add(p.kernels * p.kernel_ns);
    dev.yield();
  };
  iteration();
  b.gate.arrive_and_wait();
  while (!b.gate.stopping()) iteration();
}

/// Device time used so far by each worker: from the table (with gpushare) or from the workers'
/// own counts (without).
inline std::array<std::uint64_t, workers> used_ns(const run_context& run, board& b,
                                                  bool with_gpushare) {
  std::array<std::uint64_t, workers> used{};
  if (!with_gpushare) {
    for (int i = 0; i < workers; ++i) used[i] = b.device_ns[i].load();
    return used;
  }
  auto table = gpushare::table::open_existing(run.object_name());
  for (const auto& s : table.snapshot().sessions)
    for (int i = 0; i < workers; ++i)
      if (s.name == names[i]) used[i] = s.device_ns;
  return used;
}

inline phase_result run_phase(const run_context& run, const params& p, bool with_gpushare,
                              bool cap) {
  shared<board> b;
  children procs;
  for (int i = 0; i < workers; ++i)
    procs.spawn(names[i], [&, i] {
      worker(run, p, *b, i, with_gpushare, cap && i == capped ? p.cap_ppm : 1'000'000);
    });
  const std::uint64_t go = procs.open_gate(b->gate, workers);
  sleep_until_ns(go + 200'000'000); // let the split settle
  const auto used0 = used_ns(run, *b, with_gpushare);
  const auto cpu0 = procs.cpu_samples();
  const std::uint64_t t0 = now_ns();
  sleep_until_ns(t0 + p.phase_ns);
  const auto used1 = used_ns(run, *b, with_gpushare);
  const auto cpu1 = procs.cpu_samples();
  const std::uint64_t t1 = now_ns();
  const double wall = static_cast<double>(t1 - t0);
  b->gate.stop.store(1);
  procs.wait_all();

  phase_result r;
  double total = 0;
  for (int i = 0; i < workers; ++i) total += static_cast<double>(used1[i] - used0[i]);
  for (int i = 0; i < workers; ++i)
    r.achieved[i] = total > 0 ? 100 * static_cast<double>(used1[i] - used0[i]) / total : 0;
  r.capped_of_wall = 100 * static_cast<double>(used1[capped] - used0[capped]) / wall;
  r.busy = 100 * total / wall;
  r.cpu_wait_pct = worst_cpu_wait_pct(cpu0, cpu1, t1 - t0);
  if (with_gpushare && !cap) {
    double sum = 0;
    for (auto s : shares) sum += s;
    for (int i = 0; i < workers; ++i) r.expected[i] = 100 * shares[i] / sum;
  } else if (with_gpushare) { // the cap binds; the others split the rest by their shares
    const double cap_pct = static_cast<double>(p.cap_ppm) / 10'000;
    double others = 0;
    for (int i = 0; i < workers; ++i)
      if (i != capped) others += shares[i];
    for (int i = 0; i < workers; ++i)
      r.expected[i] = i == capped ? cap_pct : (100 - cap_pct) * shares[i] / others;
  }
  return r;
}

inline result run(const run_context& run, const params& p) {
  result r;
  const double phase_s = static_cast<double>(p.phase_ns) / 1e9 + 0.2; // + settling
  progress_phase(1, 3, phase_s);
  r.without_gpushare = run_phase(run, p, false, false);
  progress_phase(2, 3, phase_s);
  r.with_shares = run_phase(run, p, true, false);
  progress_phase(3, 3, phase_s);
  r.with_cap = run_phase(run, p, true, true);
  progress_done();
  r.measured.cpu_wait_pct = worst_cpu_wait(
      {r.without_gpushare.cpu_wait_pct, r.with_shares.cpu_wait_pct, r.with_cap.cpu_wait_pct});
  r.trust = judge(r.measured);
  return r;
}

inline void print_intro(const params& p) {
  std::printf("Fair share: three busy workers with shares 1:1:2 (kernels of %.1f ms, %d per "
              "iteration),\nthen the share-2 worker capped at %.0f%%; %.1f s per phase.\n",
              static_cast<double>(p.kernel_ns) / 1e6, p.kernels,
              static_cast<double>(p.cap_ppm) / 10'000, static_cast<double>(p.phase_ns) / 1e9);
  std::fflush(stdout);
}

inline void print_report(const result& r, const params& p) {
  std::printf("\n  %-36s %-22s %-22s %6s\n", "phase (device time a / b / c)", "configured",
              "achieved", "busy");
  const auto row = [](const char* name, const phase_result& x, const char* note) {
    char configured[64], achieved[64];
    if (x.expected[0] > 0)
      std::snprintf(configured, sizeof configured, "%.0f / %.0f / %.0f %%", x.expected[0],
                    x.expected[1], x.expected[2]);
    else
      std::snprintf(configured, sizeof configured, "%s", note);
    std::snprintf(achieved, sizeof achieved, "%.1f / %.1f / %.1f %%", x.achieved[0], x.achieved[1],
                  x.achieved[2]);
    std::printf("  %-36s %-22s %-22s %5.0f%%\n", name, configured, achieved, x.busy);
  };
  row("shares 1:1:2, without gpushare", r.without_gpushare, "(not applied)");
  row("shares 1:1:2, with gpushare", r.with_shares, "");
  char capped_name[64];
  std::snprintf(capped_name, sizeof capped_name, "same, worker-c capped at %.0f%%",
                static_cast<double>(p.cap_ppm) / 10'000);
  row(capped_name, r.with_cap, "");
  std::printf("  (busy: the device time the three used, as a share of the wall time)\n\n");
  print_verdict(r.trust);
  if (!r.trust.trustworthy) return; // the table above is what was measured, not a finding
  std::printf("\n  worker-c used %.1f%% of the wall time under its %.0f%% cap\n",
              r.with_cap.capped_of_wall, static_cast<double>(p.cap_ppm) / 10'000);
}

/// The largest difference, in percentage points, between configured and achieved.
inline double max_error_pp(const phase_result& x) {
  double worst = 0;
  for (int i = 0; i < workers; ++i) {
    const double d = x.achieved[i] - x.expected[i];
    worst = std::max(worst, d < 0 ? -d : d);
  }
  return worst;
}

inline void print_results(const result& r, const params& p) {
  const char* abc[workers] = {"a", "b", "c"};
  for (int i = 0; i < workers; ++i) {
    result_line(std::string("fair_share.without_") + abc[i], r.without_gpushare.achieved[i]);
    result_line(std::string("fair_share.shares_") + abc[i], r.with_shares.achieved[i]);
    result_line(std::string("fair_share.capped_") + abc[i], r.with_cap.achieved[i]);
  }
  result_line("fair_share.shares_max_error_pp", max_error_pp(r.with_shares));
  result_line("fair_share.capped_max_error_pp", max_error_pp(r.with_cap));
  result_line("fair_share.cap_pct", static_cast<double>(p.cap_ppm) / 10'000);
  result_line("fair_share.capped_of_wall_pct", r.with_cap.capped_of_wall);
  result_line("fair_share.cpu_wait_pct", r.measured.cpu_wait_pct);
  result_line("fair_share.trustworthy", r.trust.trustworthy ? "yes" : "no");
}

} // namespace demo::fair_share
