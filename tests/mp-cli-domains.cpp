// SPDX-License-Identifier: Apache-2.0
// The gpushare command-line tool: its domains: GPUSHARE_DOMAIN, --domain, --all-domains, and the
// messages that name them. The tool runs as a program against tables that these tests create. Every
// test uses a domain of its own, so no other test's tables can show up in its output.
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

TEST_CASE("GPUSHARE_DOMAIN is the default domain, and --domain or --all-domains overrides it") {
  test_domain a, b;
  session sa("gpu-a", a.options("env-same"));
  session sb("gpu-b", b.options("env-same"));
  const env_vars in_a = {"GPUSHARE_DOMAIN=" + a.name()};

  const cli_result j = run_cli_env(in_a, {"status", "--json", "--interval", "0"});
  REQUIRE(j.code == 0);
  const json doc = parse_json(j.out);
  CHECK(doc["domain"].str() == a.name());
  REQUIRE(doc["tables"].size() == 1);
  CHECK(doc["tables"][0]["key"].str() == "gpu-a");
  const cli_result text = run_cli_env(in_a, {"status", "--interval", "0"});
  CHECK(text.code == 0);
  CHECK(text.out.starts_with("1 table, 1 live session (only domain \"" + a.name() +
                             "\", from GPUSHARE_DOMAIN; --all-domains shows every domain)\n"));

  const cli_result other =
      run_cli_env(in_a, {"status", "--json", "--interval", "0", "--domain", b.name()});
  REQUIRE(other.code == 0);
  const json other_doc = parse_json(other.out);
  CHECK(other_doc["domain"].str() == b.name());
  REQUIRE(other_doc["tables"].size() == 1);
  CHECK(other_doc["tables"][0]["key"].str() == "gpu-b");

  const cli_result all =
      run_cli_env(in_a, {"status", "--json", "--interval", "0", "--all-domains"});
  REQUIRE(all.code == 0);
  const json all_doc = parse_json(all.out);
  CHECK(all_doc["domain"].is_null());
  CHECK(session_of(table_of(all_doc, "gpu-a"), "env-same")["pid"].i64() == ::getpid());
  CHECK(session_of(table_of(all_doc, "gpu-b"), "env-same")["pid"].i64() == ::getpid());

  // The name is in both domains: ambiguous over every domain, one session in domain a.
  const cli_result ambiguous = run_cli({"set", "env-same", "--share", "3"});
  CHECK(ambiguous.code == 1);
  CHECK(contains(ambiguous.err, "live sessions are named \"env-same\""));
  const cli_result set = run_cli_env(in_a, {"set", "env-same", "--share", "3"});
  INFO(set.err);
  CHECK(set.code == 0);
  CHECK(contains(set.out, "in table " + a.object_name("gpu-a")));
  CHECK(sa.info().share == 3);
  CHECK(sb.info().share == 1);

  const cli_result m = run_cli_env(in_a, {"metrics"});
  CHECK(m.code == 0);
  CHECK(contains(m.out, "domain=\"" + a.name() + "\""));
  CHECK_FALSE(contains(m.out, "domain=\"" + b.name() + "\""));

  const cli_result c = run_cli_env(in_a, {"clean", "--dry-run"});
  CHECK(c.code == 0);
  CHECK(contains(c.out, "kept " + a.object_name("gpu-a") + ": 1 live session\n"));
  CHECK_FALSE(contains(c.out, b.object_name("gpu-b")));
  CHECK(contains(c.out, "would remove 0 of 1 table (dry run: nothing was removed) (only domain \"" +
                            a.name() + "\", from GPUSHARE_DOMAIN"));

  const cli_result top = run_cli_env(in_a, {"top", "--iterations", "1", "--interval", "0.01"});
  CHECK(top.code == 0);
  CHECK(contains(top.out, "gpu-a"));
  CHECK_FALSE(contains(top.out, "gpu-b"));

  // A bad value is a usage error naming the variable, unless --domain or --all-domains overrides.
  for (const auto& command : {"status", "top", "set", "clean", "metrics"}) {
    CAPTURE(command);
    std::vector<std::string> args = {command};
    if (std::string_view(command) == "set") args = {"set", "env-same", "--share", "2"};
    const cli_result bad = run_cli_env({"GPUSHARE_DOMAIN=bad/domain"}, args);
    CHECK(bad.code == 2);
    CHECK(contains(bad.err, "environment variable GPUSHARE_DOMAIN=\"bad/domain\" is invalid"));
    CHECK(contains(bad.err, "(or override it with --domain D or --all-domains)"));
    CHECK(contains(bad.err, "Usage: gpushare " + std::string(command)));
    CHECK(bad.out.empty());
  }
  const cli_result empty = run_cli_env({"GPUSHARE_DOMAIN="}, {"status"});
  CHECK(empty.code == 2);
  CHECK(contains(empty.err, "environment variable GPUSHARE_DOMAIN is set but empty"));
  const cli_result overridden = run_cli_env({"GPUSHARE_DOMAIN=bad/domain"},
                                            {"status", "--domain", a.name(), "--interval", "0"});
  CHECK(overridden.code == 0);
  CHECK(run_cli_env({"GPUSHARE_DOMAIN="}, {"metrics", "--all-domains"}).code == 0);
  CHECK(sb.info().share == 1);
}

TEST_CASE("a domain without tables is named, with the domains that have tables") {
  test_domain d, empty;
  session s("gpu", d.options("worker"));
  const std::string none = "domain \"" + empty.name() + "\" has no tables; tables exist in ";

  const cli_result by_name = run_cli({"set", "worker", "--domain", empty.name(), "--share", "2"});
  CHECK(by_name.code == 1);
  CHECK(contains(by_name.err, "error: no live session named \"worker\": " + none));
  CHECK(contains(by_name.err, "\"" + d.name() + "\""));
  CHECK(contains(by_name.err, "(see `gpushare status --all-domains`)"));
  CHECK_FALSE(contains(by_name.err, "there are no tables"));

  const cli_result by_slot = run_cli({"set", "0", "--domain", empty.name(), "--share", "2"});
  CHECK(by_slot.code == 1);
  CHECK(contains(by_slot.err, "error: no table to look in: " + none));

  const cli_result by_table =
      run_cli({"set", "worker", "--domain", empty.name(), "--table", "gpu", "--share", "2"});
  CHECK(by_table.code == 1);
  CHECK(contains(by_table.err, "error: no table matches --table gpu: " + none));

  const cli_result st = run_cli({"status", "--domain", empty.name()});
  CHECK(st.code == 0);
  CHECK(st.out.starts_with(none));
  CHECK(contains(st.out, "\"" + d.name() + "\""));

  const cli_result cl = run_cli({"clean", "--domain", empty.name(), "--dry-run"});
  CHECK(cl.code == 0);
  CHECK(contains(cl.out, "would remove 0 of 0 tables (dry run: nothing was removed): " + none));

  // A domain that has tables, but not the session: the message says where it looked.
  const cli_result elsewhere = run_cli({"set", "nobody", "--domain", d.name(), "--share", "2"});
  CHECK(elsewhere.code == 1);
  CHECK(contains(elsewhere.err, "no live session named \"nobody\" in domain \"" + d.name() + "\""));
  CHECK(s.info().share == 1);
}

TEST_CASE("counts agree with their nouns: 1 table, 1 live session, 2 tables, 2 live sessions") {
  test_domain single, pair;
  session lone("gpu", single.options("lone"));
  session one("gpu-1", pair.options("a"));
  session two_a("gpu-2", pair.options("b"));
  session two_b("gpu-2", pair.options("c"));
  const pid_t dead_a = spawn_holder(pair, "gpu-dead", "dead-a");
  const pid_t dead_b = spawn_holder(pair, "gpu-dead", "dead-b");
  kill_holder(dead_a);
  kill_holder(dead_b);

  const cli_result s1 = run_cli({"status", "--domain", single.name(), "--interval", "0"});
  CHECK(s1.out.starts_with("1 table, 1 live session\n"));
  const cli_result s2 = run_cli({"status", "--domain", pair.name(), "--interval", "0"});
  CHECK(s2.out.starts_with("3 tables, 3 live sessions\n")); // the dead ones are left out

  const cli_result c1 = run_cli({"clean", "--domain", single.name(), "--dry-run"});
  CHECK(contains(c1.out, "kept " + single.object_name("gpu") + ": 1 live session\n"));
  CHECK(contains(c1.out, "would remove 0 of 1 table (dry run"));
  const cli_result c2 = run_cli({"clean", "--domain", pair.name(), "--dry-run"});
  CHECK(contains(c2.out, "kept " + pair.object_name("gpu-1") + ": 1 live session\n"));
  CHECK(contains(c2.out, "kept " + pair.object_name("gpu-2") + ": 2 live sessions\n"));
  CHECK(contains(c2.out, "would remove " + pair.object_name("gpu-dead") + " (2 dead sessions)"));
  CHECK(contains(c2.out, "would remove 1 of 3 tables (dry run"));

  const cli_result forced = run_cli({"clean", "--domain", pair.name(), "--dry-run", "--force"});
  CHECK(contains(forced.out, "would remove " + pair.object_name("gpu-1") +
                                 " (--force: it has 1 live session, which would go on using"));
  CHECK(contains(forced.out, "would remove " + pair.object_name("gpu-2") +
                                 " (--force: it has 2 live sessions, which would go on using"));
  CHECK(contains(forced.out, "would remove 3 of 3 tables (dry run"));

  // A slot number with several tables: "there are 3 tables in domain ...".
  const cli_result slot = run_cli({"set", "0", "--domain", pair.name(), "--share", "2"});
  CHECK(slot.code == 1);
  CHECK(contains(slot.err, "needs --table: there are 3 tables in domain \"" + pair.name() + "\":"));
}
