// SPDX-License-Identifier: Apache-2.0
// The command-line tool's pure parts, without running it: argument parsing, formatting, JSON and
// Prometheus output, the recent device-time figure and the reading of table file names.
#include <doctest/doctest.h>

#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <gpushare/discovery.hpp>

#include "cli_args.hpp"
#include "cli_clean.hpp"
#include "cli_format.hpp"
#include "cli_json.hpp"
#include "cli_prometheus.hpp"
#include "cli_sample.hpp"
#include "cli_set.hpp"
#include "cli_status.hpp"
#include "support/json.hpp"

using namespace gpushare;
using namespace gpushare::cli;

namespace {
constexpr flag_spec specs[] = {{"--domain", true}, {"--json", false}, {"--share", true}};

parsed_args parse(std::vector<std::string> words, std::size_t max_positionals = 1) {
  return parse_command_line(words, specs, max_positionals);
}

/// The message of the usage_error `f` throws ("" if it throws none).
template <class F> std::string usage_message(F f) {
  try {
    f();
  } catch (const usage_error& e) {
    return e.what();
  }
  return "";
}
} // namespace

TEST_CASE("flags take values in both spellings, positionals are counted, -- ends the flags") {
  const parsed_args a = parse({"worker", "--domain", "prod", "--share=3", "--json"});
  REQUIRE(a.positionals.size() == 1);
  CHECK(a.positionals[0] == "worker");
  CHECK(a.value("--domain") == "prod");
  CHECK(a.value("--share") == "3");
  CHECK(a.has("--json"));
  CHECK(a.value("--json") == "");
  CHECK_FALSE(a.has("--other"));
  CHECK_FALSE(a.help);
  CHECK(parse({"--help"}).help);
  CHECK(parse({"-h"}).help);
  const parsed_args dashed = parse({"--", "--json"});
  CHECK(dashed.positionals == std::vector<std::string>{"--json"});
  CHECK_FALSE(dashed.has("--json"));
  CHECK(parse({"--share", "-1"}).value("--share") == "-1"); // a value may start with one dash
}

TEST_CASE("command-line mistakes are usage errors that say what is wrong") {
  CHECK(usage_message([] { parse({"--bogus"}); }) == "unknown option '--bogus'");
  CHECK(usage_message([] { parse({"-x"}); }) == "unknown option '-x'");
  CHECK(usage_message([] { parse({"--domain"}); }) == "option --domain needs a value");
  CHECK(usage_message([] { parse({"--domain", "--json"}); }) == "option --domain needs a value");
  CHECK(usage_message([] { parse({"--domain="}); }) == "option --domain needs a non-empty value");
  CHECK(usage_message([] { parse({"--json=1"}); }) == "option --json takes no value");
  CHECK(usage_message([] {
          parse({"--json", "--json"});
        }) == "option --json is given more than once");
  CHECK(usage_message([] { parse({"a", "b"}); }) == "unexpected extra argument 'b'");
  CHECK(usage_message([] { parse({"a"}, 0); }) == "unexpected argument 'a'");
}

TEST_CASE("intervals are seconds or a duration with a unit within the allowed range") {
  CHECK(parse_interval_ns("--interval", "0.2", status_interval) == 200'000'000);
  CHECK(parse_interval_ns("--interval", "2", status_interval) == 2'000'000'000);
  CHECK(parse_interval_ns("--interval", "250ms", status_interval) == 250'000'000);
  CHECK(parse_interval_ns("--interval", "1.5s", status_interval) == 1'500'000'000);
  CHECK(parse_interval_ns("--interval", "500us", status_interval) == 500'000);
  CHECK(parse_interval_ns("--interval", "0", status_interval) == 0);
  CHECK(parse_interval_ns("--interval", "1min", status_interval) == 60'000'000'000);
  CHECK(parse_interval_ns("--interval", "2min", top_interval) == 120'000'000'000);
  const auto fails = [](const char* s) {
    return usage_message([&] { parse_interval_ns("--interval", s, top_interval); });
  };
  CHECK(fails("abc").starts_with("--interval: invalid interval \"abc\""));
  CHECK(fails("5parsecs")
            .starts_with("--interval: invalid interval \"5parsecs\": unknown unit "
                         "\"parsecs\"; expected a duration from 10ms to 1h"));
  CHECK(fails("0").starts_with("--interval: invalid interval \"0\": shorter than 10ms"));
  CHECK(fails("3601").starts_with("--interval: invalid interval \"3601\": longer than 1h"));
  CHECK(fails("99999999999999999999").find("the number is too large") != std::string::npos);
  CHECK(fails("99999999999").find("longer than 1h") != std::string::npos);
  CHECK(fails("-1").find("a sign is not allowed") != std::string::npos);
  CHECK(fails("2min").empty()); // accepted: "" is what usage_message gives when nothing throws
}

TEST_CASE("counts are whole numbers in range") {
  CHECK(parse_count("--iterations", "3", 1, 10) == 3);
  CHECK(usage_message([] { parse_count("--iterations", "0", 1, 10); }) ==
        "--iterations: \"0\" is out of range (1 to 10)");
  CHECK(usage_message([] {
          parse_count("--iterations", "1.5", 1, 10);
        }).starts_with("--iterations: invalid number \"1.5\""));
}

TEST_CASE("a session is named by its name, by a slot number, or by name: for a numeric name") {
  const session_target by_name = parse_session_target("trainer");
  CHECK(by_name.name == "trainer");
  CHECK_FALSE(by_name.slot.has_value());
  const session_target by_slot = parse_session_target("17");
  CHECK(by_slot.slot == 17u);
  CHECK_FALSE(by_slot.name.has_value());
  const session_target numeric = parse_session_target("name:17");
  CHECK(numeric.name == "17");
  CHECK_FALSE(numeric.slot.has_value());
  CHECK(usage_message([] { parse_session_target("4096"); }).find("out of range") !=
        std::string::npos);
  CHECK(usage_message([] { parse_session_target("name:"); }) == "the session name is empty");
}

TEST_CASE("set's settings are parsed like the GPUSHARE_ variables") {
  std::vector<std::string> words = {
      "w",     "--share",        "4",      "--priority",         "high", "--compute-limit",
      "30%",   "--memory-limit", "1.5GiB", "--memory-guarantee", "20%",  "--quantum",
      "500us", "--handover",     "yield"};
  static constexpr flag_spec set_specs[] = {
      {"--share", true},        {"--priority", true},         {"--compute-limit", true},
      {"--memory-limit", true}, {"--memory-guarantee", true}, {"--quantum", true},
      {"--handover", true}};
  const settings_change c = parse_settings(parse_command_line(words, set_specs, 1));
  CHECK(c.share == 4u);
  CHECK(c.priority == priority::high);
  CHECK(c.compute_limit_ppm == 300'000u);
  CHECK(c.memory_limit == memory_amount::of_bytes(3ull << 29));
  CHECK(c.memory_guarantee == memory_amount::of_ppm(200'000));
  CHECK(c.quantum == std::chrono::microseconds(500));
  CHECK(c.handover == handover_point::at_yield);

  std::vector<std::string> bad = {"w", "--compute-limit", "30"};
  CHECK(usage_message([&] {
          parse_settings(parse_command_line(bad, set_specs, 1));
        }).starts_with("--compute-limit: invalid percentage \"30\": a '%' is required"));
}

TEST_CASE("set describes each change as old -> new, or unchanged") {
  session_info before, after;
  before.share = 1;
  after.share = 4;
  before.priority = after.priority = priority::low;
  before.memory_limit = 1ull << 30;
  after.memory_limit = detail::unlimited_capacity;
  before.quantum_ns = 5'000'000;
  after.quantum_ns = 500'000;
  settings_change c;
  c.share = 4;
  c.priority = priority::low;
  c.memory_limit = memory_amount::of_ppm(1'000'000);
  c.quantum = std::chrono::microseconds(500);
  CHECK(describe_change(c, before, after) == "  priority: low (unchanged)\n"
                                             "  share: 1 -> 4\n"
                                             "  memory limit: 1.00 GiB -> unlimited\n"
                                             "  quantum: 5 ms -> 500 us\n");
}

TEST_CASE("human formats: sizes, durations, decimals, percentages, modes and ages") {
  CHECK(bytes_text(0) == "0 B");
  CHECK(bytes_text(1536) == "1.50 KiB");
  CHECK(bytes_text(detail::unlimited_capacity) == "unlimited");
  CHECK(duration_text(0) == "0 ms");
  CHECK(duration_text(999'999'999) == "999 ms");
  CHECK(duration_text(12'345'000'000) == "12.34 s");
  CHECK(duration_text(183'000'000'000) == "3m03s");
  CHECK(duration_text(7'500'000'000'000) == "2h05m");
  CHECK(duration_text(3 * 86'400'000'000'000ull + 4 * 3'600'000'000'000ull) == "3d04h");
  CHECK(fixed_decimal(1'500'000'000, 9) == "1.5");
  CHECK(fixed_decimal(700'000, 6) == "0.7");
  CHECK(fixed_decimal(1'000'000, 6) == "1");
  CHECK(fixed_decimal(5, 9) == "0.000000005");
  CHECK(fixed_decimal(42, 0) == "42");
  CHECK(quantum_text(2'000'000) == "2 ms");
  CHECK(quantum_text(1'000) == "1 us");
  CHECK(quantum_text(10'000'000'000) == "10 s");
  CHECK(percent_text(12.345) == "12.3%");
  CHECK(mode_text(0660) == "0660");
  CHECK(priority_text(2) == "high");
  CHECK(priority_text(6) == "6");
  CHECK(age_text(10'000'000'000, 7'000'000'000) == "3 s ago");
  CHECK(age_text(1'000'000'000'000, 1'000'000'000) == "16 min ago");
  CHECK(seconds_text(10'000'000) == "0.01 s");
}

TEST_CASE("a text table lines up left- and right-aligned columns") {
  text_table t({{"ID", text_table::align::right}, {"NAME", text_table::align::left}});
  t.add_row({"7", "alpha"});
  t.add_row({"123", "b"});
  CHECK(t.render("  ") == "   ID  NAME\n"
                          "    7  alpha\n"
                          "  123  b\n");
}

TEST_CASE("JSON output: escaped strings, exact integers, nesting and empty containers") {
  // A lone 0xe9 is no UTF-8: it becomes the text \xe9 (JSON has no raw bytes), not "é".
  CHECK(json_quote("a\"b\\c\nd\x01\xe9") == "\"a\\\"b\\\\c\\nd\\u0001\\\\xe9\"");
  json_writer w;
  w.begin_object();
  w.field("n", std::uint64_t{18446744073709551615ull});
  w.field("s", "x");
  w.key("list");
  w.begin_array();
  w.number(std::int64_t{-1});
  w.begin_object();
  w.field("ok", true);
  w.null_field("none");
  w.end_object();
  w.end_array();
  w.key("empty");
  w.begin_array();
  w.end_array();
  w.key("pct");
  w.number(12.345, 2);
  w.end_object();
  CHECK(w.str() == "{\n"
                   "  \"n\": 18446744073709551615,\n"
                   "  \"s\": \"x\",\n"
                   "  \"list\": [\n"
                   "    -1,\n"
                   "    {\n"
                   "      \"ok\": true,\n"
                   "      \"none\": null\n"
                   "    }\n"
                   "  ],\n"
                   "  \"empty\": [],\n"
                   "  \"pct\": 12.35\n"
                   "}\n");
}

TEST_CASE("JSON strings: UTF-8 text passes unchanged and reads back the same; other bytes are "
          "written as \\xNN, controls as \\u00XX") {
  // Well-formed UTF-8 of 2, 3 and 4 bytes: unchanged (the earlier writer made "é" "\u00c3\u00a9").
  const std::string text = "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x9a\x80";
  CHECK(json_quote(text) == "\"" + text + "\"");
  // C1 controls (U+0085), DEL: \u escapes of their code points.
  CHECK(json_quote("\xc2\x85\x7f") == "\"\\u0085\\u007f\"");
  // Not UTF-8: a truncated sequence, an overlong form, a surrogate, a stray continuation byte.
  CHECK(json_quote("\xe6\x97") == "\"\\\\xe6\\\\x97\"");
  CHECK(json_quote("\xc0\x80") == "\"\\\\xc0\\\\x80\"");
  CHECK(json_quote("\xed\xa0\x80") == "\"\\\\xed\\\\xa0\\\\x80\"");
  CHECK(json_quote("\x80") == "\"\\\\x80\"");
  // Seeded random strings: always one valid JSON string that reads back as the same text where
  // the input was UTF-8, and with each ill-formed byte as the text \xNN otherwise.
  std::mt19937 rng(20261129);
  for (int round = 0; round < 2000; ++round) {
    std::string s;
    const int n = static_cast<int>(rng() % 24);
    for (int k = 0; k < n; ++k) {
      switch (rng() % 4) {
      case 0: s += static_cast<char>(rng() % 256); break;
      case 1: s += "\xc3\xa9"; break;
      case 2: s += static_cast<char>('a' + rng() % 26); break;
      default: s += "\xe2\x82\xac"; break; // U+20AC
      }
    }
    CAPTURE(round);
    const std::string quoted = json_quote(s);
    const test::json parsed = test::parse_json("[" + quoted + "]");
    const std::string back = parsed[0].str();
    bool utf8 = true;
    for (std::size_t i = 0; i < s.size();) {
      const auto c = static_cast<unsigned char>(s[i]);
      if (c < 0x80) {
        ++i;
        continue;
      }
      const std::size_t len = gpushare::json::utf8_sequence(std::string_view(s).substr(i));
      const bool c1 =
          c == 0xC2 && i + 1 < s.size() && (static_cast<unsigned char>(s[i + 1]) & 0xE0) == 0x80;
      if (len == 0 && !c1) utf8 = false;
      i += len ? len : c1 ? 2 : 1;
    }
    if (utf8)
      CHECK(back == s);
    else
      CHECK(back.find("\\x") != std::string::npos);
  }
}

TEST_CASE("table strings: text escapes every byte outside printable ASCII") {
  CHECK(safe_text("plain name-1.x") == "plain name-1.x");
  CHECK(safe_text("\x1b]0;T\x07\r\n\t\x7f\xff\\") == "\\x1b]0;T\\x07\\x0d\\x0a\\x09\\x7f\\xff\\\\");
  CHECK(safe_text(std::string("a\0b", 3)) == "a\\x00b");
  CHECK(safe_text("\xc3\xa9") == "\\xc3\\xa9"); // even well-formed UTF-8: ASCII only
}

TEST_CASE("Prometheus label values: control bytes and invalid UTF-8 are escaped") {
  CHECK(escape_label_value("\x1b[2J\x07\r\x7f") == "\\\\x1b[2J\\\\x07\\\\x0d\\\\x7f");
  CHECK(escape_label_value("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") ==
        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"); // well-formed UTF-8 stays
  CHECK(escape_label_value("\xff") == "\\\\xff");
  CHECK(escape_label_value("\xc3(") == "\\\\xc3(");                     // truncated sequence
  CHECK(escape_label_value("\xc0\xaf") == "\\\\xc0\\\\xaf");            // overlong
  CHECK(escape_label_value("\xed\xa0\x80") == "\\\\xed\\\\xa0\\\\x80"); // surrogate
  CHECK(escape_label_value("\xf4\x90\x80\x80") == "\\\\xf4\\\\x90\\\\x80\\\\x80"); // above U+10FFFF
  CHECK(escape_label_value("\xc2\x9b") == "\\\\xc2\\\\x9b"); // C1 control (CSI)
}

TEST_CASE("Prometheus output: families in order, HELP and TYPE once, label values escaped") {
  CHECK(escape_label_value("a\\b\"c\nd") == "a\\\\b\\\"c\\nd");
  CHECK(escape_help("x\\y\nz") == "x\\\\y\\nz");
  exposition x;
  x.declare("m_total", "counter", "Things.\nCounted.");
  x.declare("g", "gauge", "A gauge.");
  x.declare("unused", "gauge", "Never sampled.");
  x.declare("m_total", "gauge", "A second declaration is ignored.");
  x.sample("g", {{"name", "we\"ird"}}, 5);
  x.sample("m_total", {{"a", "1"}, {"b", "2"}}, "1.5");
  x.sample("m_total", {}, 2);
  x.sample("undeclared", {}, 1);
  CHECK(x.render() == "# HELP m_total Things.\\nCounted.\n"
                      "# TYPE m_total counter\n"
                      "m_total{a=\"1\",b=\"2\"} 1.5\n"
                      "m_total 2\n"
                      "# HELP g A gauge.\n"
                      "# TYPE g gauge\n"
                      "g{name=\"we\\\"ird\"} 5\n");
}

TEST_CASE("recent device time is the session's device-time delta over the wall-time delta") {
  auto reading = [](std::uint64_t taken_ns, std::vector<session_info> sessions) {
    table_reading t;
    t.entry.object_name = "/gpushare.d.u0.k";
    t.snapshot.emplace();
    t.snapshot->created_unix_ns = 42;
    t.snapshot->sessions = std::move(sessions);
    t.taken_ns = taken_ns;
    return t;
  };
  auto session = [](std::uint32_t slot, std::uint32_t generation, std::uint64_t device_ns) {
    session_info i;
    i.id = {slot, generation};
    i.device_ns = device_ns;
    return i;
  };
  const table_reading before =
      reading(1'000'000'000, {session(1, 1, 100'000'000), session(2, 1, 0), session(3, 1, 5)});
  const table_reading now = reading(1'200'000'000, {session(1, 1, 150'000'000), session(2, 1, 0),
                                                    session(3, 2, 0), session(4, 1, 9)});
  sample earlier;
  earlier.tables.push_back(before);
  const table_reading* previous = find_previous(&earlier, now);
  REQUIRE(previous != nullptr);
  const recent_usage r = recent_device_usage(previous, now);
  CHECK(r.window_ns == 200'000'000u);
  REQUIRE(r.percent.size() == 4);
  CHECK(r.percent[0] == doctest::Approx(25.0)); // 50 ms of 200 ms
  CHECK(r.percent[1] == doctest::Approx(0.0));
  CHECK_FALSE(r.percent[2].has_value()); // slot 3 holds a new session (generation 2)
  CHECK_FALSE(r.percent[3].has_value()); // not there before

  table_reading recreated = now;
  recreated.snapshot->created_unix_ns = 43; // the same name, another table
  CHECK(find_previous(&earlier, recreated) == nullptr);
  const recent_usage none = recent_device_usage(nullptr, now);
  CHECK_FALSE(none.window_ns.has_value());
  CHECK(none.percent.size() == 4);
  CHECK_FALSE(none.percent[0].has_value());

  // Guards that began before the window are accounted in it when they end: 192 + 14.6 ms in a
  // 200 ms window was 96.0% + 7.3%. The column now adds up to at most 100%, in proportion.
  const table_reading late = reading(1'200'000'000, {session(1, 1, 100'000'000 + 192'000'000),
                                                     session(2, 1, 14'600'000), session(3, 1, 5)});
  const recent_usage over = recent_device_usage(previous, late);
  REQUIRE(over.percent[0].has_value());
  REQUIRE(over.percent[1].has_value());
  CHECK(*over.percent[0] + *over.percent[1] + over.percent[2].value_or(0) ==
        doctest::Approx(100.0));
  CHECK(*over.percent[0] == doctest::Approx(100.0 * 192.0 / 206.6));
}

TEST_CASE("recent device time adds up to at most 100% over random readings (seeded)") {
  std::mt19937_64 g(7);
  for (int round = 0; round < 500; ++round) {
    CAPTURE(round);
    table_reading a, b;
    a.snapshot.emplace();
    b.snapshot.emplace();
    a.taken_ns = 1'000'000'000;
    b.taken_ns = a.taken_ns + 1 + g() % 1'000'000'000;
    const std::size_t n = 1 + g() % 6;
    for (std::size_t k = 0; k < n; ++k) {
      session_info i;
      i.id = {static_cast<std::uint32_t>(k), 1};
      i.device_ns = g() % 10'000'000'000;
      a.snapshot->sessions.push_back(i);
      i.device_ns += g() % 2 == 0 ? g() % (b.taken_ns - a.taken_ns) : g() % 3'000'000'000;
      b.snapshot->sessions.push_back(i);
    }
    const recent_usage r = recent_device_usage(&a, b);
    double sum = 0;
    for (const auto& p : r.percent) {
      REQUIRE(p.has_value());
      CHECK(*p >= 0.0);
      CHECK(*p <= 100.0 + 1e-9);
      sum += *p;
    }
    CHECK(sum <= 100.0 + 1e-9);
  }
}

TEST_CASE("table file names are read into domain, owner and key") {
  const auto e = parse_table_file_name("gpushare.default.u1000.GPU-8f1e");
  REQUIRE(e.has_value());
  CHECK(e->object_name == "/gpushare.default.u1000.GPU-8f1e");
  CHECK(e->path == "/dev/shm/gpushare.default.u1000.GPU-8f1e");
  CHECK(e->domain == "default");
  CHECK(e->owner == "u1000");
  CHECK(e->owner_id == 1000);
  CHECK_FALSE(e->group);
  CHECK(e->key == "GPU-8f1e");

  const auto g = parse_table_file_name("gpushare.prod.g42.a.b");
  REQUIRE(g.has_value());
  CHECK(g->group);
  CHECK(g->owner_id == 42);
  CHECK(g->key == "a.b");

  for (const char* not_a_table :
       {"gpushare.", "gpushare.d.u1", "gpushare.d.x1.k", "gpushare..u1.k", "gpushare.d.u.k",
        "gpushare.d.u1.", "gpushare.d.u1..k", "sem.gpushare.d.u1.k", "gpushare.d.u1.k/x"}) {
    CAPTURE(not_a_table);
    CHECK_FALSE(parse_table_file_name(not_a_table).has_value());
  }

  // Ambiguous: the shortest domain, unless the domain is given.
  const auto shortest = parse_table_file_name("gpushare.a.u5.u1000.k");
  REQUIRE(shortest.has_value());
  CHECK(shortest->domain == "a");
  CHECK(shortest->key == "u1000.k");
  const auto as_given = parse_table_file_name("gpushare.a.u5.u1000.k", "a.u5");
  REQUIRE(as_given.has_value());
  CHECK(as_given->owner == "u1000");
  CHECK(as_given->key == "k");
  CHECK_FALSE(parse_table_file_name("gpushare.other.u1.k", "a").has_value());
  CHECK_FALSE(parse_table_file_name("gpushare.ab.u1.k", "a").has_value());
}

TEST_CASE("error codes have stable names for JSON and metrics (gpushare::to_string)") {
  static_assert(std::string_view(gpushare::to_string(errc::no_free_slot)) == "no_free_slot");
  CHECK(std::string(gpushare::to_string(errc::permission_denied)) == "permission_denied");
  CHECK(std::string(gpushare::to_string(errc::table_incompatible)) == "table_incompatible");
  CHECK(std::string(gpushare::to_string(errc::table_corrupt)) == "table_corrupt");
  CHECK(std::string(gpushare::to_string(errc::table_busy)) == "table_busy");
  CHECK(std::string(gpushare::to_string(errc::cuda_error)) == "cuda_error");
  CHECK(std::string(gpushare::to_string(errc::no_such_table)) == "no_such_table");
  // Every code has its own name, and the name is the enumerator's spelling (lower case, '_').
  std::set<std::string> names;
  for (int c = static_cast<int>(errc::invalid_argument); c <= static_cast<int>(errc::no_such_table);
       ++c) {
    const std::string n = gpushare::to_string(static_cast<errc>(c));
    CHECK(n != "unknown");
    CHECK(n.find_first_not_of("abcdefghijklmnopqrstuvwxyz_") == std::string::npos);
    names.insert(n);
  }
  CHECK(names.size() == static_cast<std::size_t>(errc::no_such_table));
  CHECK(std::string(gpushare::to_string(static_cast<errc>(999))) == "unknown");
}

TEST_CASE("plural: singular for exactly one, plural otherwise") {
  CHECK(plural(0, "table") == "0 tables");
  CHECK(plural(1, "table") == "1 table");
  CHECK(plural(2, "table") == "2 tables");
  CHECK(plural(1, "live session") == "1 live session");
  CHECK(plural(3, "live session") == "3 live sessions");
  CHECK(plural(1, "entry", "entries") == "1 entry");
  CHECK(plural(2, "entry", "entries") == "2 entries");
  CHECK(sessions_text(1, "live") == "1 live session");
  CHECK(sessions_text(2, "dead") == "2 dead sessions");
}

TEST_CASE("a mistyped command or option suggests the nearest one") {
  constexpr std::string_view commands[] = {"status", "top", "set", "clean", "metrics", "help"};
  CHECK(nearest("stat", commands) == "status");   // the only command it begins
  CHECK(nearest("stauts", commands) == "status"); // two letters swapped
  CHECK(nearest("tpo", commands) == "top");
  CHECK(nearest("sett", commands) == "set");
  CHECK(nearest("cleen", commands) == "clean");
  CHECK(nearest("metric", commands) == "metrics");
  CHECK_FALSE(nearest("frobnicate", commands).has_value());
  CHECK_FALSE(nearest("s", commands).has_value()); // status and set: too short to pick one
  CHECK_FALSE(nearest("", commands).has_value());
  CHECK(did_you_mean("stat", commands) == "; did you mean 'status'?");
  CHECK(did_you_mean("xyzzy", commands).empty());
  CHECK(edit_distance("status", "status") == 0);
  CHECK(edit_distance("stauts", "status") == 1);
  CHECK(edit_distance("", "top") == 3);

  constexpr std::string_view options[] = {"--domain", "--json"};
  CHECK(nearest("--dommain", options) == "--domain");
  CHECK(nearest("-json", options) == "--json");
  CHECK(nearest("--dom", options) == "--domain");
  CHECK(usage_message([] {
          parse({"--domian", "x"});
        }) == "unknown option '--domian'; did you mean '--domain'?");
  CHECK(usage_message([] { parse({"--hepl"}); }) ==
        "unknown option '--hepl'; did you mean '--help'?");
  CHECK(usage_message([] { parse({"--xyzzy"}); }) == "unknown option '--xyzzy'");
}

namespace {
constexpr flag_spec domain_specs[] = {{"--domain", true}, {"--all-domains", false}};

/// domain_option() over `words`, with GPUSHARE_DOMAIN unset (nullopt) or set to `env`.
domain_choice domain_of(std::vector<std::string> words, std::optional<std::string> env) {
  const parsed_args a = parse_command_line(words, domain_specs, 0);
  return domain_option(a, [env](const char* name) -> std::optional<std::string> {
    if (std::string_view(name) == "GPUSHARE_DOMAIN") return env;
    return std::nullopt;
  });
}
} // namespace

TEST_CASE(
    "the domain is --domain, else GPUSHARE_DOMAIN, else every domain, or all with --all-domains") {
  const domain_choice every = domain_of({}, std::nullopt);
  CHECK_FALSE(every.name.has_value());
  CHECK(every.text() == "every domain");

  const domain_choice env = domain_of({}, "team-a");
  CHECK(env.name == "team-a");
  CHECK(env.from_environment);
  CHECK(env.text() == "domain \"team-a\" (from GPUSHARE_DOMAIN)");

  const domain_choice flag = domain_of({"--domain", "team-b"}, "team-a");
  CHECK(flag.name == "team-b");
  CHECK_FALSE(flag.from_environment);
  CHECK(flag.text() == "domain \"team-b\"");
  // A bad GPUSHARE_DOMAIN does not matter when --domain or --all-domains overrides it.
  CHECK(domain_of({"--domain", "team-b"}, "bad/domain").name == "team-b");
  CHECK_FALSE(domain_of({"--all-domains"}, "bad/domain").name.has_value());
  CHECK_FALSE(domain_of({"--all-domains"}, "team-a").name.has_value());

  CHECK(usage_message([] {
          domain_of({}, "bad/domain");
        }).starts_with("environment variable GPUSHARE_DOMAIN=\"bad/domain\" is invalid"));
  CHECK(usage_message([] {
          domain_of({}, "bad/domain");
        }).ends_with("(or override it with --domain D or --all-domains)"));
  CHECK(usage_message([] {
          domain_of({}, "");
        }).starts_with("environment variable GPUSHARE_DOMAIN is set but empty"));
  CHECK(usage_message([] {
          domain_of({"--domain", "bad/domain"}, std::nullopt);
        }).starts_with("--domain: "));
  CHECK(usage_message([] {
          domain_of({"--domain", "a", "--all-domains"}, std::nullopt);
        }) == "give --domain or --all-domains, not both");
}

TEST_CASE("no tables: says which domain has none and which domains have some") {
  domain_choice every;
  domain_choice one;
  one.name = "nosuch";
  domain_choice from_env = one;
  from_env.from_environment = true;
  CHECK(no_tables_text({}, every) == "there are no gpushare tables in /dev/shm");
  CHECK(no_tables_text({}, one) ==
        "domain \"nosuch\" has no tables (there are no gpushare tables in /dev/shm at all)");
  CHECK(no_tables_text({"a"}, one) ==
        "domain \"nosuch\" has no tables; tables exist in domain \"a\" (see `gpushare status "
        "--all-domains`)");
  CHECK(no_tables_text({"a", "b"}, from_env) ==
        "domain \"nosuch\" (from GPUSHARE_DOMAIN) has no tables; tables exist in domains \"a\", "
        "\"b\" (see `gpushare status --all-domains`)");

  sample empty;
  empty.other_domains = {"a"};
  CHECK(status_text(nullptr, empty, one) == no_tables_text({"a"}, one) + "\n");
}

TEST_CASE("status text: counts of tables, sessions and slots agree in number") {
  auto reading = [](std::uint32_t slots, std::uint32_t sessions) {
    table_reading t;
    t.entry.object_name = std::string("/gpushare.d.u0.k") + std::to_string(slots);
    t.snapshot.emplace();
    t.snapshot->object_name = t.entry.object_name;
    t.snapshot->slot_count = slots;
    for (std::uint32_t i = 0; i < sessions; ++i) {
      session_info s;
      s.id = {i, 1};
      s.name = std::string("s") + std::to_string(i);
      t.snapshot->sessions.push_back(s);
    }
    return t;
  };
  const domain_choice every;
  sample one;
  one.tables.push_back(reading(1, 1));
  const std::string one_text = status_text(nullptr, one, every);
  CHECK(one_text.starts_with("1 table, 1 live session\n"));
  CHECK(one_text.find(", 1 slot, created by pid") != std::string::npos);

  sample two;
  two.tables.push_back(reading(2, 2));
  two.tables.push_back(reading(3, 0));
  const std::string two_text = status_text(nullptr, two, every);
  CHECK(two_text.starts_with("2 tables, 2 live sessions\n"));
  CHECK(two_text.find(", 2 slots, created by pid") != std::string::npos);

  domain_choice from_env;
  from_env.name = std::string("d");
  from_env.from_environment = true;
  CHECK(status_text(nullptr, one, from_env)
            .starts_with("1 table, 1 live session (only domain \"d\", from GPUSHARE_DOMAIN; "
                         "--all-domains shows every domain)\n"));
}
