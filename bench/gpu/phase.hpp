// SPDX-License-Identifier: Apache-2.0
// One phase of a scenario: a fresh gpushare table (its own domain, removed at the end), the
// simulated device when there is no GPU, and the worker processes, which get ready, start
// together at the gate, and are reaped (or killed, if the phase fails). From the gate to their
// end, the phase measures how long its workers waited for a CPU (harness/conditions.hpp): the
// timing figures of a phase whose workers were kept waiting show the machine's load.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gpushare/gpushare.hpp>
#include <harness/conditions.hpp>
#include <harness/context.hpp>
#include <harness/processes.hpp>

#include "config.hpp"

namespace bench {

/// Where the benchmark runs: the GPU found by the probe, or the simulated one.
struct device_info {
  demo::device_mode mode; ///< gpu, name, uuid, memory (as the demos describe a device)
  std::string driver;     ///< NVIDIA driver version, e.g. "580.95.05" (GPU; from NVML)
  int cuda_driver = 0;    ///< cudaDriverGetVersion, e.g. 13000
  int cuda_runtime = 0;   ///< cudaRuntimeGetVersion
  int multiprocessors = 0;
  int compute_major = 0, compute_minor = 0;
};

/// The table and device of one phase. The domain is "gb<pid>-<tag>" (at most 32 characters, so
/// tags are short: "q1-u" is QoS, repeat 1, unmanaged), so phases never share sessions or
/// accounting, and no other program's sessions mix in.
class phase {
public:
  phase(const device_info& device, std::string_view tag)
      : run_(device.mode, tag, 16 * demo::GiB, "gb") {}

  const demo::run_context& run() const { return run_; }
  demo::children& workers() { return workers_; }

  /// Opens the gate for `n` workers (see demo::children::open_gate) and starts measuring their
  /// run-queue wait. Returns the time the gate opened.
  std::uint64_t start(demo::start_gate& gate, int n) {
    const std::uint64_t go = workers_.open_gate(gate, n);
    cpu_before_ = workers_.cpu_samples();
    cpu_t0_ = demo::now_ns();
    return go;
  }

  /// Waits for every worker (throwing, as demo::children::wait_all does, when one failed) and
  /// returns the worst worker's run-queue wait from start() to its end, as a percentage of that
  /// time: NaN when it could not be read.
  double finish() {
    const std::vector<demo::children::ended_sample> ended = workers_.wait_ended();
    workers_.wait_all();
    if (ended.size() != cpu_before_.size() || ended.empty()) return NAN;
    double worst = 0;
    for (std::size_t i = 0; i < ended.size(); ++i) {
      const auto& a = cpu_before_[i];
      const auto& z = ended[i].cpu;
      if (!a || !z || z->wait_ns < a->wait_ns || ended[i].at_ns <= cpu_t0_) return NAN;
      const double pct = 100.0 * static_cast<double>(z->wait_ns - a->wait_ns) /
                         static_cast<double>(ended[i].at_ns - cpu_t0_);
      worst = pct > worst ? pct : worst;
    }
    return worst;
  }

  /// Options for a worker's session in this phase's table.
  gpushare::session_options options(const std::string& name,
                                    int priority = gpushare::priority::normal,
                                    std::uint32_t share = 1) const {
    return run_.options(name, priority, share);
  }

private:
  demo::run_context run_; // declared first: destroyed after the workers are reaped
  demo::children workers_;
  std::vector<std::optional<demo::cpu_sample>> cpu_before_;
  std::uint64_t cpu_t0_ = 0;
};

} // namespace bench
