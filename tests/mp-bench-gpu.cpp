// SPDX-License-Identifier: Apache-2.0
// The GPU benchmark harness (bench/gpu/), run as a program on the simulated GPU with short
// phases: every scenario runs and its figures land in the JSON, finite and in range. When the
// bench judged its measurement conditions good (its workers seldom waited for a CPU), the
// figures must tell unmanaged sharing and gpushare apart the way the simulated device does (the
// bounds are generous: the phases are short); when it judged them bad (a busy machine), it must
// say so plainly instead. Bad input is refused with status 2.
#include <doctest/doctest.h>

#include "test_util.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

struct bench_run {
  int exit_code = -1;
  std::string output; ///< stdout and stderr
  std::string json;   ///< the file written by --json
  std::string first_line;

  /// The number recorded as "<key>": <number> in the JSON (the first repeat's figure).
  double figure(const std::string& key) const {
    const std::string needle = "\"" + key + "\": ";
    const auto at = json.find(needle);
    if (at == std::string::npos) {
      FAIL_CHECK("the JSON has no figure " << key);
      return NAN;
    }
    const char* start = json.c_str() + at + needle.size();
    if (std::string_view(start, 4) == "null") return NAN;
    return std::strtod(start, nullptr);
  }
  /// The series recorded as "<key>": [...] (the first repeat's), null as NaN.
  std::vector<double> series(const std::string& key) const {
    std::vector<double> out;
    const std::string needle = "\"" + key + "\": [";
    const auto at = json.find(needle);
    if (at == std::string::npos) {
      FAIL_CHECK("the JSON has no series " << key);
      return out;
    }
    const char* p = json.c_str() + at + needle.size();
    while (*p != ']' && *p != '\0') {
      while (*p == ' ' || *p == '\n' || *p == ',') ++p;
      if (*p == ']') break;
      if (std::string_view(p, 4) == "null") {
        out.push_back(NAN);
        p += 4;
        continue;
      }
      char* end = nullptr;
      out.push_back(std::strtod(p, &end));
      if (end == p) break;
      p = end;
    }
    return out;
  }
  std::size_t count(const std::string& text) const {
    std::size_t n = 0;
    for (auto at = json.find(text); at != std::string::npos; at = json.find(text, at + 1)) ++n;
    return n;
  }
};

bool in_range(double x, double low, double high) { return x >= low && x <= high; }

/// Whether the bench judged the conditions of `scenario`'s (first) repeat good enough to trust
/// its figures. Either way, checks that the verdict agrees with the conditions it recorded and
/// that the output says it plainly: a warning naming the scenario, and its goals not judged.
bool trusted(const bench_run& r, const std::string& scenario) {
  CAPTURE(scenario);
  const auto results = r.json.find("\"results\": {");
  const auto at = r.json.find("\"" + scenario + "\": [", results);
  const auto field = r.json.find("\"trustworthy\": ", at);
  if (results == std::string::npos || at == std::string::npos || field == std::string::npos) {
    FAIL_CHECK("the JSON does not say whether the " << scenario << " figures are trustworthy");
    return false;
  }
  const bool ok = r.json.compare(field + 15, 4, "true") == 0;
  const double wait = r.figure(scenario + ".cpu_wait_pct");
  CHECK(wait >= 0); // measured (NaN fails): /proc/<pid>/schedstat is there on Linux
  const std::string warning = "WARNING: these " + scenario + " figures are NOT trustworthy";
  if (ok) {
    CHECK(wait <= 10); // the limit (support/harness/include/harness/conditions.hpp)
    CHECK(r.output.find(warning) == std::string::npos);
  } else {
    CHECK(r.json.find("\"not_trustworthy_because\"", at) != std::string::npos);
    CHECK(r.output.find(warning) != std::string::npos);
    if (wait > 10) CHECK(r.output.find("waited for a CPU up to") != std::string::npos);
    CHECK(r.output.find("Their goals are not judged (n/t)") != std::string::npos);
    MESSAGE("the bench judged the " << scenario << " figures not trustworthy (CPU wait " << wait
                                    << "%): they are not checked");
  }
  if (scenario == "qos") { // also judged by the solo service time (simulated: nominal 2 ms)
    const double service = r.figure("qos.service_over_nominal");
    CHECK(service > 0.9);
    if (ok) CHECK(service <= 1.5);
    if (!ok && wait <= 10) CHECK(service > 1.5);
    if (!ok && service > 1.5) {
      CHECK(r.output.find("a request alone took") != std::string::npos);
      MESSAGE("(QoS: a solo request took " << service << "x its nominal time)");
    }
  } else if (!ok) {
    CHECK(wait > 10);
  }
  return ok;
}

std::string json_path() {
  return "/tmp/gpushare-bench-test-" + std::to_string(::getpid()) + ".json";
}

bench_run run_bench(const std::string& args, const std::string& env = "") {
  const std::set<std::string> left_before = test::leftover_tables("gb");
  const std::string path = json_path();
  std::remove(path.c_str());
  const std::string command =
      env + " " + GPUSHARE_BENCH_GPU_PATH + " --json " + path + " " + args + " 2>&1";
  bench_run r;
  const test::command_result ran = test::run_command(command);
  r.exit_code = ran.exit_code;
  r.output = ran.output;
  r.first_line = r.output.substr(0, r.output.find('\n'));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  r.json = text.str();
  std::remove(path.c_str());
  MESSAGE(command << " exited with " << r.exit_code << "; its output:\n" << r.output);
  for (const std::string& table : test::leftover_tables("gb"))
    CHECK_MESSAGE(left_before.count(table) == 1, "the harness left its table /dev/shm/" << table);
  return r;
}

/// The memory scenario's timeline of one side agrees with its counts: one entry per job; a job
/// completed was granted its memory after it asked and ended after that; a job that failed out of
/// memory was never granted; the starts are staggered in job order.
void check_memory_timeline(const bench_run& r, const std::string& side) {
  CAPTURE(side);
  const auto asked = r.series("memory.timeline.asked_s." + side);
  const auto granted = r.series("memory.timeline.granted_s." + side);
  const auto ended = r.series("memory.timeline.ended_s." + side);
  const auto outcome = r.series("memory.timeline.outcome." + side);
  const auto jobs = static_cast<std::size_t>(r.figure("memory.jobs"));
  REQUIRE(asked.size() == jobs);
  REQUIRE(granted.size() == jobs);
  REQUIRE(ended.size() == jobs);
  REQUIRE(outcome.size() == jobs);
  double completed = 0, out_of_memory = 0;
  for (std::size_t i = 0; i < jobs; ++i) {
    CAPTURE(i);
    CHECK(asked[i] >= 0);
    if (i > 0) CHECK(asked[i] > asked[i - 1]);
    CHECK(ended[i] >= asked[i]);
    if (outcome[i] == 0) {
      ++completed;
      CHECK(granted[i] >= asked[i]);
      CHECK(ended[i] >= granted[i]);
    } else {
      CHECK(outcome[i] == 1);
      ++out_of_memory;
      CHECK(std::isnan(granted[i]));
    }
  }
  CHECK(completed == r.figure("memory.completed." + side));
  CHECK(out_of_memory == r.figure("memory.out_of_memory." + side));
}

} // namespace

TEST_CASE(
    "bench-gpu: every scenario runs on the simulated GPU and its figures separate the modes") {
  const bench_run r = run_bench("--simulate --quick");
  REQUIRE(r.exit_code == 0);
  CHECK(r.first_line.rfind("mode: simulated (--simulate)", 0) == 0);
  CHECK(r.output.find("summary (SIMULATED GPU") != std::string::npos);
  CHECK(r.output.find("scenario     metric") != std::string::npos);
  REQUIRE(!r.json.empty());
  CHECK(r.json.find("\"schema\": \"gpushare-bench-gpu/1\"") != std::string::npos);
  CHECK(r.json.find("\"mode\": \"simulated\"") != std::string::npos);
  CHECK(r.json.find("\"device\": null") != std::string::npos);
  CHECK(r.json.find("\"error\"") == std::string::npos);
  // Simulated, the share rows' device-time measure is labelled as such, not as CUDA events.
  CHECK(r.output.find("max split error, pp (guard time, simulated)") != std::string::npos);
  CHECK(r.output.find("CUDA events") == std::string::npos);
  CHECK(r.json.find("CUDA events") == std::string::npos);
  CHECK(r.output.find("raw figures: " + json_path()) != std::string::npos);

  // The figures of every scenario are there, finite and in their possible ranges, however
  // busy the machine is.
  CHECK(r.figure("qos.rate_per_s") > 0);
  CHECK(r.figure("qos.service_ms") > 0);
  CHECK(r.figure("qos.requests") > 0);
  CHECK(r.figure("qos.p99_ms.solo") > 0);
  for (const char* side : {"unmanaged", "gpushare"}) {
    CAPTURE(side);
    const std::string s(side);
    CHECK(r.figure("qos.p99_ratio." + s) > 0);
    CHECK(r.figure("qos.p50_ratio." + s) > 0);
    CHECK(r.figure("qos.training_kept." + s) > 0);
    CHECK(r.figure("qos.training_kept." + s) < 2);
    CHECK(r.figure("qos.unserved." + s) >= 0);
  }
  CHECK(in_range(r.figure("qos.training_ceiling.gpushare"), 0, 1));
  for (const char* split : {"3to1", "1to1to2"}) {
    CAPTURE(split);
    const std::string base = std::string("share.") + split;
    CHECK(in_range(r.figure(base + ".error_pp_work.unmanaged"), 0, 100));
    CHECK(in_range(r.figure(base + ".error_pp_work.gpushare"), 0, 100));
    CHECK(in_range(r.figure(base + ".error_pp_events.gpushare"), 0, 100));
    CHECK(in_range(r.figure(base + ".busy_pct_min.gpushare"), 0, 101));
  }
  for (const char* kind : {"small", "small_batched", "large"}) {
    CAPTURE(kind);
    const std::string base = std::string("overhead.") + kind;
    CHECK(r.figure(base + ".per_s.unmanaged") > 0);
    CHECK(r.figure(base + ".per_s.gpushare") > 0);
    CHECK(r.figure(base + ".ratio.gpushare") > 0);
  }
  CHECK(r.figure("handover.g1.guard_ms") > 0);
  CHECK(r.figure("handover.g4.guard_ms") > 0);
  CHECK(r.figure("handover.g1.requests.gpushare") > 5);
  CHECK(r.figure("handover.g4.requests.gpushare") > 5);

  // The figures of the timing scenarios (QoS, share, overhead, handover) are findings only when
  // the bench judged its own conditions good enough: on a busy machine the workers wait for a
  // CPU at every wake-up and the figures show that load. Then the bench must say so, and the
  // figures are not checked (speed belongs in the benchmark, not in a test that must hold on a
  // busy machine).

  const bool qos = trusted(r, "qos"), share = trusted(r, "share"),
             overhead = trusted(r, "overhead"), handover = trusted(r, "handover");

  // QoS: with gpushare the inference tail is far below the time-sliced one, and training runs.
  if (qos) {
    CHECK(r.figure("qos.p99_ratio.gpushare") < r.figure("qos.p99_ratio.unmanaged"));
    CHECK(r.figure("qos.p99_ratio.gpushare") < 3);
    CHECK(r.figure("qos.training_kept.gpushare") > 0.2);
    // Inference at 50% load keeps the simulated device about half busy with exclusive guards,
    // so training can keep at most about half of its solo throughput.
    CHECK(r.figure("qos.training_ceiling.gpushare") > 0.3);
    CHECK(r.figure("qos.training_ceiling.gpushare") < 0.7);
    CHECK(r.figure("qos.training_kept.gpushare") < r.figure("qos.training_ceiling.gpushare") + 0.1);
  }
  // The training goal is judged against the run's own ceiling (issue 42, B13), in every run.
  CHECK(r.figure("qos.training_of_ceiling.gpushare") > 0);
  CHECK(r.output.find("training kept / its ceiling") != std::string::npos);
  CHECK(r.output.find(">= 0.60") == std::string::npos);

  // Share accuracy: unmanaged ignores the shares (3:1 comes out near 50/50, 25 points off);
  // with gpushare both measures are close to the configured split.
  if (share) {
    CHECK(r.figure("share.3to1.error_pp_work.unmanaged") > 10);
    CHECK(r.figure("share.3to1.error_pp_events.gpushare") < 8);
    CHECK(r.figure("share.3to1.error_pp_work.gpushare") < 8);
    CHECK(r.figure("share.1to1to2.error_pp_work.unmanaged") > 8);
    CHECK(r.figure("share.1to1to2.error_pp_events.gpushare") < 8);
    CHECK(r.figure("share.1to1to2.busy_pct_min.gpushare") > 50);
  }

  // Overhead: guards on simulated kernels cost little.
  if (overhead) {
    CHECK(std::fabs(r.figure("overhead.small.ratio.gpushare") - 1) < 0.5);
    CHECK(std::fabs(r.figure("overhead.large.ratio.gpushare") - 1) < 0.5);
    // The host time per launch, with and without a guard, and what the guard adds.
    CHECK(r.figure("overhead.small.host_us.unmanaged") > 0);
    CHECK(r.figure("overhead.small.host_us.gpushare") > 0);
    CHECK(std::fabs(r.figure("overhead.small.host_us_added.gpushare") -
                    (r.figure("overhead.small.host_us.gpushare") -
                     r.figure("overhead.small.host_us.unmanaged"))) < 50);
    CHECK(r.output.find("small kernels, host us added per launch") != std::string::npos);
  }

  // Handover: a longer low-priority guard is measured as longer and delays the request more. (The
  // medians, not the tails: a p99 is easily the CPU's wake-up latency, whatever the guard length.)
  if (handover) {
    CHECK(r.figure("handover.g4.guard_ms") > 2 * r.figure("handover.g1.guard_ms"));
    CHECK(r.figure("handover.g4.p50_us.gpushare") > r.figure("handover.g1.p50_us.gpushare"));
  }

  // Memory: 4 jobs of 35% each; without gpushare some fail out-of-memory, with it none does.
  CHECK(r.figure("memory.out_of_memory.unmanaged") >= 1);
  CHECK(r.figure("memory.out_of_memory.unmanaged") + r.figure("memory.completed.unmanaged") == 4);
  CHECK(r.figure("memory.out_of_memory.gpushare") == 0);
  CHECK(r.figure("memory.completed.gpushare") == 4);
  check_memory_timeline(r, "unmanaged");
  check_memory_timeline(r, "gpushare");

  // The summary judges the goals it has trustworthy figures for: QoS 2, share 4, overhead 4 (3
  // ratios and the host time a guard adds to a small kernel's launch), memory 2 (handover has
  // none); the others' "met" is null.
  CHECK(r.count("\"goal\": \"") == 12);
  CHECK(r.count("\"met\": true") + r.count("\"met\": false") ==
        (qos ? 2u : 0u) + (share ? 4u : 0u) + (overhead ? 4u : 0u) + 2u);
}

TEST_CASE("bench-gpu: repeats are recorded one by one and summarised with their range") {
  const bench_run r = run_bench("--simulate --quick --scenarios memory --repeats 2");
  REQUIRE(r.exit_code == 0);
  CHECK(r.count("\"repeat\": ") == 2);
  CHECK(r.count("\"scenario\": \"memory\"") == 2); // two summary rows
  CHECK(r.json.find("\"qos\"") == std::string::npos);
  // Each summary side lists one value per repeat.
  CHECK(r.json.find("\"values\": [\n") != std::string::npos);
  CHECK(r.output.find("over 2 repeats") != std::string::npos);
}

TEST_CASE("bench-gpu: without --json it writes no file, and says so") {
  char dir[] = "/tmp/gpushare-bench-cwd-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const test::command_result ran =
      test::run_command(std::string("cd ") + dir + " && " + GPUSHARE_BENCH_GPU_PATH +
                        " --simulate --quick --scenarios memory 2>&1");
  MESSAGE("its output:\n" << ran.output);
  CHECK(ran.exit_code == 0);
  CHECK(ran.output.find("raw figures: not written (--json PATH writes them)") != std::string::npos);
  std::size_t entries = 0;
  if (DIR* d = ::opendir(dir)) {
    while (const dirent* e = ::readdir(d))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") {
        MESSAGE("left in the working directory: " << e->d_name);
        ++entries;
      }
    ::closedir(d);
  }
  CHECK(entries == 0);
  ::rmdir(dir);
}

TEST_CASE("bench-gpu: bad input is refused with status 2 and says what was wrong") {
  const struct {
    const char* args;
    const char* says;
  } cases[] = {
      {"--repeats 0", "--repeats must be an integer from 1 to 100, not '0'"},
      {"--scenarios qos,bogus", "unknown scenario 'bogus'"},
      {"--scenarios ''", "--scenarios needs at least one scenario"},
      {"--load 2", "--load must be a number from"},
      {"--memory-jobs 2 --memory-fraction 0.4", "must exceed 1"},
      {"--guard-steps 1,x", "--guard-steps: each entry must be an integer"},
      {"--frobnicate", "unknown option '--frobnicate'"},
      {"--quick=yes", "--quick takes no value"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.args);
    const bench_run r = run_bench(c.args);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(c.says) != std::string::npos);
    CHECK(r.output.find("usage:") != std::string::npos);
  }
  const std::string unwritable = std::string(GPUSHARE_BENCH_GPU_PATH) +
                                 " --simulate --quick --json /nonexistent-dir/x.json 2>&1";
  const test::command_result ran = test::run_command(unwritable);
  CHECK(ran.exit_code == 2);
  CHECK(ran.output.find("cannot write the JSON results to '/nonexistent-dir/x.json'") !=
        std::string::npos);
}

TEST_CASE("bench-gpu: --require-gpu fails (status 1, with the reason) instead of simulating") {
  // No device is visible with CUDA_VISIBLE_DEVICES empty, GPU machine or not.
  const bench_run r = run_bench("--require-gpu --quick", "CUDA_VISIBLE_DEVICES=");
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("--require-gpu, but no GPU is usable: ") != std::string::npos);
  CHECK(r.json.empty()); // nothing was measured, nothing written
}
