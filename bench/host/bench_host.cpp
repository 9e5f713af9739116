// SPDX-License-Identifier: Apache-2.0
// Host-side benchmarks of the shared table (no GPU): the reserve/release fast path, joining (one
// process, and 256 processes at once), snapshots, and compute arbitration (the guard and yield fast
// paths, the cross-process handoff latency, and the shares achieved by busy processes; a "kernel"
// is CPU spinning inside a scoped_kernel). Each benchmark states its target. The guard and the
// handoff are also measured next to their physical limits in the same run (an uncontended
// process-shared pthread_mutex, a raw futex ping-pong between two processes); main() prints the
// ratios and their goals at the end. This file holds the memory, join, snapshot and guard
// benchmarks and main(); handoff.cpp the cross-process handoff, shares.cpp the achieved shares,
// support.hpp what they share (one program: bench/CMakeLists.txt).
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include <gpushare/gpushare.hpp>

#include "support.hpp"

namespace {

using namespace bench_host;

// The loop shared by both reserve/release benchmarks: try_reserve(4 KiB), then release it.
void reserve_release_loop(benchmark::State& state, gpushare::session& s) {
  for (auto _ : state) {
    auto r = s.try_reserve(4096);
    if (!r) {
      state.SkipWithError("try_reserve(4096) failed on an almost empty 1 GiB table");
      break;
    }
    benchmark::DoNotOptimize(r);
  } // the reservation's destructor releases it
}

// reserve/release: one try_reserve(4 KiB) + release pair, uncontended. Target: <= 200 ns.
void reserve_release(benchmark::State& state) {
  bench_table t("reserve");
  gpushare::session s = t.join("bench");
  reserve_release_loop(state, s);
}
BENCHMARK(reserve_release)->Name("reserve/release");

// reserve/release_contended: the same pair from 2 threads, each with its own session on one
// table, so they take turns on the table lock. Target: <= 1 us per pair per thread.
void reserve_release_contended(benchmark::State& state) {
  static bench_table t("contended"); // shared by the threads; unlinked when the program exits
  gpushare::session s = t.join("thread" + std::to_string(state.thread_index()));
  reserve_release_loop(state, s); // both threads have joined before either starts timing
}
BENCHMARK(reserve_release_contended)->Name("reserve/release_contended")->Threads(2);

// What the parent and the joining children of session/join share (anonymous MAP_SHARED memory).
constexpr std::uint32_t joiners = 256; // a table's default slot count: every slot is taken
struct join_stage {
  std::atomic<std::uint32_t> ready{0};  // children waiting for "go"
  std::atomic<std::uint32_t> go{0};     // 1: join now; 2: abort (a fork failed)
  std::atomic<std::uint32_t> joined{0}; // children done joining (or failing to)
  std::atomic<std::uint32_t> failed{0}; // children whose join threw
  std::uint64_t join_ns[joiners];       // each child's own join duration
};

// Blocks while `word` is below `target` (futex waits on shared memory, so across processes).
void wait_until_at_least(std::atomic<std::uint32_t>& word, std::uint32_t target) {
  for (std::uint32_t v; (v = word.load()) < target;) futex_wait_for(&word, v, 1'000'000'000);
}

// One forked joiner: waits for "go", joins, reports, stays joined until all have, then leaves.
[[noreturn]] void joiner(join_stage& st, std::uint32_t i, const gpushare::session_options& opts,
                         const std::string& key) {
  if (st.ready.fetch_add(1) + 1 == joiners) futex_wake_all(&st.ready);
  while (st.go.load() == 0) futex_wait_for(&st.go, 0, 1'000'000'000);
  int rc = 0;
  if (st.go.load() == 1) {
    try {
      const std::uint64_t start = now_ns();
      gpushare::session s(key, opts);
      st.join_ns[i] = now_ns() - start;
      if (st.joined.fetch_add(1) + 1 == joiners) futex_wake_all(&st.joined);
      wait_until_at_least(st.joined, joiners);
    } catch (...) {
      st.failed.fetch_add(1);
      if (st.joined.fetch_add(1) + 1 == joiners) futex_wake_all(&st.joined);
      rc = 1;
    }
  }
  std::_Exit(rc); // no benchmark teardown, no static destructors in the child
}

// session/join: 256 processes join one pre-created table at once. Target: all in <= 1 s.
void join_256(benchmark::State& state) {
  bench_table t("join");
  gpushare::table table = t.open(); // pre-created; the parent holds no session
  const gpushare::session_options opts = t.options("joiner");
  void* mem = ::mmap(nullptr, sizeof(join_stage), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    state.SkipWithError("mmap failed");
    return;
  }
  double total_ms = 0, slowest_us = 0, median_us = 0;
  for (auto _ : state) {
    join_stage* st = new (mem) join_stage;
    std::vector<pid_t> children;
    for (std::uint32_t i = 0; i < joiners; ++i) {
      const pid_t pid = ::fork();
      if (pid == 0) joiner(*st, i, opts, t.key());
      if (pid < 0) break;
      children.push_back(pid);
    }
    if (children.size() == joiners) wait_until_at_least(st->ready, joiners);
    const std::uint64_t go = now_ns();
    st->go = children.size() == joiners ? 1 : 2;
    futex_wake_all(&st->go);
    if (st->go == 1) wait_until_at_least(st->joined, joiners);
    const std::uint64_t all_joined = now_ns();
    bool ok = st->go == 1 && st->failed == 0;
    for (pid_t pid : children) {
      int status = 0;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    if (!ok) {
      state.SkipWithError(st->go == 2 ? "fork failed" : "a child failed to join");
      break;
    }
    state.SetIterationTime(static_cast<double>(all_joined - go) / 1e9);
    std::vector<std::uint64_t> ns(st->join_ns, st->join_ns + joiners);
    std::sort(ns.begin(), ns.end());
    total_ms += static_cast<double>(all_joined - go) / 1e6;
    slowest_us += static_cast<double>(ns.back()) / 1e3;
    median_us += static_cast<double>(ns[joiners / 2]) / 1e3;
  }
  ::munmap(mem, sizeof(join_stage));
  if (!table.snapshot().sessions.empty()) state.SkipWithError("sessions left behind");
  using C = benchmark::Counter; // averages over the iterations
  state.counters["total_ms"] = C(total_ms, C::kAvgIterations);
  state.counters["slowest_join_us"] = C(slowest_us, C::kAvgIterations);
  state.counters["median_join_us"] = C(median_us, C::kAvgIterations);
}
BENCHMARK(join_256)
    ->Name("session/join")
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

// session/join_leave: one process joins an existing table and leaves again. Target: <= 100 us.
void join_leave(benchmark::State& state) {
  bench_table t("join-leave");
  gpushare::table table = t.open(); // keeps the table existing between sessions
  const gpushare::session_options opts = t.options("bench");
  for (auto _ : state) {
    gpushare::session s(t.key(), opts);
    benchmark::DoNotOptimize(s);
  }
}
BENCHMARK(join_leave)->Name("session/join_leave")->Unit(benchmark::kMicrosecond);

// snapshot/16_sessions: table::snapshot() with 16 live sessions (what a status tool refreshes).
// Target: <= 50 us.
void snapshot_16(benchmark::State& state) {
  bench_table t("snapshot");
  std::vector<gpushare::session> sessions;
  for (int i = 0; i < 16; ++i) sessions.push_back(t.join("session" + std::to_string(i)));
  gpushare::table table = t.open();
  for (auto _ : state) {
    gpushare::table_snapshot snap = table.snapshot();
    if (snap.sessions.size() != 16) {
      state.SkipWithError("the snapshot does not show 16 sessions");
      break;
    }
    benchmark::DoNotOptimize(snap);
  }
}
BENCHMARK(snapshot_16)->Name("snapshot/16_sessions")->Unit(benchmark::kMicrosecond);

// ---- compute arbitration ----------------------------------------------------------------------

// guard/uncontended: an empty scoped_kernel made and ended, its session alone. Target: <= 100 ns.
void guard_uncontended(benchmark::State& state) {
  make_multithreaded();
  bench_table t("guard");
  gpushare::session s = t.join("bench");
  for (auto _ : state) {
    gpushare::scoped_kernel k(s);
    benchmark::DoNotOptimize(k);
  }
  if (s.info().guards != static_cast<std::uint64_t>(state.iterations()))
    state.SkipWithError("the session did not account one guard per iteration");
}
BENCHMARK(guard_uncontended)->Name("guard/uncontended");

// guard/yield_uncontended: s.yield() with nobody waiting (one relaxed load). Target: <= 50 ns.
void yield_uncontended(benchmark::State& state) {
  bench_table t("yield");
  gpushare::session s = t.join("bench");
  for (auto _ : state) s.yield();
}
BENCHMARK(yield_uncontended)->Name("guard/yield_uncontended");

// An uncontended process-shared pthread_mutex in shared memory, optionally robust (the table
// lock is both: detail/robust_lock.hpp).
class pshared_mutex {
public:
  explicit pshared_mutex(bool robust) {
    pthread_mutexattr_t attr;
    ::pthread_mutexattr_init(&attr);
    ::pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    if (robust) ::pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    ok_ = m_ && ::pthread_mutex_init(&*m_, &attr) == 0;
    ::pthread_mutexattr_destroy(&attr);
  }
  ~pshared_mutex() {
    if (ok_) ::pthread_mutex_destroy(&*m_);
  }
  pshared_mutex(const pshared_mutex&) = delete;
  pshared_mutex& operator=(const pshared_mutex&) = delete;
  explicit operator bool() const { return ok_; }
  pthread_mutex_t* get() const { return &*m_; }

private:
  shared_block<pthread_mutex_t> m_;
  bool ok_ = false;
};

// Nanoseconds per call of `op`, over `n` calls.
template <class Op> double ns_per_op(std::uint32_t n, Op op) {
  const std::uint64_t start = now_ns();
  for (std::uint32_t i = 0; i < n; ++i) op();
  return static_cast<double>(now_ns() - start) / n;
}

// guard/vs_mutex: the uncontended guard enter + exit next to the lock + unlock pair of an
// uncontended process-shared pthread_mutex, and of a robust one (the kind the table lock is).
// Short blocks of each are interleaved (1001 blocks of 2000 pairs; the median block counts), so
// that all three see the same machine, and a block the OS interrupts (a timer tick, another
// process's time slice) is an outlier rather than part of the figure. Goal: the guard <= 4x the
// pshared mutex pair, and <= 100 ns.
constexpr std::uint32_t pair_blocks = 1001;
constexpr std::uint32_t pairs_per_block = 2000;
constexpr std::uint32_t warm_up_blocks = 50;
void guard_vs_mutex(benchmark::State& state) {
  make_multithreaded(); // as in guard/uncontended
  bench_table t("guard-mutex");
  gpushare::session s = t.join("bench");
  pshared_mutex plain(false), robust(true);
  if (!plain || !robust) {
    state.SkipWithError("cannot initialise the process-shared mutexes");
    return;
  }
  const double load_start = load1();
  auto guard_pair = [&s] {
    gpushare::scoped_kernel k(s);
    benchmark::DoNotOptimize(k);
  };
  auto lock_pair = [](pthread_mutex_t* m) {
    return [m] {
      if (::pthread_mutex_lock(m) != 0) std::abort(); // uncontended: cannot fail
      ::pthread_mutex_unlock(m);
    };
  };
  double guard_ns = 0, mutex_ns = 0, robust_ns = 0;
  for (auto _ : state) {
    for (std::uint32_t b = 0; b < warm_up_blocks; ++b) { // caches, the table's pages, branches
      ns_per_op(pairs_per_block, guard_pair);
      ns_per_op(pairs_per_block, lock_pair(plain.get()));
      ns_per_op(pairs_per_block, lock_pair(robust.get()));
    }
    std::vector<double> g, m, r;
    for (std::uint32_t b = 0; b < pair_blocks; ++b) {
      g.push_back(ns_per_op(pairs_per_block, guard_pair));
      m.push_back(ns_per_op(pairs_per_block, lock_pair(plain.get())));
      r.push_back(ns_per_op(pairs_per_block, lock_pair(robust.get())));
    }
    guard_ns = median(g);
    mutex_ns = median(m);
    robust_ns = median(r);
    state.SetIterationTime(guard_ns / 1e9);
  }
  const std::uint64_t expected = std::uint64_t{pair_blocks + warm_up_blocks} * pairs_per_block;
  if (s.info().guards != expected) {
    state.SkipWithError("the session did not account one guard per pair");
    return;
  }
  ratios.guard_ns.push_back(guard_ns);
  ratios.mutex_ns.push_back(mutex_ns);
  ratios.robust_mutex_ns.push_back(robust_ns);
  ratios.guard_load.push_back(load_start);
  state.counters["guard_ns"] = guard_ns;
  state.counters["mutex_ns"] = mutex_ns;
  state.counters["robust_mutex_ns"] = robust_ns;
  state.counters["x_mutex"] = guard_ns / mutex_ns;
  state.counters["x_robust"] = guard_ns / robust_ns;
  state.counters["load1"] = load_start;
}
BENCHMARK(guard_vs_mutex)->Name("guard/vs_mutex")->UseManualTime()->Iterations(1);

// The values over the repetitions as "median [min-max]" (just the value if there is one).
std::string spread(const std::vector<double>& x, const char* format) {
  auto text = [format](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, format, v);
    return std::string(buf);
  };
  const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
  return x.size() < 2 ? text(x[0]) : text(median(x)) + " [" + text(*lo) + "-" + text(*hi) + "]";
}

// a[i] / b[i]: a figure over its baseline, within each repetition.
std::vector<double> per_repetition(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) r.push_back(a[i] / b[i]);
  return r;
}

// The rows of a reclaim series (`what` names it): p50 and p99 next to the futex round trip of the
// same run.
void reclaim_rows(std::vector<std::vector<std::string>>& rows, const reclaim_series& r,
                  const std::string& what) {
  if (r.p50_us.empty()) return;
  const std::string load = spread(r.load, "%.2f");
  rows.push_back({what + " p50", spread(r.p50_us, "%.1f") + " us", "futex round trip p50",
                  spread(r.trip_p50_us, "%.1f") + " us",
                  spread(per_repetition(r.p50_us, r.trip_p50_us), "%.1f"), "-", "-", load});
  rows.push_back({what + " p99", spread(r.p99_us, "%.1f") + " us", "futex round trip p99",
                  spread(r.trip_p99_us, "%.1f") + " us",
                  spread(per_repetition(r.p99_us, r.trip_p99_us), "%.1f"), "-", "-", load});
}

// The table of figures, baselines, ratios and goals of the ratio benchmarks that ran: medians over
// the repetitions and, with several, their range. A ratio is taken within each repetition (figure
// and baseline measured together); its median over the repetitions decides the goal.
void print_ratios(double load_start, double load_end) {
  const ratio_figures& f = ratios;
  using row = std::vector<std::string>;
  std::vector<row> rows{
      {"figure", "measured", "baseline (same run)", "", "ratio", "goal", "met?", "load1 at start"}};
  auto met = [](bool yes) { return std::string(yes ? "yes" : "NO"); };
  for (int same_cpu = 0; same_cpu < 2; ++same_cpu) {
    const handoff_series& h = f.handoff[same_cpu];
    if (h.p50_us.empty()) continue;
    const std::string where = same_cpu ? ", same CPU" : ", two CPUs";
    const std::vector<double> x50 = per_repetition(h.p50_us, h.futex_p50_us);
    const std::vector<double> x99 = per_repetition(h.p99_us, h.futex_p99_us);
    const std::string load = spread(h.load, "%.2f");
    rows.push_back({"handoff p50" + where, spread(h.p50_us, "%.1f") + " us", "futex ping-pong p50",
                    spread(h.futex_p50_us, "%.1f") + " us", spread(x50, "%.2f"), "-", "-", load});
    rows.push_back({"handoff p99" + where, spread(h.p99_us, "%.1f") + " us", "futex ping-pong p99",
                    spread(h.futex_p99_us, "%.1f") + " us", spread(x99, "%.2f"), "<= 1.5x",
                    met(median(x99) <= 1.5), load});
  }
  if (!f.guard_ns.empty()) {
    const std::vector<double> x = per_repetition(f.guard_ns, f.mutex_ns);
    const std::string guard = spread(f.guard_ns, "%.1f") + " ns";
    const std::string load = spread(f.guard_load, "%.2f");
    rows.push_back({"guard enter+exit", guard, "pshared mutex lock+unlock",
                    spread(f.mutex_ns, "%.1f") + " ns", spread(x, "%.2f"), "<= 4x",
                    met(median(x) <= 4), load});
    rows.push_back({"guard enter+exit", guard, "(absolute)", "", "", "<= 100 ns",
                    met(median(f.guard_ns) <= 100), load});
    rows.push_back({"guard enter+exit", guard, "robust pshared mutex",
                    spread(f.robust_mutex_ns, "%.1f") + " ns",
                    spread(per_repetition(f.guard_ns, f.robust_mutex_ns), "%.2f"), "(none)", "-",
                    load});
  }
  reclaim_rows(rows, f.reclaim, "reclaim demand->grant");
  reclaim_rows(rows, f.loan, "loan call->grant");
  if (rows.size() == 1) return;
  const std::size_t reps =
      std::max({f.handoff[0].p50_us.size(), f.handoff[1].p50_us.size(), f.guard_ns.size(),
                f.reclaim.p50_us.size(), f.loan.p50_us.size()});
  std::printf("\nRatios to the physical limit, measured in this run (%zu repetition%s%s). Load "
              "average %.2f at the start, %.2f at the end.\n",
              reps, reps == 1 ? "" : "s", reps == 1 ? "" : ": median [min-max]", load_start,
              load_end);
  std::vector<std::size_t> width(rows[0].size(), 0);
  for (const row& r : rows)
    for (std::size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  for (const row& r : rows) {
    for (std::size_t i = 0; i < r.size(); ++i)
      std::printf("  %-*s", static_cast<int>(width[i]), r[i].c_str());
    std::printf("\n");
  }
  std::fflush(stdout);
}

} // namespace

// BENCHMARK_MAIN(), then the table of ratios to the baselines.
int main(int argc, char** argv) {
  const double load_start = load1();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  print_ratios(load_start, load1());
  return 0;
}
