// SPDX-License-Identifier: Apache-2.0
// Who a session belongs to (docs/cluster-env.md), across processes: a forked child whose
// environment names a Kubernetes pod and a Slurm job step joins a table; a snapshot, `gpushare
// status` (text and JSON) and `gpushare metrics` show exactly those values, and nothing for a
// session without them.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <string>

#include "cli_test_util.hpp"
#include "test_util.hpp"

using namespace gpushare;
using namespace cli_test;

namespace {

/// The identity the child's environment gives it.
void set_child_identity() {
  ::setenv("GPUSHARE_POD_NAME", "infer-7d9f-x2k", 1);
  ::setenv("POD_NAME", "not-this-one", 1); // GPUSHARE_POD_NAME wins
  ::setenv("POD_NAMESPACE", "team-a", 1);
  ::setenv("GPUSHARE_CONTAINER_NAME", "server", 1);
  ::setenv("SLURM_JOB_ID", "4242", 1);
  ::setenv("SLURM_STEP_ID", "4294967291", 1); // the batch step, as Slurm writes it
  ::setenv("SLURM_ARRAY_JOB_ID", "4200", 1);
  ::setenv("SLURM_ARRAY_TASK_ID", "7", 1);
}

/// A child that joins `key` as "tagged" with the identity above, and holds.
pid_t spawn_tagged(const test_domain& d, const std::string& key) {
  return test::spawn_holding([&](const std::function<void()>& hold) {
    set_child_identity();
    session s(key, d.options("tagged"));
    hold();
  });
}

} // namespace

TEST_CASE("a child's pod and Slurm identity reach the snapshot and status text") {
  test_domain d;
  session plain("gpu", d.options("plain", 1ull << 30));
  const pid_t child = spawn_tagged(d, "gpu");
  const table_snapshot snap = plain.snapshot();
  REQUIRE(snap.sessions.size() == 2);
  for (const session_info& i : snap.sessions) {
    if (i.name == "plain") {
      CHECK(i.identity.empty());
      continue;
    }
    CHECK(i.identity.pod == "infer-7d9f-x2k");
    CHECK(i.identity.pod_namespace == "team-a");
    CHECK(i.identity.container == "server");
    CHECK(i.identity.slurm_job_id == 4242u);
    CHECK(i.identity.slurm_step_id == slurm_batch_step);
    CHECK(i.identity.slurm_array_job_id == 4200u);
    CHECK(i.identity.slurm_array_task_id == 7u);
  }
  const cli_result r = run_cli({"status", "--domain", d.name(), "--interval", "0"});
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, " IDENTITY "));
  CHECK(contains(r.out, " team-a/infer-7d9f-x2k/server job 4200_7.batch "));
  bool plain_row = false;
  for (const std::string& line : lines_of(r.out))
    if (contains(line, " plain ")) plain_row = contains(line, std::to_string(::getpid()) + "  -  ");
  CHECK(plain_row); // "-" in the IDENTITY column, right after the PID
  kill_holder(child);
}

TEST_CASE("status shows no IDENTITY column when no session has one") {
  test_domain d;
  session plain("gpu", d.options("plain", 1ull << 30));
  const cli_result r = run_cli({"status", "--domain", d.name(), "--interval", "0"});
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, " NAME "));
  CHECK_FALSE(contains(r.out, "IDENTITY"));
}

TEST_CASE("status --json gives each session's identity, with null for what is unknown") {
  test_domain d;
  session plain("gpu", d.options("plain", 1ull << 30));
  const pid_t child = spawn_tagged(d, "gpu");
  const cli_result r = run_cli({"status", "--json", "--domain", d.name(), "--interval", "0"});
  REQUIRE(r.code == 0);
  const json doc = parse_json(r.out);
  const json& t = table_of(doc, "gpu");
  const json& id = session_of(t, "tagged")["identity"];
  CHECK(id["pod"].str() == "infer-7d9f-x2k");
  CHECK(id["namespace"].str() == "team-a");
  CHECK(id["container"].str() == "server");
  CHECK(id["slurm_job_id"].u64() == 4242);
  CHECK(id["slurm_step_id"].u64() == 4294967291u);
  CHECK(id["slurm_step"].str() == "batch");
  CHECK(id["slurm_array_job_id"].u64() == 4200);
  CHECK(id["slurm_array_task_id"].u64() == 7);
  const json& none = session_of(t, "plain")["identity"];
  CHECK(none["pod"].str().empty());
  CHECK(none["namespace"].str().empty());
  CHECK(none["container"].str().empty());
  CHECK(none["slurm_job_id"].is_null());
  CHECK(none["slurm_step"].is_null());
  CHECK(none["slurm_array_task_id"].is_null());
  kill_holder(child);
}

TEST_CASE("metrics label every session series with the same identity labels") {
  test_domain d;
  session plain("gpu", d.options("plain", 1ull << 30));
  const pid_t child = spawn_tagged(d, "gpu");
  std::string tagged_slot;
  for (const session_info& i : plain.snapshot().sessions)
    if (i.name == "tagged") tagged_slot = std::to_string(i.id.slot);
  REQUIRE_FALSE(tagged_slot.empty());
  const cli_result m = run_cli({"metrics", "--domain", d.name()});
  REQUIRE(m.code == 0);
  const std::string table_labels =
      "table=\"" + d.object_name("gpu") + "\",key=\"gpu\",domain=\"" + d.name() + "\"";
  const std::string tagged =
      table_labels + ",session=\"tagged\",slot=\"" + tagged_slot +
      "\",pod=\"infer-7d9f-x2k\",namespace=\"team-a\","
      "container=\"server\",slurm_job_id=\"4200_7\",slurm_step_id=\"batch\",group=\"\"";
  const std::string untagged =
      table_labels + ",session=\"plain\",slot=\"" + std::to_string(plain.id().slot) +
      "\",pod=\"\",namespace=\"\",container=\"\",slurm_job_id=\"\",slurm_step_id=\"\",group=\"\"";
  CHECK(contains(m.out, "gpushare_session_reserved_bytes{" + tagged + "} 0\n"));
  CHECK(contains(m.out, "gpushare_session_share{" + tagged + "} 1\n"));
  CHECK(contains(m.out, "gpushare_session_info{" + tagged + ",pid=\"" + std::to_string(child) +
                            "\"} 1\n"));
  CHECK(contains(m.out, "gpushare_session_reserved_bytes{" + untagged + "} 0\n"));
  kill_holder(child);
}

TEST_CASE("an invalid identity variable is ignored with one warning and the join succeeds") {
  test_domain d;
  int code = -1;
  const std::string err = test::child_stderr(
      [&] {
        ::setenv("GPUSHARE_POD_NAME", "Not_A_Pod", 1);
        ::setenv("SLURM_JOB_ID", "42", 1);
        session s("gpu", d.options("odd", 1ull << 30));
        session again("gpu", d.options("odd2", 1ull << 30)); // the warning is not repeated
        const auto snap = s.snapshot();
        if (snap.sessions.size() != 2) ::_exit(3);
        for (const session_info& i : snap.sessions)
          if (!i.identity.pod.empty() || i.identity.slurm_job_id != 42u) ::_exit(4);
        ::_exit(0);
      },
      &code);
  CHECK(code == 0);
  const std::string warning = "gpushare: warning: environment variable GPUSHARE_POD_NAME="
                              "\"Not_A_Pod\" is ignored: it is no Kubernetes pod name";
  CHECK(contains(err, warning));
  CHECK(err.find(warning) == err.rfind(warning));
}
