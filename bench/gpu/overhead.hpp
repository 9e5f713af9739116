// SPDX-License-Identifier: Apache-2.0
// Scenario 3, solo overhead: one process alone on the GPU, running the same kernels with and
// without gpushare, every launch in its own guard when with. Three variants:
//   small:         the activation over small_elements values (launch-bound: a few microseconds
//                  each), one guard per launch;
//   small_batched: the same kernels, one guard per 200 launches (how a launch-heavy loop should
//                  use gpushare: a guard per step, not per kernel);
//   large:         train_size^3 GEMMs (GPU-bound), one guard per launch.
// Each measurement is a fresh process that warms up, then launches for `overhead_s` and waits
// for the GPU to finish; its throughput is launches / elapsed. Two rounds per workload, in
// alternating order (without, with, with, without), so a drift of the machine over time does
// not favour either. Reported: throughput with / without, the median of the rounds' ratios.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine.hpp"
#include "figures.hpp"
#include "phase.hpp"

namespace bench::overhead {

struct board {
  demo::start_gate gate;
  std::uint64_t launches = 0;
  std::uint64_t elapsed_ns = 0;
  std::uint64_t host_ns = 0; ///< in the launch loop (the final wait for the GPU left out)
};

enum class variant { small, small_batched, large };

inline const char* name(variant v) {
  return v == variant::small ? "small" : v == variant::small_batched ? "small_batched" : "large";
}

inline void worker(phase& ph, const config& cfg, board& b, variant v, bool managed) {
  const bool large_kernels = v == variant::large;
  engine e(ph.run(), cfg, managed ? std::optional(ph.options("solo")) : std::nullopt,
           large_kernels ? large : small);
  const int batch = large_kernels ? 4 : 200; // launches between looks at the clock
  const auto launch = [&] { large_kernels ? e.large_kernel() : e.small_kernel(); };
  const auto launch_batch = [&] {
    if (!managed) {
      for (int i = 0; i < batch; ++i) launch();
    } else if (v == variant::small_batched) {
      const demo::region g = e.guard();
      for (int i = 0; i < batch; ++i) launch();
    } else {
      for (int i = 0; i < batch; ++i) {
        const demo::region g = e.guard();
        launch();
      }
    }
  };
  b.gate.arrive_and_wait();
  const auto duration = static_cast<std::uint64_t>(cfg.overhead_s * 1e9);
  const std::uint64_t warm_end = now_ns() + duration / 4; // clocks up, caches and pools warm
  while (now_ns() < warm_end) launch_batch();
  e.sync();
  std::uint64_t launches = 0;
  const std::uint64_t t0 = now_ns();
  std::uint64_t t = t0;
  while (t - t0 < duration) {
    launch_batch();
    launches += static_cast<std::uint64_t>(batch);
    t = now_ns();
  }
  b.host_ns = t - t0;
  e.sync();
  b.elapsed_ns = now_ns() - t0;
  b.launches = launches;
}

/// One measurement: launches per second, and the host time per launch in the launch loop (the
/// cost of a bare cudaLaunchKernel without gpushare; with it, that of a launch and its share of
/// a guard; while the GPU is behind, the launch queue's waits too).
struct measured {
  double per_s = NAN;
  double host_us_per_launch = NAN;
};

/// `cpu_waits` gets the worker's run-queue wait (phase.hpp).
inline measured measure(const device_info& dev, const config& cfg, const std::string& tag,
                        variant v, bool managed, std::vector<double>& cpu_waits) {
  phase ph(dev, tag);
  demo::shared<board> b;
  ph.workers().spawn("solo", [&] { worker(ph, cfg, *b, v, managed); });
  ph.start(b->gate, 1);
  cpu_waits.push_back(ph.finish());
  return {ratio(static_cast<double>(b->launches) * 1e9, static_cast<double>(b->elapsed_ns)),
          ratio(static_cast<double>(b->host_ns) / 1e3, static_cast<double>(b->launches))};
}

inline figures run(const device_info& dev, const config& cfg, int repeat) {
  figures f;
  std::vector<double> cpu_waits;
  for (const variant v : {variant::small, variant::small_batched, variant::large}) {
    const std::string base = std::string("overhead.") + name(v);
    const std::string tag =
        "o" + std::to_string(repeat) + "-" + std::to_string(static_cast<int>(v));
    std::vector<double> without, with, ratios, host_without, host_with, host_extra;
    for (int round = 0; round < 2; ++round) {
      const auto one = [&](bool managed) {
        return measure(dev, cfg, tag + (managed ? "-g" : "-u") + std::to_string(round), v, managed,
                       cpu_waits);
      };
      measured a, b; // without, with; the second round runs them in the other order
      if (round % 2 == 1) {
        b = one(true);
        a = one(false);
      } else {
        a = one(false);
        b = one(true);
      }
      without.push_back(a.per_s);
      with.push_back(b.per_s);
      ratios.push_back(ratio(b.per_s, a.per_s));
      host_without.push_back(a.host_us_per_launch);
      host_with.push_back(b.host_us_per_launch);
      host_extra.push_back(b.host_us_per_launch - a.host_us_per_launch);
    }
    f.set(base + ".per_s.unmanaged", median(without));
    f.set(base + ".per_s.gpushare", median(with));
    f.set(base + ".ratio.gpushare", median(ratios));
    f.set(base + ".host_us.unmanaged", median(host_without));
    f.set(base + ".host_us.gpushare", median(host_with));
    f.set(base + ".host_us_added.gpushare", median(host_extra));
    f.add_series(base + ".rounds_per_s.unmanaged", without);
    f.add_series(base + ".rounds_per_s.gpushare", with);
  }
  // A worker kept waiting for a CPU launches less, by chance more in one round than another.
  f.measured_cpu_waits("overhead", cpu_waits);
  return f;
}

} // namespace bench::overhead
