// SPDX-License-Identifier: Apache-2.0
// The QoS scenario (the `qos` demo, and the first half of `showcase`): a latency-sensitive
// "inference" process next to a "training" process that keeps the device busy.
//
// Inference requests arrive at random (a Poisson process) at `load` (50%) of the inference
// process's solo capacity, measured first; each request is a few short kernels, and its latency
// runs from its arrival to its completion (so time queued behind earlier requests counts). The
// training process runs iterations of several kernels back to back. Four phases, each as long:
//   1. inference alone (also measures the solo capacity),   2. training alone,
//   3. both, without gpushare (the device time-slices between them),
//   4. both, with gpushare: inference in priority class high, training low, every kernel region
//      in a guard, training yielding at the end of each iteration.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "conditions.hpp"
#include "context.hpp"
#include "processes.hpp"
#include "progress.hpp"
#include "report.hpp"
#include "stats.hpp"
#include "worker.hpp"

namespace demo::qos {

struct params {
  std::uint64_t phase_ns = 2'000'000'000;
  double load = 0.5; ///< offered inference load, as a fraction of its solo capacity
  int inference_kernels = 2;
  std::uint64_t inference_kernel_ns = 1'000'000;
  int training_kernels = 10;
  std::uint64_t training_kernel_ns = 1'000'000;
};

struct phase_result {
  std::size_t requests = 0;
  std::size_t unserved = 0; ///< not served by the deadline (counted with their wait so far)
  double p50_ms = 0, p99_ms = 0;
  double training_per_s = 0; ///< training iterations per second
  double busy_pct = 0;       ///< device time of the kernels run, as a percentage of the wall time
  double cpu_wait_pct = NAN; ///< the worst worker's run-queue wait, % of the wall time
};

struct result {
  double service_ms = 0; ///< one request, alone, back to back
  double rate_per_s = 0; ///< offered inference requests per second
  phase_result inference_alone, training_alone, without_gpushare, with_gpushare;
  double nominal_service_ms = 0; ///< one request's kernel time
  conditions measured;           ///< of the whole run
  verdict trust;                 ///< judged from `measured`
};

/// What the workers of one phase share with the parent.
struct board {
  static constexpr std::size_t max_samples = 1u << 18; // 17 min at 250 requests/s
  start_gate gate;
  double rate_per_s = 0; ///< arrival rate (phase 1 measures it)
  double service_ms = 0;
  std::uint64_t training_iterations = 0;
  std::uint64_t training_window_ns = 0;
  std::uint64_t inference_window_ns = 0; ///< from the first arrival's time to the last response
  std::uint32_t unserved = 0;
  std::uint32_t samples = 0;
  double latency_ms[max_samples];
};

inline constexpr std::uint64_t warm_up_ns = 100'000'000; // before the measured part starts

/// Serves `arrivals` (ns after `start`) one after another: waits for each, runs `request` unless
/// `give_up` has passed (then counts it in `b.unserved`), and records in `b.latency_ms` the time
/// from its arrival to its completion, so time queued behind earlier requests counts. `Board`
/// has unserved, samples, latency_ms[] and max_samples.
template <class Board, class Request>
void serve_arrivals(Board& b, const std::vector<std::uint64_t>& arrivals, std::uint64_t start,
                    std::uint64_t give_up, Request&& request) {
  for (std::uint64_t offset : arrivals) {
    const std::uint64_t arrival = start + offset;
    if (now_ns() < arrival) sleep_until_ns(arrival);
    if (now_ns() < give_up)
      request();
    else
      ++b.unserved;
    if (b.samples < Board::max_samples)
      b.latency_ms[b.samples++] = static_cast<double>(now_ns() - arrival) / 1e6;
  }
}

/// Measures the inference worker's solo capacity: 10 requests to warm up, then `n` back to back,
/// timed. Sets `b.service_ms` (one request) and `b.rate_per_s` (arrivals for `load`, a fraction of
/// that capacity), and returns when the measured part may start: `warm_up` from now. `Board` has
/// service_ms and rate_per_s.
template <class Board, class Request>
std::uint64_t calibrate_service(Board& b, double load, int n, std::uint64_t warm_up,
                                Request&& request) {
  for (int i = 0; i < 10; ++i) request();
  const std::uint64_t t0 = now_ns();
  for (int i = 0; i < n; ++i) request();
  const double service_s = static_cast<double>(now_ns() - t0) / 1e9 / n;
  b.service_ms = service_s * 1e3;
  b.rate_per_s = load / service_s;
  return now_ns() + warm_up;
}

inline void inference_worker(const run_context& run, const params& p, board& b, bool calibrate,
                             bool with_gpushare) {
  worker_device dev(run, with_gpushare
                             ? std::optional(run.options("inference", gpushare::priority::high))
                             : std::nullopt);
  const auto request = [&] {
    {
      const region r = dev.guard();
      for (int k = 0; k < p.inference_kernels; ++k) dev.kernel(p.inference_kernel_ns);
    }
    dev.sync();
  };
  request(); // the first launch and guard pay one-time costs
  b.gate.arrive_and_wait();
  std::uint64_t start = b.gate.go_ns.load() + warm_up_ns;
  if (calibrate) start = calibrate_service(b, p.load, 40, warm_up_ns, request);
  sleep_until_ns(start);
  const std::vector<std::uint64_t> arrivals = poisson_arrivals(b.rate_per_s, p.phase_ns);
  const std::uint64_t give_up = start + 3 * p.phase_ns; // an overloaded phase still ends
  serve_arrivals(b, arrivals, start, give_up, request);
  b.inference_window_ns = now_ns() - start;
  b.gate.stop.store(1); // the training process stops too
}

inline void training_worker(const run_context& run, const params& p, board& b, bool with_gpushare) {
  worker_device dev(run, with_gpushare
                             ? std::optional(run.options("training", gpushare::priority::low))
                             : std::nullopt);
  const auto iteration = [&] {
    for (int k = 0; k < p.training_kernels; ++k) {
      const region r = dev.guard();
      dev.kernel(p.training_kernel_ns);
    }
    dev.sync();
    dev.yield(); // the end of an iteration: a cheap moment to give way
  };
  iteration();
  b.gate.arrive_and_wait();
  const std::uint64_t start = b.gate.go_ns.load() + warm_up_ns;
  std::uint64_t done = 0;
  while (!b.gate.stopping()) {
    iteration();
    if (now_ns() >= start) ++done;
  }
  b.training_iterations = done;
  b.training_window_ns = now_ns() - start;
}

/// Runs one phase: the workers asked for, until inference has served its arrivals (or, for
/// training alone, for one phase).
inline phase_result run_phase(const run_context& run, const params& p, bool inference,
                              bool training, bool with_gpushare, result& r) {
  shared<board> b;
  b->rate_per_s = r.rate_per_s;
  const bool calibrate = inference && r.rate_per_s == 0;
  children workers;
  if (inference)
    workers.spawn("inference", [&] { inference_worker(run, p, *b, calibrate, with_gpushare); });
  if (training) workers.spawn("training", [&] { training_worker(run, p, *b, with_gpushare); });
  const std::uint64_t go = workers.open_gate(b->gate, (inference ? 1 : 0) + (training ? 1 : 0));
  // The workers' run-queue wait over the measured part (conditions.hpp): sampled when it starts
  // and when the phase stops, before the workers are reaped.
  sleep_until_ns(go + warm_up_ns);
  const auto cpu_before = workers.cpu_samples();
  const std::uint64_t cpu_t0 = now_ns();
  if (!inference) {
    sleep_until_ns(go + warm_up_ns + p.phase_ns);
    b->gate.stop.store(1);
  } else {
    while (!b->gate.stopping() && !workers.any_ended()) sleep_until_ns(now_ns() + 1'000'000);
  }
  const auto cpu_after = workers.cpu_samples();
  const std::uint64_t cpu_t1 = now_ns();
  workers.wait_all();

  phase_result out;
  if (calibrate) {
    r.service_ms = b->service_ms;
    r.rate_per_s = b->rate_per_s;
  }
  if (inference) {
    const std::vector<double> samples(b->latency_ms, b->latency_ms + b->samples);
    out.requests = samples.size();
    out.unserved = b->unserved;
    out.p50_ms = percentile(samples, 50);
    out.p99_ms = percentile(samples, 99);
  }
  if (training && b->training_window_ns > 0)
    out.training_per_s = static_cast<double>(b->training_iterations) * 1e9 /
                         static_cast<double>(b->training_window_ns);
  // Both run over the same window: training stops when inference has served its last request.
  const double window =
      static_cast<double>(inference ? b->inference_window_ns : b->training_window_ns);
  const double used = static_cast<double>(out.requests - out.unserved) * p.inference_kernels *
                          static_cast<double>(p.inference_kernel_ns) +
                      static_cast<double>(b->training_iterations) * p.training_kernels *
                          static_cast<double>(p.training_kernel_ns);
  out.busy_pct = window > 0 ? 100 * used / window : 0;
  out.cpu_wait_pct = worst_cpu_wait_pct(cpu_before, cpu_after, cpu_t1 - cpu_t0);
  return out;
}

/// The run's conditions: the worst phase's CPU wait, and the solo service time against the
/// nominal kernel time of a request.
inline conditions measure_conditions(const result& r) {
  conditions c;
  c.cpu_wait_pct = worst_cpu_wait({r.inference_alone.cpu_wait_pct, r.training_alone.cpu_wait_pct,
                                   r.without_gpushare.cpu_wait_pct, r.with_gpushare.cpu_wait_pct});
  if (r.nominal_service_ms > 0) c.service_over_nominal = r.service_ms / r.nominal_service_ms;
  return c;
}

inline result run(const run_context& run, const params& p) {
  result r;
  r.nominal_service_ms = p.inference_kernels * static_cast<double>(p.inference_kernel_ns) / 1e6;
  const double phase_s = static_cast<double>(p.phase_ns + warm_up_ns) / 1e9;
  progress_phase(1, 4, phase_s);
  r.inference_alone = run_phase(run, p, true, false, false, r);
  progress_phase(2, 4, phase_s);
  r.training_alone = run_phase(run, p, false, true, false, r);
  progress_phase(3, 4, phase_s);
  r.without_gpushare = run_phase(run, p, true, true, false, r);
  progress_phase(4, 4, phase_s);
  r.with_gpushare = run_phase(run, p, true, true, true, r);
  progress_done();
  r.measured = measure_conditions(r);
  r.trust = judge(r.measured);
  return r;
}

inline double ratio(double a, double b) { return b > 0 ? a / b : 0; }

inline void print_intro(const params& p) {
  std::printf("QoS: a high-priority inference process, with random (Poisson) arrivals at %.0f%% of "
              "its solo\ncapacity, next to a low-priority training process.\n",
              p.load * 100);
  std::printf("  inference: requests of %d kernels x %.1f ms; training: iterations of %d kernels x "
              "%.1f ms,\n  yielding at the end of each; %.1f s per phase\n",
              p.inference_kernels, static_cast<double>(p.inference_kernel_ns) / 1e6,
              p.training_kernels, static_cast<double>(p.training_kernel_ns) / 1e6,
              static_cast<double>(p.phase_ns) / 1e9);
  std::fflush(stdout);
}

inline void print_report(const result& r) {
  std::printf("  solo service time %.2f ms per request (its kernels: %.2f ms) -> %.0f requests/s "
              "offered\n\n",
              r.service_ms, r.nominal_service_ms, r.rate_per_s);
  std::printf("  %-30s %9s %9s %9s %14s %6s\n", "phase", "requests", "p50 ms", "p99 ms",
              "training it/s", "busy");
  const auto row = [](const char* name, const phase_result& x, bool inference, bool training) {
    std::printf("  %-30s", name);
    if (inference)
      std::printf(" %9zu %9.2f %9.2f", x.requests, x.p50_ms, x.p99_ms);
    else
      std::printf(" %9s %9s %9s", "-", "-", "-");
    if (training)
      std::printf(" %14.1f", x.training_per_s);
    else
      std::printf(" %14s", "-");
    std::printf(" %5.0f%%\n", x.busy_pct);
    if (x.unserved > 0)
      std::printf("  %-30s (%zu %s not served in time; counted with %s wait so far)\n", "",
                  x.unserved, x.unserved == 1 ? "request" : "requests",
                  x.unserved == 1 ? "its" : "their");
  };
  row("inference alone", r.inference_alone, true, false);
  row("training alone", r.training_alone, false, true);
  row("co-located, without gpushare", r.without_gpushare, true, true);
  row("co-located, with gpushare", r.with_gpushare, true, true);
  std::printf(
      "  (busy: the device time of the kernels the phase ran, as a share of its wall time. "
      "Without\n  gpushare each inference kernel queues behind training's kernels; with it "
      "a request waits\n  at most for the training kernel in progress, then runs alone.)\n");
  std::printf("\n");
  print_verdict(r.trust);
  if (!r.trust.trustworthy) return; // the table above is what was measured, not a finding
  std::printf("\n  inference p99 with gpushare: %.2f ms, %.2fx its p99 alone (%.2f ms)\n",
              r.with_gpushare.p99_ms, ratio(r.with_gpushare.p99_ms, r.inference_alone.p99_ms),
              r.inference_alone.p99_ms);
  std::printf("  inference p99 without gpushare: %.2f ms; it grows with the length of the run "
              "(time-sliced,\n  inference's queue barely keeps up), so how many times lower "
              "gpushare's is depends on the run\n",
              r.without_gpushare.p99_ms);
  std::printf("  training throughput kept: %.0f%% with gpushare (%.0f%% without), of %.1f it/s "
              "alone\n",
              100 * ratio(r.with_gpushare.training_per_s, r.training_alone.training_per_s),
              100 * ratio(r.without_gpushare.training_per_s, r.training_alone.training_per_s),
              r.training_alone.training_per_s);
  std::printf("  (p99 is set by bursts of arrivals, in which requests queue behind one another, so "
              "it adds up\n  the wake-up delays of several requests. Every phase replays the same "
              "arrivals, and p99 with\n  gpushare can come out below p99 alone when the other "
              "process keeps the CPUs awake: differences\n  of up to about 10%% either way are "
              "such timing noise, not a gain.)\n");
}

inline void print_results(const result& r) {
  result_line("qos.rate_per_s", r.rate_per_s);
  result_line("qos.service_ms", r.service_ms);
  result_line("qos.p50_alone_ms", r.inference_alone.p50_ms);
  result_line("qos.p99_alone_ms", r.inference_alone.p99_ms);
  result_line("qos.p50_without_ms", r.without_gpushare.p50_ms);
  result_line("qos.p99_without_ms", r.without_gpushare.p99_ms);
  result_line("qos.p50_with_ms", r.with_gpushare.p50_ms);
  result_line("qos.p99_with_ms", r.with_gpushare.p99_ms);
  result_line("qos.p99_ratio", ratio(r.without_gpushare.p99_ms, r.with_gpushare.p99_ms));
  result_line("qos.p99_with_over_alone", ratio(r.with_gpushare.p99_ms, r.inference_alone.p99_ms));
  result_line("qos.training_alone_per_s", r.training_alone.training_per_s);
  result_line("qos.training_kept",
              ratio(r.with_gpushare.training_per_s, r.training_alone.training_per_s));
  result_line("qos.training_kept_without",
              ratio(r.without_gpushare.training_per_s, r.training_alone.training_per_s));
  result_line("qos.nominal_service_ms", r.nominal_service_ms);
  result_line("qos.service_over_nominal", r.measured.service_over_nominal);
  result_line("qos.cpu_wait_pct", r.measured.cpu_wait_pct);
  result_line("qos.trustworthy", r.trust.trustworthy ? "yes" : "no");
}

} // namespace demo::qos
