// SPDX-License-Identifier: Apache-2.0
// A session's platform identity (detail/identity.hpp): Kubernetes names and Slurm ids from
// session_options or the environment, their precedence, invalid values ignored with a notice,
// how status shows them, and the slot that records them (detail/slot.hpp, snapshot.hpp).
#include <gpushare/detail/identity.hpp>
#include <gpushare/detail/slot.hpp>
#include <gpushare/detail/snapshot.hpp>
#include <gpushare/options.hpp>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include <doctest/doctest.h>

#include "test_util.hpp"

namespace {

namespace d = gpushare::detail;
using gpushare::errc;
using gpushare::platform_identity;
using gpushare::resolve_options;
using gpushare::session_options;
using test::fake_env;

platform_identity identity_of(const session_options& o, std::map<std::string, std::string> env,
                              std::vector<gpushare::notice>* notices = nullptr) {
  const auto r = resolve_options(o, fake_env(std::move(env)));
  if (notices != nullptr) *notices = r.notices;
  return r.identity;
}

const std::map<std::string, std::string> full_env = {{"GPUSHARE_POD_NAME", "infer-7d9f-x2k.v1"},
                                                     {"GPUSHARE_POD_NAMESPACE", "team-a"},
                                                     {"GPUSHARE_CONTAINER_NAME", "server"},
                                                     {"SLURM_JOB_ID", "4242"},
                                                     {"SLURM_STEP_ID", "3"},
                                                     {"SLURM_ARRAY_JOB_ID", "4200"},
                                                     {"SLURM_ARRAY_TASK_ID", "7"}};

} // namespace

TEST_CASE("identity: every variable is read with its exact value") {
  std::vector<gpushare::notice> n;
  const platform_identity id = identity_of({}, full_env, &n);
  CHECK(id.pod == "infer-7d9f-x2k.v1");
  CHECK(id.pod_namespace == "team-a");
  CHECK(id.container == "server");
  CHECK(id.slurm_job_id == 4242u);
  CHECK(id.slurm_step_id == 3u);
  CHECK(id.slurm_array_job_id == 4200u);
  CHECK(id.slurm_array_task_id == 7u);
  CHECK(n.empty());
  CHECK(identity_of({}, {}).empty());
}

TEST_CASE("identity: GPUSHARE_* variables win over the conventional ones") {
  const auto id = identity_of({}, {{"GPUSHARE_POD_NAME", "a"},
                                   {"POD_NAME", "b"},
                                   {"GPUSHARE_POD_NAMESPACE", "ns1"},
                                   {"POD_NAMESPACE", "ns2"},
                                   {"SLURM_JOB_ID", "10"},
                                   {"SLURM_JOBID", "11"},
                                   {"SLURM_STEP_ID", "1"},
                                   {"SLURM_STEPID", "2"}});
  CHECK(id.pod == "a");
  CHECK(id.pod_namespace == "ns1");
  CHECK(id.slurm_job_id == 10u);
  CHECK(id.slurm_step_id == 1u);
  const auto fallback = identity_of(
      {},
      {{"POD_NAME", "b"}, {"POD_NAMESPACE", "ns2"}, {"SLURM_JOBID", "11"}, {"SLURM_STEPID", "2"}});
  CHECK(fallback.pod == "b");
  CHECK(fallback.pod_namespace == "ns2");
  CHECK(fallback.slurm_job_id == 11u);
  CHECK(fallback.slurm_step_id == 2u);
  CHECK(fallback.container.empty()); // no fallback for the container
}

TEST_CASE("identity: a value set in code wins, and an empty string there means none") {
  session_options o;
  o.pod = "coded";
  o.pod_namespace = "";
  o.slurm_job_id = 99;
  o.slurm_step_id = gpushare::slurm_batch_step;
  const auto id = identity_of(o, full_env);
  CHECK(id.pod == "coded");
  CHECK(id.pod_namespace.empty()); // the environment is not read for it
  CHECK(id.container == "server");
  CHECK(id.slurm_job_id == 99u);
  CHECK(id.slurm_step_id == gpushare::slurm_batch_step);
  session_options bad;
  bad.container = "Bad_Name";
  const auto e = test::thrown([&] { resolve_options(bad, fake_env({})); });
  REQUIRE(e);
  CHECK(e->code() == errc::invalid_argument);
  CHECK(std::string(e->what()).find("session_options::container \"Bad_Name\" is not valid") !=
        std::string::npos);
}

TEST_CASE("identity: an invalid variable is ignored with one notice that names it") {
  const std::string long_pod(254, 'a');
  std::vector<gpushare::notice> n;
  const auto id = identity_of({},
                              {{"GPUSHARE_POD_NAME", long_pod},
                               {"POD_NAME", "fallback"},
                               {"GPUSHARE_POD_NAMESPACE", "Team_A"},
                               {"GPUSHARE_CONTAINER_NAME", "-x"},
                               {"SLURM_JOB_ID", "12a"},
                               {"SLURM_STEP_ID", "4294967296"},
                               {"SLURM_ARRAY_TASK_ID", ""}},
                              &n);
  CHECK(id.empty());      // the first variable set decides; an invalid one is not replaced
  REQUIRE(n.size() == 6); // a variable set but empty is no value either
  CHECK(n[0].severity == gpushare::notice::kind::warning);
  CHECK(n[0].text.find("environment variable GPUSHARE_POD_NAME=") == 0);
  CHECK(n[0].text.find("it has 254 characters; the most is 253") != std::string::npos);
  CHECK(n[1].text.find(
            "GPUSHARE_POD_NAMESPACE=\"Team_A\" is ignored: it is no Kubernetes namespace") !=
        std::string::npos);
  CHECK(n[1].text.find("only lower-case letters, digits and '-'") != std::string::npos);
  CHECK(n[2].text.find("must start and end with a lower-case letter or a digit") !=
        std::string::npos);
  CHECK(n[3].text.find("SLURM_JOB_ID=\"12a\" is ignored: it is not a decimal number") !=
        std::string::npos);
  CHECK(n[4].text.find("SLURM_STEP_ID=\"4294967296\"") != std::string::npos);
  CHECK(n[5].text.find("environment variable SLURM_ARRAY_TASK_ID=\"\" is ignored") == 0);
  // 253 characters is the most a pod name has, and is kept whole.
  const std::string max_pod = std::string(252, 'b') + "1";
  CHECK(identity_of({}, {{"POD_NAME", max_pod}}).pod == max_pod);
}

TEST_CASE("identity: Slurm's step ids, special steps included") {
  CHECK(d::parse_slurm_step("0") == 0u);
  CHECK(d::parse_slurm_step("4294967291") == gpushare::slurm_batch_step);
  CHECK(d::parse_slurm_step("batch") == gpushare::slurm_batch_step);
  CHECK(d::parse_slurm_step("extern") == gpushare::slurm_extern_step);
  CHECK(d::parse_slurm_step("interactive") == gpushare::slurm_interactive_step);
  CHECK_FALSE(d::parse_slurm_step("-1"));
  CHECK_FALSE(d::parse_slurm_step(" 1"));
  CHECK(d::slurm_step_text(gpushare::slurm_extern_step) == "extern");
  CHECK(d::slurm_step_text(12) == "12");
  CHECK(d::parse_slurm_id("4294967295") == 4294967295u);
  CHECK_FALSE(d::parse_slurm_id("99999999999"));
}

TEST_CASE("identity: how status shows it") {
  platform_identity id = identity_of({}, full_env);
  CHECK(d::identity_text(id) == "team-a/infer-7d9f-x2k.v1/server job 4200_7.3");
  id.slurm_array_job_id.reset();
  CHECK(d::identity_text(id) == "team-a/infer-7d9f-x2k.v1/server job 4242.3");
  CHECK(d::identity_text(identity_of({}, {{"POD_NAME", "p"}})) == "p");
  CHECK(d::identity_text(identity_of({}, {{"SLURM_JOB_ID", "5"}, {"SLURM_STEP_ID", "batch"}})) ==
        "job 5.batch");
  CHECK(d::identity_text({}).empty());
}

TEST_CASE("identity: a slot records it whole and a snapshot reads it back") {
  alignas(64) static d::slot_record slot;
  std::memset(static_cast<void*>(&slot), 0, sizeof slot);
  platform_identity id = identity_of({}, full_env);
  id.pod = std::string(252, 'p') + "9"; // the longest a pod name may be
  d::write_platform(slot.platform, id);
  CHECK(d::read_platform(slot.platform) == id);
  d::slot_platform none{};
  CHECK(d::read_platform(none).empty());
  d::slot_platform job_zero{};
  d::write_platform(job_zero, identity_of({}, {{"SLURM_JOB_ID", "0"}}));
  CHECK(d::read_platform(job_zero).slurm_job_id == 0u); // 0 is a value, not "none"
}
