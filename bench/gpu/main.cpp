// SPDX-License-Identifier: Apache-2.0
// gpushare's GPU benchmark: one command runs every scenario (QoS, share accuracy, solo overhead,
// handover, memory), each against unmanaged sharing of the same device in the same run, prints
// a table and, with --json PATH, writes every raw figure as JSON. See bench/gpu/README.md.
//
//   ./build/bench/gpu/gpushare_bench_gpu [--repeats N] [--scenarios LIST] [--json PATH] ...
//
// Without a usable GPU it runs on the simulated GPU the demos use, and says so: those figures
// check that the harness works and are not GPU measurements.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gpushare/gpushare.hpp>
#include <harness/progress.hpp>
#include <json_writer.hpp>

#include "config.hpp"
#include "figures.hpp"
#include "handover.hpp"
#include "memory.hpp"
#include "overhead.hpp"
#include "probe.hpp"
#include "qos.hpp"
#include "share.hpp"
#include "summary.hpp"

extern char** environ;

namespace {

using bench::config;
using bench::device_info;
using bench::figures;

figures run_scenario(const std::string& name, const device_info& dev, const config& cfg,
                     int repeat) {
  if (name == "qos") return bench::qos::run(dev, cfg, repeat);
  if (name == "share") return bench::share::run(dev, cfg, repeat);
  if (name == "overhead") return bench::overhead::run(dev, cfg, repeat);
  if (name == "handover") return bench::handover::run(dev, cfg, repeat);
  return bench::memory::run(dev, cfg, repeat);
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string join_command(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    if (i) s += ' ';
    s += argv[i];
  }
  return s;
}

/// The mode as the JSON gives it: gpu, cudasim or simulated.
const char* mode_key(const device_info& dev) {
  return demo::on_simulated_runtime(dev.mode) ? "cudasim" : dev.mode.gpu ? "gpu" : "simulated";
}

void print_device(const device_info& dev) {
  if (demo::on_simulated_runtime(dev.mode)) {
    std::printf("mode: cudasim (simulated CUDA runtime, %s) - %s, %s, %d SMs, compute %d.%d; no "
                "GPU: kernels do not run, their durations come from kernel models "
                "(docs/cudasim.md); the figures check the harness and are NOT GPU "
                "measurements\n",
                dev.mode.simulator.c_str(), dev.mode.device_name.c_str(),
                gpushare::format_bytes(dev.mode.memory).c_str(), dev.multiprocessors,
                dev.compute_major, dev.compute_minor);
  } else if (dev.mode.gpu) {
    std::printf("mode: GPU - %s (%s), %s, %d SMs, compute %d.%d; driver %s, CUDA driver API %d, "
                "runtime %d\n",
                dev.mode.device_name.c_str(), dev.mode.uuid.c_str(),
                gpushare::format_bytes(dev.mode.memory).c_str(), dev.multiprocessors,
                dev.compute_major, dev.compute_minor,
                dev.driver.empty() ? "(NVML unavailable)" : dev.driver.c_str(), dev.cuda_driver,
                dev.cuda_runtime);
  } else {
    std::printf("mode: simulated (%s) - kernels are simulated on the CPU; the figures check the "
                "harness and are NOT GPU measurements\n",
                dev.mode.why_simulated.c_str());
  }
}

void print_config(const config& c, bool gpu) {
  if (c.simulated_runtime) {
    std::printf("workload check: SKIPPED on cudasim (its cuBLAS computes no results, so there is "
                "nothing to compare with the CPU reference)\n");
    if (c.runs("overhead"))
      std::printf("note: the overhead scenario takes minutes on cudasim (it does not bound a "
                  "stream's queue of launches as a GPU does); leave it out with --scenarios\n");
  }
  std::printf("scenarios:");
  for (const auto& s : c.scenarios) std::printf(" %s", s.c_str());
  std::printf("; %d repeat%s%s; about %.0f s of measuring per repeat, plus process start-up\n",
              c.repeats, c.repeats == 1 ? "" : "s", c.quick ? "; --quick" : "",
              c.planned_seconds());
  std::printf("settings: %s\n", demo::settings_line<config>(bench::config_options, c).c_str());
  if (gpu)
    std::printf("workloads: training %d^3 bf16 GEMM + activation per step, %d steps per "
                "iteration; inference %d GEMM%s of (%d x %d) x (%d x %d) per request; small "
                "kernel %d elements\n",
                c.train_size, 3 * c.train_layers, c.infer_layers, c.infer_layers == 1 ? "" : "s",
                c.infer_hidden, c.infer_hidden, c.infer_hidden, c.infer_batch, c.small_elements);
  else
    std::printf("workloads (simulated): training step %.0f+%.0f us, %d steps per iteration; "
                "inference %d x %.0f us per request; small kernel %.0f us, large %.0f us\n",
                c.sim_gemm_us, c.sim_act_us, 3 * c.train_layers, c.infer_layers, c.sim_infer_us,
                c.sim_small_us, c.sim_large_us);
  std::fflush(stdout);
}

/// One line per scenario run: its figures as key=value (the series go to the JSON only).
void print_figures(const std::string& name, int repeat, const figures& f, double seconds) {
  std::printf("[%s, repeat %d, %.1f s]", name.c_str(), repeat, seconds);
  for (const auto& [k, v] : f.values()) std::printf(" %s=%.4g", k.c_str(), v);
  std::printf("\n");
  for (const auto& n : f.notes) std::printf("  note: %s\n", n.c_str());
  if (f.measured) {
    const demo::verdict v = f.judged();
    if (v.trustworthy) {
      std::printf("  conditions OK:");
      for (std::size_t i = 0; i < v.checked.size(); ++i)
        std::printf("%s %s", i ? ";" : "", v.checked[i].c_str());
      std::printf("\n");
    } else {
      std::printf("  WARNING: these %s figures are NOT trustworthy; they are not findings about "
                  "gpushare:\n",
                  name.c_str());
      for (const std::string& r : v.reasons) std::printf("    - %s\n", r.c_str());
      std::printf("    Run the benchmark again on a machine that is not busy with other work.\n");
    }
  }
  if (!f.error.empty()) std::printf("  ERROR: %s\n", f.error.c_str());
  std::fflush(stdout);
}

void write_config(gpushare::json::json_writer& j, const config& c) {
  j.key("config");
  j.begin_object();
  demo::write_json<config>(j, bench::config_options, c);
  j.end_object();
}

std::string to_json(const config& cfg, const device_info& dev, const std::string& started,
                    const std::string& command,
                    const std::map<std::string, std::vector<figures>>& results) {
  gpushare::json::json_writer j;
  j.begin_object();
  j.field("schema", "gpushare-bench-gpu/1");
  j.field("started_utc", started);
  j.field("command", command);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  j.field("host", host);
  j.field("gpushare_version", std::to_string(gpushare::version.major) + "." +
                                  std::to_string(gpushare::version.minor) + "." +
                                  std::to_string(gpushare::version.patch));
  j.field("mode", mode_key(dev));
  if (!dev.mode.gpu) j.field("why_simulated", dev.mode.why_simulated);
  if (cfg.simulated_runtime) { // GPU mode, but on the simulated CUDA runtime: no GPU figures
    j.field("simulated_runtime", dev.mode.simulator);
    j.field("simulated_note", "cudasim (simulated CUDA runtime): kernels did not run, their "
                              "durations came from models; these figures check the harness and "
                              "are not GPU measurements");
  }
  // Each worker checks one step of its GEMM workload against a CPU reference before it is
  // timed (GPU), except on cudasim, whose cuBLAS computes nothing.
  j.field("workload_check", cfg.simulated_runtime ? "skipped (cudasim computes no results)"
                            : dev.mode.gpu        ? "checked against a CPU reference"
                                                  : "none (simulated kernels)");
  j.key("device");
  if (dev.mode.gpu) {
    j.begin_object();
    j.field("name", dev.mode.device_name);
    j.field("uuid", dev.mode.uuid);
    j.field("memory_bytes", dev.mode.memory);
    j.field("multiprocessors", dev.multiprocessors);
    j.field("compute_capability",
            std::to_string(dev.compute_major) + "." + std::to_string(dev.compute_minor));
    j.field("driver", dev.driver);
    j.field("cuda_driver_api", dev.cuda_driver);
    j.field("cuda_runtime", dev.cuda_runtime);
    j.end_object();
  } else {
    j.null();
  }
  j.key("environment"); // the GPUSHARE_* variables that were set (they change the library)
  j.begin_object();
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    if (kv.rfind("GPUSHARE_", 0) == 0 || kv.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0) {
      const auto eq = kv.find('=');
      j.field(kv.substr(0, eq), eq == std::string::npos ? "" : kv.substr(eq + 1));
    }
  }
  j.end_object();
  write_config(j, cfg);

  j.key("results");
  j.begin_object();
  for (const auto& [name, repeats] : results) {
    j.key(name);
    j.begin_array();
    for (std::size_t r = 0; r < repeats.size(); ++r) {
      const figures& f = repeats[r];
      j.begin_object();
      j.field("repeat", static_cast<int>(r + 1));
      if (!f.error.empty()) j.field("error", f.error);
      if (!f.notes.empty()) {
        j.key("notes");
        j.begin_array();
        for (const auto& n : f.notes) j.string(n);
        j.end_array();
      }
      if (f.measured) { // a timing scenario: were its conditions good enough to trust it?
        const demo::verdict v = f.judged();
        j.field("trustworthy", v.trustworthy);
        j.key(v.trustworthy ? "conditions_checked" : "not_trustworthy_because");
        j.begin_array();
        for (const auto& x : v.trustworthy ? v.checked : v.reasons) j.string(x);
        j.end_array();
      }
      j.key("figures");
      j.begin_object();
      for (const auto& [k, v] : f.values()) j.real_field(k, v);
      j.end_object();
      j.key("series");
      j.begin_object();
      for (const auto& [k, v] : f.series()) j.real_array(k, v);
      j.end_object();
      j.end_object();
    }
    j.end_array();
  }
  j.end_object();

  j.key("summary");
  j.begin_array();
  for (const bench::row& row : bench::summary_rows(cfg)) {
    const std::string scenario = row.scenario.substr(0, row.scenario.find(' '));
    const auto it = results.find(scenario);
    if (it == results.end()) continue;
    j.begin_object();
    j.field("scenario", row.scenario);
    j.field("metric", row.metric);
    for (const auto& [side, key] :
         {std::pair{"unmanaged", row.unmanaged}, std::pair{"gpushare", row.gpushare}}) {
      j.key(side);
      if (key.empty()) {
        j.null();
        continue;
      }
      const bench::spread s = bench::gather(it->second, key);
      j.begin_object();
      j.field("figure", key);
      j.real_field("median", s.median);
      j.real_field("min", s.min);
      j.real_field("max", s.max);
      j.real_array("values", s.values);
      j.end_object();
    }
    if (row.goal.empty()) {
      j.key("goal");
      j.null();
    } else {
      j.field("goal", row.goal);
    }
    const bool trusted = bench::trustworthy(it->second);
    const std::string verdict =
        bench::verdict(row, bench::gather(it->second, row.gpushare), trusted);
    j.field("trustworthy", trusted);
    j.key("met");
    if (verdict == "yes" || verdict == "NO")
      j.boolean(verdict == "yes");
    else
      j.null();
    j.end_object();
  }
  j.end_array();
  j.end_object();
  return j.str();
}

/// Runs every scenario, repeat-major: every scenario once, then again, so a slow drift of the
/// machine spreads over all scenarios instead of biasing one. Returns whether one failed.
bool run_all(const config& cfg, const device_info& dev,
             std::map<std::string, std::vector<figures>>& results) {
  bool failed = false;
  // The progress line (harness/progress.hpp) on a terminal: the time left is the planned
  // measuring time of the scenarios still to run, scaled by how long the finished ones really
  // took against their plan (start-up, warm-up and calibration come on top of the plan).
  demo::progress_line progress(demo::progress_wanted(cfg.quiet));
  double planned_left = cfg.planned_seconds() * cfg.repeats;
  double planned_done = 0;
  double actual_done = 0;
  for (int r = 1; r <= cfg.repeats; ++r)
    for (std::size_t i = 0; i < cfg.scenarios.size(); ++i) {
      const std::string& name = cfg.scenarios[i];
      progress.set(demo::counter("scenario", i + 1, cfg.scenarios.size(), name)
                       .append(" \xC2\xB7 ")
                       .append(demo::counter("repeat", static_cast<std::size_t>(r),
                                             static_cast<std::size_t>(cfg.repeats))),
                   demo::refined_seconds_left(planned_left, planned_done, actual_done));
      const std::uint64_t t0 = bench::now_ns();
      figures f;
      try {
        f = run_scenario(name, dev, cfg, r);
      } catch (const std::exception& e) {
        f.error = e.what();
      }
      failed = failed || !f.error.empty();
      const double took_s = static_cast<double>(bench::now_ns() - t0) / 1e9;
      planned_left -= cfg.planned_seconds(name);
      planned_done += cfg.planned_seconds(name);
      actual_done += took_s;
      progress.clear();
      print_figures(name, r, f, took_s);
      results[name].push_back(std::move(f));
    }
  return failed;
}

} // namespace

int main(int argc, char** argv) {
  config cfg = bench::parse_command_line(argc, argv);
  const std::string started = utc_now();
  const device_info dev = bench::find_device(cfg.simulate);
  if (!dev.mode.gpu && cfg.require_gpu) {
    std::fprintf(stderr, "%s: --require-gpu, but no GPU is usable: %s\n", argv[0],
                 dev.mode.why_simulated.c_str());
    return 1;
  }
  if (!cfg.json_path.empty()) {
    // Find out now, not after minutes of measuring, that the results cannot be written.
    std::ofstream probe(cfg.json_path, std::ios::binary | std::ios::app);
    if (!probe) {
      std::fprintf(stderr,
                   "%s: cannot write the JSON results to '%s' (--json): check that its "
                   "directory exists and is writable\n",
                   argv[0], cfg.json_path.c_str());
      return 2;
    }
  }
  cfg.resolve(dev.mode.gpu, demo::on_simulated_runtime(dev.mode));
  print_device(dev);
  print_config(cfg, dev.mode.gpu);

  std::map<std::string, std::vector<figures>> results;
  const bool failed = run_all(cfg, dev, results);

  bench::print_summary(cfg, results, cfg.repeats);
  if (cfg.json_path.empty()) {
    std::printf("raw figures: not written (--json PATH writes them)\n");
  } else {
    const std::string json = to_json(cfg, dev, started, join_command(argc, argv), results);
    std::ofstream out(cfg.json_path, std::ios::binary | std::ios::trunc);
    out << json;
    out.close();
    if (!out) {
      std::fprintf(stderr, "%s: could not write the JSON results to '%s'\n", argv[0],
                   cfg.json_path.c_str());
      return 1;
    }
    std::printf("raw figures: %s\n", cfg.json_path.c_str());
  }
  if (failed) {
    std::fprintf(stderr, "%s: a scenario failed (see ERROR above); its figures are incomplete\n",
                 argv[0]);
    return 1;
  }
  return 0;
}
