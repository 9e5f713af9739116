// SPDX-License-Identifier: Apache-2.0
// One phase of a scenario: a fresh gpushare table (its own domain, removed at the end), the
// simulated device when there is no GPU, and the worker processes, which get ready, start
// together at the gate, and are reaped (or killed, if the phase fails).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <gpushare/gpushare.hpp>

#include "config.hpp"
#include "demo/context.hpp"
#include "demo/processes.hpp"

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

  /// Options for a worker's session in this phase's table.
  gpushare::session_options options(const std::string& name,
                                    int priority = gpushare::priority::normal,
                                    std::uint32_t share = 1) const {
    return run_.options(name, priority, share);
  }

private:
  demo::run_context run_; // declared first: destroyed after the workers are reaped
  demo::children workers_;
};

} // namespace bench
