// SPDX-License-Identifier: Apache-2.0
// The tool shows session groups (session_options::group, GPUSHARE_GROUP): the GROUP column and
// the "groups:" line of `gpushare status`, the "group" and "groups" fields of its JSON, and the
// gpushare_group_* families and group label of `gpushare metrics`; a table without groups shows
// none of them.
#include <string>

#include "cli_test_util.hpp"

namespace {

using namespace cli_test;
constexpr std::uint64_t MiB = 1ull << 20;

session_options member(const test_domain& d, const std::string& name, const std::string& group,
                       std::optional<std::uint64_t> limit = {}) {
  session_options o = d.options(name, 1024 * MiB);
  o.group = group;
  if (limit) o.group_memory_limit = memory_amount::of_bytes(*limit);
  o.group_share = 2;
  return o;
}

} // namespace

TEST_CASE("groups: status shows the group of each session and each group's sums") {
  test_domain d;
  session a("gpu", member(d, "member-a", "pod-a", 100 * MiB));
  session b("gpu", member(d, "member-b", "pod-a"));
  session job("gpu", member(d, "rank-0", "job-7"));
  session lone("gpu", d.options("lone", 1024 * MiB));
  auto ra = a.reserve(30 * MiB, 0ms);
  auto rb = b.reserve(20 * MiB, 0ms);
  auto rj = job.reserve(5 * MiB, 0ms);

  const cli_result text = run_cli({"status", "--domain", d.name()});
  CHECK(text.code == 0);
  CHECK(contains(text.out, "GROUP"));
  CHECK(contains(text.out, "groups: \"job-7\" 1 session, share 2, committed 5.00 MiB, no memory "
                           "limit; \"pod-a\" 2 sessions, share 2, committed 50.00 MiB of "
                           "100.00 MiB\n"));

  const cli_result js = run_cli({"status", "--domain", d.name(), "--json"});
  CHECK(js.code == 0);
  const json doc = parse_json(js.out);
  const json& t = table_of(doc, "gpu");
  CHECK(session_of(t, "member-b")["group"].str() == "pod-a");
  CHECK(session_of(t, "lone")["group"].is_null());
  REQUIRE(t["groups"].size() == 2);
  const json& pod = t["groups"][1];
  CHECK(pod["name"].str() == "pod-a");
  CHECK(pod["sessions"].u64() == 2);
  CHECK(pod["share"].u64() == 2);
  CHECK(pod["memory_limit_bytes"].u64() == 100 * MiB);
  CHECK(pod["committed_bytes"].u64() == 50 * MiB);
  CHECK(pod["reserved_bytes"].u64() == 50 * MiB);
  CHECK(t["groups"][0]["memory_limit_bytes"].is_null());

  const cli_result m = run_cli({"metrics", "--domain", d.name()});
  CHECK(m.code == 0);
  const std::string table_labels = "{table=\"" + d.object_name("gpu") + "\",key=\"gpu\",domain=\"" +
                                   d.name() + "\",group=\"pod-a\"}";
  CHECK(contains(m.out, "gpushare_group_sessions" + table_labels + " 2\n"));
  CHECK(contains(m.out, "gpushare_group_memory_limit_bytes" + table_labels + " 104857600\n"));
  CHECK(contains(m.out, "gpushare_group_committed_bytes" + table_labels + " 52428800\n"));
  CHECK(contains(m.out, "# TYPE gpushare_group_share gauge\n"));
  CHECK_FALSE(contains(m.out, "gpushare_group_memory_limit_bytes{table=\"" + d.object_name("gpu") +
                                  "\",key=\"gpu\",domain=\"" + d.name() + "\",group=\"job-7\"}"));
  CHECK(contains(m.out, "session=\"member-a\""));
  CHECK(contains(m.out, "slurm_step_id=\"\",group=\"pod-a\"}"));
  CHECK(contains(m.out, "slurm_step_id=\"\",group=\"\"}"));
}

TEST_CASE("groups: a table without groups shows no group column, line or array entries") {
  test_domain d;
  session lone("gpu", d.options("lone", 1024 * MiB));
  const cli_result text = run_cli({"status", "--domain", d.name()});
  CHECK(text.code == 0);
  CHECK_FALSE(contains(text.out, "GROUP"));
  CHECK_FALSE(contains(text.out, "groups:"));
  const json doc = parse_json(run_cli({"status", "--domain", d.name(), "--json"}).out);
  CHECK(table_of(doc, "gpu")["groups"].size() == 0);
  const cli_result m = run_cli({"metrics", "--domain", d.name()});
  CHECK_FALSE(contains(m.out, "gpushare_group_sessions{"));
}

TEST_CASE("groups: gpushare run joins the group its environment names, within its limit") {
  test_domain d;
  const cli_result bad = run_cli_env({"GPUSHARE_DOMAIN=" + d.name(), "GPUSHARE_GROUP=bad group"},
                                     {"run", "--key", "gpu", "--memory", "1MiB", "--", "true"});
  CHECK(bad.code == 125); // the environment, not the command line, is wrong (issue 42, B8)
  CHECK(contains(bad.err, "GPUSHARE_GROUP=\"bad group\" is invalid"));
  const env_vars group = {"GPUSHARE_DOMAIN=" + d.name(), "GPUSHARE_GROUP=g1",
                          "GPUSHARE_GROUP_MEMORY_LIMIT=10MiB"};
  const cli_result over =
      run_cli_env(group, {"run", "--key", "gpu", "--memory", "20MiB", "--", "true"});
  CHECK(over.code == 125);
  CHECK(contains(over.err, "group 'g1'"));
  CHECK(contains(over.err, "10.00 MiB"));
  CHECK_FALSE(contains(over.err, "is not one gpushare reads"));
  const cli_result in = run_cli_env(group, {"run", "--key", "gpu", "--memory", "2MiB", "--",
                                            GPUSHARE_CLI_PATH, "status", "--domain", d.name()});
  CHECK(in.code == 0);
  CHECK(contains(in.out, "groups: \"g1\" 1 session, share 1, committed 2.00 MiB of 10.00 MiB"));
}
