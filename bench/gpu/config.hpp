// SPDX-License-Identifier: Apache-2.0
// The GPU benchmark's settings: what to run, for how long, and the workloads' sizes, with
// defaults for a real GPU and for the simulated one, and the command line that changes them.
// A bad flag or value prints what was wrong and the usage, and exits with status 2.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

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
  void resolve(bool real_gpu, bool on_cudasim = false) {
    gpu = real_gpu;
    simulated_runtime = real_gpu && on_cudasim;
    if (repeats == 0) repeats = gpu ? 3 : 1;
    if (infer_layers == 0) infer_layers = gpu ? 16 : 4;
    if (train_layers == 0) train_layers = gpu ? 8 : 2;
    const auto pick = [&](double& v, double on_gpu, double simulated, double short_run) {
      if (v == 0) v = quick ? short_run : gpu ? on_gpu : simulated;
    };
    pick(phase_s, 10, 2, 0.6);
    pick(window_s, 10, 1, 0.5);
    pick(settle_s, 2, 0.3, 0.2);
    pick(overhead_s, 5, 1, 0.3);
    pick(handover_s, 10, 1.5, 0.6);
    pick(handover_rate, 50, 40, 40);
    pick(memory_hold_s, 3, 0.6, 0.3);
    if (windows == 0) windows = quick ? 2 : 3;
    if (guard_steps.empty())
      guard_steps = quick ? std::vector<int>{1, 4} : std::vector<int>{1, 4, 16};
  }

  /// Seconds of measuring per repeat that the settings ask for (process start-up, warm-up and
  /// calibration come on top).
  double planned_seconds() const {
    double s = 0;
    if (runs("qos")) s += 4 * phase_s;
    if (runs("share")) s += 2 * 2 * (settle_s + windows * window_s);
    if (runs("overhead")) s += 3 * 4 * overhead_s * 1.25;
    if (runs("handover")) s += handover_s * (1 + 2 * static_cast<double>(guard_steps.size()));
    if (runs("memory")) { // jobs run in waves of as many as fit at once
      const double at_once = std::max(1.0, std::floor(1 / memory_fraction));
      s += memory_hold_s * (1 + std::ceil(memory_jobs / at_once));
    }
    return s;
  }

  bool runs(std::string_view scenario) const {
    return std::find(scenarios.begin(), scenarios.end(), scenario) != scenarios.end();
  }
};

inline void print_usage(std::FILE* to, const char* program) {
  std::fprintf(
      to,
      "usage: %s [options]\n"
      "Runs gpushare's GPU benchmark scenarios, each against unmanaged sharing in the same run,\n"
      "prints a table (scenario, metric, unmanaged, gpushare, goal, met?) and, with --json,\n"
      "writes every raw figure as JSON. Without a usable GPU it runs on a simulated GPU and says "
      "so.\n"
      "\n"
      "  --scenarios LIST       comma-separated, from qos,share,overhead,handover,memory (all)\n"
      "  --repeats N            repeat each scenario N times (default 3 on a GPU, 1 simulated)\n"
      "  --json PATH            write every raw figure as JSON to PATH (default: no JSON)\n"
      "  --simulate             use the simulated GPU even if a CUDA device is here\n"
      "  --require-gpu          exit 1 instead of simulating when no GPU is usable\n"
      "  --quick                short phases: checks the harness, figures are rough\n"
      "  --phase-seconds S      qos: each phase (GPU 10, simulated 2)\n"
      "  --window-seconds S     share: each accuracy window (GPU 10, simulated 1)\n"
      "  --windows N            share: windows per configuration (3)\n"
      "  --overhead-seconds S   overhead: each phase (GPU 5, simulated 1)\n"
      "  --handover-seconds S   handover: each phase (GPU 10, simulated 1.5)\n"
      "  --guard-steps LIST     handover: training steps per low-priority guard (1,4,16)\n"
      "  --load F               qos: inference load, fraction of its solo capacity (0.5)\n"
      "  --memory-jobs N        memory: processes (4)\n"
      "  --memory-fraction F    memory: each job's need, fraction of device memory (0.35)\n"
      "  --train-size N         training GEMM dimension (4096)\n"
      "  --train-layers N       training layers; an iteration is 3N steps (GPU 8, sim. 2)\n"
      "  --infer-batch N        inference batch (256)\n"
      "  --infer-hidden N       inference hidden size (8192)\n"
      "  --infer-layers N       GEMMs per inference request (GPU 16, simulated 4)\n"
      "  --help                 show this text\n",
      program);
}

namespace detail {

inline bool parse_double(const std::string& s, double& out) {
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return !s.empty() && end != nullptr && *end == '\0' && std::isfinite(out);
}

inline bool parse_int(const std::string& s, int& out) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || end == nullptr || *end != '\0' || v < -1'000'000'000 || v > 1'000'000'000)
    return false;
  out = static_cast<int>(v);
  return true;
}

inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');) parts.push_back(part);
  if (!s.empty() && s.back() == ',') parts.emplace_back();
  return parts;
}

} // namespace detail

/// Parses the command line. --help prints the usage and exits 0; a bad flag or value prints the
/// problem and the usage to stderr and exits 2.
inline config parse_command_line(int argc, char** argv) {
  config c;
  const char* program = argc > 0 ? argv[0] : "gpushare_bench_gpu";
  const auto fail = [&](const std::string& why) {
    std::fprintf(stderr, "%s: %s\n", program, why.c_str());
    print_usage(stderr, program);
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::optional<std::string> inline_value;
    if (const auto eq = flag.find('='); flag.starts_with("--") && eq != std::string::npos) {
      inline_value = flag.substr(eq + 1);
      flag.resize(eq);
    }
    const auto value = [&]() -> std::string {
      if (inline_value) return *inline_value;
      if (i + 1 >= argc) fail(flag + " needs a value");
      return argv[++i];
    };
    const auto number = [&](double lo, double hi, double& out) {
      const std::string v = value();
      double d = 0;
      if (!detail::parse_double(v, d) || d < lo || d > hi) {
        std::ostringstream why;
        why << flag << " must be a number from " << lo << " to " << hi << ", not '" << v << "'";
        fail(why.str());
      }
      out = d;
    };
    const auto integer = [&](int lo, int hi, int& out) {
      const std::string v = value();
      int n = 0;
      if (!detail::parse_int(v, n) || n < lo || n > hi)
        fail(flag + " must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
             ", not '" + v + "'");
      out = n;
    };
    const auto no_value = [&] {
      if (inline_value) fail(flag + " takes no value");
    };

    if (flag == "--help" || flag == "-h") {
      print_usage(stdout, program);
      std::exit(0);
    } else if (flag == "--simulate") {
      no_value();
      c.simulate = true;
    } else if (flag == "--require-gpu") {
      no_value();
      c.require_gpu = true;
    } else if (flag == "--quick") {
      no_value();
      c.quick = true;
    } else if (flag == "--scenarios") {
      const std::string v = value();
      c.scenarios.clear();
      for (const std::string& s : detail::split(v)) {
        if (std::find(std::begin(all_scenarios), std::end(all_scenarios), s) ==
            std::end(all_scenarios))
          fail("--scenarios: unknown scenario '" + s +
               "' (choose from qos,share,overhead,handover,memory)");
        if (!c.runs(s)) c.scenarios.push_back(s);
      }
      if (c.scenarios.empty()) fail("--scenarios needs at least one scenario");
    } else if (flag == "--repeats") {
      integer(1, 100, c.repeats);
    } else if (flag == "--json") {
      c.json_path = value();
      if (c.json_path.empty()) fail("--json needs a file name");
    } else if (flag == "--phase-seconds") {
      number(0.2, 3600, c.phase_s);
    } else if (flag == "--window-seconds") {
      number(0.2, 3600, c.window_s);
    } else if (flag == "--windows") {
      integer(1, 1000, c.windows);
    } else if (flag == "--overhead-seconds") {
      number(0.1, 3600, c.overhead_s);
    } else if (flag == "--handover-seconds") {
      number(0.2, 3600, c.handover_s);
    } else if (flag == "--guard-steps") {
      const std::string v = value();
      c.guard_steps.clear();
      for (const std::string& s : detail::split(v)) {
        int n = 0;
        if (!detail::parse_int(s, n) || n < 1 || n > 1000)
          fail("--guard-steps: each entry must be an integer from 1 to 1000, not '" + s + "'");
        c.guard_steps.push_back(n);
      }
      if (c.guard_steps.empty()) fail("--guard-steps needs at least one number");
    } else if (flag == "--load") {
      number(0.01, 0.95, c.load);
    } else if (flag == "--memory-jobs") {
      integer(2, 16, c.memory_jobs);
    } else if (flag == "--memory-fraction") {
      number(0.05, 0.8, c.memory_fraction);
    } else if (flag == "--train-size") {
      integer(64, 32768, c.train_size);
    } else if (flag == "--train-layers") {
      integer(1, 256, c.train_layers);
    } else if (flag == "--infer-batch") {
      integer(1, 65536, c.infer_batch);
    } else if (flag == "--infer-hidden") {
      integer(64, 32768, c.infer_hidden);
    } else if (flag == "--infer-layers") {
      integer(1, 1024, c.infer_layers);
    } else {
      fail("unknown option '" + flag + "'");
    }
  }
  if (c.memory_jobs * c.memory_fraction <= 1.0)
    fail("--memory-jobs x --memory-fraction must exceed 1 (the scenario needs more memory than "
         "the device has), got " +
         std::to_string(c.memory_jobs * c.memory_fraction));
  return c;
}

} // namespace bench
