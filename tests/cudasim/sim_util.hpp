// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the simulator tests: a fresh simulated device state per test, and the probe
// process (probe.cpp) started with an environment of the test's choosing.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
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

extern char** environ;

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

/// A probe process; stdout (and stderr, with `with_stderr`) and stdin on pipes.
class probe {
public:
  probe(const std::vector<std::string>& args, const env_list& env, bool with_stderr = false) {
    int out[2], in[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(in, O_CLOEXEC) != 0)
      throw std::runtime_error("pipe2 failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    if (with_stderr) posix_spawn_file_actions_adddup2(&fa, out[1], STDERR_FILENO);
    posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
    const std::string path = std::string(GPUSHARE_HELPER_DIR) + "/gpushare_helper_cudasim_probe";
    std::vector<std::string> argv_s{path};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s;
    for (char** e = environ; *e; ++e) {
      const std::string kv(*e);
      bool overridden = false;
      for (const auto& [k, v] : env) overridden |= kv.rfind(k + "=", 0) == 0;
      if (!overridden) env_s.push_back(kv);
    }
    for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    const int rc = posix_spawn(&pid_, path.c_str(), &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    ::close(out[1]);
    ::close(in[0]);
    out_ = out[0];
    in_ = in[1];
    if (rc != 0) throw std::runtime_error("cannot start " + path);
  }
  ~probe() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      wait();
    }
    ::close(out_);
    if (in_ >= 0) ::close(in_);
  }
  probe(const probe&) = delete;
  probe& operator=(const probe&) = delete;

  pid_t pid() const { return pid_; }

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
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[512];
      const ssize_t n = ::read(out_, chunk, sizeof chunk);
      if (n <= 0) break;
      buffer_.append(chunk, static_cast<std::size_t>(n));
      text_.append(chunk, static_cast<std::size_t>(n));
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
  void close_stdin() {
    if (in_ >= 0) ::close(in_);
    in_ = -1;
  }
  void kill_now() { ::kill(pid_, SIGKILL); }
  int wait() {
    if (pid_ <= 0) return status_;
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return status_;
  }

private:
  pid_t pid_ = -1;
  int out_ = -1, in_ = -1, status_ = -1;
  std::string buffer_, text_;
  std::map<std::string, std::string> values_;
};

inline std::uint64_t unix_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

} // namespace simtest
