// SPDX-License-Identifier: Apache-2.0
// Two processes share one table (host only, no GPU): a "trainer" holds most of the memory, an
// "inference" process waits for its turn, and when the trainer is killed its memory comes back.
// Each process has its own session; the parent only observes, through table::open(...).snapshot().
//
//   ./build/examples/two_process_demo [--duration SECONDS] [--simulate] [--quiet]
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>

#include <gpushare/gpushare.hpp>

#include <harness/cli.hpp>
#include <harness/report.hpp>

using namespace std::chrono_literals;
using gpushare::format_bytes;

namespace {

constexpr std::uint64_t MiB = 1ull << 20;
constexpr const char* domain = "gpusharedemo";
const std::string key = "two-process-demo-" + std::to_string(::getpid());

// The processes coordinate the story through a few flags in anonymous shared memory. (This is
// only choreography for the demo: gpushare itself needs nothing but the table's key.)
struct stage {
  std::atomic<int> trainer_ready{0}, inference_waiting{0}, inference_served{0}, finish{0};
  std::atomic<long long> inference_waited_ms{-1};
};
stage* shared = nullptr;
std::chrono::milliseconds epoch{2000}; // how long the trainer holds its memory (--duration)

// Polls `done` every millisecond for up to `timeout`.
bool eventually(const std::function<bool()>& done, std::chrono::milliseconds timeout = 10s) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}
bool wait_for(const std::atomic<int>& flag) {
  return eventually([&] { return flag.load() != 0; });
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

gpushare::session_options options(const char* name) {
  gpushare::session_options o;
  o.name = name;
  o.domain = domain;
  o.capacity = 1024 * MiB; // used by whichever process creates the table
  return o;
}

void say(const char* who, const std::string& line) {
  std::printf("  [%-9s pid %6d] %s\n", who, static_cast<int>(::getpid()), line.c_str());
  std::fflush(stdout);
}

// Runs `body` in a child process; its exit status is 0 if it returned, 1 if it threw.
pid_t spawn(const char* who, const std::function<void()>& body) {
  std::fflush(stdout); // or the child would print the parent's buffered text again
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  int rc = 0;
  try {
    body(); // sessions and reservations end here, before _exit
  } catch (const std::exception& e) {
    say(who, std::string("error: ") + e.what());
    rc = 1;
  }
  std::_Exit(rc);
}

// The trainer's guarantee keeps 256 MiB committed to it whatever the others do; above that it
// competes for the shared pool like anyone else.
void trainer() {
  auto o = options("trainer");
  o.memory_guarantee = gpushare::memory_amount::of_bytes(256 * MiB);
  gpushare::session s(key, o);
  auto weights = s.reserve(768 * MiB, 1s);
  say("trainer", "reserved 768 MiB for an epoch (guarantee: 256 MiB)");
  shared->trainer_ready = 1;
  check(wait_for(shared->inference_waiting), "inference never started waiting");
  std::this_thread::sleep_for(epoch);
  say("trainer", "epoch done: releasing 512 MiB of activations, keeping 256 MiB");
  weights.shrink(512 * MiB); // releasing wakes the waiters in every process at once
  // Hold the rest until the parent kills us: a crash with memory in hand.
  std::this_thread::sleep_for(30s);
  throw std::runtime_error("was not killed");
}

// The inference process asks for more than is free, so reserve() blocks (up to the timeout)
// until another process releases memory.
void inference() {
  gpushare::session s(key, options("inference"));
  say("inference", "asking for 512 MiB; only 256 MiB are free, so it waits (up to 10 s)");
  const auto start = std::chrono::steady_clock::now();
  auto r = s.reserve(512 * MiB, 10s);
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  say("inference", "got 512 MiB after waiting " + std::to_string(waited.count()) + " ms");
  shared->inference_waited_ms = waited.count();
  shared->inference_served = 1;
  check(wait_for(shared->finish), "the parent never said finish");
} // leaving returns the 512 MiB

void print_table(const gpushare::table_snapshot& snap) {
  std::printf("\n    %-10s %7s %11s %11s %11s %6s %10s\n", "name", "pid", "reserved", "guarantee",
              "peak", "waits", "waited");
  for (const auto& i : snap.sessions)
    std::printf("    %-10s %7d %11s %11s %11s %6llu %7llu ms\n", i.name.c_str(), i.pid,
                format_bytes(i.reserved).c_str(), format_bytes(i.memory_guarantee).c_str(),
                format_bytes(i.peak).c_str(), static_cast<unsigned long long>(i.reserve_waits),
                static_cast<unsigned long long>(i.reserve_wait_ns / 1'000'000));
  std::printf("    capacity %s, reserved %s, committed %s, available %s\n\n",
              gpushare::format_capacity(snap.capacity).c_str(),
              format_bytes(snap.reserved_total).c_str(), format_bytes(snap.committed_total).c_str(),
              gpushare::format_capacity(snap.available).c_str());
}

int run(pid_t& trainer_pid, pid_t& inference_pid) {
  std::printf("mode: table only (no GPU used, simulated or real: the memory is a number in "
              "gpushare's table)\n");
  std::printf("gpushare two-process demo: a process waits for memory, then its holder is "
              "SIGKILLed\nand its memory is reclaimed. Capacity: 1 GiB, shared by two processes; "
              "the trainer's\nepoch lasts %.1f s.\n\n",
              static_cast<double>(epoch.count()) / 1e3);
  auto table = gpushare::table::open(key, gpushare::open_mode::open_or_create,
                                     options("observer")); // observes; holds no session

  trainer_pid = spawn("trainer", trainer);
  check(wait_for(shared->trainer_ready), "the trainer did not reserve its memory");
  inference_pid = spawn("inference", inference);

  // The parent sees the waiter in the table itself: nothing but shared memory connects them.
  check(eventually([&] {
          for (const auto& i : table.snapshot().sessions)
            if (i.name == "inference" && i.waiting_for_memory > 0) return true;
          return false;
        }),
        "the table never showed inference waiting");
  say("parent", "the table shows 'inference' blocked in reserve()");
  shared->inference_waiting = 1;

  check(wait_for(shared->inference_served), "inference did not get its memory");
  const auto before = table.snapshot();
  std::printf("\nStatus after the hand-over:");
  print_table(before);
  check(before.sessions.size() == 2 && before.reserved_total == 768 * MiB,
        "expected 2 sessions holding 768 MiB, got " + std::to_string(before.sessions.size()) +
            " holding " + format_bytes(before.reserved_total));

  // A crash: SIGKILL runs no cleanup, yet the trainer's liveness lock dies with it, so the next
  // process to look at the table (here the parent's snapshot) reclaims its slot and bytes.
  std::printf("Killing the trainer with SIGKILL while it holds 256 MiB...\n");
  ::kill(trainer_pid, SIGKILL);
  int status = 0;
  ::waitpid(trainer_pid, &status, 0);
  trainer_pid = 0;
  check(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the trainer did not die by SIGKILL");
  const auto after = table.snapshot();
  std::printf("  reserved_total:     %s -> %s\n", format_bytes(before.reserved_total).c_str(),
              format_bytes(after.reserved_total).c_str());
  std::printf("  sessions:           %zu -> %zu\n", before.sessions.size(), after.sessions.size());
  std::printf("  sessions_reclaimed: %llu -> %llu\n",
              static_cast<unsigned long long>(before.sessions_reclaimed),
              static_cast<unsigned long long>(after.sessions_reclaimed));
  check(after.sessions.size() == 1 && after.reserved_total == 512 * MiB &&
            after.sessions_reclaimed == before.sessions_reclaimed + 1,
        "the trainer's memory was not reclaimed");

  shared->finish = 1;
  ::waitpid(inference_pid, &status, 0);
  inference_pid = 0;
  check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the inference process failed");
  check(table.snapshot().committed_total == 0, "memory is still committed after both ended");
  std::printf("\nBoth processes are gone and the table is empty again. Demo OK.\n\n");
  demo::result_line("mode", "table-only");
  demo::result_line("two_process.inference_waited_ms",
                    static_cast<double>(shared->inference_waited_ms.load()));
  demo::result_line("two_process.reserved_before_kill_mib",
                    static_cast<double>(before.reserved_total / MiB));
  demo::result_line("two_process.reserved_after_kill_mib",
                    static_cast<double>(after.reserved_total / MiB));
  demo::result_line("two_process.sessions_reclaimed",
                    static_cast<double>(after.sessions_reclaimed - before.sessions_reclaimed));
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0); // keep the processes' lines in order when piped
  demo::cli_spec spec;
  spec.summary = "The shared table alone (no GPU used): a process waits for memory, then its "
                 "holder is\nSIGKILLed and its memory is reclaimed.";
  spec.default_duration = 2;
  spec.duration_help = "how long the trainer holds its memory before releasing part of it";
  spec.simulate_help = "accepted, like every demo's; this one never uses a GPU";
  const demo::cli_options cli = demo::parse_cli(argc, argv, spec);
  epoch = std::chrono::milliseconds(static_cast<long long>(cli.duration_s * 1e3));
  void* p =
      ::mmap(nullptr, sizeof(stage), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("two_process_demo: mmap");
    return 1;
  }
  shared = new (p) stage;
  pid_t trainer_pid = 0, inference_pid = 0;
  int rc = 1;
  try {
    rc = run(trainer_pid, inference_pid);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "two_process_demo: FAILED: %s\n", e.what());
  }
  for (pid_t pid : {trainer_pid, inference_pid}) { // children left behind by a failure
    if (pid <= 0) continue;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  // The table stays in /dev/shm after its sessions leave; remove it (never while a session lives).
  try {
    gpushare::session_options o;
    o.domain = domain;
    (void)gpushare::table::remove(key, o);
  } catch (const gpushare::error& e) {
    std::fprintf(stderr, "two_process_demo: could not remove the table: %s\n", e.what());
  }
  return rc;
}
