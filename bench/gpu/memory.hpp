// SPDX-License-Identifier: Apache-2.0
// Scenario 5, memory: `memory_jobs` processes, each needing `memory_fraction` of the device's
// memory (together more than the device has), start 100 ms apart. A job allocates all it needs,
// writes it, runs kernels on the GPU for `memory_hold_s`, frees it and ends.
//   without gpushare: cudaMalloc; a job that finds the device full fails with out-of-memory.
//   with gpushare:    the job's session reserves the bytes in the shared budget first, waiting
//                     (up to 60 s) for running jobs to release theirs, then allocates.
// Reported: jobs that failed with out-of-memory and jobs completed, in each mode, and each job's
// timeline (when it asked for its memory, got it, and let it go or failed), for the plot of memory
// over time.
#pragma once

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "engine.hpp"
#include "figures.hpp"
#include "phase.hpp"

namespace bench::memory {

inline constexpr int max_jobs = 16;
inline constexpr std::uint64_t stagger_ns = 100'000'000;

enum class outcome : int { running, finished, out_of_memory, timed_out, failed };

struct job_record {
  outcome result = outcome::running;
  double waited_s = 0; ///< in the allocation
  // Seconds since the start gate opened; NaN for what did not happen.
  double asked_s = NAN;   ///< it began to allocate
  double granted_s = NAN; ///< its memory was allocated (and, with gpushare, reserved)
  double ended_s = NAN;   ///< it freed its memory, or failed
  char message[240] = {};
};

struct board {
  demo::start_gate gate;
  std::atomic<int> constructed{0}; ///< jobs whose engine (CUDA context, session) is ready
  std::array<job_record, max_jobs> job;
};

/// Runs kernels on the job's memory for `memory_hold_s`, giving way between batches.
inline void hold(engine& e, const config& cfg) {
  const std::uint64_t until = now_ns() + static_cast<std::uint64_t>(cfg.memory_hold_s * 1e9);
  while (now_ns() < until) {
    for (int k = 0; k < 20; ++k) {
      const demo::region g = e.guard();
      e.small_kernel();
    }
    e.sync();
    e.yield();
  }
}

inline void job(phase& ph, const config& cfg, board& b, int index, std::uint64_t bytes,
                bool managed) {
  job_record& me = b.job[static_cast<std::size_t>(index)];
  bool arrived = false;
  const auto since_go = [&b] { return static_cast<double>(now_ns() - b.gate.go_ns.load()) / 1e9; };
  // One job at a time creates its CUDA context, so that each session measures its own context
  // overhead (device free memory before and after), not its neighbours' too.
  while (b.constructed.load() < index) sleep_until_ns(now_ns() + 1'000'000);
  try {
    engine e(ph.run(), cfg,
             managed ? std::optional(ph.options("job-" + std::to_string(index + 1))) : std::nullopt,
             small);
    b.constructed.fetch_add(1);
    b.gate.arrive_and_wait();
    arrived = true;
    sleep_until_ns(b.gate.go_ns.load() + static_cast<std::uint64_t>(index) * stagger_ns);
    const std::uint64_t asked = now_ns();
    me.asked_s = since_go();
    {
      buffer memory = e.allocate(bytes); // and writes it
      me.granted_s = since_go();
      me.waited_s = static_cast<double>(now_ns() - asked) / 1e9;
      hold(e, cfg);
    }
    me.ended_s = since_go();
    me.result = outcome::finished;
  } catch (const out_of_memory& ex) {
    me.result = outcome::out_of_memory;
    std::snprintf(me.message, sizeof me.message, "%s", ex.what());
  } catch (const gpushare::error& ex) {
    // With gpushare: a timeout means the budget never had room; a CUDA allocation failure means
    // memory outside the budget ran short, which counts as an out-of-memory failure here.
    // (cuda::device_session's message for the latter says its budget allowed the allocation.)
    const bool oom = ex.code() == gpushare::errc::cuda_error &&
                     std::string(ex.what()).find("budget allowed") != std::string::npos;
    me.result = ex.code() == gpushare::errc::timeout ? outcome::timed_out
                : oom                                ? outcome::out_of_memory
                                                     : outcome::failed;
    std::snprintf(me.message, sizeof me.message, "%s", ex.what());
  } catch (const std::exception& ex) {
    me.result = outcome::failed;
    std::snprintf(me.message, sizeof me.message, "%s", ex.what());
  }
  if (arrived && me.result != outcome::finished) me.ended_s = since_go();
  if (!arrived) { // failed while getting ready: the others still start
    b.constructed.fetch_add(1);
    b.gate.arrive_and_wait();
  }
}

struct phase_result {
  int finished = 0, out_of_memory = 0, timed_out = 0, failed = 0;
  double max_wait_s = 0;
  double wall_s = 0;
  std::string first_problem; ///< the first failure's message, for the report
  /// Per job, in job order: job_record's times and the outcome as a number (outcome_code).
  std::vector<double> asked_s, granted_s, ended_s, outcomes;
};

/// The outcome as the JSON's series memory.timeline.outcome give it: 0 completed, 1 out of
/// memory, 2 timed out waiting, 3 failed otherwise (bench/gpu/README.md).
inline double outcome_code(outcome o) {
  switch (o) {
  case outcome::finished: return 0;
  case outcome::out_of_memory: return 1;
  case outcome::timed_out: return 2;
  default: return 3;
  }
}

inline phase_result run_phase(const device_info& dev, const config& cfg, const std::string& tag,
                              bool managed) {
  phase ph(dev, tag);
  demo::shared<board> b;
  const std::uint64_t device_bytes = ph.run().device_memory();
  const auto bytes =
      static_cast<std::uint64_t>(cfg.memory_fraction * static_cast<double>(device_bytes));
  for (int i = 0; i < cfg.memory_jobs; ++i)
    ph.workers().spawn("job-" + std::to_string(i + 1),
                       [&, i] { job(ph, cfg, *b, i, bytes, managed); });
  const std::uint64_t go = ph.workers().open_gate(b->gate, cfg.memory_jobs);
  ph.workers().wait_all();
  phase_result r;
  r.wall_s = static_cast<double>(now_ns() - go) / 1e9;
  for (int i = 0; i < cfg.memory_jobs; ++i) {
    const job_record& j = b->job[static_cast<std::size_t>(i)];
    switch (j.result) {
    case outcome::finished: ++r.finished; break;
    case outcome::out_of_memory: ++r.out_of_memory; break;
    case outcome::timed_out: ++r.timed_out; break;
    default: ++r.failed; break;
    }
    r.asked_s.push_back(j.asked_s);
    r.granted_s.push_back(j.granted_s);
    r.ended_s.push_back(j.ended_s);
    r.outcomes.push_back(outcome_code(j.result));
    if (j.result == outcome::finished) r.max_wait_s = std::max(r.max_wait_s, j.waited_s);
    if (j.result != outcome::finished && r.first_problem.empty())
      r.first_problem = "job-" + std::to_string(i + 1) + ": " + j.message;
  }
  return r;
}

inline figures run(const device_info& dev, const config& cfg, int repeat) {
  figures f;
  const std::string tag = "m" + std::to_string(repeat);
  const phase_result unmanaged = run_phase(dev, cfg, tag + "-u", false);
  const phase_result managed = run_phase(dev, cfg, tag + "-g", true);
  f.set("memory.jobs", cfg.memory_jobs);
  f.set("memory.job_fraction", cfg.memory_fraction);
  const auto record = [&](const std::string& k, const phase_result& x) {
    f.set("memory.out_of_memory." + k, x.out_of_memory);
    f.set("memory.completed." + k, x.finished);
    f.set("memory.timed_out." + k, x.timed_out);
    f.set("memory.failed." + k, x.failed);
    f.set("memory.max_wait_s." + k, x.max_wait_s);
    f.set("memory.wall_s." + k, x.wall_s);
    f.add_series("memory.timeline.asked_s." + k, x.asked_s);
    f.add_series("memory.timeline.granted_s." + k, x.granted_s);
    f.add_series("memory.timeline.ended_s." + k, x.ended_s);
    f.add_series("memory.timeline.outcome." + k, x.outcomes);
  };
  record("unmanaged", unmanaged);
  record("gpushare", managed);
  if (!unmanaged.first_problem.empty())
    f.notes.push_back("without gpushare, " + unmanaged.first_problem);
  if (!managed.first_problem.empty()) f.notes.push_back("with gpushare, " + managed.first_problem);
  return f;
}

} // namespace bench::memory
