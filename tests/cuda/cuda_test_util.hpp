// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the CUDA tests: whether a GPU is here (else the test prints the skip marker
// CTest looks for), a private domain per test, helper processes started with fork + exec (a
// CUDA context does not survive a bare fork), a test case run again in a child process with an
// environment of its own, and a gate that blocks a stream.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <cudasim/cudasim.h>
#include <gpushare/cuda.hpp>

#include "../support/process.hpp"

extern char** environ;

namespace cutest {

/// Whether this process sees a usable GPU; if not, `why` says CUDA's reason.
inline bool gpu_available(std::string* why = nullptr) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = e != cudaSuccess ? cudaGetErrorName(e) : "0 devices";
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

/// Without a GPU: print the marker CTest turns into "skipped" (SKIP_REGULAR_EXPRESSION) and
/// leave the test case.
#define CUTEST_REQUIRE_GPU()                                                                       \
  do {                                                                                             \
    std::string why_;                                                                              \
    if (!cutest::gpu_available(&why_)) {                                                           \
      std::printf("GPUSHARE_SKIP: no CUDA device (%s)\n", why_.c_str());                           \
      std::fflush(stdout);                                                                         \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

/// For checks of what device code computes (Thrust results): they need a real GPU, so on the
/// simulated runtime (docs/cudasim.md), which runs no device code, the test is skipped.
#define CUTEST_REQUIRE_DEVICE_CODE()                                                               \
  do {                                                                                             \
    CUTEST_REQUIRE_GPU();                                                                          \
    if (cudasim::active()) {                                                                       \
      std::printf("GPUSHARE_SKIP: device code does not run on the simulated CUDA runtime\n");      \
      std::fflush(stdout);                                                                         \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

/// For tests that need the simulated runtime's fault injection or counters: on a real runtime
/// the test is skipped.
#define CUTEST_REQUIRE_CUDASIM()                                                                   \
  do {                                                                                             \
    CUTEST_REQUIRE_GPU();                                                                          \
    if (!cudasim::active()) {                                                                      \
      std::printf("GPUSHARE_SKIP: needs the simulated runtime's fault injection or counters\n");   \
      std::fflush(stdout);                                                                         \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

/// A host function in a stream that blocks the stream until release(): work that waits on
/// something outside the GPU (another process's flag, an IPC event).
struct gate {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  static void CUDART_CB wait(void* self) {
    auto* g = static_cast<gate*>(self);
    std::unique_lock lock(g->m);
    g->cv.wait(lock, [g] { return g->open; });
  }
  void release() {
    {
      std::lock_guard lock(m);
      open = true;
    }
    cv.notify_all();
  }
};

/// Runs test case `name` of this program again in a child process with `env` added (and
/// GPUSHARE_TEST_CHILD=1, which the test checks to play the child's part); its exit status (-1
/// if it could not be started). For settings CUDA reads once per process (cudasim's fault
/// injection).
inline int run_in_child(const std::string& name,
                        const std::vector<std::pair<std::string, std::string>>& env) {
  std::vector<std::pair<std::string, std::string>> all = env;
  all.emplace_back("GPUSHARE_TEST_CHILD", "1");
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    for (const auto& [k, v] : all) ::setenv(k.c_str(), v.c_str(), 1);
    const std::string filter = "--test-case=" + name;
    ::execl("/proc/self/exe", "cuda-test", filter.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// Whether this process is the child run_in_child started.
inline bool in_child() { return std::getenv("GPUSHARE_TEST_CHILD") != nullptr; }

/// Device options that charge no context overhead (the tests count their own bytes exactly).
inline gpushare::cuda::device_options no_overhead() {
  gpushare::cuda::device_options d;
  d.context_overhead = 0;
  return d;
}

/// A stream for one test (non-blocking unless told otherwise), destroyed at the end.
struct stream {
  cudaStream_t s = nullptr;
  explicit stream(unsigned flags = cudaStreamNonBlocking) {
    if (cudaStreamCreateWithFlags(&s, flags) != cudaSuccess)
      throw std::runtime_error("cudaStreamCreateWithFlags failed");
  }
  ~stream() { cudaStreamDestroy(s); }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
};

/// A domain no other test or run uses; removes its table for GPU 0 at the end.
class private_domain {
public:
  explicit private_domain(const char* what) {
    static std::atomic<int> counter{0};
    name_ = std::string("cu") + what + std::to_string(::getpid() % 100000) + "x" +
            std::to_string(counter++);
  }
  ~private_domain() {
    if (uuid_.empty()) return;
    ::shm_unlink(gpushare::table_name(name_, uuid_, gpushare::table_access::user).c_str());
  }
  private_domain(const private_domain&) = delete;
  private_domain& operator=(const private_domain&) = delete;

  const std::string& name() const { return name_; }
  /// Remembers the GPU whose table to remove at the end.
  void uses(const std::string& uuid) { uuid_ = uuid; }
  gpushare::session_options options(const std::string& session_name = "test") {
    gpushare::session_options o;
    o.domain = name_;
    o.name = session_name;
    return o;
  }
  /// The same for a session of priority class `priority`.
  gpushare::session_options options(const std::string& session_name, int priority) {
    gpushare::session_options o = options(session_name);
    o.priority = priority;
    return o;
  }

private:
  std::string name_, uuid_;
};

/// A helper process (tests/cuda/helpers/cuda_worker) with its stdout on a pipe (the one process
/// runner, tests/support/process.hpp).
class helper : public test::child_process {
public:
  helper(const std::vector<std::string>& args,
         const std::vector<std::pair<std::string, std::string>>& env = {})
      : child_process(command(args), options(env)) {}

private:
  static std::vector<std::string> command(const std::vector<std::string>& args) {
    std::vector<std::string> argv{std::string(GPUSHARE_HELPER_DIR) +
                                  "/gpushare_helper_cuda_worker"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  static test::process_options
  options(const std::vector<std::pair<std::string, std::string>>& env) {
    test::process_options o;
    for (const auto& [k, v] : env) o.env.push_back(k + "=" + v);
    o.err = test::stderr_to::inherited;
    return o;
  }
};

inline std::uint64_t unix_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

} // namespace cutest
