// SPDX-License-Identifier: Apache-2.0
// The gpushare command-line tool: `top`, the refreshing view.
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
// top
// ------------------------------------------------------------------------------------------------

TEST_CASE("top --iterations 2 prints two frames with the session rows, then exits 0") {
  test_domain d;
  session s("gpu", d.options("topper"));
  const cli_result r =
      run_cli({"top", "--domain", d.name(), "--iterations", "2", "--interval", "0.1"});
  CHECK(r.code == 0);
  CHECK(r.err.empty());
  std::size_t frames = 0, rows = 0;
  for (const auto& line : lines_of(r.out)) {
    frames += line.rfind("gpushare top", 0) == 0 ? 1 : 0;
    rows += contains(line, " topper ") ? 1 : 0;
  }
  CHECK(frames == 2);
  CHECK(rows == 2);
  CHECK_FALSE(contains(r.out, "\x1b[")); // not a terminal: no screen clearing
}

TEST_CASE("top runs until SIGINT and then exits 0") {
  test_domain d;
  session s("gpu", d.options("until-interrupted"));
  running_cli top = start_cli({"top", "--domain", d.name(), "--interval", "0.05"});
  std::string seen;
  char buf[4096];
  while (!contains(seen, "until-interrupted")) {
    const ssize_t n = ::read(top.out, buf, sizeof buf);
    if (n <= 0) break;
    seen.append(buf, static_cast<std::size_t>(n));
  }
  REQUIRE(contains(seen, "until-interrupted"));
  ::kill(top.pid, SIGINT);
  const cli_result r = finish_cli(top);
  CHECK(r.code == 0);
}
