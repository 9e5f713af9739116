// SPDX-License-Identifier: Apache-2.0
// The gpushare tool's pure functions for the remedies of a stopped holder: the --max-guard and
// --compute-guarantee flags and --table-default of `set`, the line `evict` prints, and what
// status (text and JSON) and metrics show of guard bounds, revocations and evictions.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cli_args.hpp"
#include "cli_evict.hpp"
#include "cli_json.hpp"
#include "cli_metrics.hpp"
#include "cli_set.hpp"
#include "cli_status.hpp"

using namespace gpushare;
using namespace gpushare::cli;

namespace {

parsed_args set_args(std::vector<std::string> words) {
  return parse_command_line(words, set_flags, 1);
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

session_info named(const std::string& name, std::uint32_t slot) {
  session_info i;
  i.id = {slot, 1};
  i.name = name;
  return i;
}

/// A reading of one table "/gpushare.d.u0.k" with `sessions`.
table_reading reading_of(std::vector<session_info> sessions) {
  table_reading t;
  t.entry.object_name = "/gpushare.d.u0.k";
  t.snapshot.emplace();
  t.snapshot->object_name = t.entry.object_name;
  // Built, then moved in: GCC 12 at -O3 warns falsely (-Wrestrict, its bug 105329) on a
  // one-character literal assigned to a std::string.
  t.snapshot->key = std::string("k");
  t.snapshot->domain = std::string("d");
  t.snapshot->slot_count = 8;
  t.snapshot->sessions = std::move(sessions);
  return t;
}

} // namespace

TEST_CASE("set --max-guard and --compute-guarantee take the forms of their variables") {
  const settings_change c =
      parse_settings(set_args({"w", "--max-guard", "30s", "--compute-guarantee", "12.5%"}));
  CHECK(c.max_guard == std::chrono::seconds(30));
  CHECK(c.compute_guarantee_ppm == 125'000u);
  CHECK_FALSE(change_is_empty(c));
  const settings_change off =
      parse_settings(set_args({"w", "--max-guard", "none", "--compute-guarantee", "none"}));
  CHECK(off.max_guard == std::chrono::nanoseconds(0));
  CHECK(off.compute_guarantee_ppm == 0u);
  CHECK_FALSE(change_is_empty(off)); // "none" is a change too
  CHECK(change_is_empty(parse_settings(set_args({"w"}))));
  CHECK(usage_message([] {
          parse_settings(set_args({"w", "--max-guard", "10us"}));
        })
            .starts_with("--max-guard: invalid guard bound \"10us\": shorter than 1ms; expected "
                         "\"none\" (no bound), or a duration from 1ms to 1h"));
  CHECK(usage_message([] {
          parse_settings(set_args({"w", "--max-guard", "30"}));
        }).starts_with("--max-guard: invalid guard bound \"30\": a unit is required"));
  const std::string guarantee = usage_message([] {
    parse_settings(set_args({"w", "--compute-guarantee", "150%"}));
  });
  CHECK(guarantee.starts_with("--compute-guarantee: invalid percentage \"150%\": it must be at "
                              "most 100%"));
  CHECK(guarantee.ends_with("; or \"none\""));
}

TEST_CASE("set --pause-hold takes GPUSHARE_PAUSE_HOLD's forms, and shows as a ratio") {
  CHECK(parse_settings(set_args({"w", "--pause-hold", "0.5"})).pause_hold_ppm == 500'000u);
  const settings_change off = parse_settings(set_args({"w", "--pause-hold", "none"}));
  CHECK(off.pause_hold_ppm == 0u);
  CHECK_FALSE(change_is_empty(off));
  CHECK(usage_message([] {
          parse_settings(set_args({"w", "--pause-hold", "150"}));
        }).starts_with("--pause-hold: invalid pause hold \"150\": it must be at most 100"));
  CHECK(gpushare::cli::pause_hold_text(0) == "none");
  CHECK(gpushare::cli::pause_hold_text(2'000'000) == "2x");
  CHECK(gpushare::cli::pause_hold_text(1'250'000) == "1.25x");
  CHECK(gpushare::cli::pause_hold_text(1) == "0.000001x");
}

TEST_CASE("set --table-default takes --max-guard alone, in place of the session") {
  const table_defaults d =
      parse_table_defaults(set_args({"--table-default", "--max-guard", "500ms"}));
  CHECK(d.max_guard == std::chrono::milliseconds(500));
  CHECK(parse_table_defaults(set_args({"--table-default", "--max-guard", "off"})).max_guard ==
        std::chrono::nanoseconds(0));
  CHECK(usage_message([] {
          parse_table_defaults(set_args({"--table-default", "--max-guard", "1s", "--share", "2"}));
        })
            .starts_with("--share cannot be used with --table-default: it is a setting of a "
                         "session; a table has a default guard bound (--max-guard DUR|none) and "
                         "a capacity (--capacity SIZE|unlimited)"));
  CHECK(usage_message([] {
          parse_table_defaults(
              set_args({"--table-default", "--compute-guarantee", "5%", "--max-guard", "1s"}));
        }).starts_with("--compute-guarantee cannot be used with --table-default"));
  CHECK(usage_message([] {
          parse_table_defaults(set_args({"--table-default"}));
        }).starts_with("--table-default needs --max-guard DUR|none"));
  CHECK(usage_message([] {
          parse_table_defaults(set_args({"w", "--table-default", "--max-guard", "1s"}));
        }).starts_with("give --table-default or a session ('w'), not both"));
}

TEST_CASE("set --table-default takes --capacity: bytes with a unit, or unlimited, never a %") {
  const table_defaults d =
      parse_table_defaults(set_args({"--table-default", "--capacity", "80GiB"}));
  REQUIRE(d.capacity.has_value());
  CHECK(*d.capacity == 80ull << 30);
  CHECK_FALSE(d.max_guard.has_value());
  CHECK(parse_table_defaults(set_args({"--table-default", "--capacity", "Unlimited"})).capacity ==
        0u);
  const table_defaults both =
      parse_table_defaults(set_args({"--table-default", "--capacity", "4gb", "--max-guard", "2s"}));
  CHECK(both.capacity == 4'000'000'000ull);
  CHECK(both.max_guard == std::chrono::seconds(2));
  const std::string pct = usage_message([] {
    parse_table_defaults(set_args({"--table-default", "--capacity", "50%"}));
  });
  CHECK(pct.find("--capacity") != std::string::npos);
  CHECK(pct.find("a percentage is not accepted") != std::string::npos);
}

TEST_CASE("set describes a guard bound and a compute guarantee as old -> new") {
  session_info before, after;
  after.max_guard_ns = 200'000'000;
  after.compute_guarantee_ppm = 100'000;
  settings_change c;
  c.max_guard = std::chrono::milliseconds(200);
  c.compute_guarantee_ppm = 100'000;
  CHECK(describe_change(c, before, after, 30'000'000'000) ==
        "  guard bound: table default (30 s) -> 200 ms\n"
        "  compute guarantee: none -> 10%\n");
  CHECK(describe_change(c, after, before) == "  guard bound: 200 ms -> table default (none)\n"
                                             "  compute guarantee: 10% -> none\n");
}

TEST_CASE("evict's line says what went back to the table") {
  session_info i = named("trainer", 3);
  i.pid = 4242;
  i.holds_device = true;
  i.reserved = 3ull << 29;
  CHECK(evicted_text(i, "/gpushare.d.u0.k") ==
        "evicted session \"trainer\" (slot 3, pid 4242) from /gpushare.d.u0.k: its device hold "
        "and 1.50 GiB of reservations went back to the table\n");
  i.reserved = 0;
  CHECK(returned_text(i) == "its device hold went back to the table");
  i.holds_device = false;
  CHECK(returned_text(i) == "it held neither the device nor reservations");
  i.reserved = 1 << 20;
  CHECK(returned_text(i) == "its 1.00 MiB of reservations went back to the table");
  i.name = "\x1b[2J";
  CHECK(evicted_text(i, "/t").starts_with("evicted session \"\\x1b[2J\" (slot 3"));
}

TEST_CASE("status text: a table's bound, revocations and evictions, when any") {
  table_snapshot s;
  CHECK(remedies_text(s, 0) == "");
  s.default_max_guard_ns = 30'000'000'000;
  CHECK(remedies_text(s, 0) == "  stuck guards: default guard bound 30 s\n");
  s.revocations = 2;
  s.evictions = 1;
  s.last_eviction = table_snapshot::eviction{{3, 7}, "trainer", 4242, 1000, 5'000'000'000};
  CHECK(remedies_text(s, 17'000'000'000) ==
        "  stuck guards: default guard bound 30 s, 2 revocations, 1 eviction (last: \"trainer\", "
        "slot 3, pid 4242, by uid 1000, 12 s ago)\n");
  s.default_max_guard_ns = 0;
  s.evictions = 0;
  s.last_eviction.reset();
  CHECK(remedies_text(s, 0) == "  stuck guards: 2 revocations\n");
}

TEST_CASE("status text: the hint names `gpushare evict` with a name the shell reads back") {
  table_snapshot s;
  s.object_name = "/gpushare.d.u0.k";
  s.sessions = {named("trainer", 1), named("42", 2),         named("two words", 3),
                named("dup", 4),     named("dup", 5),        named("-x", 6),
                named("name:a", 7),  named("caf\xc3\xa9", 8)};
  CHECK(evict_argument(s, s.sessions[0]) == "trainer");
  CHECK(evict_argument(s, s.sessions[1]) == "name:42");
  CHECK(evict_argument(s, s.sessions[2]) == "'two words'");
  CHECK(evict_argument(s, s.sessions[3]) == "4 --table /gpushare.d.u0.k");
  CHECK(evict_argument(s, s.sessions[5]) == "6 --table /gpushare.d.u0.k");
  CHECK(evict_argument(s, s.sessions[6]) == "name:name:a");
  CHECK(evict_argument(s, s.sessions[7]) == "8 --table /gpushare.d.u0.k");

  session_info stuck = named("trainer", 1);
  stuck.active_guards = 1;
  stuck.quantum_ns = 5'000'000;
  stuck.in_guard_ns = 12'000'000'000;
  session_info fine = named("infer", 2);
  fine.active_guards = 1;
  fine.in_guard_ns = 900'000'000;
  sample now;
  now.tables.push_back(reading_of({stuck, fine}));
  const std::string text = status_text(nullptr, now, domain_choice{});
  CHECK(text.find("  hint: \"trainer\" (slot 1) has run one guard for 12.00 s; if its process "
                  "is stopped or hung, `gpushare evict trainer` gives the device to the others "
                  "(its process keeps its device memory: kill or restart it)\n") !=
        std::string::npos);
  CHECK(text.find("hint: \"infer\"") == std::string::npos);
  // No session sets a bound, a guarantee or was revoked: none of their columns.
  CHECK(text.find("MAXGUARD") == std::string::npos);
  CHECK(text.find("REVOKED") == std::string::npos);
  CHECK(text.find("CGUARANTEE") == std::string::npos);
  CHECK(text.find("stuck guards:") == std::string::npos);
}

TEST_CASE("status --json and metrics carry the bounds, guarantees, revocations and evictions") {
  session_info i = named("trainer", 1);
  i.max_guard_ns = 200'000'000;
  i.revocations = 3;
  i.compute_guarantee_ppm = 100'000;
  sample now;
  now.tables.push_back(reading_of({i}));
  table_snapshot& s = *now.tables[0].snapshot;
  s.default_max_guard_ns = 30'000'000'000;
  s.revocations = 4;
  const std::string no_eviction = status_json(nullptr, now, std::nullopt, 0);
  CHECK(no_eviction.find("\"last_eviction\": null,") != std::string::npos);
  s.evictions = 1;
  s.last_eviction = table_snapshot::eviction{{2, 9}, "gone", 77, 1000, 123};
  const std::string json = status_json(nullptr, now, std::nullopt, 0);
  for (const char* field :
       {"\"max_guard_ns\": 200000000,", "\"revocations\": 3,", "\"compute_guarantee_ppm\": 100000,",
        "\"default_max_guard_ns\": 30000000000,", "\"revocations\": 4,", "\"evictions\": 1,",
        "\"last_eviction\": {\n        \"slot\": 2,\n        \"generation\": 9,\n        \"name\": "
        "\"gone\",\n        \"pid\": 77,\n        \"by_uid\": 1000,\n        \"unix_ns\": 123\n"})
    CHECK_MESSAGE(json.find(field) != std::string::npos, field);

  const std::string m = metrics_text(now);
  const std::string labels = "{table=\"/gpushare.d.u0.k\",key=\"k\",domain=\"d\"";
  CHECK(m.find("# TYPE gpushare_table_revocations_total counter\n"
               "gpushare_table_revocations_total" +
               labels + "} 4\n") != std::string::npos);
  CHECK(m.find("# TYPE gpushare_table_evictions_total counter\n"
               "gpushare_table_evictions_total" +
               labels + "} 1\n") != std::string::npos);
  CHECK(m.find("# TYPE gpushare_session_revocations_total counter\n"
               "gpushare_session_revocations_total" +
               labels +
               ",session=\"trainer\",slot=\"1\",pod=\"\",namespace=\"\",container=\"\","
               "slurm_job_id=\"\",slurm_step_id=\"\",group=\"\"} 3\n") != std::string::npos);
  CHECK(m.find("# HELP gpushare_session_revocations_total ") != std::string::npos);
}
