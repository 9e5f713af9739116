// SPDX-License-Identifier: Apache-2.0
// The demos' progress line (harness/progress.hpp), end to end: showcase runs briefly in simulated
// mode under a pseudo-terminal (forkpty), where it must draw "showcase: [1/2] QoS, phase 1/4 ·
// ... left" rewritten with "\r"; with --quiet on the terminal, and with its output piped, it must
// write no progress, no "\r" and no escape sequence. On a narrow terminal the line is cut to fit.
#include <doctest/doctest.h>

#include "test_util.hpp"

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

const std::string showcase = std::string(GPUSHARE_EXAMPLES_DIR) + "/showcase";

struct pty_run {
  int exit_code = -1;
  std::string output; ///< what the demo wrote to the terminal, stdout and stderr together
};

/// Runs `program` (showcase unless named) with `args` on a new pseudo-terminal `columns` wide;
/// gives up after 120 s.
pty_run run_on_pty(const std::vector<std::string>& args, unsigned short columns,
                   const std::string& program = showcase) {
  winsize ws{};
  ws.ws_row = 24;
  ws.ws_col = columns;
  int master = -1;
  const pid_t pid = forkpty(&master, nullptr, nullptr, &ws);
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::vector<char*> argv{const_cast<char*>(program.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::unsetenv("GPUSHARE_NO_PROGRESS");
    ::execv(program.c_str(), argv.data());
    ::_exit(127);
  }
  pty_run r;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  char buf[4096];
  while (std::chrono::steady_clock::now() < give_up) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 500) <= 0) continue;
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n <= 0) break; // EIO: the demo and its workers closed the terminal
    r.output.append(buf, static_cast<std::size_t>(n));
  }
  int status = 0;
  if (std::chrono::steady_clock::now() >= give_up) ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  ::close(master);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

const std::string dot = "\xC2\xB7";

} // namespace

TEST_CASE("demo progress: showcase draws its progress line on a terminal") {
  const pty_run r = run_on_pty({"--duration", "2", "--simulate"}, 200);
  MESSAGE("output on the terminal:\n" << r.output);
  CHECK(r.exit_code == 0);
  CHECK(has(r.output, "\rshowcase: [1/2] QoS, phase 1/4 " + dot));
  CHECK(has(r.output, "\rshowcase: [2/2] fair share, phase 3/3 " + dot));
  CHECK(has(r.output, " left\x1b[K"));
  CHECK(has(r.output, "\r\x1b[K")); // erased before the results and at the end
  CHECK(has(r.output, "Summary ("));
  // The results are never printed into a drawn line: each drawn line is followed by "\r" (a
  // redraw, or the erase before the demo prints again).
  std::size_t drawn = 0;
  for (std::size_t at = r.output.find(" left\x1b[K"); at != std::string::npos;
       at = r.output.find(" left\x1b[K", at + 1)) {
    const std::size_t next = at + std::string(" left\x1b[K").size();
    CHECK_MESSAGE(r.output.compare(next, 1, "\r") == 0,
                  "after a drawn line: " << r.output.substr(next, 40));
    ++drawn;
  }
  CHECK(drawn > 2);
}

TEST_CASE("demo progress: the line is cut to a narrow terminal's width") {
  const pty_run r = run_on_pty({"--duration", "2", "--simulate"}, 30);
  CHECK(r.exit_code == 0);
  // Each drawn line: "\r" + text + "\x1b[K", the text at most 29 columns.
  std::size_t drawn = 0;
  for (std::size_t at = r.output.find("\rshowcase: "); at != std::string::npos;
       at = r.output.find("\rshowcase: ", at + 1)) {
    const std::size_t end = r.output.find("\x1b[K", at);
    REQUIRE(end != std::string::npos);
    const std::string text = r.output.substr(at + 1, end - at - 1);
    std::size_t columns = 0;
    for (const char c : text)
      if ((static_cast<unsigned char>(c) & 0xC0U) != 0x80U) ++columns;
    CHECK_MESSAGE(columns <= 29, "drawn: " << text);
    ++drawn;
  }
  CHECK(drawn > 0);
}

TEST_CASE("demo progress: --quiet on a terminal and piped output show no progress") {
  const pty_run quiet = run_on_pty({"--duration", "2", "--simulate", "--quiet"}, 200);
  CHECK(quiet.exit_code == 0);
  CHECK(has(quiet.output, "Summary ("));
  CHECK_FALSE(has(quiet.output, "\x1b"));
  CHECK_FALSE(has(quiet.output, " left"));
  // The terminal turns "\n" into "\r\n"; any other "\r" would be a drawn line.
  for (std::size_t at = quiet.output.find('\r'); at != std::string::npos;
       at = quiet.output.find('\r', at + 1))
    CHECK(quiet.output.compare(at, 2, "\r\n") == 0);

  const test::command_result piped = test::run_command(showcase + " --duration 2 --simulate 2>&1");
  CHECK(piped.exit_code == 0);
  CHECK(has(piped.output, "Summary ("));
  CHECK(has(piped.output, "\n[2/2] "));
  CHECK_FALSE(has(piped.output, "\r"));
  CHECK_FALSE(has(piped.output, "\x1b"));
  CHECK_FALSE(has(piped.output, dot));
}

#ifdef GPUSHARE_BENCH_GPU_PATH
TEST_CASE("bench progress: gpushare_bench_gpu draws scenario, repeat and time left on a terminal "
          "and nothing with --quiet") {
  const std::vector<std::string> args = {"--simulate",   "--quick",   "--scenarios",
                                         "share,memory", "--repeats", "1"};
  const pty_run r = run_on_pty(args, 200, GPUSHARE_BENCH_GPU_PATH);
  CAPTURE(r.output);
  CHECK(r.exit_code == 0);
  CHECK(has(r.output, "scenario 1/2 share " + dot + " repeat 1/1 " + dot));
  CHECK(has(r.output, "scenario 2/2 memory " + dot + " repeat 1/1 " + dot));
  CHECK(has(r.output, " left"));
  CHECK(has(r.output, "\r\x1b[K")); // erased before the results
  CHECK(has(r.output, "[memory, repeat 1,"));
  std::vector<std::string> quiet_args = args;
  quiet_args.push_back("--quiet");
  const pty_run q = run_on_pty(quiet_args, 200, GPUSHARE_BENCH_GPU_PATH);
  CAPTURE(q.output);
  CHECK(q.exit_code == 0);
  CHECK(has(q.output, "[memory, repeat 1,"));
  CHECK_FALSE(has(q.output, "\x1b["));
  CHECK_FALSE(has(q.output, "scenario 1/2"));
}
#endif
