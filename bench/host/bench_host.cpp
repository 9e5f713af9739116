// SPDX-License-Identifier: Apache-2.0
// Host-side benchmarks of the shared table (no GPU): the reserve/release fast path, joining (one
// process, and 256 processes at once), snapshots, and compute arbitration (the guard and yield fast
// paths, the cross-process handoff latency, and the shares achieved by busy processes; a "kernel"
// is CPU spinning inside a scoped_kernel). Each benchmark states its target. The guard and the
// handoff are also measured next to their physical limits in the same run (an uncontended
// process-shared pthread_mutex, a raw futex ping-pong between two processes); main() prints the
// ratios and their goals at the end.
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

namespace {

constexpr std::uint64_t GiB = 1ull << 30;
constexpr const char* bench_domain = "gpusharebench";

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

// Cross-process waiting on a word in MAP_SHARED memory: the Linux futex system call itself
// (FUTEX_WAIT and FUTEX_WAKE, not their _PRIVATE forms, so that it works across processes). The
// futex ping-pong benchmark below measures exactly this as the floor of any handoff.
void futex_wait_for(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                    std::uint64_t timeout_ns) {
  timespec timeout{static_cast<time_t>(timeout_ns / 1'000'000'000),
                   static_cast<long>(timeout_ns % 1'000'000'000)};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &timeout,
            nullptr, 0);
}
void futex_wake_all(std::atomic<std::uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr,
            nullptr, 0);
}

// A table private to this benchmark process (its key includes the pid); removed on destruction.
class bench_table {
public:
  explicit bench_table(const std::string& what) {
    static std::atomic<int> counter{0};
    key_ = "bench-" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    opts_.domain = bench_domain;
    opts_.capacity = GiB;
  }
  ~bench_table() { // its sessions have left by now; remove() keeps a table still in use
    try {
      gpushare::table::remove(key_, opts_);
    } catch (const gpushare::error&) {
    }
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
  gpushare::table open() const {
    return gpushare::table::open(key_, gpushare::open_mode::open_or_create, opts_);
  }

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

// A "kernel": spins the CPU for `ns`.
void spin_for(std::uint64_t ns) {
  const std::uint64_t end = now_ns() + ns;
  while (now_ns() < end) {
  }
}

// A T in anonymous MAP_SHARED memory, so that forked children and the parent see the same one.
template <class T> class shared_block {
public:
  shared_block() {
    void* mem =
        ::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem != MAP_FAILED) value_ = new (mem) T;
  }
  ~shared_block() {
    if (value_ != nullptr) ::munmap(value_, sizeof(T));
  }
  shared_block(const shared_block&) = delete;
  shared_block& operator=(const shared_block&) = delete;

  explicit operator bool() const { return value_ != nullptr; }
  T* operator->() const { return value_; }
  T& operator*() const { return *value_; }

private:
  T* value_ = nullptr;
};

// Forks a child that runs `body` (returning its exit code; an exception is exit code 2) and leaves
// with std::_Exit: no benchmark teardown, no static destructors. Returns the pid, or -1.
template <class Body> pid_t spawn(Body body) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  int rc = 2;
  try {
    rc = body();
  } catch (...) {
  }
  std::_Exit(rc);
}

// Waits for a child; true if it exited with status 0.
bool reap(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Waits (futex, across processes) until `word` reaches `target` or `timeout_ns` passes.
bool wait_at_least_for(std::atomic<std::uint32_t>& word, std::uint32_t target,
                       std::uint64_t timeout_ns) {
  const std::uint64_t deadline = now_ns() + timeout_ns;
  for (std::uint32_t v; (v = word.load()) < target;) {
    const std::uint64_t now = now_ns();
    if (now >= deadline) return false;
    futex_wait_for(&word, v, std::min<std::uint64_t>(deadline - now, 100'000'000));
  }
  return true;
}

// Adds 1 to `word` and wakes whoever waits for it.
void count_up(std::atomic<std::uint32_t>& word) {
  word.fetch_add(1);
  futex_wake_all(&word);
}

// Makes this process multi-threaded for good, as every CUDA process is (the runtime starts
// threads). While a process has only ever had one thread, glibc says so (__libc_single_threaded)
// and libstdc++ then counts shared_ptr references without atomic instructions, which makes a guard
// cheaper than any real user sees, and a filtered run differ from a full one (where the threads
// of reserve/release_contended ran first).
void make_multithreaded() {
  std::thread([] {}).join();
}

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

// ---- ratios to the physical limit ---------------------------------------------------------------
// Absolute nanoseconds on a shared VM say little, so the arbitration figures are also measured
// next to a baseline in the same run: the guard against an uncontended process-shared
// pthread_mutex (what any cross-process lock costs at least), the handoff against a raw futex
// ping-pong between two processes (what waking another process costs at least). main() prints
// the ratios, the goals and whether they are met after the benchmarks (see print_ratios()).

// The 1-minute load average (-1 if /proc/loadavg cannot be read).
double load1() {
  double v = -1;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &v) != 1) v = -1;
    std::fclose(f);
  }
  return v;
}

// What the ratio benchmarks found, one value per repetition (they run one iteration each, so
// Google Benchmark calls them once per repetition); print_ratios() summarises them.
struct handoff_series {
  std::vector<double> p50_us, p99_us, futex_p50_us, futex_p99_us, load;
};
struct ratio_figures {
  handoff_series handoff[2]; // [0]: the two processes on two CPUs, [1]: on the same CPU
  std::vector<double> guard_ns, mutex_ns, robust_mutex_ns, guard_load;
};
ratio_figures ratios;

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

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
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

// The CPUs this process may run on.
std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

// Pins the calling process to `cpu`.
bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return ::sched_setaffinity(0, sizeof(set), &set) == 0;
}

// What the two processes of a handoff run share.
constexpr std::uint32_t handoff_target = 5000;                // samples wanted (>= 2000 required)
constexpr std::uint64_t handoff_deadline_ns = 10'000'000'000; // stop collecting after 10 s
constexpr std::uint64_t handoff_guard_ns = 2'000; // each guard spins 2 us > the 1 us quantum
struct handoff_stage {
  std::atomic<std::uint32_t> ready{0}; // processes joined
  std::atomic<std::uint32_t> go{0};    // 1: start
  std::atomic<std::uint32_t> stop{0};  // 1: enough samples (or the deadline passed)
  std::atomic<std::uint32_t> count{0}; // samples taken
  std::atomic<std::uint32_t> turn{0};  // futex ping-pong only: whose turn it is (0 or 1)
  // Written by the holder just before it hands over, read by the next holder once it runs.
  std::atomic<std::uint64_t> release_ns{0};
  std::atomic<std::int32_t> releaser{-1};
  // Added by each process when it stops: turns it had, context switches during them.
  std::atomic<std::uint64_t> turns{0}, voluntary_switches{0}, involuntary_switches{0};
  std::uint64_t latency_ns[handoff_target];
};

// Records a turn's handoff latency if the other process released last (t_release is its).
void take_sample(handoff_stage& st, int me, std::uint64_t t_run) {
  const std::uint64_t t_release = st.release_ns.load(std::memory_order_relaxed);
  if (st.releaser.load(std::memory_order_relaxed) != 1 - me) return;
  const std::uint32_t i = st.count.fetch_add(1);
  if (i < handoff_target) st.latency_ns[i] = t_run - t_release;
  if (i + 1 >= handoff_target) st.stop = 1;
}

// The end of a turn: t_release, just before the handover.
void mark_release(handoff_stage& st, int me) {
  st.releaser.store(me, std::memory_order_relaxed);
  st.release_ns.store(now_ns(), std::memory_order_relaxed);
}

// Counts this process's context switches from construction to finish().
class switch_counter {
public:
  switch_counter() : start_(usage()) {}
  void finish(handoff_stage& st, std::uint64_t turns) const {
    const rusage end = usage();
    st.turns += turns;
    st.voluntary_switches += static_cast<std::uint64_t>(end.ru_nvcsw - start_.ru_nvcsw);
    st.involuntary_switches += static_cast<std::uint64_t>(end.ru_nivcsw - start_.ru_nivcsw);
  }

private:
  static rusage usage() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return u;
  }
  rusage start_;
};

// One process of a guard handoff run: back-to-back 2 us guards. A sample is taken when this guard
// had to wait (its session's device_waits grew) and the other process released last: then the
// other's guard exit handed the device over, and t_run - t_release is the handoff latency.
int guard_handoff_worker(handoff_stage& st, int me, const bench_table& t) {
  gpushare::session_options o = t.options(me == 0 ? "A" : "B");
  o.quantum = std::chrono::microseconds(1); // every guard uses it up: hand over at each exit
  gpushare::session s(t.key(), o);
  count_up(st.ready);
  if (!wait_at_least_for(st.go, 1, 10'000'000'000)) return 1;
  const std::uint64_t deadline = now_ns() + handoff_deadline_ns;
  std::uint64_t waits = s.info().device_waits, turns = 0;
  const switch_counter switches;
  while (st.stop.load(std::memory_order_relaxed) == 0) {
    {
      gpushare::scoped_kernel k(s);
      const std::uint64_t t_run = now_ns();
      const std::uint64_t w = s.info().device_waits; // outside the handoff path: we hold the device
      if (w != waits) take_sample(st, me, t_run);
      waits = w;
      ++turns;
      spin_for(handoff_guard_ns);
      mark_release(st, me); // then the guard ends
    }
    if (now_ns() > deadline) st.stop = 1;
  }
  switches.finish(st, turns);
  return 0;
}

// The raw futex calls of the baseline (shared, not private: the word is in MAP_SHARED memory
// that two processes map, as gpushare's are), spelled out here so that the baseline does not
// depend on the library. The wait is bounded like gpushare's and the wake wakes all, as its do.
// One process of a futex ping-pong run: the same turns as guard_handoff_worker (2 us of spinning
// between t_run and t_release), but a turn passes by storing the other's number in one shared word
// and waking it, and is awaited by FUTEX_WAIT on that word: the floor of any cross-process handoff.
int futex_pingpong_worker(handoff_stage& st, int me) {
  count_up(st.ready);
  if (!wait_at_least_for(st.go, 1, 10'000'000'000)) return 1;
  const std::uint64_t deadline = now_ns() + handoff_deadline_ns;
  const auto mine = static_cast<std::uint32_t>(me);
  std::uint64_t turns = 0;
  const switch_counter switches;
  while (st.stop.load(std::memory_order_relaxed) == 0) {
    for (std::uint32_t v; (v = st.turn.load(std::memory_order_acquire)) != mine;) {
      if (st.stop.load(std::memory_order_relaxed) != 0) break;
      futex_wait_for(&st.turn, v, 100'000'000);
    }
    if (st.turn.load(std::memory_order_acquire) != mine) break; // stopped while waiting
    const std::uint64_t t_run = now_ns();
    take_sample(st, me, t_run);
    ++turns;
    spin_for(handoff_guard_ns);
    mark_release(st, me);
    st.turn.store(1 - mine, std::memory_order_release);
    futex_wake_all(&st.turn);
    if (now_ns() > deadline) st.stop = 1;
  }
  switches.finish(st, turns);
  return 0;
}

// What one handoff run measured: percentiles of the latencies, and context switches per turn.
struct handoff_figures {
  std::size_t samples = 0;
  double mean_us = 0, p50_us = 0, p99_us = 0, max_us = 0;
  double voluntary_switches = 0, involuntary_switches = 0; // per turn, both processes together
  const char* error = nullptr;
};

// Runs two forked processes, pinned to `cpus`, that take turns (guard handoffs in `t`, or the futex
// ping-pong) until handoff_target samples (or 10 s), and summarises their latencies.
handoff_figures run_handoffs(bool guards, const bench_table& t, const int (&cpus)[2]) {
  handoff_figures f;
  shared_block<handoff_stage> st;
  if (!st) {
    f.error = "mmap failed";
    return f;
  }
  bool ok = true;
  std::vector<pid_t> pids;
  for (int me = 0; me < 2; ++me) {
    const pid_t pid = spawn([&st, me, &t, guards, cpu = cpus[me]] {
      if (!pin_to(cpu)) return 3;
      return guards ? guard_handoff_worker(*st, me, t) : futex_pingpong_worker(*st, me);
    });
    if (pid < 0)
      ok = false;
    else
      pids.push_back(pid);
  }
  ok = ok && wait_at_least_for(st->ready, 2, 10'000'000'000);
  st->stop = ok ? 0 : 1;
  st->go = 1;
  futex_wake_all(&st->go);
  for (pid_t pid : pids) ok = reap(pid) && ok;
  if (!ok) {
    f.error = "a handoff process failed";
    return f;
  }
  std::vector<std::uint64_t> ns(st->latency_ns,
                                st->latency_ns + std::min(st->count.load(), handoff_target));
  if (ns.empty()) {
    f.error = "no handoff was observed";
    return f;
  }
  std::sort(ns.begin(), ns.end());
  auto us_at = [&ns](double q) {
    return static_cast<double>(
               ns[static_cast<std::size_t>(q * static_cast<double>(ns.size() - 1))]) /
           1e3;
  };
  double sum = 0;
  for (std::uint64_t v : ns) sum += static_cast<double>(v);
  f.samples = ns.size();
  f.mean_us = sum / static_cast<double>(ns.size()) / 1e3;
  f.p50_us = us_at(0.50);
  f.p99_us = us_at(0.99);
  f.max_us = static_cast<double>(ns.back()) / 1e3;
  const double turns = static_cast<double>(std::max<std::uint64_t>(st->turns, 1));
  f.voluntary_switches = static_cast<double>(st->voluntary_switches) / turns;
  f.involuntary_switches = static_cast<double>(st->involuntary_switches) / turns;
  return f;
}

// handoff/cross_process: guard end in one process to the waiter running in another. p99 <= 50 us.
// (Equal priorities, 1 us quantum, both busy: each guard uses the quantum up, so the device
// changes hands at guard exits. Time is the mean.) The same iteration runs the futex ping-pong
// (futex_*) between two processes forked and placed the same way, with the same turns, sample
// count and percentiles; which of the two runs first alternates between repetitions. Goal: p99 <=
// 1.5x the ping-pong's p99.
// Placement decides the floor (a wake-up on another, idle CPU or a switch on the same one), and
// the scheduler's choice for unpinned processes changes from run to run, so the processes are
// pinned: same_cpu:0 to the first two CPUs this process may use, same_cpu:1 both to the first.
void handoff_cross_process(benchmark::State& state) {
  static int runs = 0; // odd repetitions run the ping-pong first
  const bool same_cpu = state.range(0) != 0;
  const std::vector<int> allowed = allowed_cpus();
  if (allowed.empty() || (!same_cpu && allowed.size() < 2)) {
    state.SkipWithError("needs two CPUs");
    return;
  }
  const int cpus[2] = {allowed[0], same_cpu ? allowed[0] : allowed[1]};
  bench_table t("handoff");
  const double load_start = load1();
  handoff_figures g, f;
  for (auto _ : state) {
    if (runs++ % 2 == 1) {
      f = run_handoffs(false, t, cpus);
      g = run_handoffs(true, t, cpus);
    } else {
      g = run_handoffs(true, t, cpus);
      f = run_handoffs(false, t, cpus);
    }
    if (g.error != nullptr || f.error != nullptr) {
      state.SkipWithError(g.error != nullptr ? g.error : f.error);
      return;
    }
    state.SetIterationTime(g.mean_us / 1e6);
  }
  handoff_series& r = ratios.handoff[same_cpu ? 1 : 0];
  r.p50_us.push_back(g.p50_us);
  r.p99_us.push_back(g.p99_us);
  r.futex_p50_us.push_back(f.p50_us);
  r.futex_p99_us.push_back(f.p99_us);
  r.load.push_back(load_start);
  state.counters["samples"] = static_cast<double>(g.samples);
  state.counters["p50_us"] = g.p50_us;
  state.counters["p99_us"] = g.p99_us;
  state.counters["max_us"] = g.max_us;
  state.counters["futex_p50_us"] = f.p50_us;
  state.counters["futex_p99_us"] = f.p99_us;
  state.counters["futex_max_us"] = f.max_us;
  state.counters["x_p50"] = g.p50_us / f.p50_us;
  state.counters["x_p99"] = g.p99_us / f.p99_us;
  state.counters["csw_per_turn"] = g.voluntary_switches;    // sleeps per turn, both processes
  state.counters["icsw_per_turn"] = g.involuntary_switches; // preemptions per turn
  state.counters["futex_csw_per_turn"] = f.voluntary_switches;
  state.counters["futex_icsw_per_turn"] = f.involuntary_switches;
  state.counters["load1"] = load_start;
  if (std::min(g.samples, f.samples) < 2000)
    state.SetLabel("fewer than 2000 samples before the deadline");
}
BENCHMARK(handoff_cross_process)
    ->Name("handoff/cross_process")
    ->ArgName("same_cpu")
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMicrosecond);

// What the busy processes of fairness/shares share with the parent.
struct busy_control {
  std::atomic<std::uint32_t> started{0};
  std::atomic<std::uint32_t> stop{0};
};

// The device time each session (by name) used while the parent slept `window`.
std::map<std::string, double> device_ns_during(gpushare::table& table,
                                               std::chrono::milliseconds window) {
  std::map<std::string, std::uint64_t> before;
  for (const auto& s : table.snapshot().sessions) before[s.name] = s.device_ns;
  std::this_thread::sleep_for(window);
  std::map<std::string, double> used;
  for (const auto& s : table.snapshot().sessions)
    used[s.name] = static_cast<double>(s.device_ns - before[s.name]);
  return used;
}

constexpr std::chrono::milliseconds shares_window{2000}; // fairness/shares measures over this

// One row of the fairness table: a session, its configured share and what it got.
struct share_row {
  std::string name;
  std::uint32_t share = 1;
  double configured_pct = 0, achieved_pct = 0; // of the device time all of them used
  double window_pct = 0;                       // its device time as a part of the window
};

// Runs one process per entry of `shares` (1 ms spinning guards, back to back) for 200 ms of
// warm-up and then a 2 s window; returns configured and achieved percentages of device time, or
// an empty vector if a process failed.
std::vector<share_row>
run_shares(const std::string& what,
           const std::vector<std::pair<std::string, std::uint32_t>>& shares) {
  bench_table t(what);
  gpushare::table table = t.open();
  shared_block<busy_control> c;
  if (!c) return {};
  std::vector<pid_t> pids;
  for (const auto& [name, share] : shares) {
    gpushare::session_options o = t.options(name);
    o.share = share;
    const pid_t pid = spawn([&t, o, &c] {
      gpushare::session s(t.key(), o);
      count_up(c->started);
      while (c->stop.load(std::memory_order_relaxed) == 0) {
        gpushare::scoped_kernel k(s);
        spin_for(1'000'000);
      }
      return 0;
    });
    if (pid > 0) pids.push_back(pid);
  }
  bool ok =
      pids.size() == shares.size() &&
      wait_at_least_for(c->started, static_cast<std::uint32_t>(shares.size()), 10'000'000'000);
  std::map<std::string, double> used;
  if (ok) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    used = device_ns_during(table, shares_window);
  }
  c->stop = 1;
  for (pid_t pid : pids) ok = reap(pid) && ok;
  if (!ok) return {};
  double total_used = 0;
  std::uint32_t total_share = 0;
  for (const auto& [name, share] : shares) {
    total_used += used[name];
    total_share += share;
  }
  const double window_ns = std::chrono::duration<double, std::nano>(shares_window).count();
  std::vector<share_row> rows;
  for (const auto& [name, share] : shares)
    rows.push_back({name, share, 100.0 * share / total_share,
                    total_used > 0 ? 100.0 * used[name] / total_used : 0,
                    100.0 * used[name] / window_ns});
  return rows;
}

// fairness/shares: achieved vs configured shares, 3:1 then 1:1:2 (no timing). Target: <= 5 pp off.
void fairness_shares(benchmark::State& state) {
  std::vector<share_row> split31, split112;
  for (auto _ : state) {
    split31 = run_shares("shares31", {{"three", 3}, {"one", 1}});
    split112 = run_shares("shares112", {{"a", 1}, {"b", 1}, {"c", 2}});
  }
  if (split31.empty() || split112.empty()) {
    state.SkipWithError("a busy process failed");
    return;
  }
  double worst = 0, busy31 = 0, busy112 = 0;
  std::printf("\nfairness/shares: device time over 2 s, busy processes with 1 ms guards\n");
  std::printf("  %-6s %-8s %6s %14s %12s %10s %12s\n", "split", "session", "share", "configured %",
              "achieved %", "error pp", "of window %");
  for (const auto* split : {&split31, &split112})
    for (const share_row& r : *split) {
      const double error = r.achieved_pct - r.configured_pct;
      worst = std::max(worst, std::abs(error));
      (split == &split31 ? busy31 : busy112) += r.window_pct;
      std::printf("  %-6s %-8s %6u %14.1f %12.1f %+10.1f %12.1f\n",
                  split == &split31 ? "3:1" : "1:1:2", r.name.c_str(), r.share, r.configured_pct,
                  r.achieved_pct, error, r.window_pct);
    }
  std::fflush(stdout);
  state.counters["achieved_3of4_pct"] = split31[0].achieved_pct;
  state.counters["achieved_1of4_pct"] = split31[1].achieved_pct;
  state.counters["achieved_a_1of4_pct"] = split112[0].achieved_pct;
  state.counters["achieved_b_1of4_pct"] = split112[1].achieved_pct;
  state.counters["achieved_c_2of4_pct"] = split112[2].achieved_pct;
  state.counters["error_pp"] = worst;       // the largest |achieved - configured| of all five
  state.counters["busy_3to1_pct"] = busy31; // the device's busy part of each window
  state.counters["busy_112_pct"] = busy112;
}
BENCHMARK(fairness_shares)->Name("fairness/shares")->Iterations(1)->Unit(benchmark::kMillisecond);

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
  if (rows.size() == 1) return;
  const std::size_t reps =
      std::max({f.handoff[0].p50_us.size(), f.handoff[1].p50_us.size(), f.guard_ns.size()});
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
