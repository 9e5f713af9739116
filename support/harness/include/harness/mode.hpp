// SPDX-License-Identifier: Apache-2.0
// Real GPU or simulated one? The answer comes from a forked probe child, because even
// cudaGetDeviceCount initialises the CUDA driver, and the demo's parent must stay free of CUDA
// to fork its workers.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <gpushare/gpushare.hpp>

#include "gpu.hpp"
#include "run_in_child.hpp"

namespace demo {

struct device_mode {
  bool gpu = false;
  std::string why_simulated; ///< the reason, when simulated
  /// GPU mode on the simulated CUDA runtime (tools/cudasim): "cudasim <version>"; "" on a GPU.
  /// The demos then run their GPU code unchanged, but nothing they time ran on a GPU.
  std::string simulator;
  std::string device_name, uuid;
  std::uint64_t memory = 0;
#ifdef GPUSHARE_HARNESS_CUDA
  gpu::busy_kernel_rate rate;
#endif
};

#ifdef GPUSHARE_HARNESS_CUDA
/// Runs gpu::probe() in a child and reads its report (usable = 0, with a reason, on failure).
inline gpu::probe_report probe_in_child(bool calibrate_busy_kernel) {
  if (const auto r = run_in_child<gpu::probe_report>(
          [calibrate_busy_kernel] { return gpu::probe(calibrate_busy_kernel); }))
    return *r;
  gpu::probe_report r;
  std::snprintf(r.reason, sizeof r.reason, "the GPU probe process failed");
  return r;
}
#endif

/// Decides the mode. `simulate`: the user asked for the simulated GPU.
inline device_mode detect_mode(bool simulate) {
  device_mode m;
  if (simulate) {
    m.why_simulated = "--simulate";
    return m;
  }
#ifdef GPUSHARE_HARNESS_CUDA
  const gpu::probe_report r = probe_in_child(true);
  if (!r.usable) {
    m.why_simulated = r.reason;
    return m;
  }
  m.gpu = true;
  m.simulator = r.simulator;
  m.device_name = r.name;
  m.uuid = r.uuid;
  m.memory = r.memory;
  m.rate = r.rate;
#else
  m.why_simulated = "built without CUDA";
#endif
  return m;
}

/// Whether GPU mode runs on the simulated CUDA runtime rather than a GPU.
inline bool on_simulated_runtime(const device_mode& m) { return m.gpu && !m.simulator.empty(); }

/// The mode as the demos' "result mode=..." line gives it: gpu, cudasim or simulated.
inline const char* mode_key(const device_mode& m) {
  return on_simulated_runtime(m) ? "cudasim" : m.gpu ? "gpu" : "simulated";
}

/// The mode as the demos' summaries name it.
inline const char* mode_title(const device_mode& m) {
  return on_simulated_runtime(m) ? "GPU mode on the simulated CUDA runtime (cudasim)"
         : m.gpu                 ? "GPU mode"
                                 : "simulated mode";
}

/// What the simulated device is, for the demos that compare sharing with and without gpushare.
inline const char* simulation_note(const device_mode& m) {
  if (on_simulated_runtime(m))
    return "The CUDA runtime here is cudasim, a simulation: kernels do not run, each occupies "
           "the simulated\nGPU for the time its model gives, and the GPU time-slices between "
           "processes (2 ms slices unless\nCUDASIM_SLICE_US says otherwise); \"without "
           "gpushare\" uses it directly, as an unmanaged GPU.\n";
  if (m.gpu) return "";
  return "The simulated device runs one kernel at a time and time-slices between processes, "
         "as a GPU\nshared without arbitration does, in 2 ms slices (a modelling choice: NVIDIA "
         "does not publish\nits slice lengths, and none was measured here); \"without gpushare\" "
         "uses it directly.\n";
}

/// The first line every demo prints.
inline std::string mode_line(const device_mode& m) {
  if (on_simulated_runtime(m))
    return "mode: GPU mode on the simulated CUDA runtime (" + m.simulator + ": " + m.device_name +
           ", " + gpushare::format_bytes(m.memory) +
           ") — no GPU: kernels are simulated, device time from simulated CUDA events";
  if (m.gpu)
    return "mode: GPU (" + m.device_name + ", " + gpushare::format_bytes(m.memory) +
           ") — real kernels, device time from CUDA events";
  return "mode: simulated (" + m.why_simulated + ") — kernels are simulated on the CPU";
}

} // namespace demo
