// SPDX-License-Identifier: Apache-2.0
// The one duration grammar (issue 26): every option that takes a duration reads the same units
// (ns, us, ms, s, min, h, any case) and differs only in its range, whether "none" is allowed and
// whether a number alone counts (the CLI's --interval: seconds). Public API only.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>

#include <gpushare/cuda/options.hpp>
#include <gpushare/gpushare.hpp>
#include <gpushare/text.hpp>

#include "test_util.hpp"

namespace {

namespace gs = gpushare;
namespace gc = gpushare::cuda;
using test::fake_env;
using test::thrown;

constexpr std::uint64_t us = 1'000, ms = 1'000'000, s = 1'000'000'000;
constexpr std::uint64_t minute = 60 * s, hour = 3'600 * s;

/// The value `var`=`value` resolves to (session or device option), or the error message.
struct outcome {
  std::optional<std::uint64_t> ns;
  std::string message;
};

outcome resolve_var(const std::string& var, const std::string& value) {
  outcome o;
  try {
    const auto env = fake_env({{var, value}});
    if (var == "GPUSHARE_QUANTUM") o.ns = gs::resolve_options({}, env).quantum_ns;
    if (var == "GPUSHARE_MAX_GUARD") o.ns = gs::resolve_options({}, env).max_guard_ns;
    if (var == "GPUSHARE_RECLAIM_DEADLINE") o.ns = gs::resolve_options({}, env).reclaim_deadline_ns;
    if (var == "GPUSHARE_ALLOC_TIMEOUT")
      o.ns = gc::resolve_device_options({}, env).allocation_timeout_ns;
    if (var == "GPUSHARE_DRAIN_TIMEOUT")
      o.ns = gc::resolve_device_options({}, env).drain_timeout_ns;
    if (var == "GPUSHARE_MAX_IN_FLIGHT")
      o.ns = gc::resolve_device_options({}, env).max_in_flight_ns;
  } catch (const gs::error& e) {
    CHECK(e.code() == gs::errc::invalid_environment);
    o.message = e.what();
  }
  return o;
}

} // namespace

TEST_CASE("format_duration uses the largest unit that holds the value whole") {
  CHECK(gs::format_duration(0) == "0s");
  CHECK(gs::format_duration(1) == "1ns");
  CHECK(gs::format_duration(500 * us) == "500us");
  CHECK(gs::format_duration(1'500 * ms) == "1500ms");
  CHECK(gs::format_duration(10 * s) == "10s");
  CHECK(gs::format_duration(2 * minute) == "2min");
  CHECK(gs::format_duration(90 * s) == "90s");
  CHECK(gs::format_duration(24 * hour) == "24h");
}

TEST_CASE("format then parse gives every value back for random durations and options") {
  std::mt19937_64 rng(20261127); // seeded: a failure reproduces
  const std::uint64_t unit_ns[] = {1, us, ms, s, minute, hour};
  const char* unit_names[] = {"ns", "US", "ms", "S", "Min", "h"};
  for (int i = 0; i < 2'000; ++i) {
    const std::uint64_t lo = rng() % (10 * s);
    const std::uint64_t hi = lo + rng() % (48 * hour);
    const gs::duration_option o{"test duration", lo, hi, false, 0, {}, 0, {}};
    const std::uint64_t ns = lo + rng() % (hi - lo + 1);
    CAPTURE(ns);
    CHECK(gs::parse_duration(gs::format_duration(ns), o) == ns);
    // A decimal with up to 6 digits and any unit (in any case) reads back within 1 ns.
    const std::size_t k = rng() % 6;
    const std::uint64_t whole = ns / unit_ns[k];
    const std::uint64_t micros = (ns % unit_ns[k]) * 1'000'000 / unit_ns[k];
    const std::string frac = std::to_string(1'000'000 + micros).substr(1);
    const std::string text = std::to_string(whole) + "." + frac + unit_names[k];
    CAPTURE(text);
    const gs::duration_option wide{"test duration", 0, hi, false, 0, {}, 0, {}};
    const std::uint64_t back = gs::parse_duration(text, wide); // may round below lo
    CHECK(back <= ns);
    CHECK(ns - back < std::max<std::uint64_t>(unit_ns[k] / 1'000'000, 1));
  }
}

TEST_CASE("each duration option accepts the same units and keeps its own range") {
  struct row {
    const char* var;
    const char* value;
    std::optional<std::uint64_t> ns; ///< nullopt: refused
    const char* says;                ///< in the message when refused
  };
  const row rows[] = {
      {"GPUSHARE_QUANTUM", "500us", 500 * us, ""},
      {"GPUSHARE_QUANTUM", "0.5S", 500 * ms, ""},
      {"GPUSHARE_QUANTUM", "1000ns", us, ""},
      {"GPUSHARE_QUANTUM", "999ns", std::nullopt, "shorter than 1us"},
      {"GPUSHARE_QUANTUM", "1min", std::nullopt, "longer than 10s"},
      {"GPUSHARE_QUANTUM", "5", std::nullopt, "a unit is required"},
      {"GPUSHARE_QUANTUM", "none", std::nullopt, "it must start with a digit"},
      {"GPUSHARE_MAX_GUARD", "30s", 30 * s, ""},
      {"GPUSHARE_MAX_GUARD", "2min", 2 * minute, ""},
      {"GPUSHARE_MAX_GUARD", "1h", hour, ""},
      {"GPUSHARE_MAX_GUARD", "none", 0, ""},
      {"GPUSHARE_MAX_GUARD", "off", 0, ""},
      {"GPUSHARE_MAX_GUARD", "0", 0, ""},
      {"GPUSHARE_MAX_GUARD", "500us", std::nullopt, "shorter than 1ms"},
      {"GPUSHARE_MAX_GUARD", "61min", std::nullopt, "longer than 1h"},
      {"GPUSHARE_RECLAIM_DEADLINE", "2s", 2 * s, ""},
      {"GPUSHARE_RECLAIM_DEADLINE", "500ms", 500 * ms, ""},
      {"GPUSHARE_RECLAIM_DEADLINE", "1h", hour, ""},
      {"GPUSHARE_RECLAIM_DEADLINE", "500us", std::nullopt, "shorter than 1ms"},
      {"GPUSHARE_RECLAIM_DEADLINE", "2h", std::nullopt, "longer than 1h"},
      {"GPUSHARE_RECLAIM_DEADLINE", "none", std::nullopt, "it must start with a digit"},
      {"GPUSHARE_RECLAIM_DEADLINE", "2", std::nullopt, "a unit is required"},
      // Was refused ("500us" had no unit in the timeout grammar); accepted like
      // GPUSHARE_MAX_IN_FLIGHT.
      {"GPUSHARE_DRAIN_TIMEOUT", "500us", 500 * us, ""},
      {"GPUSHARE_DRAIN_TIMEOUT", "2min", 2 * minute, ""},
      {"GPUSHARE_DRAIN_TIMEOUT", "none", gc::no_timeout, ""},
      {"GPUSHARE_DRAIN_TIMEOUT", "0ms", 0, ""},
      {"GPUSHARE_DRAIN_TIMEOUT", "2", std::nullopt, "a unit is required"},
      {"GPUSHARE_ALLOC_TIMEOUT", "1.5h", 90 * minute, ""},
      {"GPUSHARE_ALLOC_TIMEOUT", "infinite", gc::no_timeout, ""},
      {"GPUSHARE_ALLOC_TIMEOUT", "25h", std::nullopt, "longer than 24h"},
      {"GPUSHARE_ALLOC_TIMEOUT", "5 days", std::nullopt, "unknown unit"},
      {"GPUSHARE_MAX_IN_FLIGHT", "500us", 500 * us, ""},
      {"GPUSHARE_MAX_IN_FLIGHT", "2MS", 2 * ms, ""},
      {"GPUSHARE_MAX_IN_FLIGHT", "1min", std::nullopt, "longer than 10s"},
      {"GPUSHARE_MAX_IN_FLIGHT", "none", std::nullopt, "it must start with a digit"},
  };
  for (const row& r : rows) {
    CAPTURE(r.var);
    CAPTURE(r.value);
    const outcome o = resolve_var(r.var, r.value);
    CHECK(o.ns == r.ns);
    if (r.ns) continue;
    CHECK(o.message.find(r.var) != std::string::npos);
    CHECK(o.message.find(r.says) != std::string::npos);
    CHECK(o.message.find("ns, us, ms, s, min or h") != std::string::npos); // the forms
  }
}

TEST_CASE("durations set in code are checked against the same ranges in the same words") {
  gs::session_options tiny;
  tiny.quantum = std::chrono::nanoseconds(10);
  const auto e = thrown([&] { (void)gs::resolve_options(tiny, fake_env({})); });
  REQUIRE(e.has_value());
  CHECK(e->code() == gs::errc::invalid_argument);
  CHECK(std::string(e->what()) == "session_options::quantum is 10ns; it must be from 1us to 10s");
  gc::device_options d;
  d.max_in_flight = std::chrono::seconds(20);
  const auto f = thrown([&] { (void)gc::resolve_device_options(d, fake_env({})); });
  REQUIRE(f.has_value());
  CHECK(std::string(f->what()) ==
        "device_options::max_in_flight is 20s; it must be from 1us to 10s");
}

TEST_CASE("a bare number counts only where the option says so") {
  const gs::duration_option seconds{"interval", 0, minute, false, 0, {}, s, {}};
  const gs::duration_option unit_required{"interval", 0, minute, false, 0, {}, 0, {}};
  CHECK(gs::parse_duration("0.5", seconds) == 500 * ms);
  CHECK(gs::parse_duration("1min", seconds) == minute);
  const auto e = thrown([&] { (void)gs::parse_duration("0.5", unit_required); });
  REQUIRE(e.has_value());
  CHECK(e->code() == gs::errc::invalid_argument);
  CHECK(std::string(e->what()).find("a unit is required") != std::string::npos);
  const auto none = thrown([&] { (void)gs::parse_duration("none", seconds); });
  CHECK(none.has_value());
}

TEST_CASE("the reclaim deadline: 2 s by default, a value in code wins, and one out of range is "
          "refused naming the field") {
  const auto env = fake_env({{"GPUSHARE_RECLAIM_DEADLINE", "5s"}});
  CHECK(gs::resolve_options({}, fake_env({})).reclaim_deadline_ns == 2 * s);
  CHECK(gs::resolve_options({}, env).reclaim_deadline_ns == 5 * s);
  gs::session_options o;
  o.reclaim_deadline = std::chrono::milliseconds(250);
  CHECK(gs::resolve_options(o, env).reclaim_deadline_ns == 250 * ms);
  CHECK(gs::parse_reclaim_deadline("750ms") == std::chrono::milliseconds(750));
  o.reclaim_deadline = std::chrono::microseconds(10);
  try {
    (void)gs::resolve_options(o, env);
    FAIL("a 10us reclaim deadline was accepted");
  } catch (const gs::error& e) {
    CHECK(e.code() == gs::errc::invalid_argument);
    CHECK(std::string(e.what()).find("session_options::reclaim_deadline") != std::string::npos);
  }
}

TEST_CASE("format_elapsed rounds a measured duration to three digits in its largest unit") {
  CHECK(gs::format_elapsed(7'929'106'847) == "7.93s"); // was "7929106847ns" (issue 42, B10)
  CHECK(gs::format_elapsed(0) == "0ns");
  CHECK(gs::format_elapsed(999) == "999ns");
  CHECK(gs::format_elapsed(250 * us) == "250us");
  CHECK(gs::format_elapsed(12'540 * us) == "12.5ms");
  CHECK(gs::format_elapsed(s) == "1s");
  CHECK(gs::format_elapsed(90 * s) == "1.5min");
  CHECK(gs::format_elapsed(hour + hour / 2) == "1.5h");
  CHECK(gs::format_elapsed(9'999 * ms) == "10s");
  CHECK(gs::format_elapsed(99'960 * ms) == "1.67min");
  // Seeded: never more than 3 significant digits, and within 0.5% of the value.
  std::mt19937_64 rng(11);
  for (int i = 0; i < 2000; ++i) {
    const std::uint64_t ns = rng() >> (rng() % 60);
    const std::string text = gs::format_elapsed(ns);
    CAPTURE(ns);
    CAPTURE(text);
    const std::size_t digits_end = text.find_first_not_of("0123456789.");
    REQUIRE(digits_end != std::string::npos);
    const std::string number = text.substr(0, digits_end), unit = text.substr(digits_end);
    std::size_t significant = 0;
    bool leading = true;
    for (const char c : number) {
      if (c == '.') continue;
      if (c != '0') leading = false;
      if (!leading) ++significant;
    }
    const std::map<std::string, double> per{{"ns", 1},  {"us", 1e3},   {"ms", 1e6},
                                            {"s", 1e9}, {"min", 60e9}, {"h", 3600e9}};
    REQUIRE(per.count(unit) == 1);
    const double shown = std::stod(number) * per.at(unit);
    if (unit != "h" && unit != "ns") CHECK(significant <= 3);
    CHECK(std::abs(shown - static_cast<double>(ns)) <= static_cast<double>(ns) * 0.005 + 0.5);
  }
}

TEST_CASE("the public text and total helpers read and write as the library does") {
  using gpushare::table_access;
  CHECK(gpushare::parse_table_access("GROUP") == table_access::group);
  CHECK(gpushare::parse_table_access("0600") == table_access::user);
  CHECK_THROWS_AS(gpushare::parse_table_access("0644"), gpushare::error);
  CHECK(gpushare::iequals("None", "nONE"));
  CHECK_FALSE(gpushare::iequals("none", "nones"));
  CHECK(gpushare::edit_distance("stauts", "status") == 1); // a swap of neighbours counts 1
  CHECK(gpushare::edit_distance("", "abc") == 3);
  CHECK(gpushare::edit_distance("kitten", "sitting") == 3);
  for (const char* step : {"batch", "extern", "interactive", "0", "17"}) {
    CAPTURE(step);
    const auto id = gpushare::parse_slurm_step(step);
    REQUIRE(id.has_value());
    CHECK(gpushare::slurm_step_text(*id) == step);
  }
  CHECK_FALSE(gpushare::parse_slurm_step("step1").has_value());
  gpushare::platform_identity id;
  CHECK(gpushare::identity_text(id).empty());
  id.pod_namespace = "ml";
  id.pod = "trainer-0";
  CHECK(gpushare::identity_text(id) == "ml/trainer-0");
  CHECK_THROWS_AS(gpushare::validate_session_name(std::string(300, 'x')), gpushare::error);
  CHECK_NOTHROW(gpushare::validate_session_name("trainer"));
  // Totals saturate instead of wrapping; a guarantee above the usage is what is committed.
  CHECK(gpushare::saturating_add(UINT64_MAX - 1, 5) == UINT64_MAX);
  CHECK(gpushare::saturating_add(2, 3) == 5);
  CHECK(gpushare::memory_commitment(1, 2, 5) == 5);
  CHECK(gpushare::memory_commitment(5, 2, 1) == 7);
  CHECK(gpushare::memory_commitment(UINT64_MAX, 1, 0) == UINT64_MAX);
  CHECK(gpushare::caller_in_group(::getegid()));
  // The CUDA layer's settings, in the forms their variables take.
  namespace gc = gpushare::cuda;
  CHECK(gc::parse_timeout("none") == gc::no_timeout);
  CHECK(gc::parse_timeout("500ms") == 500'000'000);
  CHECK(gc::parse_drain("DEVICE") == gc::drain_scope::device);
  CHECK(gc::parse_guard_timing("each") == gc::guard_timing::each);
  CHECK_THROWS_AS(gc::parse_guard_timing("sometimes"), gpushare::error);
  CHECK(gpushare::parse_duration("2ms", gc::in_flight_setting) == 2'000'000);
  CHECK_THROWS_AS(gpushare::parse_duration("0us", gc::in_flight_setting), gpushare::error);
}
