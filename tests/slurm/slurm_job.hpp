// SPDX-License-Identifier: Apache-2.0
// What the Slurm test's two job programs share (slurm_job.cpp on the core library,
// slurm_cuda_job.cpp on the CUDA layer over cudasim): the report they write, the wait for the
// other job and the guarded window that samples every session's device time.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <gpushare/gpushare.hpp>

namespace slurm_job {

using clock_type = std::chrono::steady_clock;

inline std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

inline std::map<std::string, std::uint64_t> device_ns_by_name(const gpushare::table_snapshot& t) {
  std::map<std::string, std::uint64_t> out;
  for (const auto& s : t.sessions) out[s.name] = s.device_ns;
  return out;
}

struct report {
  std::map<std::string, std::string> fields;
  void set(const std::string& k, const std::string& v) { fields[k] = v; }
  void set(const std::string& k, std::uint64_t v) { fields[k] = std::to_string(v); }
  // Written to OUT.tmp, then renamed: the test never reads half a report.
  bool write(const std::string& path) const {
    {
      std::ofstream f(path + ".tmp");
      for (const auto& [k, v] : fields) f << k << '=' << v << '\n';
      if (!f) return false;
    }
    return std::rename((path + ".tmp").c_str(), path.c_str()) == 0;
  }
};

// Waits until the table has `n` sessions; returns their names, sorted, joined by ','.
inline std::string wait_for_sessions(gpushare::session& s, std::size_t n) {
  const auto deadline = clock_type::now() + std::chrono::seconds(120);
  for (;;) {
    const auto snap = s.snapshot();
    if (snap.sessions.size() >= n || clock_type::now() > deadline) {
      std::vector<std::string> names;
      for (const auto& i : snap.sessions) names.push_back(i.name);
      std::sort(names.begin(), names.end());
      std::string out;
      for (const auto& name : names) out.append(out.empty() ? "" : ",").append(name);
      return out;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Guarded work for `seconds`; samples every session's device time at 30% and 80% of the window
// (both jobs run then) and the table's reservations throughout.
// `step` runs one guard's work.
inline void guarded_window(gpushare::session& s, double seconds, const std::function<void()>& step,
                           report& r) {
  const auto start = clock_type::now();
  const auto at = [&](double f) {
    return start + std::chrono::duration_cast<clock_type::duration>(
                       std::chrono::duration<double>(seconds * f));
  };
  std::map<std::string, std::uint64_t> first, second;
  std::uint64_t max_reserved_total = 0, max_committed_total = 0, capacity = 0, guards = 0;
  while (clock_type::now() < at(1.0)) {
    step();
    ++guards;
    if ((first.empty() && clock_type::now() >= at(0.3)) ||
        (second.empty() && clock_type::now() >= at(0.8)) || guards % 16 == 0) {
      const auto snap = s.snapshot();
      max_reserved_total = std::max(max_reserved_total, snap.reserved_total);
      max_committed_total = std::max(max_committed_total, snap.committed_total);
      capacity = snap.capacity;
      if (first.empty() && clock_type::now() >= at(0.3)) first = device_ns_by_name(snap);
      if (second.empty() && clock_type::now() >= at(0.8)) second = device_ns_by_name(snap);
    }
  }
  std::uint64_t self = 0, all = 0;
  for (const auto& [name, ns] : second) {
    const std::uint64_t d = ns - (first.count(name) ? first[name] : 0);
    all += d;
    if (name == s.name()) self = d;
  }
  r.set("guards", guards);
  r.set("window_device_ns_self", self);
  r.set("window_device_ns_all", all);
  r.set("window_split_ppm", all ? self * 1'000'000 / all : 0);
  r.set("max_reserved_total", max_reserved_total);
  r.set("max_committed_total", max_committed_total);
  r.set("capacity_seen", capacity);
}

/// Records the environment the TaskProlog gave the job.
inline void record_environment(report& r) {
  for (const char* v : {"SLURM_JOB_ID", "SLURM_SHARDS_ON_NODE", "GPUSHARE_DIR", "GPUSHARE_KEY",
                        "GPUSHARE_NAME", "GPUSHARE_SHARE", "GPUSHARE_MEMORY_LIMIT"})
    r.set(std::string("env_") + v, env_or(v, ""));
  r.set("uid", static_cast<std::uint64_t>(::getuid()));
  r.set("egid", static_cast<std::uint64_t>(::getegid()));
}

/// Tells the test that both jobs are in the table (it runs `gpushare status` then).
inline void mark_ready(const std::string& out, const std::string& name) {
  std::ofstream(out + ".ready") << name << '\n';
}

/// main(): OUT SECONDS, then `run`; a gpushare error is reported and exits 1.
inline int main_of(int argc, char** argv, const char* program,
                   const std::function<int(const std::string&, double)>& run) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s OUT SECONDS\n", program);
    return 2;
  }
  try {
    return run(argv[1], std::atof(argv[2]));
  } catch (const gpushare::error& e) {
    std::fprintf(stderr, "%s: %s (%s)\n", program, e.what(), gpushare::to_string(e.code()));
    return 1;
  }
}

} // namespace slurm_job
