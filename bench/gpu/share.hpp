// SPDX-License-Identifier: Apache-2.0
// Scenario 2, share accuracy: training processes that always have work, configured with shares
// 3:1 (two processes), then 1:1:2 (three). Each configuration runs twice with fresh processes:
// without gpushare (the shares are not applied; the GPU time-slices) and with it (normal
// priority, every training step in its own guard, a yield at each iteration's end).
//
// After a settling time the parent reads two measures at the boundaries of `windows` windows of
// `window_s` each:
//   events: each session's device time in the table. On a GPU it is the sum of the CUDA-event
//           times of its guards, which run one at a time, so it is GPU time (gpushare only).
//   work:   training steps each process completed. The processes run the same workload, so
//           their shares of the steps are their shares of the GPU's work (both modes).
// Reported per configuration: the largest |achieved - configured| of any process in any window,
// in percentage points.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine.hpp"
#include "figures.hpp"
#include "phase.hpp"

namespace bench::share {

inline constexpr int max_workers = 3;
inline constexpr std::array<const char*, max_workers> names = {"trainer-a", "trainer-b",
                                                               "trainer-c"};

struct split {
  const char* label; ///< "3:1"
  const char* key;   ///< "3to1", for figure names
  std::vector<std::uint32_t> shares;
};

inline const std::vector<split>& splits() {
  static const std::vector<split> s = {{"3:1", "3to1", {3, 1}}, {"1:1:2", "1to1to2", {1, 1, 2}}};
  return s;
}

struct board {
  demo::start_gate gate;
  std::array<std::atomic<std::uint64_t>, max_workers> steps{};
};

inline void trainer(phase& ph, const config& cfg, board& b, int index, std::uint32_t share,
                    bool managed) {
  engine e(ph.run(), cfg,
           managed ? std::optional(ph.options(names[index], gpushare::priority::normal, share))
                   : std::nullopt,
           training);
  const int steps = 3 * cfg.train_layers;
  const auto iteration = [&] {
    for (int s = 0; s < steps; ++s) {
      const demo::region g = e.guard();
      e.train_step();
    }
    e.sync();
    b.steps[index].fetch_add(static_cast<std::uint64_t>(steps));
    e.yield();
  };
  iteration();
  b.gate.arrive_and_wait();
  while (!b.gate.stopping()) iteration();
}

/// Per window, each process's percentage of the device time (events) and of the steps (work).
struct window_split {
  std::vector<double> events, work;
  double busy = NAN; ///< device time of all sessions / wall time (events; gpushare only)
};

inline std::vector<window_split> run_phase(const device_info& dev, const config& cfg,
                                           const std::string& tag, const split& sp, bool managed,
                                           std::vector<double>& cpu_waits) {
  phase ph(dev, tag);
  demo::shared<board> b;
  const int n = static_cast<int>(sp.shares.size());
  for (int i = 0; i < n; ++i)
    ph.workers().spawn(names[i], [&, i] { trainer(ph, cfg, *b, i, sp.shares[i], managed); });
  const std::uint64_t go = ph.start(b->gate, n);

  struct reading {
    std::uint64_t at = 0;
    std::vector<std::uint64_t> device_ns, steps;
  };
  const auto read = [&] {
    reading r;
    r.device_ns.assign(n, 0);
    r.steps.assign(n, 0);
    if (managed) {
      auto table = gpushare::table::open_existing(ph.run().object_name());
      for (const auto& s : table.snapshot().sessions)
        for (int i = 0; i < n; ++i)
          if (s.name == names[i]) r.device_ns[i] = s.device_ns;
    }
    for (int i = 0; i < n; ++i) r.steps[i] = b->steps[i].load();
    r.at = now_ns();
    return r;
  };
  std::vector<reading> readings;
  std::uint64_t boundary = go + static_cast<std::uint64_t>(cfg.settle_s * 1e9);
  for (int w = 0; w <= cfg.windows; ++w) {
    sleep_until_ns(boundary);
    readings.push_back(read());
    boundary += static_cast<std::uint64_t>(cfg.window_s * 1e9);
  }
  b->gate.stop.store(1);
  cpu_waits.push_back(ph.finish());

  std::vector<window_split> out;
  for (std::size_t w = 1; w < readings.size(); ++w) {
    const reading &a = readings[w - 1], &z = readings[w];
    window_split ws;
    double device_total = 0, steps_total = 0;
    for (int i = 0; i < n; ++i) {
      device_total += static_cast<double>(z.device_ns[i] - a.device_ns[i]);
      steps_total += static_cast<double>(z.steps[i] - a.steps[i]);
    }
    for (int i = 0; i < n; ++i) {
      if (managed)
        ws.events.push_back(
            100 * ratio(static_cast<double>(z.device_ns[i] - a.device_ns[i]), device_total));
      ws.work.push_back(100 * ratio(static_cast<double>(z.steps[i] - a.steps[i]), steps_total));
    }
    if (managed) ws.busy = 100 * ratio(device_total, static_cast<double>(z.at - a.at));
    out.push_back(ws);
  }
  return out;
}

/// The configured percentages of a split.
inline std::vector<double> configured(const split& sp) {
  double sum = 0;
  for (auto s : sp.shares) sum += s;
  std::vector<double> pct;
  for (auto s : sp.shares) pct.push_back(100 * s / sum);
  return pct;
}

/// Largest |achieved - configured| over processes and windows, in percentage points (NaN when a
/// window has no figure: nothing ran).
inline double max_error(const std::vector<window_split>& windows, bool events,
                        const std::vector<double>& want) {
  double worst = 0;
  for (const auto& w : windows) {
    const std::vector<double>& got = events ? w.events : w.work;
    if (got.size() != want.size()) return NAN;
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (std::isnan(got[i])) return NAN;
      worst = std::max(worst, std::fabs(got[i] - want[i]));
    }
  }
  return worst;
}

inline figures run(const device_info& dev, const config& cfg, int repeat) {
  figures f;
  std::vector<double> cpu_waits; // of every phase's workers (phase.hpp)
  for (const split& sp : splits()) {
    const std::string base = std::string("share.") + sp.key;
    // Built by appending: GCC 12 at -O3 reports a false -Wrestrict inside
    // operator+(const char*, std::string&&) here, which failed the Release build.
    std::string tag = "s";
    tag += std::to_string(repeat);
    tag += '-';
    tag += sp.key;
    const std::vector<double> want = configured(sp);
    const auto unmanaged = run_phase(dev, cfg, tag + "-u", sp, false, cpu_waits);
    const auto managed = run_phase(dev, cfg, tag + "-g", sp, true, cpu_waits);
    f.set(base + ".error_pp_work.unmanaged", max_error(unmanaged, false, want));
    f.set(base + ".error_pp_work.gpushare", max_error(managed, false, want));
    f.set(base + ".error_pp_events.gpushare", max_error(managed, true, want));
    double busy_min = 100;
    for (const auto& w : managed) busy_min = std::min(busy_min, w.busy);
    f.set(base + ".busy_pct_min.gpushare", busy_min);
    // Raw: per window, each process's percentage, flattened window by window.
    const auto flatten = [](const std::vector<window_split>& ws, bool events) {
      std::vector<double> v;
      for (const auto& w : ws)
        for (double x : events ? w.events : w.work) v.push_back(x);
      return v;
    };
    f.add_series(base + ".configured_pct", want);
    f.add_series(base + ".windows_work_pct.unmanaged", flatten(unmanaged, false));
    f.add_series(base + ".windows_work_pct.gpushare", flatten(managed, false));
    f.add_series(base + ".windows_events_pct.gpushare", flatten(managed, true));
  }
  // Busy CPUs delay the workers' iterations unevenly, and the splits show that.
  f.measured_cpu_waits("share", cpu_waits);
  return f;
}

} // namespace bench::share
