// SPDX-License-Identifier: Apache-2.0
// Time slices between processes (docs/cudasim.md, "Time slices"): one context runs on a device
// at a time, contexts of different processes with work take turns in CUDASIM_SLICE_US slices,
// and a kernel's device time advances only while its context holds the device. Each test starts
// probe processes (probe.cpp `run`) that launch one long kernel at a chosen moment, and compares
// when each completed with the round-robin model. The slices are 2 ms and the kernels 40-200 ms,
// so round robin is processor sharing (n contexts with work: each gets 1/n) within a few slices.
//
// On a loaded machine a probe may start late or notice its end late: the model is fed the
// moments the probes' streams really reached their kernels (a host function just before each,
// and one just after), and completion times are compared with a tolerance of tens of
// milliseconds. The bounds a simulator must never break are checked exactly: no kernel completes
// sooner than its own length after its stream reached it, and the last completes no earlier than
// the first arrival plus the device time of all of them (one context at a time). The exact
// bounds hold on every run; a run off the model is run again, at most 3 times in all
// (run_near_model): a probe that lost its CPU for tens of milliseconds took fewer turns.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sim_util.hpp"

using simtest::env_list;
using simtest::fresh_state;
using simtest::probe;

namespace {

/// How far a finishing time may be from the model's on a loaded 2-core machine (ms).
constexpr double tolerance_ms = 50;

struct plan_entry {
  int at_ms;     ///< when the probe launches, after the common start
  int kernel_ms; ///< its one kernel's device time
};

struct outcome {
  double t0 = 0, end = 0; ///< its stream reached the kernel, completed it (ms after the first)
  unsigned long long switches = 0; ///< the probe's cudasimStats::context_switches
  double cpu_ms = 0;               ///< the probe's CPU time between launch and end
};

/// Processor sharing: while n contexts have work, each advances at 1/n of real time.
std::vector<double> sharing_model(const std::vector<double>& arrive,
                                  const std::vector<double>& work) {
  const std::size_t n = arrive.size();
  std::vector<double> left(work), finish(n, -1);
  double t = *std::min_element(arrive.begin(), arrive.end());
  for (std::size_t done = 0; done < n;) {
    std::vector<std::size_t> active;
    double next_arrival = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < n; ++i) {
      if (finish[i] >= 0) continue;
      if (arrive[i] <= t)
        active.push_back(i);
      else
        next_arrival = std::min(next_arrival, arrive[i]);
    }
    if (active.empty()) {
      t = next_arrival;
      continue;
    }
    const double k = static_cast<double>(active.size());
    double least = std::numeric_limits<double>::infinity();
    for (std::size_t i : active) least = std::min(least, left[i]);
    const double dt = std::min(least * k, next_arrival - t);
    t += dt;
    for (std::size_t i : active) {
      left[i] -= dt / k;
      if (left[i] <= 1e-9) {
        finish[i] = t;
        ++done;
      }
    }
  }
  return finish;
}

/// Runs one probe per entry on a fresh state; each launches its kernel at its moment.
std::vector<outcome> run_plan(const std::vector<plan_entry>& plan) {
  fresh_state st("slices");
  const env_list env{{"CUDASIM_STATE", st.name()}};
  const std::uint64_t start = simtest::unix_ms() + 1500;
  std::vector<std::unique_ptr<probe>> probes;
  for (const auto& p : plan)
    probes.push_back(std::make_unique<probe>(
        std::vector<std::string>{"run", std::to_string(p.kernel_ms),
                                 std::to_string(p.kernel_ms * 1000),
                                 std::to_string(start + static_cast<std::uint64_t>(p.at_ms))},
        env));
  std::vector<outcome> out;
  double first = std::numeric_limits<double>::infinity();
  for (auto& p : probes) {
    const auto r = p->result();
    REQUIRE_MESSAGE(r.count("completed_ns"), "a probe did not finish");
    outcome o;
    o.t0 = std::stod(r.at("reached_ns")) / 1e6;
    o.end = std::stod(r.at("completed_ns")) / 1e6;
    o.switches = std::stoull(r.at("switches"));
    o.cpu_ms = std::stod(r.at("cpu_ms"));
    first = std::min(first, o.t0);
    out.push_back(o);
  }
  for (auto& o : out) {
    o.t0 -= first;
    o.end -= first;
  }
  return out;
}

std::string describe(const std::vector<plan_entry>& plan, const std::vector<outcome>& out,
                     const std::vector<double>& model) {
  std::string text;
  for (std::size_t i = 0; i < plan.size(); ++i)
    text += "probe " + std::to_string(i) + ": kernel " + std::to_string(plan[i].kernel_ms) +
            " ms, reached at " + std::to_string(out[i].t0) + ", completed at " +
            std::to_string(out[i].end) + " (model " + std::to_string(model[i]) + "), switches " +
            std::to_string(out[i].switches) + ", cpu " + std::to_string(out[i].cpu_ms) + " ms\n";
  return text;
}

/// Checks the outcome against the model and the exact bounds; returns the model's times.
std::vector<double> check_plan(const std::vector<plan_entry>& plan,
                               const std::vector<outcome>& out) {
  std::vector<double> arrive, work;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    arrive.push_back(out[i].t0);
    work.push_back(plan[i].kernel_ms);
  }
  const auto model = sharing_model(arrive, work);
  MESSAGE(describe(plan, out, model)); // the figures, in the test's output (simulated times)
  INFO(describe(plan, out, model));
  double last = 0, total = 0;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    CHECK(out[i].end >= out[i].t0 + plan[i].kernel_ms - 0.1); // never faster than the kernel
    CHECK(std::abs(out[i].end - model[i]) <= tolerance_ms);
    last = std::max(last, out[i].end);
    total += plan[i].kernel_ms;
  }
  CHECK(last >= total - 0.1); // one context at a time: no device time is created
  return model;
}

/// Whether every completion is within the tolerance of the model, and `also` holds.
bool near_model(const std::vector<plan_entry>& plan, const std::vector<outcome>& out,
                const std::function<bool(const std::vector<outcome>&)>& also) {
  std::vector<double> arrive, work;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    arrive.push_back(out[i].t0);
    work.push_back(plan[i].kernel_ms);
  }
  const auto model = sharing_model(arrive, work);
  for (std::size_t i = 0; i < plan.size(); ++i)
    if (std::abs(out[i].end - model[i]) > tolerance_ms) return false;
  return !also || also(out);
}

/// Runs the plan until its outcome is near the model (and `also` holds), at most 3 times, and
/// returns the last run. A probe that loses its CPU for tens of milliseconds (ctest -j, two CPU
/// hogs, a build in the background) takes fewer turns than the model gives it: CI once saw
/// 56 ms off the model. The bounds no simulator may break are checked exactly on every run.
std::vector<outcome>
run_near_model(const std::vector<plan_entry>& plan,
               const std::function<bool(const std::vector<outcome>&)>& also = {}) {
  std::vector<outcome> out;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    out = run_plan(plan);
    double last = 0, total = 0;
    for (std::size_t i = 0; i < plan.size(); ++i) {
      CHECK(out[i].end >= out[i].t0 + plan[i].kernel_ms - 0.1); // never faster than the kernel
      last = std::max(last, out[i].end);
      total += plan[i].kernel_ms;
    }
    CHECK(last >= total - 0.1); // one context at a time: no device time is created
    if (near_model(plan, out, also)) break;
    MESSAGE("run " << attempt << " off the model (a loaded machine?)");
  }
  return out;
}

} // namespace

TEST_CASE("two processes launching a 200 ms kernel at once both finish near 400 ms") {
  const std::vector<plan_entry> plan{{0, 200}, {0, 200}};
  const auto out = run_near_model(plan, [](const std::vector<outcome>& o) {
    return o[0].end >= 400 - tolerance_ms && o[1].end >= 400 - tolerance_ms &&
           o[0].switches >= 20 && o[1].switches >= 20;
  });
  const auto model = check_plan(plan, out);
  INFO(describe(plan, out, model));
  for (const auto& o : out) {
    CHECK(o.end >= 400 - tolerance_ms);
    CHECK(o.switches >= 20); // they took turns, about every 2 ms
  }
}

TEST_CASE("a process waiting for the device sleeps: no busy loop while it is switched out") {
  const std::vector<plan_entry> plan{{0, 200}, {0, 200}};
  const auto out = run_near_model(plan, [](const std::vector<outcome>& o) {
    return std::all_of(o.begin(), o.end(),
                       [](const outcome& x) { return x.cpu_ms < 0.1 * (x.end - x.t0); });
  });
  const auto model = check_plan(plan, out);
  INFO(describe(plan, out, model));
  // 400 ms of taking turns every 2 ms: a few hundred wake-ups of some microseconds each. A
  // process that polled the device would burn a large part of those 400 ms.
  for (const auto& o : out) CHECK(o.cpu_ms < 0.1 * (o.end - o.t0));
}

TEST_CASE("staggered arrivals: a kernel stretches by the time the others take") {
  SUBCASE("two processes, 0 and 50 ms") {
    const std::vector<plan_entry> plan{{0, 200}, {50, 200}};
    const auto out = run_near_model(plan, [](const std::vector<outcome>& o) {
      return o[0].end < o[1].end && o[0].end >= 350 - tolerance_ms;
    });
    const auto model = check_plan(plan, out); // about 350 and 400
    INFO(describe(plan, out, model));
    CHECK(out[0].end < out[1].end);
    CHECK(out[0].end >= 350 - tolerance_ms);
  }
  SUBCASE("three processes, 0, 50 and 100 ms") {
    const std::vector<plan_entry> plan{{0, 200}, {50, 200}, {100, 200}};
    const auto out = run_near_model(plan, [](const std::vector<outcome>& o) {
      return o[0].end < o[1].end && o[1].end < o[2].end && o[0].end >= 475 - tolerance_ms;
    });
    const auto model = check_plan(plan, out); // about 475, 575 and 600
    INFO(describe(plan, out, model));
    CHECK(out[0].end < out[1].end);
    CHECK(out[1].end < out[2].end);
    CHECK(out[0].end >= 475 - tolerance_ms);
  }
}

TEST_CASE("three busy processes get a third of the device each") {
  const std::vector<plan_entry> plan{{0, 150}, {0, 150}, {0, 150}};
  const auto out = run_near_model(plan, [](const std::vector<outcome>& o) {
    return std::all_of(o.begin(), o.end(),
                       [](const outcome& x) { return x.end >= 450 - tolerance_ms; });
  });
  const auto model = check_plan(plan, out);
  INFO(describe(plan, out, model));
  for (const auto& o : out) CHECK(o.end >= 450 - tolerance_ms); // none got more than its third
}

TEST_CASE("random arrivals and kernel lengths (seeded) follow the round-robin model") {
  // CUDASIM_TEST_SEED=<n> replays one scenario; by default three fixed ones.
  std::vector<unsigned> seeds{3, 8, 25};
  if (const char* s = std::getenv("CUDASIM_TEST_SEED"))
    seeds = {static_cast<unsigned>(std::strtoul(s, nullptr, 10))};
  for (const unsigned seed : seeds) {
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    const int n = std::uniform_int_distribution<int>(2, 4)(rng);
    std::vector<plan_entry> plan;
    for (int i = 0; i < n; ++i)
      plan.push_back({std::uniform_int_distribution<int>(0, 120)(rng),
                      std::uniform_int_distribution<int>(40, 160)(rng)});
    const auto out = run_near_model(plan);
    (void)check_plan(plan, out);
  }
}

namespace {

/// Two probes launch a kernel of `kernel_ms` each at the same moment; `signal` goes to the
/// first `at_ms` later. Returns the second's outcome and when the signal went (ms after the
/// second's kernel reached the device). A stopped first probe is continued once the second ends.
std::pair<outcome, double> run_signalled(int kernel_ms, int at_ms, int signal) {
  fresh_state st("slices-signal");
  const env_list env{{"CUDASIM_STATE", st.name()}};
  const std::uint64_t start = simtest::unix_ms() + 1500;
  const std::vector<std::string> args{"run", std::to_string(kernel_ms),
                                      std::to_string(kernel_ms * 1000), std::to_string(start)};
  probe victim(args, env), other(args, env);
  while (simtest::unix_ms() < start + static_cast<std::uint64_t>(at_ms))
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  const double signalled =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
  ::kill(victim.pid(), signal);
  const auto r = other.result();
  if (signal == SIGSTOP) ::kill(victim.pid(), SIGCONT);
  REQUIRE_MESSAGE(r.count("completed_ns"), "the probe did not finish");
  outcome o;
  o.t0 = std::stod(r.at("reached_ns")) / 1e6;
  o.end = std::stod(r.at("completed_ns")) / 1e6 - o.t0;
  const double at = signalled - o.t0;
  o.t0 = 0;
  return {o, at};
}

} // namespace

TEST_CASE("a stopped process's kernel keeps its turns, and a killed one's gives the device up") {
  SUBCASE("SIGSTOP at 100 ms: the device still serves both 300 ms kernels in turn") {
    const auto [o, at] = run_signalled(300, 100, SIGSTOP);
    INFO("stopped at " << at << " ms; the other completed at " << o.end << " ms (model 600)");
    CHECK(std::abs(o.end - 600) <= tolerance_ms);
  }
  SUBCASE("SIGKILL at 300 ms: the other 400 ms kernel runs alone from then") {
    const auto [o, at] = run_signalled(400, 300, SIGKILL);
    const double model = at + (400 - at / 2); // half the device until the kill, then all of it
    INFO("killed at " << at << " ms; the other completed at " << o.end << " ms (model " << model
                      << ")");
    CHECK(std::abs(o.end - model) <= tolerance_ms);
  }
}
