// SPDX-License-Identifier: Apache-2.0
// The gpushare command-line tool: `set`, which changes a live session's settings.
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
// set
// ------------------------------------------------------------------------------------------------

TEST_CASE("set changes a live session's settings, seen by the session and by status") {
  test_domain d;
  session s("gpu", d.options("worker", 64 * MiB));
  const cli_result r =
      run_cli({"set", "worker", "--domain", d.name(), "--share", "7", "--priority", "critical",
               "--compute-limit", "25%", "--memory-limit", "8MiB", "--memory-guarantee", "1MiB",
               "--quantum", "2ms", "--handover", "yield"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, "share: 1 -> 7"));
  CHECK(contains(r.out, "priority: normal -> critical"));
  CHECK(contains(r.out, "compute limit: 100% -> 25%"));
  CHECK(contains(r.out, "memory limit: 64.00 MiB -> 8.00 MiB"));
  CHECK(contains(r.out, "memory guarantee: 0 B -> 1.00 MiB"));
  CHECK(contains(r.out, "quantum: 5 ms -> 2 ms"));
  CHECK(contains(r.out, "handover: guard -> yield"));

  const session_info i = s.info();
  CHECK(i.share == 7);
  CHECK(i.priority == priority::critical);
  CHECK(i.compute_limit_ppm == 250'000);
  CHECK(i.memory_limit == 8 * MiB);
  CHECK(i.memory_guarantee == 1 * MiB);
  CHECK(i.quantum_ns == 2'000'000);
  CHECK(i.handover == handover_point::at_yield);

  const cli_result st = run_cli({"status", "--json", "--domain", d.name(), "--interval", "0"});
  REQUIRE(st.code == 0);
  const json doc = parse_json(st.out);
  const json& w = session_of(table_of(doc, "gpu"), "worker");
  CHECK(w["share"].u64() == 7);
  CHECK(w["priority"].i64() == priority::critical);
  CHECK(w["compute_limit_ppm"].u64() == 250'000);
  CHECK(w["memory_limit_bytes"].u64() == 8 * MiB);
  CHECK(w["memory_guarantee_bytes"].u64() == 1 * MiB);
  CHECK(w["handover"].str() == "yield");
}

TEST_CASE("set reaches a session of another process, by slot number with --table") {
  test_domain d;
  {
    auto t = table::open("gpu-b", gpushare::open_mode::open_or_create, d.options("x"));
  } // a second table: the slot needs --table
  const pid_t holder = spawn_holder(d, "gpu", "remote", 0, 100 * MiB);
  auto t = table::open_existing(d.object_name("gpu"));
  const auto ids = t.find("remote");
  REQUIRE(ids.size() == 1);
  const std::string slot = std::to_string(ids[0].slot);

  const cli_result without = run_cli({"set", slot, "--domain", d.name(), "--share", "2"});
  CHECK(without.code == 1);
  CHECK(contains(without.err, "needs --table"));

  const cli_result r = run_cli({"set", slot, "--table", "gpu", "--domain", d.name(),
                                "--memory-limit", "25%", "--share", "9"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, "share: 1 -> 9"));
  CHECK(contains(r.out, "memory limit: 100.00 MiB -> 25.00 MiB"));
  const auto snap = t.snapshot();
  REQUIRE(snap.sessions.size() == 1);
  CHECK(snap.sessions[0].pid == holder);
  CHECK(snap.sessions[0].share == 9);
  CHECK(snap.sessions[0].memory_limit == 25 * MiB);

  // The object name works as --table too, and an unchanged value is said to be unchanged.
  const cli_result again = run_cli({"set", slot, "--table", d.object_name("gpu"), "--share", "9"});
  CHECK(again.code == 0);
  CHECK(contains(again.out, "share: 9 (unchanged)"));
  kill_holder(holder);
}

TEST_CASE("set refuses unknown and ambiguous names and changes nothing") {
  test_domain d;
  session one("gpu-a", d.options("dup"));
  session two("gpu-b", d.options("dup"));

  const cli_result unknown = run_cli({"set", "nobody", "--domain", d.name(), "--share", "2"});
  CHECK(unknown.code == 1);
  CHECK(contains(unknown.err, "no live session named \"nobody\""));
  CHECK(unknown.out.empty());

  const cli_result ambiguous = run_cli({"set", "dup", "--domain", d.name(), "--share", "2"});
  CHECK(ambiguous.code == 1);
  CHECK(contains(ambiguous.err, "2 live sessions are named \"dup\""));
  CHECK(contains(ambiguous.err, d.object_name("gpu-a")));
  CHECK(contains(ambiguous.err, d.object_name("gpu-b")));
  CHECK(contains(ambiguous.err, "--table"));

  const cli_result no_table =
      run_cli({"set", "dup", "--domain", d.name(), "--table", "gpu-c", "--share", "2"});
  CHECK(no_table.code == 1);
  CHECK(contains(no_table.err, "no table matches --table gpu-c"));

  const cli_result refused = run_cli({"set", "dup", "--domain", d.name(), "--table", "gpu-a",
                                      "--memory-limit", "1MiB", "--memory-guarantee", "2MiB"});
  CHECK(refused.code == 1);
  CHECK(contains(refused.err, "guarantee"));

  CHECK(one.info().share == 1);
  CHECK(two.info().share == 1);
  CHECK(one.info().memory_guarantee == 0);

  const cli_result chosen =
      run_cli({"set", "dup", "--domain", d.name(), "--table", "gpu-b", "--share", "5"});
  CHECK(chosen.code == 0);
  CHECK(one.info().share == 1);
  CHECK(two.info().share == 5);
}
