// SPDX-License-Identifier: Apache-2.0
// Misconfigurations the gpushare tool makes visible (issue 24, item 2): one key used by tables
// of several domains (or table modes), whose sessions are not arbitrated against each other.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;
using namespace cli_test;

namespace {
/// A key no other test uses: the warnings below look at every table of the machine.
std::string own_key(const std::string& what) {
  static int counter = 0;
  return "split-" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}
} // namespace

TEST_CASE("status warns about a key that tables of two domains use, in text and JSON") {
  test_domain a, b;
  const std::string key = own_key("two");
  session sa(key, a.options("in-a"));
  const std::string alone = run_cli({"status", "--domain", a.name(), "--interval", "0"}).out;
  CHECK_FALSE(contains(alone, "warning: key"));
  session sb(key, b.options("in-b"));
  const std::string warning = "warning: key \"" + key + "\" has 2 tables (" +
                              std::min(a.object_name(key), b.object_name(key)) + ", " +
                              std::max(a.object_name(key), b.object_name(key)) +
                              "): sessions in different tables are not arbitrated against each "
                              "other; give every process the same GPUSHARE_DOMAIN and "
                              "GPUSHARE_TABLE_MODE\n";
  // Shown with either domain's tables, once.
  for (const std::string& domain : {a.name(), b.name()}) {
    CAPTURE(domain);
    const cli_result r = run_cli({"status", "--domain", domain, "--interval", "0"});
    REQUIRE(r.code == 0);
    CHECK(contains(r.out, warning));
    CHECK(r.out.find(warning) == r.out.rfind(warning));
  }
  const cli_result j = run_cli({"status", "--json", "--domain", a.name(), "--interval", "0"});
  REQUIRE(j.code == 0);
  const json doc = parse_json(j.out);
  const json& split = doc["split_keys"];
  bool found = false;
  for (std::size_t i = 0; i < split.size(); ++i) {
    if (split[i]["key"].str() != key) continue;
    found = true;
    REQUIRE(split[i]["tables"].size() == 2);
    CHECK(split[i]["tables"][0].str() == std::min(a.object_name(key), b.object_name(key)));
    CHECK(split[i]["tables"][1].str() == std::max(a.object_name(key), b.object_name(key)));
  }
  CHECK(found);
}

TEST_CASE("status warns about a key that a user-mode and a group-mode table both use") {
  test_domain d;
  const std::string key = own_key("modes");
  session user(key, d.options("user-mode"));
  session_options o = d.options("group-mode");
  o.access = table_access::group;
  session group(key, o);
  const std::string group_table = d.object_name(key, table_access::group);
  const cli_result r = run_cli({"status", "--domain", d.name(), "--interval", "0"});
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, "warning: key \"" + key + "\" has 2 tables ("));
  CHECK(contains(r.out, group_table));
}

TEST_CASE("set --table-default --capacity changes one table's capacity, never below committed") {
  constexpr std::uint64_t MiB = 1ull << 20;
  test_domain d;
  const std::string key = own_key("capacity");
  session s(key, d.options("no-limit", 8 * MiB));
  auto held = s.reserve(6 * MiB, 0ms);
  const std::string table = d.object_name(key);
  const auto set = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"set", "--table-default", "--domain", d.name()};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };
  const cli_result up = set({"--capacity", "16MiB"});
  CHECK(up.code == 0);
  CHECK(up.out == "capacity of " + table + ": 8.00 MiB -> 16.00 MiB\n");
  CHECK(s.info().memory_limit == 16 * MiB); // it set no limit: it follows the capacity
  const cli_result down = set({"--capacity", "4MiB"});
  CHECK(down.code == 1);
  CHECK(contains(down.err, "cannot go down to 4.00 MiB: its live sessions have committed "
                           "6.00 MiB"));
  CHECK(s.snapshot().capacity == 16 * MiB);
  const cli_result unlimited = set({"--capacity", "unlimited"});
  CHECK(unlimited.code == 0);
  CHECK(unlimited.out == "capacity of " + table + ": 16.00 MiB -> unlimited\n");
  const cli_result json = run_cli({"status", "--json", "--domain", d.name(), "--interval", "0"});
  CHECK(parse_json(json.out)["tables"][0]["capacity_unlimited"].boolean());
  // Usage errors: a percentage, a session given, two tables selected.
  const cli_result pct = set({"--capacity", "50%"});
  CHECK(pct.code == 2);
  CHECK(contains(pct.err, "a percentage is not accepted"));
  const cli_result on_session =
      run_cli({"set", "no-limit", "--domain", d.name(), "--capacity", "1GiB"});
  CHECK(on_session.code == 2);
  CHECK(contains(on_session.err, "--capacity is a table's, not a session's"));
  session other(own_key("capacity-2"), d.options("other"));
  const cli_result two = set({"--capacity", "1GiB"});
  CHECK(two.code == 2);
  CHECK(contains(two.err, "--capacity changes one table, and 2 are selected: choose it with "
                          "--table"));
  const cli_result one = set({"--capacity", "1GiB", "--table", key});
  CHECK(one.code == 0);
  CHECK(one.out == "capacity of " + table + ": unlimited -> 1.00 GiB\n");
}

TEST_CASE("status shows a killed session's memory until it is reclaimed, and only reads") {
  constexpr std::uint64_t MiB = 1ull << 20;
  test_domain d;
  const std::string key = own_key("dead");
  const pid_t holder = spawn_holder(d, key, "trainer", 12 * MiB, 64 * MiB);
  kill_holder(holder);
  // Before: "no live sessions" next to "committed 12.00 MiB", nothing said about whose it is.
  const cli_result r = run_cli({"status", "--domain", d.name(), "--interval", "0"});
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, "committed 12.00 MiB"));
  CHECK(contains(r.out, "  no live sessions\n  dead, not reclaimed yet: \"trainer\" (slot "));
  CHECK(contains(r.out, ", pid " + std::to_string(holder) +
                            ") holds 12.00 MiB reserved, 0 B external, 0 B guaranteed\n"));
  CHECK(contains(r.out, "a live session reclaims what they hold when it needs the memory"));
  const json doc =
      parse_json(run_cli({"status", "--json", "--domain", d.name(), "--interval", "0"}).out);
  const json& table = doc["tables"][0];
  CHECK(table["live_sessions"].u64() == 0);
  REQUIRE(table["dead_sessions"].size() == 1);
  CHECK(table["dead_sessions"][0]["name"].str() == "trainer");
  CHECK(table["dead_sessions"][0]["reserved_bytes"].u64() == 12 * MiB);
  // status only reads: still there; a live session's snapshot reclaims it.
  CHECK(contains(run_cli({"status", "--domain", d.name(), "--interval", "0"}).out,
                 "dead, not reclaimed yet"));
  session s(key, d.options("next"));
  CHECK(s.snapshot().dead_sessions.empty());
  const cli_result after = run_cli({"status", "--domain", d.name(), "--interval", "0"});
  CHECK_FALSE(contains(after.out, "dead, not reclaimed yet"));
  CHECK(contains(after.out, "committed 0 B"));
}
