// SPDX-License-Identifier: Apache-2.0
// Finding the GPU the benchmark runs on: device 0 as this process sees it (choose another with
// CUDA_VISIBLE_DEVICES), its name, UUID, memory, driver and CUDA versions, from the harness's
// probe (harness/gpu.hpp), which runs in a forked child: the benchmark's parent must stay free of
// CUDA to fork its workers.
#pragma once

#include <harness/mode.hpp>

#include "phase.hpp"

namespace bench {

/// The device to run on: the GPU, or the simulated one (with the reason) when `simulate` is
/// asked for or no GPU is usable. On the simulated CUDA runtime (tools/cudasim) the "GPU" is
/// cudasim's, and `mode.simulator` says so.
inline device_info find_device(bool simulate) {
  device_info d;
  if (simulate) {
    d.mode.why_simulated = "--simulate";
    return d;
  }
#ifdef GPUSHARE_HARNESS_CUDA
  const demo::gpu::probe_report r = demo::probe_in_child(false); // the harness's probe
  if (!r.usable) {
    d.mode.why_simulated = r.reason;
    return d;
  }
  d.mode.gpu = true;
  d.mode.simulator = r.simulator;
  d.mode.device_name = r.name;
  d.mode.uuid = r.uuid;
  d.mode.memory = r.memory;
  d.driver = r.driver;
  d.cuda_driver = r.cuda_driver;
  d.cuda_runtime = r.cuda_runtime;
  d.multiprocessors = r.multiprocessors;
  d.compute_major = r.major;
  d.compute_minor = r.minor;
#else
  d.mode.why_simulated = "built without CUDA";
#endif
  return d;
}

} // namespace bench
