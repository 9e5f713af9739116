// SPDX-License-Identifier: Apache-2.0
// Worker processes for the demos: shared memory that forked children write their results into,
// a start gate, and forking and reaping children. The parent never touches CUDA: each child that
// uses the GPU initialises CUDA itself (a CUDA context does not survive fork).
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "conditions.hpp"
#include "sim_device.hpp"

namespace demo {

/// A T constructed in anonymous shared memory: forked children see and change the same object.
template <class T> class shared {
public:
  shared() {
    void* p = ::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    p_ = new (p) T{};
  }
  ~shared() {
    p_->~T();
    ::munmap(p_, sizeof(T));
  }
  shared(const shared&) = delete;
  shared& operator=(const shared&) = delete;
  T* operator->() const { return p_; }
  T& operator*() const { return *p_; }
  T* get() const { return p_; }

private:
  T* p_ = nullptr;
};

/// Lets a phase's workers get ready (join tables, create streams) before the measured part
/// starts for all of them at once, and tells them when it ends.
struct start_gate {
  std::atomic<int> ready{0};
  std::atomic<int> go{0};
  std::atomic<int> stop{0};
  std::atomic<std::uint64_t> go_ns{0};

  /// A worker: says it is ready, then waits for the start.
  void arrive_and_wait() {
    ready.fetch_add(1);
    while (go.load() == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  bool stopping() const { return stop.load() != 0; }
};

/// The children of one phase. Destroying it kills and reaps any that are still running.
class children {
public:
  children() = default;
  children(const children&) = delete;
  children& operator=(const children&) = delete;
  ~children() {
    for (pid_t pid : pids_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }

  /// Forks a child that runs `body`; its exit status is 0 if it returned, 1 if it threw (the
  /// error is printed to stderr as "<who>: error: ...").
  void spawn(const std::string& who, const std::function<void()>& body) {
    std::fflush(stdout); // else the child would print the parent's buffered output again
    std::fflush(stderr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      // A worker must not outlive the demo (an interrupted parent, say): it dies with it.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) std::_Exit(1); // the parent died before prctl
      int rc = 0;
      try {
        body(); // everything the child holds (sessions, memory) is released before _Exit
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: error: %s\n", who.c_str(), e.what());
        rc = 1;
      }
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(rc);
    }
    pids_.push_back(pid);
    names_.push_back(who);
  }

  /// The parent's side of the gate: waits until `workers` children are ready (throwing if one
  /// of them ends first: it printed why), opens the gate and returns the time it opened.
  std::uint64_t open_gate(start_gate& g, int workers) {
    const std::uint64_t deadline = now_ns() + 60'000'000'000u;
    while (g.ready.load() < workers) {
      if (any_ended()) throw std::runtime_error("a worker process ended before the start");
      if (now_ns() > deadline) throw std::runtime_error("the workers did not get ready in 60 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    g.go_ns.store(now_ns());
    g.go.store(1);
    return g.go_ns.load();
  }

  /// Waits for every child. When one fails, throws at once, naming it (the destructor then
  /// kills the others: one may be waiting for what the failed one never did).
  void wait_all() {
    while (!pids_.empty()) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, 0);
      if (pid < 0 && errno == EINTR) continue;
      if (pid < 0) break; // no children left
      const auto it = std::find(pids_.begin(), pids_.end(), pid);
      if (it == pids_.end()) continue; // not one of this phase's workers
      const auto index = static_cast<std::size_t>(it - pids_.begin());
      const std::string who = names_[index];
      pids_.erase(it);
      names_.erase(names_.begin() + static_cast<std::ptrdiff_t>(index));
      if (WIFSIGNALED(status))
        throw std::runtime_error("worker process " + who + " was killed by signal " +
                                 std::to_string(WTERMSIG(status)));
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw std::runtime_error("worker process " + who + " failed");
    }
    pids_.clear();
    names_.clear();
  }

  /// Each child's CPU time and run-queue wait so far (conditions.hpp), in the order spawned.
  /// Readable until the child is reaped, so also after it ended.
  std::vector<std::optional<cpu_sample>> cpu_samples() const {
    std::vector<std::optional<cpu_sample>> out;
    for (pid_t pid : pids_) out.push_back(read_cpu_sample(pid));
    return out;
  }

  /// Whether a child has ended (without reaping it).
  bool any_ended() const {
    for (pid_t pid : pids_) {
      siginfo_t info{};
      if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          info.si_pid != 0)
        return true;
    }
    return false;
  }

  /// A child's CPU sample taken once it had ended, and when it was seen ended.
  struct ended_sample {
    std::optional<cpu_sample> cpu; ///< nullopt: not read (it had not ended, or no schedstat)
    std::uint64_t at_ns = 0;
  };

  /// Waits, without reaping, until every child has ended, and samples each one's CPU time and
  /// run-queue wait as it ends (a child that ended keeps them until it is reaped). Stops early,
  /// leaving the rest unsampled, when a child fails: wait_all() then reports it. Polls every 2 ms.
  std::vector<ended_sample> wait_ended() const {
    std::vector<ended_sample> out(pids_.size());
    std::vector<bool> ended(pids_.size(), false);
    for (;;) {
      bool all = true;
      for (std::size_t i = 0; i < pids_.size(); ++i) {
        if (ended[i]) continue;
        siginfo_t info{};
        if (::waitid(P_PID, static_cast<id_t>(pids_[i]), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
            info.si_pid == 0) {
          all = false;
          continue;
        }
        ended[i] = true;
        out[i].cpu = read_cpu_sample(pids_[i]);
        out[i].at_ns = now_ns();
        if (info.si_code != CLD_EXITED || info.si_status != 0) return out;
      }
      if (all) return out;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

private:
  std::vector<pid_t> pids_;
  std::vector<std::string> names_;
};

} // namespace demo
