// SPDX-License-Identifier: Apache-2.0
// resolve_options(): code > environment > defaults, and the errors for bad values.
#include <gpushare/options.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <doctest/doctest.h>

#include "test_util.hpp"

namespace {

using gpushare::errc;
using gpushare::memory_amount;
using gpushare::resolve_options;
using gpushare::resolved_options;
using gpushare::session_options;
using gpushare::table_access;

constexpr std::uint64_t GiB = std::uint64_t{1} << 30;

using test::fake_env;

const gpushare::env_lookup no_env = fake_env({});

using test::thrown;

/// resolve_options(opts, env) throws `code` with every fragment in its message.
void check_error(const session_options& opts, const gpushare::env_lookup& env, errc code,
                 std::initializer_list<std::string_view> parts) {
  const auto e = thrown([&] { resolve_options(opts, env); });
  REQUIRE_MESSAGE(e.has_value(), "no gpushare::error thrown");
  CHECK(e->code() == code);
  const std::string what = e->what();
  for (const auto part : parts)
    CHECK_MESSAGE(what.find(part) != std::string::npos, "\"", part, "\" not in: ", what);
}

/// One bad environment variable: invalid_environment naming it and quoting its value.
void check_bad_env(const std::string& var, const std::string& value,
                   std::initializer_list<std::string_view> parts = {}) {
  CAPTURE(var);
  CAPTURE(value);
  check_error({}, fake_env({{var, value}}), errc::invalid_environment,
              {var, gpushare::detail::quote(value)}); // the value, escaped
  if (parts.size() != 0)
    check_error({}, fake_env({{var, value}}), errc::invalid_environment, parts);
}

} // namespace

TEST_CASE("defaults") {
  const resolved_options r = resolve_options({}, no_env);
  CHECK(!r.name.empty());
  CHECK(r.name.size() <= gpushare::detail::max_session_name_length);
  CHECK_NOTHROW(gpushare::detail::validate_session_name(r.name));
  CHECK(r.priority == gpushare::priority::normal);
  CHECK(r.share == gpushare::default_share);
  CHECK(r.compute_limit_ppm == 1'000'000);
  CHECK(!r.memory_limit.has_value());
  CHECK(r.memory_guarantee == memory_amount::of_bytes(0));
  CHECK(r.domain == "default");
  CHECK(r.access == table_access::user);
  CHECK(r.capacity == (std::uint64_t{1} << 63));
  CHECK(r.open_timeout == std::chrono::milliseconds(5000));
}

TEST_CASE("the default name is the program's name") {
  // The kernel names the process after the file it executed, cut to 15 bytes (comm); the
  // program is this test's executable, whatever it is called (gpushare_unit_tests).
  std::string exe(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", exe.data(), exe.size());
  REQUIRE(n > 0);
  exe.resize(static_cast<std::size_t>(n));
  const std::string program = exe.substr(exe.rfind('/') + 1).substr(0, 15);
  const resolved_options r = resolve_options({}, no_env);
  CHECK(r.name == program);
}

TEST_CASE("environment values are used when code sets nothing") {
  const auto env = fake_env({{"GPUSHARE_DOMAIN", "team-a"},
                             {"GPUSHARE_PRIORITY", "high"},
                             {"GPUSHARE_SHARE", "3"},
                             {"GPUSHARE_COMPUTE_LIMIT", "12.5%"},
                             {"GPUSHARE_MEMORY_LIMIT", "8GiB"},
                             {"GPUSHARE_MEMORY_GUARANTEE", "1.5 GiB"},
                             {"GPUSHARE_TABLE_MODE", "0660"},
                             {"GPUSHARE_NAME", "env name"}});
  const resolved_options r = resolve_options({}, env);
  CHECK(r.domain == "team-a");
  CHECK(r.priority == gpushare::priority::high);
  CHECK(r.share == 3);
  CHECK(r.compute_limit_ppm == 125'000);
  CHECK(r.memory_limit == memory_amount::of_bytes(8 * GiB));
  CHECK(r.memory_guarantee == memory_amount::of_bytes(1610612736));
  CHECK(r.access == table_access::group);
  CHECK(r.name == "env name");
}

TEST_CASE("values set in code win over the environment") {
  const auto env = fake_env({{"GPUSHARE_DOMAIN", "team-a"},
                             {"GPUSHARE_PRIORITY", "high"},
                             {"GPUSHARE_SHARE", "3"},
                             {"GPUSHARE_COMPUTE_LIMIT", "12.5%"},
                             {"GPUSHARE_MEMORY_LIMIT", "8GiB"},
                             {"GPUSHARE_MEMORY_GUARANTEE", "1GiB"},
                             {"GPUSHARE_TABLE_MODE", "group"},
                             {"GPUSHARE_NAME", "env name"}});
  session_options o;
  o.domain = "code";
  o.priority = 6;
  o.share = 10;
  o.compute_limit_ppm = 500'000;
  o.memory_limit = memory_amount::of_ppm(250'000);
  o.memory_guarantee = memory_amount::of_ppm(100'000);
  o.access = table_access::user;
  o.name = "code name";
  o.capacity = 16 * GiB;
  o.open_timeout = std::chrono::milliseconds(10);
  const resolved_options r = resolve_options(o, env);
  CHECK(r.domain == "code");
  CHECK(r.priority == 6);
  CHECK(r.share == 10);
  CHECK(r.compute_limit_ppm == 500'000);
  CHECK(r.memory_limit == memory_amount::of_ppm(250'000));
  CHECK(r.memory_guarantee == memory_amount::of_ppm(100'000));
  CHECK(r.access == table_access::user);
  CHECK(r.name == "code name");
  CHECK(r.capacity == 16 * GiB);
  CHECK(r.open_timeout == std::chrono::milliseconds(10));
}

TEST_CASE("code, environment and defaults mix field by field") {
  session_options o;
  o.share = 5;
  const resolved_options r = resolve_options(
      o, fake_env({{"GPUSHARE_SHARE", "not even a number"}, {"GPUSHARE_PRIORITY", "critical"}}));
  CHECK(r.share == 5); // the bad variable is never looked at: code wins
  CHECK(r.priority == gpushare::priority::critical);
  CHECK(r.domain == "default");
}

TEST_CASE("bad environment values throw invalid_environment") {
  check_bad_env("GPUSHARE_MEMORY_LIMIT", "-1", {"sign", "GiB", "20%"});
  check_bad_env("GPUSHARE_MEMORY_LIMIT", "1e99GiB", {"not a unit"});
  check_bad_env("GPUSHARE_MEMORY_LIMIT", "18446744073709551616", {"too large"});
  check_bad_env("GPUSHARE_MEMORY_LIMIT", "101%", {"0% to 100%"});
  check_bad_env("GPUSHARE_MEMORY_GUARANTEE", "1.5", {"whole"});
  check_bad_env("GPUSHARE_COMPUTE_LIMIT", "30%%", {"one '%'"});
  check_bad_env("GPUSHARE_COMPUTE_LIMIT", "30", {"write \"30%\""});
  check_bad_env("GPUSHARE_COMPUTE_LIMIT", "0%", {"greater than 0%"});
  check_bad_env("GPUSHARE_PRIORITY", "urgent", {"low, normal, high or critical"});
  check_bad_env("GPUSHARE_PRIORITY", "8");
  check_bad_env("GPUSHARE_SHARE", "0", {"from 1 to 1000000"});
  check_bad_env("GPUSHARE_TABLE_MODE", "0644", {"\"0660\""});
  check_bad_env("GPUSHARE_DOMAIN", "a/b", {"position 1"});
  check_bad_env("GPUSHARE_DOMAIN", ".x", {"start with '.'"});
  check_bad_env("GPUSHARE_NAME", "bad\tname", {"\"bad\\x09name\"", "position 3"});
}

TEST_CASE("a set but empty environment variable is an error") {
  for (const char* var : {"GPUSHARE_DOMAIN", "GPUSHARE_PRIORITY", "GPUSHARE_SHARE",
                          "GPUSHARE_COMPUTE_LIMIT", "GPUSHARE_MEMORY_LIMIT",
                          "GPUSHARE_MEMORY_GUARANTEE", "GPUSHARE_TABLE_MODE", "GPUSHARE_NAME"}) {
    CAPTURE(var);
    check_error({}, fake_env({{var, ""}}), errc::invalid_environment,
                {var, "set but empty", "unset it or give a value"});
  }
}

TEST_CASE("a long bad environment value is quoted in part") {
  const std::string value = std::string(5000, '7') + "x";
  const auto e = thrown([&] { resolve_options({}, fake_env({{"GPUSHARE_SHARE", value}})); });
  REQUIRE(e.has_value());
  CHECK(e->code() == errc::invalid_environment);
  const std::string what = e->what();
  CHECK(what.find("GPUSHARE_SHARE") != std::string::npos);
  CHECK(what.find(std::string(60, '7')) != std::string::npos);
  CHECK(what.find(std::string(61, '7')) == std::string::npos);
  CHECK(what.size() < 500);
}

TEST_CASE("bad values set in code throw invalid_argument") {
  const auto with = [](auto set) {
    session_options o;
    set(o);
    return o;
  };
  check_error(with([](session_options& o) { o.name = ""; }), no_env, errc::invalid_argument,
              {"session name", "empty"});
  check_error(with([](session_options& o) { o.name = std::string(10'000, 'n'); }), no_env,
              errc::invalid_argument, {"10000 bytes"});
  check_error(with([](session_options& o) { o.domain = "../etc"; }), no_env, errc::invalid_argument,
              {"invalid domain", "\"/\""});
  check_error(with([](session_options& o) { o.share = 0; }), no_env, errc::invalid_argument,
              {"session_options::share", "from 1 to 1000000"});
  check_error(with([](session_options& o) { o.share = 1'000'001; }), no_env, errc::invalid_argument,
              {"session_options::share"});
  check_error(with([](session_options& o) { o.priority = -1; }), no_env, errc::invalid_argument,
              {"session_options::priority", "from 0 to 7"});
  check_error(with([](session_options& o) { o.priority = 8; }), no_env, errc::invalid_argument,
              {"session_options::priority"});
  check_error(with([](session_options& o) { o.compute_limit_ppm = 0; }), no_env,
              errc::invalid_argument, {"session_options::compute_limit_ppm"});
  check_error(with([](session_options& o) { o.compute_limit_ppm = 1'000'001; }), no_env,
              errc::invalid_argument, {"session_options::compute_limit_ppm"});
  check_error(with([](session_options& o) { o.memory_limit = memory_amount::of_ppm(1'000'001); }),
              no_env, errc::invalid_argument, {"session_options::memory_limit"});
  check_error(
      with([](session_options& o) { o.memory_guarantee = memory_amount::of_ppm(2'000'000); }),
      no_env, errc::invalid_argument, {"session_options::memory_guarantee"});
  check_error(with([](session_options& o) { o.access = static_cast<table_access>(7); }), no_env,
              errc::invalid_argument, {"session_options::access"});
  check_error(with([](session_options& o) { o.capacity = (std::uint64_t{1} << 63) + 1; }), no_env,
              errc::invalid_argument, {"session_options::capacity", "2^63"});
  check_error(with([](session_options& o) { o.open_timeout = std::chrono::milliseconds(-1); }),
              no_env, errc::invalid_argument, {"open_timeout"});
}

TEST_CASE("edge values set in code are accepted") {
  session_options o;
  o.priority = gpushare::max_priority;
  o.share = gpushare::max_share;
  o.compute_limit_ppm = 1;
  o.memory_limit = memory_amount::of_ppm(1'000'000);
  o.memory_guarantee = memory_amount::of_ppm(1'000'000);
  o.capacity = std::uint64_t{1} << 63;
  o.name = std::string(63, 'n');
  o.domain = std::string(32, 'd');
  const resolved_options r = resolve_options(o, no_env);
  CHECK(r.priority == 7);
  CHECK(r.share == 1'000'000);
  CHECK(r.compute_limit_ppm == 1);
  CHECK(r.capacity == (std::uint64_t{1} << 63));
  o.capacity = 0;
  CHECK(resolve_options(o, no_env).capacity == (std::uint64_t{1} << 63));
}

TEST_CASE("a guarantee above the limit in the same unit is rejected") {
  session_options o;
  o.memory_limit = memory_amount::of_bytes(4 * GiB);
  o.memory_guarantee = memory_amount::of_bytes(8 * GiB);
  check_error(o, no_env, errc::invalid_argument,
              {"guarantee 8.00 GiB", "limit 4.00 GiB", "session_options::memory_guarantee"});

  o.memory_limit = memory_amount::of_ppm(200'000);
  o.memory_guarantee = memory_amount::of_ppm(300'000);
  check_error(o, no_env, errc::invalid_argument, {"guarantee 30%", "limit 20%"});

  // From the environment: invalid_environment, naming the variable.
  check_error({},
              fake_env({{"GPUSHARE_MEMORY_LIMIT", "1GiB"}, {"GPUSHARE_MEMORY_GUARANTEE", "2GiB"}}),
              errc::invalid_environment, {"GPUSHARE_MEMORY_GUARANTEE", "GPUSHARE_MEMORY_LIMIT"});
  session_options limit_only;
  limit_only.memory_limit = memory_amount::of_bytes(GiB);
  check_error(limit_only, fake_env({{"GPUSHARE_MEMORY_GUARANTEE", "2GiB"}}),
              errc::invalid_environment,
              {"GPUSHARE_MEMORY_GUARANTEE", "session_options::memory_limit"});
}

TEST_CASE("a guarantee equal to the limit, or in another unit, passes here") {
  session_options o;
  o.memory_limit = memory_amount::of_bytes(4 * GiB);
  o.memory_guarantee = memory_amount::of_bytes(4 * GiB);
  CHECK_NOTHROW(resolve_options(o, no_env));
  o.memory_guarantee = memory_amount::of_ppm(900'000); // checked at join, against the capacity
  CHECK_NOTHROW(resolve_options(o, no_env));
  o.memory_limit.reset(); // no limit: any guarantee passes here
  o.memory_guarantee = memory_amount::of_bytes(100 * GiB);
  CHECK_NOTHROW(resolve_options(o, no_env));
}

TEST_CASE("process_environment reads the real environment") {
  REQUIRE(::setenv("GPUSHARE_TEST_UNIT_OPTIONS", "42", 1) == 0);
  CHECK(gpushare::process_environment("GPUSHARE_TEST_UNIT_OPTIONS") == std::string("42"));
  REQUIRE(::setenv("GPUSHARE_TEST_UNIT_OPTIONS", "", 1) == 0);
  CHECK(gpushare::process_environment("GPUSHARE_TEST_UNIT_OPTIONS") == std::string());
  REQUIRE(::unsetenv("GPUSHARE_TEST_UNIT_OPTIONS") == 0);
  CHECK(!gpushare::process_environment("GPUSHARE_TEST_UNIT_OPTIONS").has_value());

  REQUIRE(::setenv("GPUSHARE_SHARE", "", 1) == 0);
  check_error({}, gpushare::process_environment, errc::invalid_environment,
              {"GPUSHARE_SHARE", "set but empty"});
  REQUIRE(::setenv("GPUSHARE_SHARE", "17", 1) == 0);
  CHECK(resolve_options({}).share == 17); // the default lookup is process_environment
  REQUIRE(::unsetenv("GPUSHARE_SHARE") == 0);
}

TEST_CASE("GPUSHARE_QUANTUM and GPUSHARE_HANDOVER: environment, code and defaults") {
  std::map<std::string, std::string> vars{{"GPUSHARE_QUANTUM", "2ms"},
                                          {"GPUSHARE_HANDOVER", "yield"}};
  auto env = [&](const char* n) -> std::optional<std::string> {
    auto it = vars.find(n);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  gpushare::session_options o;
  auto r = gpushare::resolve_options(o, env);
  CHECK(r.quantum_ns == 2'000'000);
  CHECK(r.handover == gpushare::handover_point::at_yield);
  o.quantum = std::chrono::microseconds(300);
  o.handover = gpushare::handover_point::at_guard;
  r = gpushare::resolve_options(o, env);
  CHECK(r.quantum_ns == 300'000);
  CHECK(r.handover == gpushare::handover_point::at_guard);
  vars.clear();
  r = gpushare::resolve_options(gpushare::session_options{}, env);
  CHECK(r.quantum_ns == 5'000'000);
  vars["GPUSHARE_QUANTUM"] = "20s";
  try {
    (void)gpushare::resolve_options(gpushare::session_options{}, env);
    FAIL("accepted a 20 s quantum");
  } catch (const gpushare::error& e) {
    CHECK(e.code() == gpushare::errc::invalid_environment);
    CHECK(std::string(e.what()).find("GPUSHARE_QUANTUM") != std::string::npos);
  }
  gpushare::session_options tiny;
  tiny.quantum = std::chrono::nanoseconds(10);
  CHECK_THROWS_AS(gpushare::resolve_options(tiny, env), gpushare::error);
}

TEST_CASE("memory_amount::resolve never truncates a 128-bit product to 64 bits") {
  // Issue 13, item 10: 200% of 2^63 bytes truncated to 0 bytes. Every entry point refuses a
  // fraction over 100%; resolve() itself saturates.
  using gpushare::memory_amount;
  constexpr std::uint64_t cap = std::uint64_t{1} << 63;
  CHECK(memory_amount::of_ppm(1'000'000).resolve(cap) == cap);
  CHECK(memory_amount::of_ppm(500'000).resolve(cap) == cap / 2);
  CHECK(memory_amount::of_ppm(2'000'000).resolve(cap) == UINT64_MAX);
  CHECK(memory_amount::of_ppm(UINT64_MAX).resolve(UINT64_MAX) == UINT64_MAX);
  CHECK(memory_amount::of_ppm(2'000'000).resolve(100) == 200);
}

TEST_CASE("group: name, memory limit and share from code or the environment, with their errors") {
  const resolved_options none = resolve_options({}, no_env);
  CHECK(none.group.empty());
  CHECK_FALSE(none.group_memory_limit.has_value());
  CHECK_FALSE(none.group_share.has_value());
  const auto env = fake_env({{"GPUSHARE_GROUP", "pod-7f9c"},
                             {"GPUSHARE_GROUP_MEMORY_LIMIT", "4GiB"},
                             {"GPUSHARE_GROUP_SHARE", "3"}});
  const resolved_options r = resolve_options({}, env);
  CHECK(r.group == "pod-7f9c");
  REQUIRE(r.group_memory_limit.has_value());
  CHECK(r.group_memory_limit->resolve(0) == 4 * GiB);
  CHECK(r.group_memory_limit_given == "GPUSHARE_GROUP_MEMORY_LIMIT=4GiB");
  CHECK(r.group_share == 3u);
  session_options o;
  o.group = "job-42";
  o.group_share = 7;
  const resolved_options c = resolve_options(o, env);
  CHECK(c.group == "job-42");
  CHECK(c.group_share == 7u);
  CHECK(c.group_memory_limit->resolve(0) == 4 * GiB); // the environment fills what code left
  check_error({}, fake_env({{"GPUSHARE_GROUP", "no spaces"}}), errc::invalid_environment,
              {"GPUSHARE_GROUP", "no spaces", "'.', '_' and '-'"});
  check_error({}, fake_env({{"GPUSHARE_GROUP", std::string(48, 'a')}}), errc::invalid_environment,
              {"GPUSHARE_GROUP", "1 to 47"});
  check_error({}, fake_env({{"GPUSHARE_GROUP", "g"}, {"GPUSHARE_GROUP_SHARE", "0"}}),
              errc::invalid_environment, {"GPUSHARE_GROUP_SHARE"});
  check_error({}, fake_env({{"GPUSHARE_GROUP", "g"}, {"GPUSHARE_GROUP_MEMORY_LIMIT", "lots"}}),
              errc::invalid_environment, {"GPUSHARE_GROUP_MEMORY_LIMIT", "lots"});
  // Group settings without a group: an error that says to name the group.
  check_error({}, fake_env({{"GPUSHARE_GROUP_SHARE", "2"}}), errc::invalid_environment,
              {"no group", "GPUSHARE_GROUP"});
  session_options bad;
  bad.group = "has/slash";
  check_error(bad, no_env, errc::invalid_argument, {"group", "has/slash"});
  session_options orphan;
  orphan.group_share = 2;
  check_error(orphan, no_env, errc::invalid_argument, {"no group"});
  session_options empty_in_code;
  empty_in_code.group = "";
  CHECK(resolve_options(empty_in_code, fake_env({{"GPUSHARE_GROUP", "pod-7f9c"}})).group.empty());
}

TEST_CASE("GPUSHARE_PAUSE_HOLD: a ratio to the session's device time, none, and its errors") {
  CHECK(resolve_options({}, no_env).pause_hold_ppm == 2'000'000); // the default: twice
  CHECK(resolve_options({}, no_env).pause_hold_ppm == gpushare::detail::default_pause_hold_ppm);
  for (const auto& [text, ppm] :
       {std::pair{"2", 2'000'000u}, std::pair{"0.5", 500'000u}, std::pair{"100", 100'000'000u},
        std::pair{"0.000001", 1u}, std::pair{"none", 0u}, std::pair{"OFF", 0u},
        std::pair{"0", 0u}}) {
    CAPTURE(text);
    CHECK(resolve_options({}, fake_env({{"GPUSHARE_PAUSE_HOLD", text}})).pause_hold_ppm == ppm);
  }
  session_options code;
  code.pause_hold_ppm = 750'000; // code wins over the environment
  CHECK(resolve_options(code, fake_env({{"GPUSHARE_PAUSE_HOLD", "3"}})).pause_hold_ppm == 750'000);
  check_bad_env("GPUSHARE_PAUSE_HOLD", "101", {"at most 100", "ratio"});
  check_bad_env("GPUSHARE_PAUSE_HOLD", "100.5", {"at most 100"});
  check_bad_env("GPUSHARE_PAUSE_HOLD", "-1", {"sign"});
  check_bad_env("GPUSHARE_PAUSE_HOLD", "2x", {"unexpected characters"});
  check_bad_env("GPUSHARE_PAUSE_HOLD", "50%", {"unexpected characters"});
  check_bad_env("GPUSHARE_PAUSE_HOLD", ".5", {"0.5"});
  check_bad_env("GPUSHARE_PAUSE_HOLD", "1.0000001", {"6 decimals"});
  code.pause_hold_ppm = 100'000'001;
  check_error(code, no_env, errc::invalid_argument, {"session_options::pause_hold_ppm"});
}
