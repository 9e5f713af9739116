// SPDX-License-Identifier: Apache-2.0
// `gpushare run`'s parts that need no program: its command line, the environment it passes (the
// PyTorch fraction and its merge into an allocator configuration), and the readiness unit
// (--ready-when conditions, the line scanner, the watch and its start-up hold).
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli_run.hpp"

using namespace gpushare;
using namespace gpushare::cli;

namespace {

/// A fake environment.
env_lookup fake_env(std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::optional<run_request> parse(const std::vector<std::string>& words,
                                 std::map<std::string, std::string> env = {}) {
  return parse_run_request(words, fake_env(std::move(env)));
}

/// The message of the usage_error `words` cause ("" if none).
std::string usage_message(const std::vector<std::string>& words,
                          std::map<std::string, std::string> env = {}) {
  try {
    (void)parse(words, std::move(env));
  } catch (const usage_error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// A listening TCP socket on 127.0.0.1 at a port the kernel picks.
struct listener {
  int fd = -1;
  int port = 0;
  listener() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 4) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
  }
  ~listener() { close(); }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

/// Counts the takes and releases of a start-up hold.
struct hold_counter {
  int takes = 0, releases = 0;
  readiness_hold hold() {
    return {[this] { ++takes; }, [this] { ++releases; }};
  }
};

} // namespace

TEST_CASE("run: the command follows '--' and every flag before it is read") {
  const auto r =
      parse({"--key", "GPU-1", "--memory", "2GiB", "--priority", "high", "--share", "3", "--name",
             "vllm", "--timeout", "30s", "--", "python3", "-m", "x", "--", "--help"});
  REQUIRE(r.has_value());
  CHECK(r->key == "GPU-1");
  CHECK(r->memory == memory_amount::of_bytes(2ull << 30));
  CHECK(r->options.priority == priority::high);
  CHECK(r->options.share == 3u);
  CHECK(r->options.name == "vllm");
  CHECK(r->timeout_ns == 30'000'000'000ull);
  CHECK(r->command == std::vector<std::string>{"python3", "-m", "x", "--", "--help"});
  CHECK(!r->library);
  CHECK(!r->ready.has_value());
  CHECK(!parse({"--help"}).has_value());
}

TEST_CASE("run: the key and the budget may come from GPUSHARE_KEY and GPUSHARE_MEMORY_LIMIT") {
  const auto r = parse({"--", "/usr/bin/python3"},
                       {{"GPUSHARE_KEY", "GPU-9"}, {"GPUSHARE_MEMORY_LIMIT", "25%"}});
  REQUIRE(r.has_value());
  CHECK(r->key == "GPU-9");
  CHECK(r->memory == memory_amount::of_ppm(250'000));
  CHECK(r->options.name == "python3"); // the program's name
  CHECK(r->timeout_ns == UINT64_MAX);  // waits without end by default
}

TEST_CASE("run: bad command lines name what is wrong") {
  CHECK(has(usage_message({"--key", "k", "--memory", "1GiB", "true"}), "before '--'"));
  CHECK(has(usage_message({"--key", "k", "--memory", "1GiB"}), "no command"));
  CHECK(has(usage_message({"--key", "k", "--memory", "1GiB", "--"}), "no command after '--'"));
  CHECK(has(usage_message({"--key", "k", "--memory", "lots", "--", "true"}), "--memory:"));
  CHECK(has(usage_message({"--memory", "1GiB", "--", "true"}), "GPUSHARE_KEY"));
  CHECK(has(usage_message({"--key", "k", "--", "true"}), "--memory is missing"));
  CHECK(has(usage_message({"--key", "k", "--memory", "1GiB", "--priority", "urgent", "--", "true"}),
            "--priority:"));
  CHECK(has(usage_message({"--key", "k", "--memory", "1GiB", "--timeout", "soon", "--", "true"}),
            "--timeout"));
  CHECK(has(
      usage_message({"--key", "k", "--memory", "1GiB", "--startup-timeout", "5s", "--", "true"}),
      "needs --ready-when"));
  CHECK(has(usage_message(
                {"--key", "k", "--memory", "1GiB", "--library", "--timeout", "5s", "--", "true"}),
            "--library"));
  CHECK(has(usage_message({"--key", "k", "--memory", "1GiB", "--guarantee", "2GiB", "--", "true"}),
            "guarantee"));
  CHECK(has(usage_message({"--key", "k", "--memroy", "1GiB", "--", "true"}), "'--memory'"));
  CHECK(has(usage_message({"--key", "k", "--memory", "1GiB", "--card-memory", "0", "--", "true"}),
            "--card-memory"));
}

TEST_CASE("run: a session name from the program's path") {
  CHECK(name_from_command("/usr/bin/python3") == "python3");
  CHECK(name_from_command("vllm") == "vllm");
  CHECK(name_from_command("a b") == "a?b");
  CHECK(name_from_command("dir/") == "gpushare-run");
  CHECK(name_from_command(std::string(100, 'x')).size() == 63);
}

TEST_CASE("run: the PyTorch fraction is the budget over the card rounded down") {
  CHECK(fraction_text(20ull << 30, 80ull << 30) == "0.250000");
  CHECK(fraction_text(1, 3) == "0.333333");
  CHECK(fraction_text(1, 10'000'000) == "0.000000");
  CHECK(fraction_text(2, 3) == "0.666666");
  CHECK(fraction_text(80ull << 30, 80ull << 30) == "1.000000");
  CHECK(fraction_text(100, 80) == "1.000000");
}

TEST_CASE("run: the fraction is merged into an allocator configuration") {
  CHECK(merge_alloc_conf("", "per_process_memory_fraction", "0.5") ==
        "per_process_memory_fraction:0.5");
  CHECK(merge_alloc_conf("expandable_segments:True", "per_process_memory_fraction", "0.5") ==
        "expandable_segments:True,per_process_memory_fraction:0.5");
  CHECK(merge_alloc_conf("per_process_memory_fraction:0.9, max_split_size_mb:128",
                         "per_process_memory_fraction",
                         "0.5") == "max_split_size_mb:128,per_process_memory_fraction:0.5");
  CHECK(merge_alloc_conf("roundup_power2_divisions:[256:1,512:2],backend:native",
                         "per_process_memory_fraction", "0.25") ==
        "roundup_power2_divisions:[256:1,512:2],backend:native,per_process_memory_fraction:0.25");
  CHECK(alloc_conf_entries(" a:1 ,, b:[1,2] ") == std::vector<std::string>{"a:1", "b:[1,2]"});
}

TEST_CASE("run: the variables passed to the program") {
  run_budget b;
  b.key = "GPU-1";
  b.settings = {{"GPUSHARE_MEMORY_LIMIT", "2GiB"}, {"GPUSHARE_PRIORITY", "high"}};
  b.budget_bytes = 2ull << 30;
  b.card_total = 8ull << 30;
  // The runner holds the budget, no PyTorch: nothing is added.
  CHECK(budget_environment(b, fake_env({})).empty());
  b.library = true;
  CHECK(budget_environment(b, fake_env({})) ==
        std::vector<env_var>{{"GPUSHARE_KEY", "GPU-1"},
                             {"GPUSHARE_MEMORY_LIMIT", "2GiB"},
                             {"GPUSHARE_PRIORITY", "high"}});
  b.library = false;
  b.pytorch = true;
  CHECK(budget_environment(b, fake_env({})) ==
        std::vector<env_var>{{"PYTORCH_ALLOC_CONF", "per_process_memory_fraction:0.250000"}});
  // An older name already set gets the fraction too, merged.
  CHECK(budget_environment(b, fake_env({{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"},
                                        {"PYTORCH_ALLOC_CONF", "max_split_size_mb:64"}})) ==
        std::vector<env_var>{
            {"PYTORCH_ALLOC_CONF", "max_split_size_mb:64,per_process_memory_fraction:0.250000"},
            {"PYTORCH_CUDA_ALLOC_CONF",
             "expandable_segments:True,per_process_memory_fraction:0.250000"}});
}

TEST_CASE("run: --dry-run text quotes what a shell would need quoted") {
  CHECK(shell_quote("plain-word_1.2/x:y=z") == "plain-word_1.2/x:y=z");
  CHECK(shell_quote("two words") == "'two words'");
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(shell_quote("") == "''");
  CHECK(dry_run_text({{"A", "1 2"}}, {"sh", "-c", "echo $A"}) ==
        "env A='1 2'\nexec sh -c 'echo $A'\n");
}

TEST_CASE("run: an exit status reads as a shell reports it") {
  const auto status_of = [](int how) {
    const pid_t p = ::fork();
    if (p == 0) {
      if (how < 0) ::raise(-how);
      ::_exit(how);
    }
    int status = 0;
    ::waitpid(p, &status, 0);
    return status;
  };
  CHECK(exit_code_of(status_of(0)) == 0);
  CHECK(exit_code_of(status_of(42)) == 42);
  CHECK(exit_code_of(status_of(-SIGKILL)) == 128 + SIGKILL);
  CHECK(exec_failure{ENOENT}.code() == 127);
  CHECK(exec_failure{EACCES}.code() == 126);
  CHECK(has(exec_failure{ENOENT}.text("nosuch"), "command not found"));
}

TEST_CASE("ready-when: each kind of condition and the mistakes") {
  const auto p = parse_ready_when("port:8000");
  CHECK(p.what == ready_condition::kind::port);
  CHECK(p.port == 8000);
  const auto l = parse_ready_when("log:Uvicorn running on .*:[0-9]+");
  CHECK(l.what == ready_condition::kind::log);
  CHECK(std::regex_search("INFO: Uvicorn running on http://0.0.0.0:8000", l.pattern));
  const auto f = parse_ready_when("file:/tmp/a:b");
  CHECK(f.what == ready_condition::kind::file);
  CHECK(f.text == "/tmp/a:b");
  const auto error_of = [](const char* v) -> std::string {
    try {
      (void)parse_ready_when(v);
    } catch (const usage_error& e) {
      return e.what();
    }
    return "";
  };
  CHECK(has(error_of("tcp:80"), "port:N"));
  CHECK(has(error_of("8000"), "not a condition"));
  CHECK(has(error_of("port:"), "nothing after"));
  CHECK(has(error_of("port:70000"), "out of range"));
  CHECK(has(error_of("port:http"), "whole number"));
  CHECK(has(error_of("log:(unclosed"), "regular expression"));
  CHECK(has(error_of("log:(unclosed"), "--ready-when"));
}

TEST_CASE("ready-when: lines are scanned across reads with CRLF and at the stream's end") {
  const std::regex re("^listening on ([0-9]+)$");
  line_scanner s;
  CHECK(!s.feed("starting\nlisten", re));
  CHECK(!s.feed("ing on 80", re));
  CHECK(s.feed("00\r\nmore\n", re));
  line_scanner t;
  CHECK(!t.feed("listening on 1", re));
  CHECK(t.finish(re));
  line_scanner u;
  CHECK(!u.feed(std::string(line_scanner::max_line + 10, 'x') + "\n", re)); // bounded, no match
}

TEST_CASE("ready-when: a port that accepts makes the program ready and releases the hold once") {
  {
    listener l;
    hold_counter h;
    readiness_watch w(parse_ready_when(std::string("port:").append(std::to_string(l.port))),
                      10'000'000'000, h.hold());
    w.take();
    CHECK(h.takes == 1);
    w.started();
    w.check();
    CHECK(!w.pending());
    CHECK(h.releases == 1);
    w.program_exited(0); // no second report or release
    CHECK(h.releases == 1);
  }
}

TEST_CASE("ready-when: a file that appears and then a log line release the hold") {
  {
    const std::string path =
        std::string("/tmp/gpushare-unit-ready-").append(std::to_string(::getpid()));
    ::unlink(path.c_str());
    hold_counter h;
    readiness_watch w(parse_ready_when("file:" + path), 10'000'000'000, h.hold());
    w.take();
    w.started();
    w.check();
    CHECK(w.pending());
    CHECK(w.poll_timeout_ms() == readiness_watch::poll_interval_ms);
    std::FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fclose(f);
    w.check();
    CHECK(!w.pending());
    CHECK(h.releases == 1);
    ::unlink(path.c_str());
    readiness_watch lw(parse_ready_when("log:ready"), 10'000'000'000, h.hold());
    lw.take();
    lw.started();
    lw.on_output(1, "not yet\n");
    CHECK(lw.pending());
    lw.on_output(2, "now rea");
    lw.on_output(2, "dy\n");
    CHECK(!lw.pending());
    CHECK(h.releases == 2);
  }
}

TEST_CASE("ready-when: never ready the timeout releases the hold") {
  {
    listener l;
    const int port = l.port;
    l.close(); // nothing listens there now
    hold_counter h;
    readiness_watch w(parse_ready_when(std::string("port:").append(std::to_string(port))), 0,
                      h.hold());
    w.take();
    w.started();
    w.check();
    CHECK(!w.pending());
    CHECK(h.releases == 1);
    CHECK(w.poll_timeout_ms() == -1);
  }
}

TEST_CASE(
    "ready-when: a program that exits first releases the hold once and no take means no release") {
  {
    hold_counter h;
    {
      readiness_watch w(parse_ready_when("file:/nonexistent/gpushare"), 10'000'000'000, h.hold());
      w.take();
      w.started();
      w.program_exited(3);
      CHECK(!w.pending());
      CHECK(h.releases == 1);
    }
    CHECK(h.releases == 1); // the destructor releases nothing more
  }
  {
    hold_counter h;
    { readiness_watch w(parse_ready_when("file:/nonexistent/gpushare"), 0, h.hold()); }
    CHECK(h.takes == 0);
    CHECK(h.releases == 0);
  }
}
