// SPDX-License-Identifier: Apache-2.0
// `gpushare run --ready-when`: when a program counts as started (a port that accepts connections,
// a line of its output that matches, a file that exists), and the start-up hold the runner takes
// before starting it and releases once it is ready, once its wait for readiness times out, or
// once it exits first. The hold is a pair of functions (readiness_hold): with
// --serialize-startup, the table's start-up lock (cli_run.hpp, startup_lock_hold).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <utility>

#include "cli_args.hpp"
#include "cli_errors.hpp"
#include "cli_format.hpp"

namespace gpushare::cli {

/// What "ready" means for a program: `--ready-when port:N | log:REGEX | file:PATH`.
struct ready_condition {
  enum class kind { port, log, file };
  kind what = kind::port;
  int port = 0;       ///< kind::port: a TCP port of 127.0.0.1
  std::string text;   ///< kind::log: the regular expression as given; kind::file: the path
  std::regex pattern; ///< kind::log: `text` compiled (ECMAScript)

  /// "port 8000 accepts connections on 127.0.0.1", "a line of its output matches /Uvicorn
  /// running/", "file /tmp/ready exists".
  std::string describe() const {
    switch (what) {
    case kind::port:
      return std::string("port ").append(std::to_string(port)) +
             " to accept connections on 127.0.0.1";
    case kind::log: return "a line of its output to match /" + text + "/";
    case kind::file: return "file " + text + " to exist";
    }
    return {};
  }
};

/// Reads `--ready-when` (`port:8000`, `log:REGEX`, `file:PATH`); usage_error naming the flag
/// for anything else, a port outside 1..65535, or a regular expression std::regex refuses.
inline ready_condition parse_ready_when(std::string_view value) {
  const auto colon = value.find(':');
  const std::string_view kind = value.substr(0, colon);
  const std::string rest =
      colon == std::string_view::npos ? std::string() : std::string(value.substr(colon + 1));
  ready_condition c;
  if (colon == std::string_view::npos || (kind != "port" && kind != "log" && kind != "file"))
    throw usage_error(std::string("--ready-when: ").append(quote(value)) +
                      " is not a condition; give port:N (a TCP port of 127.0.0.1), log:REGEX (a "
                      "line of the program's output) or file:PATH (a file that appears)");
  if (rest.empty())
    throw usage_error(std::string("--ready-when: ").append(quote(value)) +
                      std::string(" has nothing after '").append(kind) + ":'");
  if (kind == "port") {
    c.what = ready_condition::kind::port;
    c.port = static_cast<int>(parse_count("--ready-when port", rest, 1, 65535));
  } else if (kind == "log") {
    c.what = ready_condition::kind::log;
    c.text = rest;
    try {
      c.pattern = std::regex(rest, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw usage_error(std::string("--ready-when: the regular expression ").append(quote(rest)) +
                        " is invalid (ECMAScript syntax): " + e.what());
    }
  } else {
    c.what = ready_condition::kind::file;
    c.text = rest;
  }
  return c;
}

/// Whether a TCP connection to 127.0.0.1:`port` succeeds now.
inline bool port_accepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

/// Whether `path` exists now (of any type).
inline bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

/// Splits a stream of output into lines and tests each against a pattern. A line longer than
/// max_line is tested as it is then and dropped, so memory stays bounded.
class line_scanner {
public:
  static constexpr std::size_t max_line = 64 * 1024;

  /// Adds `bytes`; true when a line completed by them (or an over-long one) matches `re`.
  bool feed(std::string_view bytes, const std::regex& re) {
    bool matched = false;
    for (const char ch : bytes) {
      if (ch == '\n') {
        matched = test(re) || matched;
        continue;
      }
      partial_.push_back(ch);
      if (partial_.size() >= max_line) matched = test(re) || matched;
    }
    return matched;
  }
  /// At the end of the stream: tests the last line if it had no newline.
  bool finish(const std::regex& re) { return !partial_.empty() && test(re); }

private:
  bool test(const std::regex& re) {
    if (!partial_.empty() && partial_.back() == '\r') partial_.pop_back();
    const bool m = std::regex_search(partial_, re);
    partial_.clear();
    return m;
  }
  std::string partial_;
};

/// The start-up hold: `take` runs before the program is started, `release` once it is ready, its
/// wait timed out, or it exited first (each at most once). Empty functions hold nothing.
struct readiness_hold {
  std::function<void()> take;
  std::function<void()> release;
};

/// Watches one program for readiness from the moment it starts. The runner feeds it the program's
/// output (for log:) and calls check() whenever its loop wakes (for port: and file:, at least
/// every poll_interval_ms); it prints one line on stderr when the program is ready, when the wait
/// times out (the program keeps running), or when the program exits first.
class readiness_watch {
public:
  static constexpr int poll_interval_ms = 50;
  using clock = std::chrono::steady_clock;

  readiness_watch(ready_condition c, std::uint64_t timeout_ns, readiness_hold hold)
      : cond_(std::move(c)), timeout_ns_(timeout_ns), hold_(std::move(hold)) {}
  readiness_watch(const readiness_watch&) = delete;
  readiness_watch& operator=(const readiness_watch&) = delete;
  ~readiness_watch() { release(); }

  /// Takes the hold: call before starting the program.
  void take() {
    if (hold_.take) hold_.take();
    held_ = true;
  }
  /// The program has started: the wait for readiness begins now.
  void started() { start_ = clock::now(); }
  bool pending() const { return !done_; }
  const ready_condition& condition() const { return cond_; }

  /// Output of the program on stream `stream` (1 stdout, 2 stderr), for log:.
  void on_output(int stream, std::string_view bytes) {
    if (done_ || cond_.what != ready_condition::kind::log) return;
    if (scanners_[stream == 2 ? 1 : 0].feed(bytes, cond_.pattern)) ready();
  }
  /// One of the program's streams ended.
  void on_output_end(int stream) {
    if (done_ || cond_.what != ready_condition::kind::log) return;
    if (scanners_[stream == 2 ? 1 : 0].finish(cond_.pattern)) ready();
  }
  /// Tests port: and file: now, and the deadline of every kind.
  void check() {
    if (done_) return;
    if ((cond_.what == ready_condition::kind::port && port_accepts(cond_.port)) ||
        (cond_.what == ready_condition::kind::file && path_exists(cond_.text))) {
      ready();
      return;
    }
    if (waited_ns() >= timeout_ns_) timed_out();
  }
  /// How long the runner's loop may sleep before check() is due (-1: no need to wake).
  int poll_timeout_ms() const {
    if (done_) return -1;
    const std::uint64_t left = timeout_ns_ > waited_ns() ? timeout_ns_ - waited_ns() : 0;
    const std::uint64_t left_ms = left / 1'000'000 + 1;
    if (cond_.what == ready_condition::kind::log)
      return static_cast<int>(std::min<std::uint64_t>(left_ms, 1000));
    return static_cast<int>(std::min<std::uint64_t>(left_ms, poll_interval_ms));
  }
  /// The program exited with exit code `code` before it was ready (no-op once it was).
  void program_exited(int code) {
    if (done_) return;
    report(
        std::string("gpushare run: the program exited (exit code ").append(std::to_string(code)) +
        std::string(") before it was ready: waited ").append(duration_text(waited_ns())) + " for " +
        cond_.describe() + "\n");
  }

private:
  std::uint64_t waited_ns() const {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - start_).count());
  }
  void ready() {
    report(std::string("gpushare run: the program is ready after ")
               .append(duration_text(waited_ns())) +
           " (waited for " + cond_.describe() + ")\n");
  }
  void timed_out() {
    report(std::string("gpushare run: warning: the program is not ready after ")
               .append(format_duration(timeout_ns_)) +
           " (waited for " + cond_.describe() +
           "); it keeps running, and the start-up hold is released so that others may start\n");
  }
  void report(const std::string& line) {
    done_ = true;
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
    release();
  }
  void release() {
    if (!held_) return;
    held_ = false;
    if (hold_.release) hold_.release();
  }

  ready_condition cond_;
  std::uint64_t timeout_ns_;
  readiness_hold hold_;
  clock::time_point start_ = clock::now();
  line_scanner scanners_[2];
  bool held_ = false;
  bool done_ = false;
};

} // namespace gpushare::cli
