// SPDX-License-Identifier: Apache-2.0
// Scenario 1, QoS: a high-priority inference process with random (Poisson) arrivals at `load`
// (50%) of its solo capacity, next to a low-priority training process that always has work.
// Four phases of one run, each with fresh processes and as long as the others:
//   solo inference (first measures the solo service time, which sets the arrival rate),
//   solo training, both without gpushare (the GPU time-slices between them), both with gpushare
//   (inference priority high, training low, every training step in its own guard, a yield at
//   each training iteration's end).
// A request's latency runs from its arrival to its completion, so time spent queued behind the
// process's own earlier requests counts, as it does for a real server. Reported: inference
// p50/p99 divided by solo, training throughput divided by solo.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <harness/qos_scenario.hpp>
#include <harness/stats.hpp>

#include "engine.hpp"
#include "figures.hpp"
#include "phase.hpp"

namespace bench::qos {

struct board {
  static constexpr std::size_t max_samples = 1u << 17;
  demo::start_gate gate;
  double rate_per_s = 0; ///< arrivals per second (the solo phase measures it)
  double service_ms = 0; ///< one request alone, back to back
  std::uint64_t training_iterations = 0;
  std::uint64_t training_window_ns = 0;
  std::uint32_t unserved = 0; ///< arrivals not served before the phase's deadline
  /// With gpushare: the inference session's accounted device time over the measured window,
  /// as a fraction of the window (what is left is the most training can get).
  double inference_busy = NAN;
  std::uint32_t samples = 0;
  double latency_ms[max_samples];
};

inline constexpr std::uint64_t warm_up_ns = 200'000'000;

inline void inference_worker(phase& ph, const config& cfg, board& b, bool calibrate, bool managed,
                             std::uint32_t seed) {
  engine e(ph.run(), cfg,
           managed ? std::optional(ph.options("inference", gpushare::priority::high))
                   : std::nullopt,
           inference);
  const auto request = [&] {
    {
      const demo::region g = e.guard();
      for (int l = 0; l < cfg.infer_layers; ++l) e.infer_layer();
    }
    e.sync();
  };
  for (int i = 0; i < 3; ++i) request(); // library loading, cuBLAS heuristics, first guards
  b.gate.arrive_and_wait();
  const auto phase_ns = static_cast<std::uint64_t>(cfg.phase_s * 1e9);
  std::uint64_t start = b.gate.go_ns.load() + warm_up_ns;
  if (calibrate) start = demo::qos::calibrate_service(b, cfg.load, 50, warm_up_ns, request);
  sleep_until_ns(start);
  if (managed) e.settle(); // the warm-up's device time in, before the first reading
  const std::uint64_t device_ns_before = managed ? e.session().info().device_ns : 0;
  const std::vector<std::uint64_t> arrivals = demo::poisson_arrivals(b.rate_per_s, phase_ns, seed);
  const std::uint64_t give_up = start + 3 * phase_ns; // an overloaded phase still ends
  demo::qos::serve_arrivals(b, arrivals, start, give_up, request);
  b.gate.stop.store(1); // training stops too: both measured over the same window
  if (managed) e.settle();
  if (managed)
    b.inference_busy = ratio(static_cast<double>(e.session().info().device_ns - device_ns_before),
                             static_cast<double>(now_ns() - start));
}

inline void training_worker(phase& ph, const config& cfg, board& b, bool managed) {
  engine e(ph.run(), cfg,
           managed ? std::optional(ph.options("training", gpushare::priority::low)) : std::nullopt,
           training);
  const auto iteration = [&] {
    for (int s = 0; s < 3 * cfg.train_layers; ++s) {
      const demo::region g = e.guard();
      e.train_step();
    }
    e.sync();
    e.yield(); // the end of an iteration: a cheap moment to give way
  };
  iteration();
  b.gate.arrive_and_wait();
  const std::uint64_t warm_until = b.gate.go_ns.load() + warm_up_ns;
  while (now_ns() < warm_until) iteration();
  const std::uint64_t start = now_ns(); // at an iteration boundary: whole iterations counted
  std::uint64_t done = 0;
  while (!b.gate.stopping()) {
    iteration();
    ++done;
  }
  b.training_iterations = done;
  b.training_window_ns = now_ns() - start;
}

struct phase_result {
  std::vector<double> latency_ms;
  std::uint32_t unserved = 0;
  double training_per_s = NAN;
  double inference_busy = NAN;
  double cpu_wait_pct = NAN; ///< the workers' worst run-queue wait, % of the time (phase.hpp)
};

inline phase_result run_phase(const device_info& dev, const config& cfg, const std::string& tag,
                              bool inference, bool training, bool managed, double& rate_per_s,
                              double& service_ms, std::uint32_t seed) {
  phase ph(dev, tag);
  demo::shared<board> b;
  b->rate_per_s = rate_per_s;
  const bool calibrate = inference && rate_per_s == 0;
  if (inference)
    ph.workers().spawn("inference",
                       [&] { inference_worker(ph, cfg, *b, calibrate, managed, seed); });
  if (training) ph.workers().spawn("training", [&] { training_worker(ph, cfg, *b, managed); });
  const std::uint64_t go = ph.start(b->gate, (inference ? 1 : 0) + (training ? 1 : 0));
  if (!inference) {
    sleep_until_ns(go + warm_up_ns + static_cast<std::uint64_t>(cfg.phase_s * 1e9));
    b->gate.stop.store(1);
  }
  const double cpu_wait_pct = ph.finish();
  if (calibrate) {
    rate_per_s = b->rate_per_s;
    service_ms = b->service_ms;
  }
  phase_result r;
  r.latency_ms.assign(b->latency_ms, b->latency_ms + b->samples);
  r.unserved = b->unserved;
  r.inference_busy = b->inference_busy;
  r.cpu_wait_pct = cpu_wait_pct;
  if (training)
    r.training_per_s = ratio(static_cast<double>(b->training_iterations) * 1e9,
                             static_cast<double>(b->training_window_ns));
  return r;
}

inline figures run(const device_info& dev, const config& cfg, int repeat) {
  figures f;
  double rate = 0, service = 0;
  const std::uint32_t seed = 20261121u + static_cast<std::uint32_t>(repeat);
  const std::string r = "q" + std::to_string(repeat);
  const phase_result solo =
      run_phase(dev, cfg, r + "-inf", true, false, false, rate, service, seed);
  const phase_result train =
      run_phase(dev, cfg, r + "-trn", false, true, false, rate, service, seed);
  const phase_result unmanaged =
      run_phase(dev, cfg, r + "-u", true, true, false, rate, service, seed);
  const phase_result managed = run_phase(dev, cfg, r + "-g", true, true, true, rate, service, seed);

  f.set("qos.service_ms", service);
  f.set("qos.rate_per_s", rate);
  f.set("qos.requests", static_cast<double>(solo.latency_ms.size()));
  const double p50_solo = percentile(solo.latency_ms, 50),
               p99_solo = percentile(solo.latency_ms, 99);
  f.set("qos.p50_ms.solo", p50_solo);
  f.set("qos.p99_ms.solo", p99_solo);
  f.set("qos.training_per_s.solo", train.training_per_s);
  const auto record = [&](const char* name, const phase_result& x) {
    const std::string k(name);
    const double p50 = percentile(x.latency_ms, 50), p99 = percentile(x.latency_ms, 99);
    f.set("qos.p50_ms." + k, p50);
    f.set("qos.p99_ms." + k, p99);
    f.set("qos.p50_ratio." + k, ratio(p50, p50_solo));
    f.set("qos.p99_ratio." + k, ratio(p99, p99_solo));
    f.set("qos.unserved." + k, x.unserved);
    f.set("qos.training_per_s." + k, x.training_per_s);
    f.set("qos.training_kept." + k, ratio(x.training_per_s, train.training_per_s));
  };
  record("unmanaged", unmanaged);
  record("gpushare", managed);
  // Guards run one at a time: while inference holds the GPU, training cannot run, so training
  // can keep at most the GPU time inference leaves.
  f.set("qos.inference_busy.gpushare", managed.inference_busy);
  f.set("qos.training_ceiling.gpushare", 1 - managed.inference_busy);
  // The goal is stated against that ceiling (issue 41: >= 0.90 of it), never as a fixed share a
  // run's own ceiling may make impossible (issue 42, B13: "NO" for >= 0.60 under a 0.50 ceiling).
  f.set("qos.training_of_ceiling.gpushare",
        ratio(ratio(managed.training_per_s, train.training_per_s), 1 - managed.inference_busy));
  // The conditions: on a machine busy with other work the workers wait for a CPU at every
  // wake-up, and the latencies and throughputs above show that load (harness/conditions.hpp).
  demo::conditions c;
  c.cpu_wait_pct = worst_cpu_wait(
      {solo.cpu_wait_pct, train.cpu_wait_pct, unmanaged.cpu_wait_pct, managed.cpu_wait_pct});
  // Simulated, a request's nominal service time is known: its kernels' durations.
  if (!dev.mode.gpu) c.service_over_nominal = service / (cfg.infer_layers * cfg.sim_infer_us / 1e3);
  f.set("qos.cpu_wait_pct", c.cpu_wait_pct);
  if (!dev.mode.gpu) f.set("qos.service_over_nominal", c.service_over_nominal);
  f.measured = c;
  f.add_series("qos.latency_ms.solo", solo.latency_ms);
  f.add_series("qos.latency_ms.unmanaged", unmanaged.latency_ms);
  f.add_series("qos.latency_ms.gpushare", managed.latency_ms);
  return f;
}

} // namespace bench::qos
