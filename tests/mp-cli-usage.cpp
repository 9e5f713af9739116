// SPDX-License-Identifier: Apache-2.0
// The gpushare command-line tool: its command line: bad arguments, help, version and suggestions.
// The tool runs as a program against tables that these tests create. Every test uses a domain
// of its own, so no other test's tables can show up in its output.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>

#include <gpushare/discovery.hpp>

#include "cli_test_util.hpp"
#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;

using namespace cli_test;

// ------------------------------------------------------------------------------------------------
// command line
// ------------------------------------------------------------------------------------------------

TEST_CASE("bad command lines exit 2 with the error and the usage on stderr") {
  const std::vector<std::vector<std::string>> bad = {
      {},
      {"frobnicate"},
      {"--frobnicate"},
      {"status", "--bogus"},
      {"status", "--domain"},
      {"status", "--domain", "bad/domain"},
      {"status", "extra"},
      {"status", "--json=yes"},
      {"status", "--json", "--json"},
      {"top", "--interval", "abc"},
      {"top", "--interval", "0"},
      {"top", "--iterations", "0"},
      {"top", "--iterations", "-3"},
      {"set"},
      {"set", "worker"},
      {"set", "worker", "--share", "abc"},
      {"set", "worker", "--share", "0"},
      {"set", "worker", "--priority", "urgent"},
      {"set", "worker", "--compute-limit", "30"},
      {"set", "worker", "--memory-limit", "12 parsecs"},
      {"set", "worker", "--quantum", "5"},
      {"set", "worker", "other", "--share", "2"},
      {"clean", "--force=yes"},
      {"metrics", "--interval", "1"},
  };
  for (const auto& args : bad) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    CAPTURE(joined);
    const cli_result r = run_cli(args);
    CHECK(r.code == 2);
    CHECK(contains(r.err, "error: "));
    CHECK(contains(r.err, "Usage: gpushare"));
    CHECK(r.out.empty());
  }
  const cli_result value = run_cli({"set", "worker", "--share", "abc"});
  CHECK(contains(value.err, "--share: invalid share \"abc\""));
  CHECK(contains(value.err, "Usage: gpushare set"));
  const cli_result flag = run_cli({"status", "--bogus"});
  CHECK(contains(flag.err, "unknown option '--bogus'"));
  const cli_result missing = run_cli({"status", "--domain"});
  CHECK(contains(missing.err, "option --domain needs a value"));
}

TEST_CASE("--help, <command> --help and --version print to stdout and exit 0") {
  const cli_result help = run_cli({"--help"});
  CHECK(help.code == 0);
  CHECK(contains(help.out, "Usage: gpushare <command>"));
  for (const char* c : {"status", "top", "set", "clean", "metrics"}) {
    CAPTURE(c);
    const cli_result r = run_cli({c, "--help"});
    CHECK(r.code == 0);
    CHECK(contains(r.out, std::string("Usage: gpushare ") + c));
    CHECK(r.err.empty());
    const cli_result h = run_cli({"help", c});
    CHECK(h.code == 0);
    CHECK(h.out == r.out);
  }
  const cli_result v = run_cli({"--version"});
  CHECK(v.code == 0);
  CHECK(v.out == "gpushare " GPUSHARE_VERSION_STRING " (table layout " +
                     std::to_string(table_layout_version) + ")\n");
}

TEST_CASE("mistyped commands and options get a suggestion, and extra arguments are refused") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"stat"}, "error: unknown command 'stat'; did you mean 'status'?\n"},
      {{"stauts"}, "error: unknown command 'stauts'; did you mean 'status'?\n"},
      {{"metric"}, "error: unknown command 'metric'; did you mean 'metrics'?\n"},
      {{"help", "stat"}, "error: unknown command 'stat'; did you mean 'status'?\n"},
      {{"frobnicate"}, "error: unknown command 'frobnicate'\n"},
      {{"--verison"}, "error: unknown option '--verison'; did you mean '--version'?\n"},
      {{"--status"}, "error: unknown option '--status'; did you mean 'status'?\n"},
      {{"status", "--dommain", "x"}, "error: unknown option '--dommain'; did you mean '--domain'?"},
      {{"status", "-json"}, "error: unknown option '-json'; did you mean '--json'?"},
      {{"clean", "--dryrun"}, "error: unknown option '--dryrun'; did you mean '--dry-run'?"},
      {{"top", "--iteration", "2"}, "did you mean '--iterations'?"},
      {{"--version", "extra"}, "error: --version takes no arguments, got 'extra'"},
      {{"help", "status", "extra"}, "error: unexpected extra argument 'extra'"},
      {{"--help", "top", "extra"}, "error: unexpected extra argument 'extra'"},
      {{"status", "extra"}, "error: unexpected argument 'extra'"},
      {{"top", "extra"}, "error: unexpected argument 'extra'"},
      {{"clean", "extra"}, "error: unexpected argument 'extra'"},
      {{"metrics", "extra"}, "error: unexpected argument 'extra'"},
      {{"set", "worker", "other", "--share", "2"}, "error: unexpected extra argument 'other'"},
      {{"status", "--domain", "x", "--all-domains"},
       "error: give --domain or --all-domains, not both"},
  };
  for (const auto& [args, message] : bad) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    CAPTURE(joined);
    const cli_result r = run_cli(args);
    CHECK(r.code == 2);
    CHECK(contains(r.err, message));
    CHECK(contains(r.err, "Usage: gpushare"));
    CHECK(r.out.empty());
  }
  // help takes the command to describe after --help and -h too.
  const cli_result h = run_cli({"--help", "status"});
  CHECK(h.code == 0);
  CHECK(h.out == run_cli({"status", "--help"}).out);
  CHECK(run_cli({"-h", "clean"}).out == run_cli({"clean", "--help"}).out);
  CHECK(run_cli({"help", "help"}).out == run_cli({"--help"}).out);
}
