// SPDX-License-Identifier: Apache-2.0
// The gpushare command-line tool: `metrics`, in the Prometheus text format.
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

constexpr std::uint64_t MiB = 1ull << 20;

using namespace cli_test;

// ------------------------------------------------------------------------------------------------
// metrics
// ------------------------------------------------------------------------------------------------

TEST_CASE("metrics prints HELP and TYPE lines and each session's values with escaped labels") {
  test_domain d;
  session_options o = d.options("we\"ird\\name", 64 * MiB);
  o.share = 4;
  o.priority = priority::high;
  session s("gpu", o);
  auto r = s.reserve(3 * MiB, 0ms);
  {
    scoped_kernel g(s);
    g.set_device_time(1500ms);
  }
  const cli_result m = run_cli({"metrics", "--domain", d.name()});
  REQUIRE(m.code == 0);
  const std::string table_labels =
      "table=\"" + d.object_name("gpu") + "\",key=\"gpu\",domain=\"" + d.name() + "\"";
  const std::string session_labels =
      table_labels + ",session=\"we\\\"ird\\\\name\",slot=\"" + std::to_string(s.id().slot) +
      "\",pod=\"\",namespace=\"\",container=\"\",slurm_job_id=\"\",slurm_step_id=\"\",group=\"\"";
  // The pid is a label of the info series only: a restarted process continues the others.
  CHECK(contains(m.out, "gpushare_session_info{" + session_labels + ",pid=\"" +
                            std::to_string(::getpid()) + "\"} 1\n"));
  CHECK_FALSE(contains(m.out, "gpushare_session_reserved_bytes{" + session_labels + ",pid="));
  CHECK(contains(m.out, "# HELP gpushare_table_capacity_bytes "));
  CHECK(contains(m.out, "# TYPE gpushare_table_capacity_bytes gauge\n"));
  CHECK(contains(m.out, "gpushare_table_capacity_bytes{" + table_labels + "} 67108864\n"));
  CHECK(contains(m.out, "gpushare_table_committed_bytes{" + table_labels + "} 3145728\n"));
  CHECK(contains(m.out, "gpushare_table_sessions{" + table_labels + "} 1\n"));
  CHECK(contains(m.out, "gpushare_table_up{" + table_labels + "} 1\n"));
  CHECK(contains(m.out, "# TYPE gpushare_session_reserved_bytes gauge\n"));
  CHECK(contains(m.out, "gpushare_session_reserved_bytes{" + session_labels + "} 3145728\n"));
  CHECK(contains(m.out, "gpushare_session_share{" + session_labels + "} 4\n"));
  CHECK(contains(m.out, "gpushare_session_priority{" + session_labels + "} 2\n"));
  CHECK(contains(m.out, "# TYPE gpushare_session_device_seconds_total counter\n"));
  CHECK(contains(m.out, "gpushare_session_device_seconds_total{" + session_labels + "} 1.5\n"));
  CHECK(contains(m.out, "gpushare_session_guards_total{" + session_labels + "} 1\n"));
  CHECK(contains(m.out, "gpushare_session_device_waits_total{" + session_labels + "} 0\n"));
  CHECK(contains(m.out, "gpushare_session_compute_limit_ratio{" + session_labels + "} 1\n"));
  CHECK_FALSE(contains(m.out, "gpushare_device_free_bytes")); // no CUDA session observed it

  // Every sample belongs to the family whose HELP and TYPE lines came just before it.
  std::map<std::string, int> types;
  std::string current;
  for (const auto& line : lines_of(m.out)) {
    if (line.rfind("# HELP ", 0) == 0) {
      current = line.substr(7, line.find(' ', 7) - 7);
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      CHECK(name == current);
      ++types[name];
      continue;
    }
    const std::string name = line.substr(0, line.find_first_of("{ "));
    CHECK(name == current);
    CHECK(types.count(name) == 1);
  }
  for (const auto& [name, count] : types) CHECK(count == 1);
}
