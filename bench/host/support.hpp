// SPDX-License-Identifier: Apache-2.0
// What the host benchmarks (bench/host/*.cpp, one program) share: the clock, the cross-process
// wait on a shared word, a private table, forked processes and shared memory, CPU placement, and
// the ratios to the physical limits that the benchmarks record and main() prints.
#pragma once

#include <algorithm>
#include <atomic>
#include <benchmark/benchmark.h>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <gpushare/gpushare.hpp>
#include <linux/futex.h>
#include <map>
#include <new>
#include <pthread.h>
#include <sched.h>
#include <string>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <time.h>
#include <unistd.h>
#include <utility>
#include <vector>

namespace bench_host {

inline constexpr std::uint64_t GiB = 1ull << 30;
inline constexpr const char* bench_domain = "gpusharebench";

inline std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

// Cross-process waiting on a word in MAP_SHARED memory: the Linux futex system call itself
// (FUTEX_WAIT and FUTEX_WAKE, not their _PRIVATE forms, so that it works across processes). The
// futex ping-pong benchmark below measures exactly this as the floor of any handoff.
inline void futex_wait_for(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                           std::uint64_t timeout_ns) {
  timespec timeout{static_cast<time_t>(timeout_ns / 1'000'000'000),
                   static_cast<long>(timeout_ns % 1'000'000'000)};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &timeout,
            nullptr, 0);
}
inline void futex_wake_all(std::atomic<std::uint32_t>* word) {
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

// A "kernel": spins the CPU for `ns`.
inline void spin_for(std::uint64_t ns) {
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
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench child %d: %s\n", static_cast<int>(::getpid()), e.what());
  } catch (...) {
  }
  std::_Exit(rc);
}

// Waits for a child; true if it exited with status 0.
inline bool reap(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Waits (futex, across processes) until `word` reaches `target` or `timeout_ns` passes.
inline bool wait_at_least_for(std::atomic<std::uint32_t>& word, std::uint32_t target,
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
inline void count_up(std::atomic<std::uint32_t>& word) {
  word.fetch_add(1);
  futex_wake_all(&word);
}

// Makes this process multi-threaded for good, as every CUDA process is (the runtime starts
// threads). While a process has only ever had one thread, glibc says so (__libc_single_threaded)
// and libstdc++ then counts shared_ptr references without atomic instructions, which makes a guard
// cheaper than any real user sees, and a filtered run differ from a full one (where the threads
// of reserve/release_contended ran first).
inline void make_multithreaded() {
  std::thread([] {}).join();
}

// ---- ratios to the physical limit ---------------------------------------------------------------
// Absolute nanoseconds on a shared VM say little, so the arbitration figures are also measured
// next to a baseline in the same run: the guard against an uncontended process-shared
// pthread_mutex (what any cross-process lock costs at least), the handoff against a raw futex
// ping-pong between two processes (what waking another process costs at least). main() prints
// the ratios, the goals and whether they are met after the benchmarks (see print_ratios()).

// The 1-minute load average (-1 if /proc/loadavg cannot be read).
inline double load1() {
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
struct reclaim_series { // reclaim/demand_to_grant and the futex round trip of the same run
  std::vector<double> p50_us, p99_us, trip_p50_us, trip_p99_us, load;
};
struct ratio_figures {
  handoff_series handoff[2]; // [0]: the two processes on two CPUs, [1]: on the same CPU
  reclaim_series reclaim;
  reclaim_series loan; // reclaim/loan_call_to_grant
  std::vector<double> guard_ns, mutex_ns, robust_mutex_ns, guard_load;
};
inline ratio_figures ratios; // filled by the benchmarks, printed by main()

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// The CPUs this process may run on.
inline std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

// Pins the calling process to `cpu`.
inline bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return ::sched_setaffinity(0, sizeof(set), &set) == 0;
}

} // namespace bench_host
