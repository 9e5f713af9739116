// SPDX-License-Identifier: Apache-2.0
// The demos in examples/, run as programs in simulated mode with short durations. Each test reads
// the demo's "result <key>=<value>" lines and checks the key figures within generous bounds (the
// demos measure timing on a machine that other work may load).
#include <doctest/doctest.h>

#include "test_util.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>

#ifdef GPUSHARE_EXAMPLES_DIR

namespace {

struct demo_run {
  int exit_code = -1;
  std::string output;                        ///< stdout
  std::string first_line;                    ///< stdout's first line
  std::map<std::string, std::string> values; ///< from the "result k=v" lines

  double number(const std::string& key) const {
    const auto it = values.find(key);
    if (it == values.end()) {
      FAIL_CHECK("the demo printed no result " << key);
      return -1;
    }
    return std::stod(it->second);
  }
};

/// Runs examples/<name> with `args`; its stderr goes to the test's stderr.
demo_run run_demo(const std::string& name, const std::string& args) {
  const std::set<std::string> left_before = test::leftover_tables("demo");
  const std::string command = std::string(GPUSHARE_EXAMPLES_DIR) + "/" + name + " " + args;
  demo_run r;
  const test::command_result ran = test::run_command(command);
  r.exit_code = ran.exit_code;
  r.output = ran.output;
  std::istringstream lines(r.output);
  std::getline(lines, r.first_line);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("result ", 0) != 0) continue;
    const auto eq = line.find('=');
    if (eq != std::string::npos) r.values[line.substr(7, eq - 7)] = line.substr(eq + 1);
  }
  MESSAGE(command << " exited with " << r.exit_code << "; its output:\n" << r.output);
  for (const std::string& table : test::leftover_tables("demo"))
    CHECK_MESSAGE(left_before.count(table) == 1, "the demo left its table /dev/shm/" << table);
  return r;
}

bool says_simulated(const demo_run& r) {
  return r.first_line.rfind("mode: simulated (--simulate)", 0) == 0;
}

} // namespace

TEST_CASE("quickstart: runs its guarded steps on the simulated device and exits 0") {
  const demo_run r = run_demo("quickstart", "--simulate --duration 0.5");
  CHECK(r.exit_code == 0);
  CHECK(says_simulated(r));
  CHECK(r.number("quickstart.steps") >= 10); // 4 ms a step: about 125 in 0.5 s
  CHECK(r.number("quickstart.guards") == r.number("quickstart.steps"));
  CHECK(r.number("quickstart.device_ms") >= 40);
}

TEST_CASE("qos: gpushare lowers the inference p99 next to training, and training keeps going") {
  const demo_run r = run_demo("qos", "--simulate --duration 4");
  REQUIRE(r.exit_code == 0);
  CHECK(says_simulated(r));
  CHECK(r.number("qos.rate_per_s") > 0);
  CHECK(r.number("qos.p99_with_ms") > 0);
  CHECK(r.number("qos.p99_with_ms") < r.number("qos.p99_without_ms"));
  CHECK(r.number("qos.p50_with_ms") < r.number("qos.p50_without_ms"));
  CHECK(r.number("qos.training_kept") > 0.3);
}

TEST_CASE("fair_share: device time follows the shares, and the cap holds") {
  const demo_run r = run_demo("fair_share", "--simulate --duration 3");
  REQUIRE(r.exit_code == 0);
  CHECK(says_simulated(r));
  // Shares 1:1:2 -> 25 / 25 / 50 %, within 10 percentage points.
  CHECK(std::abs(r.number("fair_share.shares_a") - 25) <= 10);
  CHECK(std::abs(r.number("fair_share.shares_b") - 25) <= 10);
  CHECK(std::abs(r.number("fair_share.shares_c") - 50) <= 10);
  // worker-c capped at 30%: 35 / 35 / 30 %, and at most 35% of the wall time.
  CHECK(r.number("fair_share.cap_pct") == 30);
  CHECK(std::abs(r.number("fair_share.capped_a") - 35) <= 10);
  CHECK(std::abs(r.number("fair_share.capped_b") - 35) <= 10);
  CHECK(std::abs(r.number("fair_share.capped_c") - 30) <= 10);
  CHECK(r.number("fair_share.capped_of_wall_pct") <= 35);
  CHECK(r.number("fair_share.capped_of_wall_pct") >= 5);
}

TEST_CASE("memory_budget: without gpushare some jobs fail with out-of-memory, with it all finish") {
  const demo_run r = run_demo("memory_budget", "--simulate --duration 1.5");
  REQUIRE(r.exit_code == 0);
  CHECK(says_simulated(r));
  CHECK(r.number("memory_budget.jobs") == 4);
  CHECK(r.number("memory_budget.without_oom") >= 1);
  CHECK(r.number("memory_budget.without_errors") == 0);
  CHECK(r.number("memory_budget.with_failed") == 0);
  CHECK(r.number("memory_budget.with_finished") == 4);
  CHECK(r.number("memory_budget.with_waited") >= 1);
}

TEST_CASE("showcase: runs both scenarios, says it is simulated on its first line, exits 0") {
  const demo_run r = run_demo("showcase", "--simulate --duration 4");
  CHECK(r.exit_code == 0);
  CHECK(says_simulated(r));
  CHECK(r.output.find("Summary") != std::string::npos);
  CHECK(r.number("qos.p99_with_ms") > 0);
  CHECK(r.number("fair_share.shares_c") > 0);
}

TEST_CASE("demo flags: --help exits 0, a bad flag or duration exits 2 with the usage") {
  for (const char* name : {"quickstart", "qos", "fair_share", "memory_budget", "showcase"}) {
    CAPTURE(name);
    const demo_run help = run_demo(name, "--help");
    CHECK(help.exit_code == 0);
    CHECK(help.first_line.rfind("usage: ", 0) == 0);
    CHECK(run_demo(name, "--no-such-flag 2>/dev/null").exit_code == 2);
    CHECK(run_demo(name, "--duration soon 2>/dev/null").exit_code == 2);
    CHECK(run_demo(name, "--duration 2>/dev/null").exit_code == 2);
  }
}

#endif // GPUSHARE_EXAMPLES_DIR
