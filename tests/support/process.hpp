// SPDX-License-Identifier: Apache-2.0
// The one way tests run a program: start it with arguments, environment changes and optionally
// another uid; read its stdout and stderr to their end and wait for it (run_process; run_command
// with /bin/sh as the program), or keep it running beside the test (child_process: the CUDA
// tests' helpers, cudasim's probe).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fork.hpp"

extern char** environ; // <unistd.h> declares it only with _GNU_SOURCE

namespace test {

/// uid for process_options::as_uid that keeps the test's own.
constexpr uid_t keep_uid = static_cast<uid_t>(-1);

/// Where a started program's stderr goes.
enum class stderr_to {
  own_pipe,    ///< a pipe of its own (running_process::err)
  stdout_pipe, ///< the stdout pipe, interleaved with stdout
  inherited,   ///< the test's own stderr
};

/// How to start a program.
struct process_options {
  std::vector<std::string> env;   ///< "NAME=value" to set; replaces an inherited NAME
  std::vector<std::string> unset; ///< names not to inherit from the test's environment
  uid_t as_uid = keep_uid;        ///< drop to this uid (and gid) before exec
  stderr_to err = stderr_to::own_pipe;
  bool stdin_pipe = false; ///< stdin from a pipe (running_process::in); else the test's own
};

/// A started program: its pid, the read ends of its stdout and stderr and the write end of its
/// stdin (-1 where not a pipe).
struct running_process {
  pid_t pid = -1;
  int out = -1, err = -1, in = -1;
};

/// What a program wrote and how it ended.
struct process_result {
  int code = -1; ///< its exit status, or 128 + the signal that killed it
  std::string out, err;
};

namespace support_detail {
inline bool named(std::string_view var, const std::string& name) {
  return var.size() > name.size() && var.substr(0, name.size()) == name && var[name.size()] == '=';
}
} // namespace support_detail

/// Starts `argv` (argv[0] is the program's path); throws std::runtime_error if it cannot.
inline running_process start_process(const std::vector<std::string>& argv,
                                     const process_options& opts = {}) {
  std::vector<std::string> words = argv;
  std::vector<char*> args;
  for (auto& w : words) args.push_back(w.data());
  args.push_back(nullptr);
  // The child's environment, built here: setenv() between fork() and exec() is not safe.
  std::vector<std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    bool drop = false;
    for (const auto& n : opts.unset) drop = drop || support_detail::named(*e, n);
    for (const auto& v : opts.env)
      drop = drop || support_detail::named(*e, v.substr(0, v.find('=')));
    if (!drop) vars.emplace_back(*e);
  }
  vars.insert(vars.end(), opts.env.begin(), opts.env.end());
  std::vector<char*> envp;
  for (auto& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  const bool own_err = opts.err == stderr_to::own_pipe;
  int out[2], err[2] = {-1, -1}, in[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0 || (own_err && ::pipe2(err, O_CLOEXEC) != 0) ||
      (opts.stdin_pipe && ::pipe2(in, O_CLOEXEC) != 0))
    throw std::runtime_error("pipe2 failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) { // only async-signal-safe calls from here to exec
    ::dup2(out[1], STDOUT_FILENO);
    if (own_err) ::dup2(err[1], STDERR_FILENO);
    if (opts.err == stderr_to::stdout_pipe) ::dup2(out[1], STDERR_FILENO);
    if (opts.stdin_pipe) ::dup2(in[0], STDIN_FILENO);
    const uid_t uid = opts.as_uid;
    if (uid != keep_uid && (::setgid(uid) != 0 || ::setuid(uid) != 0)) ::_exit(126);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  ::close(out[1]);
  if (own_err) ::close(err[1]);
  if (opts.stdin_pipe) ::close(in[0]);
  return {pid, out[0], err[0], in[1]};
}

/// Reads the program's pipes to their end, then waits for it.
inline process_result finish_process(running_process r) {
  process_result res;
  pollfd fds[2] = {{r.out, POLLIN, 0}, {r.err, POLLIN, 0}};
  std::string* sinks[2] = {&res.out, &res.err};
  int open_pipes = (r.out >= 0 ? 1 : 0) + (r.err >= 0 ? 1 : 0);
  while (open_pipes > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_pipes;
      }
    }
  }
  res.code = wait_exit(r.pid);
  return res;
}

/// Runs `argv` to its end (its stdin is the test's own).
inline process_result run_process(const std::vector<std::string>& argv,
                                  const process_options& opts = {}) {
  return finish_process(start_process(argv, opts));
}

/// What a program run through the shell printed and how it ended.
struct command_result {
  int exit_code = -1; ///< its exit status, or 128 + the signal that killed it
  std::string output; ///< what it wrote to stdout (add 2>&1 to the command for stderr too)
};

/// Runs `command` with /bin/sh and reads all its output (stderr stays the test's own).
inline command_result run_command(const std::string& command) {
  process_options opts;
  opts.err = stderr_to::inherited;
  process_result r = run_process({"/bin/sh", "-c", command}, opts);
  return {r.code, std::move(r.out)};
}

/// A program that runs beside the test (a helper the test talks to), killed and reaped at the
/// end: its stdout read line by line or up to a deadline, its stdin a pipe when asked for.
class child_process {
public:
  child_process(const std::vector<std::string>& argv, const process_options& opts)
      : p_(start_process(argv, opts)) {}
  ~child_process() {
    if (p_.pid > 0) {
      ::kill(p_.pid, SIGKILL);
      wait();
    }
    for (int fd : {p_.out, p_.err, p_.in})
      if (fd >= 0) ::close(fd);
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  pid_t pid() const { return p_.pid; }
  void kill_now() { ::kill(p_.pid, SIGKILL); }
  /// Closes its stdin (a helper that reads it to the end then exits normally).
  void close_stdin() {
    if (p_.in >= 0) ::close(p_.in);
    p_.in = -1;
  }
  /// Waits for it to end: its exit code, or 128 + signal.
  int wait() {
    if (p_.pid <= 0) return exit_;
    exit_ = wait_exit(p_.pid);
    p_.pid = -1;
    return exit_;
  }

  /// The next line of output, or what is left if the program ended, or "" if no line came by
  /// `timeout`.
  std::string read_line(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (const auto nl = buffer_.find('\n'); nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const read_result r = read_until(end);
      if (r == read_result::timed_out) return "";
      if (r == read_result::ended) {
        std::string rest = std::move(buffer_);
        buffer_.clear();
        return rest;
      }
    }
  }

protected:
  enum class read_result { more, timed_out, ended };
  /// Appends what the program writes to stdout to buffer_ (and to text_) as it comes: one read,
  /// or timed_out once `end` has passed, or ended at the end of its output.
  read_result read_until(std::chrono::steady_clock::time_point end) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return read_result::timed_out;
    pollfd p{p_.out, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return read_result::more;
    char chunk[512];
    const ssize_t n = ::read(p_.out, chunk, sizeof chunk);
    if (n <= 0) return read_result::ended;
    buffer_.append(chunk, static_cast<std::size_t>(n));
    text_.append(chunk, static_cast<std::size_t>(n));
    return read_result::more;
  }

  std::string buffer_; ///< read, not yet taken
  std::string text_;   ///< everything read

private:
  running_process p_;
  int exit_ = -1;
};

} // namespace test
