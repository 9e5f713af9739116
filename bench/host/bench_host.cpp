// SPDX-License-Identifier: Apache-2.0
// Host-side benchmarks of the shared table (no GPU): the reserve/release fast path, joining (one
// process, and 256 processes at once), and snapshots. Each benchmark states its target.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include <gpushare/gpushare.hpp>

namespace {

constexpr std::uint64_t GiB = 1ull << 30;
constexpr const char* bench_domain = "gpusharebench";

std::uint64_t now_ns() { return gpushare::detail::monotonic_ns(); }

// A table private to this benchmark process (its key includes the pid); unlinked on destruction.
class bench_table {
public:
  explicit bench_table(const std::string& what) {
    static std::atomic<int> counter{0};
    key_ = "bench-" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    opts_.domain = bench_domain;
    opts_.capacity = GiB;
  }
  ~bench_table() {
    ::shm_unlink(
        gpushare::detail::table_object_name(bench_domain, key_, gpushare::table_access::user)
            .c_str());
  }
  bench_table(const bench_table&) = delete;
  bench_table& operator=(const bench_table&) = delete;

  const std::string& key() const { return key_; }
  gpushare::session_options options(const std::string& name) const {
    gpushare::session_options o = opts_;
    o.name = name;
    return o;
  }
  gpushare::session join(const std::string& name) const {
    return gpushare::session(key_, options(name));
  }
  gpushare::table open() const { return gpushare::table::open(key_, opts_); }

private:
  std::string key_;
  gpushare::session_options opts_;
};

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
  for (std::uint32_t v; (v = word.load()) < target;)
    gpushare::detail::futex_wait(&word, v, 1'000'000'000);
}

// One forked joiner: waits for "go", joins, reports, stays joined until all have, then leaves.
[[noreturn]] void joiner(join_stage& st, std::uint32_t i, const gpushare::session_options& opts,
                         const std::string& key) {
  if (st.ready.fetch_add(1) + 1 == joiners) gpushare::detail::futex_wake(&st.ready);
  while (st.go.load() == 0) gpushare::detail::futex_wait(&st.go, 0, 1'000'000'000);
  int rc = 0;
  if (st.go.load() == 1) {
    try {
      const std::uint64_t start = now_ns();
      gpushare::session s(key, opts);
      st.join_ns[i] = now_ns() - start;
      if (st.joined.fetch_add(1) + 1 == joiners) gpushare::detail::futex_wake(&st.joined);
      wait_until_at_least(st.joined, joiners);
    } catch (...) {
      st.failed.fetch_add(1);
      if (st.joined.fetch_add(1) + 1 == joiners) gpushare::detail::futex_wake(&st.joined);
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
    gpushare::detail::futex_wake(&st->go);
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

} // namespace

BENCHMARK_MAIN();
