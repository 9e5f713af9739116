// SPDX-License-Identifier: Apache-2.0
// `gpushare run` as a user runs it: the budget held in the table for the program's lifetime, the
// variables passed to it, exit codes passed through, signals forwarded, a killed program or a
// killed runner cleaned up, the wait for a budget that is taken, and --ready-when of each kind.
// The programs are /bin/sh scripts; every table is in a domain of the test's own.
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli_test_util.hpp"
#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;
using namespace cli_test;

namespace {

constexpr std::uint64_t MiB = 1ull << 20;

/// A domain and a key of the test's own, and the runner's environment: tables created with a
/// capacity of 1 GiB.
struct run_fixture {
  test_domain d;
  std::string key = std::string("GPU-run-").append(std::to_string(::getpid()));
  env_vars env() const { return {"GPUSHARE_DOMAIN=" + d.name(), "GPUSHARE_CAPACITY=1GiB"}; }
  cli_result run(std::vector<std::string> args) const { return run_cli_env(env(), args); }
  running_cli start(std::vector<std::string> args) const {
    return start_cli(args, keep_uid, env());
  }
  std::vector<std::string> with(std::vector<std::string> flags,
                                const std::vector<std::string>& command) const {
    std::vector<std::string> out = {"run", "--key", key};
    out.insert(out.end(), flags.begin(), flags.end());
    out.push_back("--");
    out.insert(out.end(), command.begin(), command.end());
    return out;
  }
  /// The live sessions of the table now (none if it does not exist).
  std::vector<session_info> sessions() const {
    try {
      return table::open(key, open_mode::open_existing, d.options("observer")).snapshot().sessions;
    } catch (const gpushare::error& e) {
      if (e.code() != errc::no_such_table) throw;
      return {};
    }
  }
  std::string file(const std::string& what) const {
    return "/tmp/gpushare-mp-run-" + d.name() + "-" + what;
  }
};

/// The next line from `fd` (without its newline), or "" after `timeout`.
std::string read_line(int fd, std::chrono::milliseconds timeout = 20s) {
  std::string line;
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char c;
    if (::read(fd, &c, 1) != 1) break;
    if (c == '\n') return line;
    line += c;
  }
  return line;
}

/// Whether process `pid` is gone (or a zombie nobody has reaped yet).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  std::ifstream stat(std::string("/proc/").append(std::to_string(pid)) + "/stat");
  std::string all;
  std::getline(stat, all);
  const auto close = all.rfind(')');
  return close == std::string::npos || all.substr(close + 2, 1) == "Z";
}

template <class Pred> bool eventually(Pred pred, std::chrono::milliseconds limit = 20s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

/// A TCP port of 127.0.0.1 that nothing listens on (the kernel gave it, and it was closed).
int unused_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

} // namespace

TEST_CASE("run: the budget is held in the table while the program runs and then returned") {
  run_fixture f;
  const std::string go = f.file("go");
  running_cli r = f.start(f.with({"--memory", "256MiB", "--name", "trainer"},
                                 {"sh", "-c", "while [ ! -e " + go + " ]; do sleep 0.02; done"}));
  REQUIRE(eventually([&] {
    const auto now = f.sessions();
    return now.size() == 1 && now[0].reserved > 0; // joined, then reserved
  }));
  const session_info s = f.sessions().at(0);
  CHECK(s.name == "trainer");
  CHECK(s.reserved == 256 * MiB);
  CHECK(s.memory_limit == 256 * MiB);
  CHECK(s.pid == r.pid);
  std::ofstream(go).put('x');
  const cli_result res = finish_cli(r);
  ::unlink(go.c_str());
  CHECK(res.code == 0);
  CHECK(f.sessions().empty());
}

TEST_CASE("run: exit codes pass through and 127 or 126 when the command cannot run") {
  run_fixture f;
  for (const int code : {0, 3, 42}) {
    CAPTURE(code);
    const cli_result r = f.run(f.with(
        {"--memory", "1MiB"}, {"sh", "-c", std::string("exit ").append(std::to_string(code))}));
    CHECK(r.code == code);
  }
  const cli_result missing = f.run(f.with({"--memory", "1MiB"}, {"gpushare-no-such-command"}));
  CHECK(missing.code == 127);
  CHECK(contains(missing.err, "command not found"));
  const cli_result not_exec = f.run(f.with({"--memory", "1MiB"}, {"/dev/null"}));
  CHECK(not_exec.code == 126);
  CHECK(contains(not_exec.err, "/dev/null"));
  CHECK(f.sessions().empty());
}

TEST_CASE("run: the variables the program gets") {
  run_fixture f;
  const std::string show =
      "echo \"$GPUSHARE_KEY|$GPUSHARE_MEMORY_LIMIT|$GPUSHARE_PRIORITY|$PYTORCH_ALLOC_CONF\"";
  const cli_result plain = f.run(f.with({"--memory", "256MiB", "--pytorch"}, {"sh", "-c", show}));
  CHECK(plain.code == 0);
  // The runner holds the budget: no GPUSHARE_* for the program; the fraction of the capacity.
  CHECK(plain.out == "|||per_process_memory_fraction:0.250000\n");
  const cli_result lib = f.run(f.with({"--memory", "512MiB", "--priority", "high", "--library",
                                       "--pytorch", "--card-memory", "2GiB"},
                                      {"sh", "-c", show}));
  CHECK(lib.code == 0);
  CHECK(lib.out == f.key + "|512MiB|high|per_process_memory_fraction:0.250000\n");
  CHECK(f.sessions().empty()); // --library reserves nothing itself
  env_vars merged = f.env();
  merged.push_back("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True");
  const cli_result m =
      run_cli_env(merged, f.with({"--memory", "512MiB", "--pytorch"},
                                 {"sh", "-c", "echo \"$PYTORCH_CUDA_ALLOC_CONF\""}));
  CHECK(m.out == "expandable_segments:True,per_process_memory_fraction:0.500000\n");
}

TEST_CASE("run: --dry-run prints the variables and the command and runs nothing") {
  run_fixture f;
  const cli_result r = f.run(
      f.with({"--memory", "1GiB", "--library", "--pytorch", "--card-memory", "4GiB", "--dry-run"},
             {"sh", "-c", "touch x"}));
  CHECK(r.code == 0);
  CHECK(contains(r.out, "env GPUSHARE_KEY=" + f.key + "\n"));
  CHECK(contains(r.out, "env GPUSHARE_MEMORY_LIMIT=1GiB\n"));
  CHECK(contains(r.out, "env PYTORCH_ALLOC_CONF=per_process_memory_fraction:0.250000\n"));
  CHECK(contains(r.out, "exec sh -c 'touch x'\n"));
  CHECK(f.sessions().empty());
  // Without --library: the runner would hold the budget, in a table it would create with
  // GPUSHARE_CAPACITY (1 GiB), whose capacity gives the fraction; nothing is created.
  const cli_result held = f.run(f.with({"--memory", "256MiB", "--pytorch", "--dry-run"}, {"true"}));
  CHECK(held.code == 0);
  CHECK(contains(held.out, "# gpushare run reserves 256MiB in table \"" + f.key + "\""));
  CHECK(contains(held.out, "per_process_memory_fraction 0.250000 = 256.00 MiB of 1.00 GiB"));
  CHECK(contains(held.out, "env PYTORCH_ALLOC_CONF=per_process_memory_fraction:0.250000\n"));
  CHECK(!contains(held.out, "GPUSHARE_KEY"));
  CHECK(!f.d.exists(f.key));
}

TEST_CASE("run: a program killed by SIGKILL gives 137 and its session leaves the table") {
  run_fixture f;
  const cli_result r = f.run(f.with({"--memory", "64MiB"}, {"sh", "-c", "kill -KILL $$"}));
  CHECK(r.code == 128 + SIGKILL);
  CHECK(f.sessions().empty());
}

TEST_CASE("run: SIGTERM to the runner reaches the program whose exit code comes back") {
  run_fixture f;
  running_cli r =
      f.start(f.with({"--memory", "64MiB"},
                     {"sh", "-c", "trap 'exit 7' TERM; echo ready; while :; do sleep 0.02; done"}));
  REQUIRE(read_line(r.out) == "ready");
  ::kill(r.pid, SIGTERM);
  const cli_result res = finish_cli(r);
  CHECK(res.code == 7);
  CHECK(f.sessions().empty());
}

TEST_CASE("run: every forwarded signal reaches the program and none ends the runner") {
  run_fixture f;
  std::string script;
  for (const char* name : {"INT", "HUP", "QUIT", "USR1", "USR2", "WINCH"})
    script += std::string("trap 'echo ") + name + "' " + name + "; ";
  script += "trap 'exit 9' TERM; echo ready; while :; do sleep 0.02; done";
  running_cli r = f.start(f.with({"--memory", "64MiB"}, {"sh", "-c", script}));
  REQUIRE(read_line(r.out) == "ready");
  const std::pair<int, const char*> signals[] = {{SIGINT, "INT"},   {SIGHUP, "HUP"},
                                                 {SIGQUIT, "QUIT"}, {SIGUSR1, "USR1"},
                                                 {SIGUSR2, "USR2"}, {SIGWINCH, "WINCH"}};
  for (const auto& [sig, name] : signals) {
    CAPTURE(name);
    ::kill(r.pid, sig);
    CHECK(read_line(r.out) == name);
  }
  ::kill(r.pid, SIGTERM);
  CHECK(finish_cli(r).code == 9);
}

TEST_CASE("run: a runner killed by SIGKILL takes its program along and its budget is reclaimed") {
  run_fixture f;
  running_cli r = f.start(f.with({"--memory", "1GiB"}, {"sh", "-c", "echo $$; exec sleep 600"}));
  const std::string line = read_line(r.out);
  REQUIRE(!line.empty());
  const pid_t program = static_cast<pid_t>(std::stol(line));
  REQUIRE(f.sessions().size() == 1);
  ::kill(r.pid, SIGKILL);
  CHECK(finish_cli(r).code == 128 + SIGKILL);
  CHECK(eventually([&] { return process_gone(program); }));
  // The whole capacity fits again once the dead runner's session is reclaimed.
  session s(f.key, f.d.options("after"));
  CHECK(s.reserve(1ull << 30, 20s).size() == 1ull << 30);
}

TEST_CASE(
    "run: a budget taken by another session times out naming who holds it with exit code 125") {
  run_fixture f;
  const pid_t holder = spawn_holder(f.d, f.key, "holder", 900 * MiB, 1ull << 30);
  const std::string marker = f.file("started");
  const cli_result r =
      f.run(f.with({"--memory", "256MiB", "--timeout", "0.3s"}, {"sh", "-c", "touch " + marker}));
  kill_holder(holder);
  CHECK(r.code == 125);
  CHECK(contains(r.err, "waiting up to 300ms"));
  CHECK(contains(r.err, "did not become available"));
  CHECK(contains(r.err, "\"holder\""));
  CHECK(contains(r.err, "the program was not started"));
  CHECK(::access(marker.c_str(), F_OK) != 0);
}

TEST_CASE("run: Ctrl-C or SIGTERM while it waits for the budget: its session leaves at once") {
  // (issue 42, B8: the runner died of the signal and its session stayed until a peer reclaimed
  // it; docs/cli.md says the budget goes back.)
  for (const int sig : {SIGINT, SIGTERM}) {
    CAPTURE(sig);
    run_fixture f;
    const pid_t holder = spawn_holder(f.d, f.key, "holder", 900 * MiB, 1ull << 30);
    const std::string marker = f.file("started");
    running_cli runner = f.start(
        f.with({"--memory", "256MiB", "--name", "runner"}, {"sh", "-c", "touch " + marker}));
    const bool waiting = test::eventually([&] {
      for (const session_info& s : f.sessions())
        if (s.name == "runner" && s.waiting_for_memory > 0) return true;
      return false;
    });
    CHECK(waiting);
    ::kill(runner.pid, sig);
    const cli_result r = finish_cli(runner);
    CHECK(r.code == 128 + sig);
    CHECK(contains(r.err, std::string(sig == SIGINT ? "SIGINT" : "SIGTERM") +
                              " while waiting for the budget: the session left the table"));
    // Read without the lock, which would reclaim a dead session first: none is left.
    const table_snapshot t = table::read_unlocked(f.d.object_name(f.key));
    CHECK(t.dead_sessions.empty());
    REQUIRE(t.sessions.size() == 1);
    CHECK(t.sessions[0].name == "holder");
    CHECK(::access(marker.c_str(), F_OK) != 0);
    kill_holder(holder);
  }
}

TEST_CASE("run: bad command lines exit 2 naming the flag") {
  run_fixture f;
  const cli_result no_dash = f.run({"run", "--key", f.key, "--memory", "1GiB", "true"});
  CHECK(no_dash.code == 2);
  CHECK(contains(no_dash.err, "before '--'"));
  const cli_result no_command = f.run({"run", "--key", f.key, "--memory", "1GiB", "--"});
  CHECK(no_command.code == 2);
  CHECK(contains(no_command.err, "no command"));
  const cli_result bad_memory = f.run(f.with({"--memory", "much"}, {"true"}));
  CHECK(bad_memory.code == 2);
  CHECK(contains(bad_memory.err, "--memory"));
  const cli_result bad_regex =
      f.run(f.with({"--memory", "1MiB", "--ready-when", "log:(x"}, {"true"}));
  CHECK(bad_regex.code == 2);
  CHECK(contains(bad_regex.err, "--ready-when"));
  CHECK(f.sessions().empty());
  // The error stays on screen: the synopsis and where the rest is, not the 75-line help (issue
  // 42, B8).
  for (const cli_result* r : {&no_dash, &no_command, &bad_memory, &bad_regex}) {
    CHECK(std::count(r->err.begin(), r->err.end(), '\n') <= 8);
    CHECK(contains(r->err, "Usage: gpushare run"));
    CHECK(contains(r->err, "(`gpushare run --help` shows every option)\n"));
    CHECK(!contains(r->err, "Exit codes:"));
  }
}

TEST_CASE("run: a bad GPUSHARE_* in the environment is no bad command line: 125, naming it") {
  run_fixture f;
  env_vars env = f.env();
  env.push_back("GPUSHARE_PRIORITY=urgent");
  const std::string marker = f.file("started");
  const cli_result r =
      run_cli_env(env, f.with({"--memory", "1MiB"}, {"sh", "-c", "touch " + marker}));
  CHECK(r.code == 125); // was 2, with the command line's usage
  CHECK(contains(r.err, "gpushare run: error: "));
  CHECK(contains(r.err, "GPUSHARE_PRIORITY"));
  CHECK(!contains(r.err, "Usage:"));
  CHECK(::access(marker.c_str(), F_OK) != 0);
  CHECK(f.sessions().empty());
}

TEST_CASE("run --ready-when: a log line with the output passed through unchanged") {
  run_fixture f;
  const cli_result r = f.run(
      f.with({"--memory", "1MiB", "--ready-when", "log:listening on [0-9]+$"},
             {"sh", "-c",
              "echo starting; echo warming >&2; sleep 0.1; echo listening on 8000; sleep 0.1; "
              "echo done"}));
  CHECK(r.code == 0);
  CHECK(r.out == "starting\nlistening on 8000\ndone\n");
  CHECK(contains(r.err, "warming\n"));
  CHECK(contains(r.err, "the program is ready after"));
}

TEST_CASE("run --ready-when: a file and a port") {
  run_fixture f;
  const std::string ready = f.file("ready");
  const cli_result r = f.run(f.with({"--memory", "1MiB", "--ready-when", "file:" + ready},
                                    {"sh", "-c", "sleep 0.1; touch " + ready + "; sleep 0.2"}));
  ::unlink(ready.c_str());
  CHECK(r.code == 0);
  CHECK(contains(r.err, "the program is ready after"));
  CHECK(contains(r.err, "file " + ready));
  // The test listens on the port (the program itself need not).
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  const std::string port = std::to_string(ntohs(a.sin_port));
  const cli_result p =
      f.run(f.with({"--memory", "1MiB", "--ready-when", "port:" + port}, {"sleep", "0.2"}));
  ::close(fd);
  CHECK(p.code == 0);
  CHECK(contains(p.err, "the program is ready after"));
  CHECK(contains(p.err, "port " + port));
}

TEST_CASE("run --ready-when: never ready warns at the timeout and keeps the program running") {
  run_fixture f;
  const std::string port = std::to_string(unused_port());
  const cli_result r = f.run(
      f.with({"--memory", "1MiB", "--ready-when", "port:" + port, "--startup-timeout", "0.2s"},
             {"sh", "-c", "sleep 1.5; echo still running; exit 5"}));
  CHECK(r.code == 5);
  CHECK(r.out == "still running\n");
  CHECK(contains(r.err, "is not ready after 200ms"));
  CHECK(contains(r.err, "port " + port));
  CHECK(contains(r.err, "it keeps running"));
}

TEST_CASE("run --ready-when: a program that exits before it is ready is reported") {
  run_fixture f;
  const cli_result r = f.run(f.with({"--memory", "1MiB", "--ready-when", "log:never printed"},
                                    {"sh", "-c", "echo something else; exit 4"}));
  CHECK(r.code == 4);
  CHECK(r.out == "something else\n");
  CHECK(contains(r.err, "exited (exit code 4) before it was ready"));
  CHECK(contains(r.err, "never printed"));
}

#ifdef GPUSHARE_CUDASIM_PROBE
// Where the simulated CUDA runtime and its probe are built (tests/cudasim/CMakeLists.txt).
TEST_CASE("run: a program that allocates on the simulated runtime runs with its budget held") {
  run_fixture f;
  const std::string state = "gpushare-mp-run-" + f.d.name();
  test::process_options o;
  o.env = {"GPUSHARE_DOMAIN=" + f.d.name(), "LD_LIBRARY_PATH=" GPUSHARE_CUDASIM_LIB_DIR,
           "CUDASIM_STATE=" + state, "CUDASIM_MEMORY=2GiB"};
  // The key is the simulated GPU's UUID, as a user would take it from nvidia-smi -L.
  const test::process_result devices = test::run_process({GPUSHARE_CUDASIM_PROBE, "devices"}, o);
  std::string uuid;
  for (const std::string& l : lines_of(devices.out))
    if (l.rfind("uuid0=", 0) == 0) uuid = l.substr(6);
  REQUIRE(!uuid.empty());
  f.key = uuid;
  o.env.push_back("GPUSHARE_CAPACITY=2GiB");
  o.stdin_pipe = true;
  test::running_process r =
      test::start_process({GPUSHARE_CLI_PATH, "run", "--key", uuid, "--memory", "512MiB", "--",
                           GPUSHARE_CUDASIM_PROBE, "hold", "300"},
                          o);
  CHECK(read_line(r.out) == "malloc=cudaSuccess"); // 300 MiB of the simulated GPU's memory
  CHECK(read_line(r.out) == "held=1");
  const auto during = f.sessions();
  REQUIRE(during.size() == 1);
  CHECK(during[0].name == "gpushare_helper_cudasim_probe");
  CHECK(during[0].reserved == 512 * MiB);
  ::close(r.in); // the probe exits normally once its stdin closes
  r.in = -1;
  const test::process_result res = test::finish_process(r);
  CHECK(res.code == 0);
  CHECK(f.sessions().empty());
  ::shm_unlink(("/" + state).c_str());
}
#endif
