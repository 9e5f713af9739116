// SPDX-License-Identifier: Apache-2.0
// The GPU benchmark's settings: what to run, for how long, and the workloads' sizes, with
// defaults for a real GPU and for the simulated one, and the command line that changes them: one
// table (config_options) on the harness's option parser (harness/options.hpp). A bad flag or
// value prints what was wrong and the usage, and exits with status 2.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <harness/options.hpp>

namespace bench {

inline constexpr std::string_view all_scenarios[] = {"qos", "share", "overhead", "handover",
                                                     "memory"};

/// Everything a run needs to know. Durations are seconds; GPU workload sizes are matrix
/// dimensions; simulated workloads are kernel durations in microseconds.
struct config {
  // What to run.
  bool simulate = false;    ///< --simulate: the simulated GPU even when a real one is here
  bool require_gpu = false; ///< --require-gpu: fail instead of simulating when no GPU is usable
  bool quick = false;       ///< --quick: short phases (checks the harness; figures are rough)
  bool quiet = false;       ///< --quiet: no progress line on the terminal (results still print)
  int repeats = 0;          ///< 0: 3 on a GPU, 1 simulated
  std::vector<std::string> scenarios{all_scenarios, all_scenarios + 5};
  std::string json_path; ///< --json: where to write the JSON ("": nowhere)

  // How long (0: the mode's default, filled in by resolve()).
  double phase_s = 0;           ///< qos: each of its four phases
  double window_s = 0;          ///< share: one accuracy window
  int windows = 0;              ///< share: windows per configuration
  double settle_s = 0;          ///< share: before the first window
  double overhead_s = 0;        ///< overhead: each measured phase
  double handover_s = 0;        ///< handover: each phase
  double handover_rate = 0;     ///< handover: requests per second (low: the GPU stays on training)
  std::vector<int> guard_steps; ///< handover: training steps per low-priority guard
  double memory_hold_s = 0;     ///< memory: how long each job holds its memory, running kernels

  // The scenarios' shape.
  double load = 0.5;             ///< qos: offered inference load, a fraction of its solo capacity
  int memory_jobs = 4;           ///< memory: processes
  double memory_fraction = 0.35; ///< memory: each job's need, a fraction of the device's memory

  // GPU workloads (bf16 GEMMs through cuBLAS, fp32 accumulation).
  int train_size = 4096; ///< training GEMMs are train_size^3
  int train_layers = 0;  ///< an iteration is 3 x this many steps (0: 8 on a GPU, 2 simulated)
  int infer_batch = 256; ///< inference GEMMs: (infer_hidden x infer_hidden) x (... x batch)
  int infer_hidden = 8192;
  int infer_layers = 0;         ///< GEMMs per inference request (0: 16 on a GPU, 4 simulated)
  int small_elements = 1 << 20; ///< overhead: elements of the launch-heavy elementwise kernel

  // Simulated workloads (microseconds of simulated device time).
  double sim_gemm_us = 900, sim_act_us = 100, sim_infer_us = 500, sim_small_us = 20;
  double sim_large_us = 2000, sim_stamp_us = 5;

  bool gpu = false;               ///< the mode, set by resolve()
  bool simulated_runtime = false; ///< GPU mode on cudasim, the simulated CUDA runtime (resolve())

  /// Fills in what depends on the mode and --quick. `on_cudasim`: GPU mode runs on the simulated
  /// CUDA runtime (tools/cudasim); its settings are the GPU's.
  void resolve(bool real_gpu, bool on_cudasim = false);

  /// Seconds of measuring per repeat that the settings ask for (process start-up, warm-up and
  /// calibration come on top).
  double planned_seconds() const {
    double s = 0;
    for (const std::string& name : scenarios) s += planned_seconds(name);
    return s;
  }

  /// The same for one scenario (0 for a name that is not one).
  double planned_seconds(std::string_view scenario) const {
    if (scenario == "qos") return 4 * phase_s;
    if (scenario == "share") return 2 * 2 * (settle_s + windows * window_s);
    if (scenario == "overhead") return 3 * 4 * overhead_s * 1.25;
    if (scenario == "handover")
      return handover_s * (1 + 2 * static_cast<double>(guard_steps.size()));
    if (scenario == "memory") { // jobs run in waves of as many as fit at once
      const double at_once = std::max(1.0, std::floor(1 / memory_fraction));
      return memory_hold_s * (1 + std::ceil(memory_jobs / at_once));
    }
    return 0;
  }

  bool runs(std::string_view scenario) const {
    return std::find(scenarios.begin(), scenarios.end(), scenario) != scenarios.end();
  }
};

/// Every setting, declared once: its flag, help, range, default by mode and JSON key. The table
/// drives the parser, --help, the settings line a run prints and the JSON's "config".
using config_option = demo::option<config>;
inline constexpr config_option config_options[] = {
    config_option("--scenarios", "LIST", &config::scenarios,
                  "comma-separated, from qos,share,overhead,handover,memory (all)")
        .json("scenarios")
        .words("scenario", all_scenarios),
    config_option("--repeats", "N", &config::repeats, "repeat each scenario N times")
        .json("repeats")
        .range(1, 100)
        .by_mode(3, 1),
    config_option("--json", "PATH", &config::json_path,
                  "write every raw figure as JSON to PATH (default: no JSON)")
        .noun("file name"),
    config_option("--simulate", "", &config::simulate,
                  "use the simulated GPU even if a CUDA device is here"),
    config_option("--require-gpu", "", &config::require_gpu,
                  "exit 1 instead of simulating when no GPU is usable"),
    config_option("--quiet", "", &config::quiet,
                  "no progress line on the terminal (results are still printed)"),
    config_option("--quick", "", &config::quick,
                  "short phases: checks the harness, figures are rough")
        .json("quick"),
    config_option("--phase-seconds", "S", &config::phase_s, "qos: each phase")
        .json("phase_s")
        .range(0.2, 3600)
        .by_mode(10, 2, 0.6),
    config_option("--window-seconds", "S", &config::window_s, "share: each accuracy window")
        .json("window_s")
        .range(0.2, 3600)
        .by_mode(10, 1, 0.5),
    config_option("--windows", "N", &config::windows, "share: windows per configuration")
        .json("windows")
        .range(1, 1000)
        .by_mode(3, 3, 2),
    config_option::setting(&config::settle_s).json("settle_s").by_mode(2, 0.3, 0.2),
    config_option("--overhead-seconds", "S", &config::overhead_s, "overhead: each phase")
        .json("overhead_s")
        .range(0.1, 3600)
        .by_mode(5, 1, 0.3),
    config_option("--handover-seconds", "S", &config::handover_s, "handover: each phase")
        .json("handover_s")
        .range(0.2, 3600)
        .by_mode(10, 1.5, 0.6),
    config_option::setting(&config::handover_rate).json("handover_rate_per_s").by_mode(50, 40, 40),
    config_option("--guard-steps", "LIST", &config::guard_steps,
                  "handover: training steps per low-priority guard (1,4,16; --quick 1,4)")
        .json("guard_steps")
        .range(1, 1000)
        .noun("number"),
    config_option::setting(&config::memory_hold_s).json("memory_hold_s").by_mode(3, 0.6, 0.3),
    config_option("--load", "F", &config::load,
                  "qos: inference load, fraction of its solo capacity")
        .json("load")
        .range(0.01, 0.95),
    config_option("--memory-jobs", "N", &config::memory_jobs, "memory: processes")
        .json("memory_jobs")
        .range(2, 16),
    config_option("--memory-fraction", "F", &config::memory_fraction,
                  "memory: each job's need, fraction of device memory")
        .json("memory_fraction")
        .range(0.05, 0.8),
    config_option("--train-size", "N", &config::train_size, "training GEMM dimension")
        .json("train_size")
        .range(64, 32768),
    config_option("--train-layers", "N", &config::train_layers,
                  "training layers; an iteration is 3N steps")
        .json("train_layers")
        .range(1, 256)
        .by_mode(8, 2),
    config_option("--infer-batch", "N", &config::infer_batch, "inference batch")
        .json("infer_batch")
        .range(1, 65536),
    config_option("--infer-hidden", "N", &config::infer_hidden, "inference hidden size")
        .json("infer_hidden")
        .range(64, 32768),
    config_option("--infer-layers", "N", &config::infer_layers, "GEMMs per inference request")
        .json("infer_layers")
        .range(1, 1024)
        .by_mode(16, 4),
    config_option::setting(&config::small_elements).json("small_elements"),
    config_option::setting(&config::sim_gemm_us).json("sim_gemm_us"),
    config_option::setting(&config::sim_act_us).json("sim_act_us"),
    config_option::setting(&config::sim_infer_us).json("sim_infer_us"),
    config_option::setting(&config::sim_small_us).json("sim_small_us"),
    config_option::setting(&config::sim_large_us).json("sim_large_us"),
};

inline constexpr demo::command_line<config> config_command_line{
    "Runs gpushare's GPU benchmark scenarios, each against unmanaged sharing in the same run,\n"
    "prints a table (scenario, metric, unmanaged, gpushare, goal, met?) and, with --json,\n"
    "writes every raw figure as JSON. Without a usable GPU it runs on a simulated GPU and says "
    "so.\n",
    config_options, false, true};

inline void config::resolve(bool real_gpu, bool on_cudasim) {
  gpu = real_gpu;
  simulated_runtime = real_gpu && on_cudasim;
  demo::resolve_defaults<config>(config_options, *this, gpu, quick);
  if (guard_steps.empty())
    guard_steps = quick ? std::vector<int>{1, 4} : std::vector<int>{1, 4, 16};
}

/// Parses the command line. --help prints the usage and exits 0; a bad flag or value prints the
/// problem and the usage to stderr and exits 2.
inline config parse_command_line(int argc, char** argv) {
  config c;
  demo::parse(config_command_line, argc, argv, c);
  if (c.memory_jobs * c.memory_fraction <= 1.0)
    demo::refuse(config_command_line, argc > 0 ? argv[0] : "gpushare_bench_gpu",
                 "--memory-jobs x --memory-fraction must exceed 1 (the scenario needs more "
                 "memory than the device has), got " +
                     std::to_string(c.memory_jobs * c.memory_fraction));
  return c;
}

} // namespace bench
