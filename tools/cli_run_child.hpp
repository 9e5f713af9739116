// SPDX-License-Identifier: Apache-2.0
// `gpushare run`: starting the program and staying beside it until it ends. The runner blocks the
// signals it forwards and reads them from a signalfd, so that none of them ends it; the program
// gets the runner's original signal mask back, a parent-death signal (SIGKILL) so that it never
// outlives a killed runner, and, with --ready-when log:, pipes for its output, which the runner
// copies unchanged to its own stdout and stderr while it scans them.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "cli_errors.hpp"
#include "cli_run_ready.hpp"

namespace gpushare::cli {

/// The signals the runner passes on to the program.
inline constexpr int forwarded_signals[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT,
                                            SIGUSR1, SIGUSR2, SIGWINCH};

/// The signal the program gets when the runner dies (prctl PR_SET_PDEATHSIG): SIGKILL, which it
/// cannot ignore, since its budget goes back to the table with the runner's session.
inline constexpr int parent_death_signal = SIGKILL;

/// The forwarded signals, SIGCHLD and SIGPIPE blocked in the runner and read from a signalfd;
/// the mask before is what the program gets. Restores the mask when it ends.
class signal_gate {
public:
  signal_gate() {
    sigset_t set;
    ::sigemptyset(&set);
    for (const int s : forwarded_signals) ::sigaddset(&set, s);
    ::sigaddset(&set, SIGCHLD);
    ::sigaddset(&set, SIGPIPE); // a closed stdout ends a write with EPIPE, never the runner
    ::sigprocmask(SIG_BLOCK, &set, &old_);
    fd_ = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd_ < 0) {
      ::sigprocmask(SIG_SETMASK, &old_, nullptr);
      throw runtime_failure(std::string("signalfd failed: ") + std::strerror(errno));
    }
  }
  signal_gate(const signal_gate&) = delete;
  signal_gate& operator=(const signal_gate&) = delete;
  ~signal_gate() {
    ::close(fd_);
    ::sigprocmask(SIG_SETMASK, &old_, nullptr);
  }
  int fd() const { return fd_; }
  const sigset_t& original_mask() const { return old_; }

private:
  sigset_t old_{};
  int fd_ = -1;
};

/// A started program: its pid and, when its output is captured, the read ends of its pipes.
struct started_program {
  pid_t pid = -1;
  int out = -1, err = -1;
};

/// Why the program could not be started: errno of execvp, and the exit code that says so (127:
/// not found, 126: found but not executable), as shells do.
struct exec_failure {
  int error = 0;
  int code() const { return error == ENOENT || error == ENOTDIR ? 127 : 126; }
  std::string text(const std::string& program) const {
    if (code() == 127)
      return std::string("cannot run ").append(quote(program)) +
             (program.find('/') == std::string::npos ? ": command not found (searched PATH)"
                                                     : ": no such file");
    return std::string("cannot run ").append(quote(program)) + ": " + std::strerror(error);
  }
};

namespace run_detail {

/// In the forked child, before exec: only async-signal-safe calls. Never returns.
[[noreturn]] inline void exec_child(char* const* argv, char* const* envp, const sigset_t& mask,
                                    pid_t runner, int report_fd, int out_fd, int err_fd) {
  // Dies with the runner; if the runner died before prctl, getppid() is no longer the runner.
  if (::prctl(PR_SET_PDEATHSIG, parent_death_signal) != 0 || ::getppid() != runner) ::_exit(125);
  if (out_fd >= 0 && ::dup2(out_fd, STDOUT_FILENO) < 0) ::_exit(125);
  if (err_fd >= 0 && ::dup2(err_fd, STDERR_FILENO) < 0) ::_exit(125);
  ::sigprocmask(SIG_SETMASK, &mask, nullptr);
  ::execvpe(argv[0], argv, envp);
  const int e = errno;
  [[maybe_unused]] const auto n = ::write(report_fd, &e, sizeof e);
  ::_exit(e == ENOENT || e == ENOTDIR ? 127 : 126);
}

inline void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

} // namespace run_detail

/// Starts `command` with environment `env` ("NAME=value"), the signal mask `mask`, and with
/// `capture` its stdout and stderr on pipes. Returns the program, or the reason exec failed (the
/// child is reaped then).
inline std::pair<started_program, std::optional<exec_failure>>
start_program(const std::vector<std::string>& command, const std::vector<std::string>& env,
              const sigset_t& mask, bool capture) {
  std::vector<std::string> words = command, vars = env;
  std::vector<char*> argv, envp;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  for (auto& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  int report[2], out[2] = {-1, -1}, err[2] = {-1, -1};
  if (::pipe2(report, O_CLOEXEC) != 0 ||
      (capture && (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)))
    throw runtime_failure(std::string("pipe2 failed: ") + std::strerror(errno));
  const pid_t runner = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw runtime_failure(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0)
    run_detail::exec_child(argv.data(), envp.data(), mask, runner, report[1], out[1], err[1]);
  run_detail::close_fd(report[1]);
  run_detail::close_fd(out[1]);
  run_detail::close_fd(err[1]);
  int e = 0;
  ssize_t n;
  while ((n = ::read(report[0], &e, sizeof e)) < 0 && errno == EINTR) {
  }
  run_detail::close_fd(report[0]);
  if (n != static_cast<ssize_t>(sizeof e)) return {{pid, out[0], err[0]}, std::nullopt};
  run_detail::close_fd(out[0]);
  run_detail::close_fd(err[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return {{}, exec_failure{e}};
}

/// An exit status as a shell reports it: the exit code, or 128 + the signal that killed it.
inline int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 125;
}

/// Stays beside a started program until it ends: forwards signals, copies its output (when
/// captured) and feeds it to `watch`, checks `watch` for readiness. Returns the program's exit
/// code (128 + N when signal N killed it).
class supervisor {
public:
  supervisor(const signal_gate& gate, started_program p, readiness_watch* watch)
      : sigfd_(gate.fd()), p_(p), watch_(watch) {}
  supervisor(const supervisor&) = delete;
  supervisor& operator=(const supervisor&) = delete;
  ~supervisor() {
    run_detail::close_fd(p_.out);
    run_detail::close_fd(p_.err);
  }

  int run() {
    while (!status_) {
      pollfd fds[3] = {{sigfd_, POLLIN, 0}, {p_.out, POLLIN, 0}, {p_.err, POLLIN, 0}};
      const int timeout = watch_ ? watch_->poll_timeout_ms() : -1;
      if (::poll(fds, 3, timeout) < 0 && errno != EINTR)
        throw runtime_failure(std::string("poll failed: ") + std::strerror(errno));
      if (fds[0].revents != 0) read_signals();
      if (fds[1].revents != 0) pump(p_.out, 1);
      if (fds[2].revents != 0) pump(p_.err, 2);
      if (watch_) watch_->check();
    }
    drain(); // what the program wrote just before it ended
    const int code = exit_code_of(*status_);
    if (watch_) watch_->program_exited(code);
    return code;
  }

private:
  /// Forwards each signal read, unless the kernel sent it to the terminal's foreground process
  /// group (Ctrl-C, a hangup, a resized window): the program, in that group too, has it already.
  void read_signals() {
    signalfd_siginfo si;
    while (::read(sigfd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
      const int sig = static_cast<int>(si.ssi_signo);
      if (sig == SIGCHLD) {
        reap();
      } else if (sig != SIGPIPE && si.ssi_code != SI_KERNEL && !status_) {
        ::kill(p_.pid, sig);
      }
    }
    reap(); // a SIGCHLD merged into one already read is not lost
  }
  void reap() {
    int status = 0;
    if (!status_ && ::waitpid(p_.pid, &status, WNOHANG) == p_.pid) status_ = status;
  }
  /// Copies what is readable on `fd` to the runner's stream `stream`; closes it at its end.
  void pump(int& fd, int stream) {
    char buf[65536];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
      run_detail::close_fd(fd);
      if (watch_) watch_->on_output_end(stream);
      return;
    }
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(stream, buf + done, static_cast<std::size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break; // the runner's stream is closed: the output is dropped, still scanned
      done += w;
    }
    if (watch_) watch_->on_output(stream, std::string_view(buf, static_cast<std::size_t>(n)));
  }
  /// After the program ended: copies what is left in its pipes without waiting for a process it
  /// started that may hold them open.
  void drain() {
    for (auto [fd, stream] : {std::pair<int*, int>{&p_.out, 1}, {&p_.err, 2}}) {
      if (*fd < 0) continue;
      ::fcntl(*fd, F_SETFL, ::fcntl(*fd, F_GETFL) | O_NONBLOCK);
      while (*fd >= 0) {
        pollfd f{*fd, POLLIN, 0};
        if (::poll(&f, 1, 0) <= 0) break;
        pump(*fd, stream);
      }
    }
  }

  int sigfd_;
  started_program p_;
  readiness_watch* watch_;
  std::optional<int> status_;
};

} // namespace gpushare::cli
