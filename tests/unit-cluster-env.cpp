// SPDX-License-Identifier: Apache-2.0
// Cluster schedulers' limits as fallbacks (detail/cluster_env.hpp, docs/cluster-env.md): every
// mapped format, the per-device forms, precedence against the code and GPUSHARE_*, the variables
// that are not mapped, and bad values.
#include <gpushare/detail/cluster_env.hpp>
#include <gpushare/options.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <doctest/doctest.h>

#include "test_util.hpp"

namespace {

namespace d = gpushare::detail;
using gpushare::errc;
using gpushare::memory_amount;
using gpushare::resolve_options;
using gpushare::resolved_options;
using gpushare::session_options;
using test::fake_env;

constexpr std::uint64_t KiB = 1024, MiB = KiB * 1024, GiB = MiB * 1024, TiB = GiB * 1024;

resolved_options resolve(std::map<std::string, std::string> env, session_options o = {}) {
  return resolve_options(o, fake_env(std::move(env)));
}

std::optional<std::uint64_t> limit_bytes(const resolved_options& r) {
  if (!r.memory_limit) return std::nullopt;
  REQUIRE(r.memory_limit->kind == memory_amount::unit::bytes);
  return r.memory_limit->value;
}

/// resolve(env) throws invalid_environment with every fragment in its message.
void check_bad(std::map<std::string, std::string> env,
               std::initializer_list<std::string_view> parts) {
  const auto e = test::thrown([&] { resolve(env); });
  REQUIRE(e);
  CHECK(e->code() == errc::invalid_environment);
  for (std::string_view p : parts)
    CHECK_MESSAGE(std::string(e->what()).find(p) != std::string::npos, e->what());
}

} // namespace

TEST_CASE("cluster env: HAMi-core's memory forms") {
  CHECK(d::parse_hami_memory("1g") == GiB);
  CHECK(d::parse_hami_memory("1G") == GiB);
  CHECK(d::parse_hami_memory("1024m") == GiB);
  CHECK(d::parse_hami_memory("3000M") == 3000 * MiB);
  CHECK(d::parse_hami_memory("1048576k") == GiB);
  CHECK(d::parse_hami_memory("1073741824") == GiB);
  CHECK(d::parse_hami_memory("8589934592g") == std::uint64_t{1} << 63); // the most
  CHECK(d::parse_hami_memory("0") == std::nullopt);                     // HAMi's "no limit"
  CHECK(d::parse_hami_memory("0m") == std::nullopt);
  for (const char* bad :
       {"", "g", "1.5g", "1gb", "1GiB", "-1", "0x10", " 1g", "1 g", "8589934593g"})
    CHECK_MESSAGE(test::thrown([&] { (void)d::parse_hami_memory(bad); }), std::string(bad));
}

TEST_CASE("cluster env: HAMi-core's SM limit is a percentage; 0 and 100 mean none") {
  CHECK(d::parse_hami_sm_limit_ppm("30") == 300'000u);
  CHECK(d::parse_hami_sm_limit_ppm("1") == 10'000u);
  CHECK(d::parse_hami_sm_limit_ppm("99") == 990'000u);
  CHECK(d::parse_hami_sm_limit_ppm("0") == std::nullopt);
  CHECK(d::parse_hami_sm_limit_ppm("100") == std::nullopt);
  for (const char* bad : {"101", "30%", "12.5", "-5", ""})
    CHECK_MESSAGE(test::thrown([&] { (void)d::parse_hami_sm_limit_ppm(bad); }), std::string(bad));
}

TEST_CASE("cluster env: MPS's pinned-memory list picks the session's device") {
  CHECK(d::parse_mps_pinned_limit("0=1G,1=512M", 0) == GiB);
  CHECK(d::parse_mps_pinned_limit("0=1G,1=512M", 1) == 512 * MiB);
  CHECK(d::parse_mps_pinned_limit("0=1G,1=512M", 2) == std::nullopt);
  CHECK(d::parse_mps_pinned_limit("1=2GB", 1) == 2 * GiB);
  CHECK(d::parse_mps_pinned_limit("0=4096m", 0) == 4096 * MiB);
  CHECK(d::parse_mps_pinned_limit("0=64k", 0) == 64 * KiB);
  CHECK(d::parse_mps_pinned_limit("0=1t", 0) == TiB);
  for (const char* bad : {"1G", "0=1G,", "0=", "0=1", "0=1.5G", "x=1G", "0=1G;1=2G", "=1G"})
    CHECK_MESSAGE(test::thrown([&] { (void)d::parse_mps_pinned_limit(bad, 0); }), std::string(bad));
}

TEST_CASE("cluster env: a memory limit from HAMi or MPS when nothing else sets one") {
  const auto r = resolve({{"CUDA_DEVICE_MEMORY_LIMIT", "2g"}});
  CHECK(limit_bytes(r) == 2 * GiB);
  CHECK(r.memory_limit_from_cluster == "CUDA_DEVICE_MEMORY_LIMIT=2g");
  CHECK(r.memory_limit_given == "CUDA_DEVICE_MEMORY_LIMIT=2g");
  REQUIRE(r.notices.size() == 1);
  CHECK(r.notices[0].severity == gpushare::notice::kind::note);
  CHECK(r.notices[0].text.find("memory limit is 2.00 GiB, from CUDA_DEVICE_MEMORY_LIMIT=2g") !=
        std::string::npos);
  // HAMi's per-device form wins over its form for all devices (HAMi-core's own order).
  CHECK(limit_bytes(resolve({{"CUDA_DEVICE_MEMORY_LIMIT", "2g"},
                             {"CUDA_DEVICE_MEMORY_LIMIT_0", "3000m"}})) == 3000 * MiB);
  // ... unless it is 0 (HAMi's "none"): then the form for all devices applies.
  CHECK(limit_bytes(resolve(
            {{"CUDA_DEVICE_MEMORY_LIMIT", "2g"}, {"CUDA_DEVICE_MEMORY_LIMIT_0", "0"}})) == 2 * GiB);
  CHECK(limit_bytes(resolve({{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1G,1=2G"}})) == GiB);
  // Both apply at once: the smaller.
  CHECK(limit_bytes(resolve({{"CUDA_DEVICE_MEMORY_LIMIT_0", "3g"},
                             {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1G"}})) == GiB);
  CHECK(limit_bytes(resolve({{"CUDA_DEVICE_MEMORY_LIMIT_0", "512m"},
                             {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1G"}})) == 512 * MiB);
  CHECK_FALSE(resolve({{"CUDA_DEVICE_MEMORY_LIMIT", ""}}).memory_limit); // empty: unset
  CHECK(resolve({}).notices.empty());
}

TEST_CASE("cluster env: the device ordinal picks the per-device values") {
  session_options o;
  o.device_ordinal = 1;
  const std::map<std::string, std::string> env = {
      {"CUDA_DEVICE_MEMORY_LIMIT_0", "1g"},
      {"CUDA_DEVICE_MEMORY_LIMIT_1", "5g"},
      {"CUDA_DEVICE_SM_LIMIT_0", "20"},
      {"CUDA_DEVICE_SM_LIMIT_1", "40"},
      {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=9G,1=6G"}};
  const auto r = resolve(env, o);
  CHECK(limit_bytes(r) == 5 * GiB);
  CHECK(r.compute_limit_ppm == 400'000u);
  const auto r0 = resolve(env); // unset: device 0
  CHECK(limit_bytes(r0) == GiB);
  CHECK(r0.compute_limit_ppm == 200'000u);
  o.device_ordinal = 2; // named by no per-device form, and no form for all devices
  const auto r2 = resolve(env, o);
  CHECK_FALSE(r2.memory_limit);
  CHECK(r2.compute_limit_ppm == 1'000'000u);
  o.device_ordinal = -1;
  const auto e = test::thrown([&] { resolve(env, o); });
  REQUIRE(e);
  CHECK(e->code() == errc::invalid_argument);
}

TEST_CASE("cluster env: the code and GPUSHARE_* win; the scheduler's variable is not read then") {
  const std::map<std::string, std::string> hami = {{"CUDA_DEVICE_MEMORY_LIMIT", "not-a-size"},
                                                   {"CUDA_DEVICE_SM_LIMIT", "bad"}};
  auto env = hami;
  env["GPUSHARE_MEMORY_LIMIT"] = "1GiB";
  env["GPUSHARE_COMPUTE_LIMIT"] = "50%";
  const auto r = resolve(env);
  CHECK(limit_bytes(r) == GiB);
  CHECK(r.compute_limit_ppm == 500'000u);
  CHECK(r.memory_limit_from_cluster.empty());
  CHECK(r.notices.empty());
  session_options o;
  o.memory_limit = memory_amount::of_bytes(3 * GiB);
  o.compute_limit_ppm = 250'000;
  const auto coded = resolve(hami, o);
  CHECK(limit_bytes(coded) == 3 * GiB);
  CHECK(coded.compute_limit_ppm == 250'000u);
}

TEST_CASE("cluster env: a compute limit from HAMi's SM limit") {
  const auto r = resolve({{"CUDA_DEVICE_SM_LIMIT", "30"}});
  CHECK(r.compute_limit_ppm == 300'000u);
  CHECK(r.compute_limit_from_cluster == "CUDA_DEVICE_SM_LIMIT=30");
  REQUIRE(r.notices.size() == 1);
  CHECK(r.notices[0].text.find("compute limit is 30%, from CUDA_DEVICE_SM_LIMIT=30") !=
        std::string::npos);
  CHECK(resolve({{"CUDA_DEVICE_SM_LIMIT", "100"}}).compute_limit_ppm == 1'000'000u);
  CHECK(resolve({{"CUDA_DEVICE_SM_LIMIT", "0"}}).compute_limit_ppm == 1'000'000u);
  // The per-device 0 is HAMi's "no limit" for that device, not "use the other variable".
  CHECK(resolve({{"CUDA_DEVICE_SM_LIMIT", "30"}, {"CUDA_DEVICE_SM_LIMIT_0", "0"}})
            .compute_limit_ppm == 1'000'000u);
}

TEST_CASE("cluster env: variables whose meaning differs are not read") {
  const auto r = resolve({{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25"},
                          {"GPU_PORTION", "0.5"},
                          {"RUNAI_NUM_OF_GPUS", "0.5"},
                          {"GPU_FRACTION", "0.5"}});
  CHECK(r.compute_limit_ppm == 1'000'000u);
  CHECK_FALSE(r.memory_limit);
  CHECK(r.notices.empty());
}

TEST_CASE("cluster env: a bad value throws invalid_environment naming it and its override") {
  check_bad({{"CUDA_DEVICE_MEMORY_LIMIT", "2 GiB"}},
            {"environment variable CUDA_DEVICE_MEMORY_LIMIT=\"2 GiB\" is invalid",
             "HAMi-core's forms", "because GPUSHARE_MEMORY_LIMIT is unset",
             "or set GPUSHARE_MEMORY_LIMIT to override it"});
  check_bad({{"CUDA_DEVICE_MEMORY_LIMIT_0", "lots"}}, {"CUDA_DEVICE_MEMORY_LIMIT_0=\"lots\""});
  check_bad({{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "1G"}},
            {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=\"1G\" is invalid",
             "\"1G\" is no <device>=<amount> pair"});
  // A malformed pair is refused even when it is another device's.
  check_bad({{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1G,1=2X"}},
            {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"});
  check_bad({{"CUDA_DEVICE_SM_LIMIT", "150"}},
            {"CUDA_DEVICE_SM_LIMIT=\"150\" is invalid", "GPUSHARE_COMPUTE_LIMIT"});
}

TEST_CASE(
    "cluster env: a guarantee above a cluster memory limit is refused as from the environment") {
  const auto e = test::thrown([] {
    resolve({{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}, {"GPUSHARE_MEMORY_GUARANTEE", "2GiB"}});
  });
  REQUIRE(e);
  CHECK(e->code() == errc::invalid_environment);
  CHECK(std::string(e->what()).find("CUDA_DEVICE_MEMORY_LIMIT=1g") != std::string::npos);
}

TEST_CASE("cluster env: which variables are the platform's") {
  for (const char* v : {"POD_NAME", "GPUSHARE_POD_NAMESPACE", "SLURM_STEP_ID", "SLURM_JOBID",
                        "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT_3",
                        "CUDA_DEVICE_SM_LIMIT_0", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"})
    CHECK_MESSAGE(d::is_platform_variable(v), v);
  for (const char* v : {"CUDA_DEVICE_MEMORY_LIMITS", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                        "SLURM_NTASKS", "GPUSHARE_MEMORY_LIMIT", "GPU_PORTION"})
    CHECK_FALSE_MESSAGE(d::is_platform_variable(v), v);
}
