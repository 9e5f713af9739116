// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the simulator tests: a fresh simulated device state per test, and the probe
// process (probe.cpp) started with an environment of the test's choosing.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../support/process.hpp"

namespace simtest {

/// A simulated device state (CUDASIM_STATE) no other test uses, removed at the end. Setting it
/// in this process only works before the process's first CUDA call: each CTest test is a
/// process of its own, and a test that needs this process on a fresh state calls this first.
class fresh_state {
public:
  explicit fresh_state(const char* what) {
    static std::atomic<int> counter{0};
    name_ = std::string("cudasim-test-") + what + "-" + std::to_string(::getpid()) + "-" +
            std::to_string(counter++);
    ::shm_unlink(("/" + name_).c_str());
  }
  ~fresh_state() { ::shm_unlink(("/" + name_).c_str()); }
  fresh_state(const fresh_state&) = delete;
  fresh_state& operator=(const fresh_state&) = delete;
  const std::string& name() const { return name_; }
  /// Makes this process use the state (before its first CUDA call).
  void use_here() const { ::setenv("CUDASIM_STATE", name_.c_str(), 1); }

private:
  std::string name_;
};

using env_list = std::vector<std::pair<std::string, std::string>>;

/// A probe process; stdout (and stderr, with `with_stderr`) and stdin on pipes (the one process
/// runner, tests/support/process.hpp).
class probe : public test::child_process {
public:
  probe(const std::vector<std::string>& args, const env_list& env, bool with_stderr = false)
      : child_process(command(args), options(env, with_stderr)) {}

  /// Reads key=value lines until `key` has been printed (or the probe ended, or 60 s passed).
  /// Returns everything read so far.
  const std::map<std::string, std::string>& until(const std::string& key) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!values_.count(key)) {
      const auto nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        const std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        const auto eq = line.find('=');
        if (eq != std::string::npos) values_[line.substr(0, eq)] = line.substr(eq + 1);
        continue;
      }
      if (read_until(end) != read_result::more) break;
    }
    return values_;
  }
  /// Runs to the end: all its values.
  const std::map<std::string, std::string>& result() {
    until("done");
    close_stdin();
    wait();
    return values_;
  }
  /// Everything it wrote so far (read by until() and result()).
  const std::string& text() const { return text_; }

private:
  static std::vector<std::string> command(const std::vector<std::string>& args) {
    std::vector<std::string> argv{std::string(GPUSHARE_HELPER_DIR) +
                                  "/gpushare_helper_cudasim_probe"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  static test::process_options options(const env_list& env, bool with_stderr) {
    test::process_options o;
    for (const auto& [k, v] : env) o.env.push_back(k + "=" + v);
    o.err = with_stderr ? test::stderr_to::stdout_pipe : test::stderr_to::inherited;
    o.stdin_pipe = true;
    return o;
  }

  std::map<std::string, std::string> values_;
};

inline std::uint64_t unix_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

} // namespace simtest
