// SPDX-License-Identifier: Apache-2.0
// Scenario 4, handover: how long a high-priority request waits for the GPU while a low-priority
// training process holds it, as a function of the training process's guard length.
//
// Inference requests arrive at random (Poisson, `handover_rate` per second: rare enough that the
// GPU is mostly training's). Each request's first kernel is a one-thread stamp kernel that
// records when it started; the latency is from the moment the request is issued to that start.
// On a GPU the stamp is the GPU's global timer, converted to the host's clock with an offset
// measured before and after the phase (its uncertainty, half the best launch round trip, is
// reported; the solo phase shows the latency on an idle GPU, which includes it).
//
// For each guard length G (training steps per guard) two phases run: training and inference
// without gpushare (the GPU time-slices), and with it (inference high, training low). One solo
// phase per run gives the idle-GPU baseline. The guard's duration is measured from the training
// session's accounted device time divided by its guards.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <harness/stats.hpp>

#include "engine.hpp"
#include "figures.hpp"
#include "phase.hpp"

namespace bench::handover {

struct board {
  static constexpr std::size_t max_samples = 1u << 15;
  demo::start_gate gate;
  std::uint32_t samples = 0;
  double latency_us[max_samples];
  std::uint64_t clock_uncertainty_ns = 0;
  std::uint64_t guards = 0;             ///< training guards completed
  std::uint64_t training_device_ns = 0; ///< the training session's accounted device time
  // The clock calibrations need an idle GPU (their round trips would otherwise include time
  // slices of training's work): training starts after the first and finishes before the second.
  std::atomic<int> calibrated{0};
  std::atomic<int> training_done{0};
};

/// Waits (up to 60 s: a peer that died is reported by the parent) until `flag` is set.
inline void wait_for(const std::atomic<int>& flag) {
  const std::uint64_t deadline = now_ns() + 60'000'000'000u;
  while (flag.load() == 0 && now_ns() < deadline) sleep_until_ns(now_ns() + 200'000);
}

inline constexpr std::uint64_t warm_up_ns = 200'000'000;

inline void inference_worker(phase& ph, const config& cfg, board& b, bool managed,
                             bool with_training, std::uint32_t seed) {
  const auto duration = static_cast<std::uint64_t>(cfg.handover_s * 1e9);
  const std::vector<std::uint64_t> arrivals =
      demo::poisson_arrivals(cfg.handover_rate, duration, seed);
  const std::size_t n = std::min<std::size_t>(arrivals.size(), board::max_samples);
  engine e(ph.run(), cfg,
           managed ? std::optional(ph.options("inference", gpushare::priority::high))
                   : std::nullopt,
           inference, n);
  const auto request = [&](std::size_t slot) {
    {
      const demo::region g = e.guard();
      e.stamp(slot);
      for (int l = 0; l < cfg.infer_layers; ++l) e.infer_layer();
    }
    e.sync();
  };
  if (n > 0) request(0); // warm-up; slot 0 is written again below
  b.gate.arrive_and_wait();
  e.calibrate_clock(); // training waits for this
  b.calibrated.store(1);
  const std::uint64_t start = b.gate.go_ns.load() + warm_up_ns;
  std::vector<std::uint64_t> issued(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    sleep_until_ns(start + arrivals[i]);
    issued[i] = now_ns();
    request(i);
  }
  b.gate.stop.store(1);
  if (with_training) wait_for(b.training_done);
  e.calibrate_clock();
  const std::vector<std::uint64_t> started = e.stamps(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (started[i] == 0) continue;
    // A stamp before its issue time is clock uncertainty at work; it counts as no wait.
    const double us =
        started[i] > issued[i] ? static_cast<double>(started[i] - issued[i]) / 1e3 : 0;
    b.latency_us[b.samples++] = us;
  }
  b.clock_uncertainty_ns = e.clock_uncertainty_ns();
}

inline void training_worker(phase& ph, const config& cfg, board& b, int guard_steps, bool managed) {
  engine e(ph.run(), cfg,
           managed ? std::optional(ph.options("training", gpushare::priority::low)) : std::nullopt,
           training);
  // An iteration of about 3 x train_layers steps, in guards of guard_steps steps each.
  const int guards_per_iteration =
      std::max(1, (3 * cfg.train_layers + guard_steps / 2) / guard_steps);
  std::uint64_t guards = 0;
  const auto iteration = [&] {
    for (int g = 0; g < guards_per_iteration; ++g) {
      const demo::region held = e.guard();
      for (int s = 0; s < guard_steps; ++s) e.train_step();
      ++guards;
    }
    e.sync();
    e.yield();
  };
  iteration();
  b.gate.arrive_and_wait();
  wait_for(b.calibrated);
  guards = 0;
  e.settle(); // the warm-up's device time in, before the first reading
  const std::uint64_t device_ns_before = managed ? e.session().info().device_ns : 0;
  while (!b.gate.stopping()) iteration();
  e.settle(); // all of its guards' device time accounted
  b.guards = guards;
  if (managed) b.training_device_ns = e.session().info().device_ns - device_ns_before;
  b.training_done.store(1);
}

struct phase_result {
  std::vector<double> latency_us;
  double guard_ms = NAN;
  double clock_uncertainty_us = 0;
  double cpu_wait_pct = NAN; ///< the workers' worst run-queue wait, % of the time (phase.hpp)
};

inline phase_result run_phase(const device_info& dev, const config& cfg, const std::string& tag,
                              int guard_steps, bool with_training, bool managed,
                              std::uint32_t seed) {
  phase ph(dev, tag);
  demo::shared<board> b;
  ph.workers().spawn("inference",
                     [&] { inference_worker(ph, cfg, *b, managed, with_training, seed); });
  if (with_training)
    ph.workers().spawn("training", [&] { training_worker(ph, cfg, *b, guard_steps, managed); });
  ph.start(b->gate, with_training ? 2 : 1);
  const double cpu_wait_pct = ph.finish();
  phase_result r;
  r.cpu_wait_pct = cpu_wait_pct;
  r.latency_us.assign(b->latency_us, b->latency_us + b->samples);
  r.clock_uncertainty_us = static_cast<double>(b->clock_uncertainty_ns) / 1e3;
  if (managed && b->guards > 0)
    r.guard_ms = static_cast<double>(b->training_device_ns) / 1e6 / static_cast<double>(b->guards);
  return r;
}

inline figures run(const device_info& dev, const config& cfg, int repeat) {
  figures f;
  const std::uint32_t seed = 7'000'000u + static_cast<std::uint32_t>(repeat);
  const std::string r = "h" + std::to_string(repeat);
  const phase_result solo = run_phase(dev, cfg, r + "-solo", 0, false, false, seed);
  f.set("handover.solo.p50_us", percentile(solo.latency_us, 50));
  f.set("handover.solo.p99_us", percentile(solo.latency_us, 99));
  f.add_series("handover.solo.latency_us", solo.latency_us);
  double uncertainty = solo.clock_uncertainty_us;
  std::vector<double> cpu_waits = {solo.cpu_wait_pct};
  for (int g : cfg.guard_steps) {
    const std::string base = "handover.g" + std::to_string(g);
    const std::string tag = r + "-g" + std::to_string(g);
    const phase_result unmanaged = run_phase(dev, cfg, tag + "-u", g, true, false, seed);
    const phase_result managed = run_phase(dev, cfg, tag + "-g", g, true, true, seed);
    f.set(base + ".guard_ms", managed.guard_ms);
    f.set(base + ".p50_us.unmanaged", percentile(unmanaged.latency_us, 50));
    f.set(base + ".p99_us.unmanaged", percentile(unmanaged.latency_us, 99));
    f.set(base + ".p50_us.gpushare", percentile(managed.latency_us, 50));
    f.set(base + ".p99_us.gpushare", percentile(managed.latency_us, 99));
    f.set(base + ".requests.gpushare", static_cast<double>(managed.latency_us.size()));
    f.add_series(base + ".latency_us.unmanaged", unmanaged.latency_us);
    f.add_series(base + ".latency_us.gpushare", managed.latency_us);
    uncertainty =
        std::max({uncertainty, unmanaged.clock_uncertainty_us, managed.clock_uncertainty_us});
    cpu_waits.push_back(unmanaged.cpu_wait_pct);
    cpu_waits.push_back(managed.cpu_wait_pct);
  }
  f.set("handover.clock_uncertainty_us", uncertainty);
  // Start latencies on busy CPUs are the CPUs' wake-up latencies, whatever the guard length.
  f.measured_cpu_waits("handover", cpu_waits);
  return f;
}

} // namespace bench::handover
