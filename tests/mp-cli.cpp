// SPDX-License-Identifier: Apache-2.0
// The gpushare command-line tool, run as a program against tables that these tests create. Every
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

#ifdef GPUSHARE_CLI_PATH

using namespace gpushare;
using namespace std::chrono_literals;

constexpr std::uint64_t MiB = 1ull << 20;

using namespace cli_test;

// ------------------------------------------------------------------------------------------------
// status
// ------------------------------------------------------------------------------------------------

TEST_CASE("status --json lists each table and each live session with its settings and memory") {
  test_domain d;
  session_options ao = d.options("alpha", 64 * MiB);
  ao.priority = priority::high;
  ao.share = 3;
  ao.compute_limit_ppm = 400'000;
  ao.memory_limit = memory_amount::of_bytes(32 * MiB);
  ao.memory_guarantee = memory_amount::of_bytes(2 * MiB);
  session alpha("gpu-a", ao);
  auto ra = alpha.reserve(1 * MiB, 0ms);
  session beta("gpu-a", d.options("beta"));
  auto rb = beta.reserve(4 * MiB, 0ms);
  beta.set_external_usage(3 * MiB);
  const pid_t gamma = spawn_holder(d, "gpu-b", "gamma", 5 * MiB);

  const cli_result r = run_cli({"status", "--json", "--domain", d.name(), "--interval", "0.05"});
  REQUIRE(r.code == 0);
  CHECK(r.err.empty());
  CHECK(contains(r.out, "\"reserved_bytes\": 1048576"));
  const json doc = parse_json(r.out);
  CHECK(doc["schema_version"].u64() == 1);
  CHECK(doc["gpushare_version"].str() == GPUSHARE_VERSION_STRING);
  CHECK(doc["table_layout_version"].u64() == table_layout_version);
  CHECK(doc["domain"].str() == d.name());
  CHECK(doc["interval_ns"].u64() == 50'000'000);
  CHECK(doc["unreadable"].size() == 0);
  REQUIRE(doc["tables"].size() == 2);

  const json& a = table_of(doc, "gpu-a");
  CHECK(a["object_name"].str() == d.object_name("gpu-a"));
  CHECK(a["path"].str() == d.path("gpu-a"));
  CHECK(a["domain"].str() == d.name());
  CHECK(a["owner"].str() == "u" + std::to_string(::geteuid()));
  CHECK(a["access"].str() == "user");
  CHECK(a["mode"].str() == "0600");
  CHECK(a["creator_pid"].i64() == ::getpid());
  CHECK(a["slot_count"].u64() == 256);
  CHECK(a["capacity_bytes"].u64() == 64 * MiB);
  CHECK_FALSE(a["capacity_unlimited"].boolean());
  CHECK(a["reserved_bytes"].u64() == 5 * MiB);
  CHECK(a["committed_bytes"].u64() == 2 * MiB + 7 * MiB); // alpha's guarantee; beta's 4 + 3
  CHECK(a["available_bytes"].u64() == 64 * MiB - 9 * MiB);
  CHECK(a["live_sessions"].u64() == 2);
  CHECK(a["device"].is_null());
  CHECK(a["holder"].is_null());
  CHECK(a["recent_window_ns"].u64() > 0);
  REQUIRE(a["sessions"].size() == 2);

  const json& sa = session_of(a, "alpha");
  CHECK(sa["pid"].i64() == ::getpid());
  CHECK(sa["slot"].u64() == alpha.id().slot);
  CHECK(sa["generation"].u64() == alpha.id().generation);
  CHECK(sa["priority"].i64() == priority::high);
  CHECK(sa["priority_name"].str() == "high");
  CHECK(sa["share"].u64() == 3);
  CHECK(sa["compute_limit_ppm"].u64() == 400'000);
  CHECK(sa["memory_limit_bytes"].u64() == 32 * MiB);
  CHECK(sa["memory_guarantee_bytes"].u64() == 2 * MiB);
  CHECK(sa["reserved_bytes"].u64() == 1 * MiB);
  CHECK(sa["external_bytes"].u64() == 0);
  CHECK(sa["peak_bytes"].u64() == 1 * MiB);
  CHECK(sa["reservations_granted"].u64() == 1);
  CHECK(sa["quantum_ns"].u64() == 5'000'000);
  CHECK(sa["handover"].str() == "guard");
  CHECK(sa["state"].str() == "idle");
  CHECK(sa["device_ns"].u64() == 0);
  CHECK(sa["recent_device_percent"].number() == 0.0); // idle over the whole window
  CHECK(sa["device_waits"].u64() == 0);
  CHECK_FALSE(sa["holds_device"].boolean());

  const json& sb = session_of(a, "beta");
  CHECK(sb["priority"].i64() == priority::normal);
  CHECK(sb["share"].u64() == 1);
  CHECK(sb["compute_limit_ppm"].u64() == 1'000'000);
  CHECK(sb["memory_limit_bytes"].u64() == 64 * MiB); // the default limit is the capacity
  CHECK(sb["reserved_bytes"].u64() == 4 * MiB);
  CHECK(sb["external_bytes"].u64() == 3 * MiB);
  CHECK(sb["peak_bytes"].u64() == 7 * MiB);

  const json& b = table_of(doc, "gpu-b");
  CHECK(b["capacity_unlimited"].boolean());
  CHECK(b["capacity_bytes"].u64() == detail::unlimited_capacity);
  REQUIRE(b["sessions"].size() == 1);
  CHECK(b["sessions"][0]["name"].str() == "gamma");
  CHECK(b["sessions"][0]["pid"].i64() == gamma);
  CHECK(b["sessions"][0]["reserved_bytes"].u64() == 5 * MiB);
  kill_holder(gamma);
}

TEST_CASE("status --json counts device time and shows no recent figure without an interval") {
  test_domain d;
  session s("gpu", d.options("worker"));
  {
    scoped_kernel g(s);
    g.set_device_time(250ms);
  }
  const cli_result r = run_cli({"status", "--json", "--domain", d.name(), "--interval", "0"});
  REQUIRE(r.code == 0);
  const json doc = parse_json(r.out);
  const json& w = session_of(table_of(doc, "gpu"), "worker");
  CHECK(w["device_ns"].u64() == 250'000'000);
  CHECK(w["guards"].u64() == 1);
  CHECK(w["recent_device_percent"].is_null());
  CHECK(table_of(doc, "gpu")["recent_window_ns"].is_null());
  CHECK(doc["interval_ns"].u64() == 0);
}

TEST_CASE("status prints an aligned table with the session names") {
  test_domain d;
  session a("gpu", d.options("first", 64 * MiB));
  auto ra = a.reserve(1 * MiB, 0ms);
  session b("gpu", d.options("a-much-longer-name"));
  auto rb = b.reserve(12 * MiB, 0ms);

  const cli_result r = run_cli({"status", "--domain", d.name(), "--interval", "0.05"});
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, "1 table, 2 live sessions"));
  CHECK(contains(r.out, d.object_name("gpu")));
  CHECK(contains(r.out, "capacity 64.00 MiB, free 51.00 MiB"));
  const auto lines = lines_of(r.out);
  std::size_t header = lines.size();
  for (std::size_t i = 0; i < lines.size(); ++i)
    if (contains(lines[i], "SLOT") && contains(lines[i], "NAME")) header = i;
  REQUIRE(header + 2 < lines.size());
  const std::string& h = lines[header];
  const std::size_t name_col = h.find("NAME");
  const std::size_t reserved_end = h.find("RESERVED") + std::strlen("RESERVED");
  const std::size_t pid_end = h.find("PID") + 3;
  std::map<std::string, std::string> rows; // session name -> its row
  for (std::size_t i = header + 1; i <= header + 2; ++i) {
    const std::string& row = lines[i];
    const std::size_t end = row.find(' ', name_col);
    rows[row.substr(name_col, end - name_col)] = row;
  }
  REQUIRE(rows.count("first") == 1);
  REQUIRE(rows.count("a-much-longer-name") == 1);
  // Right-aligned columns end where their titles end.
  CHECK(rows["first"].substr(0, reserved_end).ends_with("1.00 MiB"));
  CHECK(rows["a-much-longer-name"].substr(0, reserved_end).ends_with("12.00 MiB"));
  CHECK(rows["first"].substr(0, pid_end).ends_with(std::to_string(::getpid())));
  CHECK(contains(rows["first"], "idle"));
}

TEST_CASE("status with no tables in the domain says so and succeeds") {
  test_domain d;
  const cli_result r = run_cli({"status", "--domain", d.name()});
  CHECK(r.code == 0);
  CHECK(r.out.starts_with("domain \"" + d.name() + "\" has no tables"));
  const cli_result j = run_cli({"status", "--json", "--domain", d.name()});
  CHECK(j.code == 0);
  CHECK(parse_json(j.out)["tables"].size() == 0);
}

TEST_CASE("status reports a table of another layout and a table it may not open, and goes on") {
  test_domain d;
  session ok("good", d.options("fine"));
  { auto t = table::open("old", gpushare::open_mode::open_or_create, d.options("x")); }
  {
    const int fd = ::shm_open(d.object_name("old").c_str(), O_RDWR, 0);
    REQUIRE(fd >= 0);
    void* p =
        ::mmap(nullptr, sizeof(detail::table_header), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(p != MAP_FAILED);
    static_cast<detail::table_header*>(p)->prefix.layout_version = 99;
    ::munmap(p, sizeof(detail::table_header));
    ::close(fd);
  }
  const cli_result r = run_cli({"status", "--json", "--domain", d.name(), "--interval", "0"});
  REQUIRE(r.code == 0);
  const json doc = parse_json(r.out);
  REQUIRE(doc["tables"].size() == 1);
  CHECK(doc["tables"][0]["key"].str() == "good");
  REQUIRE(doc["unreadable"].size() == 1);
  CHECK(doc["unreadable"][0]["key"].str() == "old");
  CHECK(doc["unreadable"][0]["error"].str() == "table_incompatible");
  CHECK(contains(doc["unreadable"][0]["message"].str(), "layout version 99"));
  const cli_result text = run_cli({"status", "--domain", d.name(), "--interval", "0"});
  CHECK(text.code == 0);
  CHECK(contains(text.out, "incompatible layout"));
  CHECK(contains(text.out, "fine"));

  if (::geteuid() != 0) {
    MESSAGE("not root: the permission-denied part needs another uid to run the tool as");
    return;
  }
  const uid_t nobody = 65534;
  const cli_result denied = run_cli({"status", "--json", "--domain", d.name()}, nobody);
  REQUIRE(denied.code == 0);
  const json dd = parse_json(denied.out);
  CHECK(dd["tables"].size() == 0);
  REQUIRE(dd["unreadable"].size() == 2);
  for (const auto& u : dd["unreadable"].items) {
    CHECK(u["error"].str() == "permission_denied");
    CHECK(u["file_uid"].u64() == 0);
    CHECK(u["file_mode"].str() == "0600");
  }
  const cli_result denied_text = run_cli({"status", "--domain", d.name()}, nobody);
  CHECK(denied_text.code == 0);
  CHECK(contains(denied_text.out, "permission denied"));
  CHECK(contains(denied_text.out, "belongs to another user or group"));
  // clean as another user removes nothing it may not open.
  const cli_result clean = run_cli({"clean", "--domain", d.name()}, nobody);
  CHECK(clean.code == 0);
  CHECK(contains(clean.out, "kept " + d.object_name("good") + ": owned by uid 0"));
  CHECK(d.exists("good"));
  CHECK(d.exists("old"));
}

// ------------------------------------------------------------------------------------------------
// set
// ------------------------------------------------------------------------------------------------

TEST_CASE("set changes a live session's settings, seen by the session and by status") {
  test_domain d;
  session s("gpu", d.options("worker", 64 * MiB));
  const cli_result r =
      run_cli({"set", "worker", "--domain", d.name(), "--share", "7", "--priority", "critical",
               "--compute-limit", "25%", "--memory-limit", "8MiB", "--memory-guarantee", "1MiB",
               "--quantum", "2ms", "--handover", "yield"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, "share: 1 -> 7"));
  CHECK(contains(r.out, "priority: normal -> critical"));
  CHECK(contains(r.out, "compute limit: 100% -> 25%"));
  CHECK(contains(r.out, "memory limit: 64.00 MiB -> 8.00 MiB"));
  CHECK(contains(r.out, "memory guarantee: 0 B -> 1.00 MiB"));
  CHECK(contains(r.out, "quantum: 5 ms -> 2 ms"));
  CHECK(contains(r.out, "handover: guard -> yield"));

  const session_info i = s.info();
  CHECK(i.share == 7);
  CHECK(i.priority == priority::critical);
  CHECK(i.compute_limit_ppm == 250'000);
  CHECK(i.memory_limit == 8 * MiB);
  CHECK(i.memory_guarantee == 1 * MiB);
  CHECK(i.quantum_ns == 2'000'000);
  CHECK(i.handover == handover_point::at_yield);

  const cli_result st = run_cli({"status", "--json", "--domain", d.name(), "--interval", "0"});
  REQUIRE(st.code == 0);
  const json doc = parse_json(st.out);
  const json& w = session_of(table_of(doc, "gpu"), "worker");
  CHECK(w["share"].u64() == 7);
  CHECK(w["priority"].i64() == priority::critical);
  CHECK(w["compute_limit_ppm"].u64() == 250'000);
  CHECK(w["memory_limit_bytes"].u64() == 8 * MiB);
  CHECK(w["memory_guarantee_bytes"].u64() == 1 * MiB);
  CHECK(w["handover"].str() == "yield");
}

TEST_CASE("set reaches a session of another process, by slot number with --table") {
  test_domain d;
  {
    auto t = table::open("gpu-b", gpushare::open_mode::open_or_create, d.options("x"));
  } // a second table: the slot needs --table
  const pid_t holder = spawn_holder(d, "gpu", "remote", 0, 100 * MiB);
  auto t = table::open_existing(d.object_name("gpu"));
  const auto ids = t.find("remote");
  REQUIRE(ids.size() == 1);
  const std::string slot = std::to_string(ids[0].slot);

  const cli_result without = run_cli({"set", slot, "--domain", d.name(), "--share", "2"});
  CHECK(without.code == 1);
  CHECK(contains(without.err, "needs --table"));

  const cli_result r = run_cli({"set", slot, "--table", "gpu", "--domain", d.name(),
                                "--memory-limit", "25%", "--share", "9"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, "share: 1 -> 9"));
  CHECK(contains(r.out, "memory limit: 100.00 MiB -> 25.00 MiB"));
  const auto snap = t.snapshot();
  REQUIRE(snap.sessions.size() == 1);
  CHECK(snap.sessions[0].pid == holder);
  CHECK(snap.sessions[0].share == 9);
  CHECK(snap.sessions[0].memory_limit == 25 * MiB);

  // The object name works as --table too, and an unchanged value is said to be unchanged.
  const cli_result again = run_cli({"set", slot, "--table", d.object_name("gpu"), "--share", "9"});
  CHECK(again.code == 0);
  CHECK(contains(again.out, "share: 9 (unchanged)"));
  kill_holder(holder);
}

TEST_CASE("set refuses unknown and ambiguous names and changes nothing") {
  test_domain d;
  session one("gpu-a", d.options("dup"));
  session two("gpu-b", d.options("dup"));

  const cli_result unknown = run_cli({"set", "nobody", "--domain", d.name(), "--share", "2"});
  CHECK(unknown.code == 1);
  CHECK(contains(unknown.err, "no live session named \"nobody\""));
  CHECK(unknown.out.empty());

  const cli_result ambiguous = run_cli({"set", "dup", "--domain", d.name(), "--share", "2"});
  CHECK(ambiguous.code == 1);
  CHECK(contains(ambiguous.err, "2 live sessions are named \"dup\""));
  CHECK(contains(ambiguous.err, d.object_name("gpu-a")));
  CHECK(contains(ambiguous.err, d.object_name("gpu-b")));
  CHECK(contains(ambiguous.err, "--table"));

  const cli_result no_table =
      run_cli({"set", "dup", "--domain", d.name(), "--table", "gpu-c", "--share", "2"});
  CHECK(no_table.code == 1);
  CHECK(contains(no_table.err, "no table matches --table gpu-c"));

  const cli_result refused = run_cli({"set", "dup", "--domain", d.name(), "--table", "gpu-a",
                                      "--memory-limit", "1MiB", "--memory-guarantee", "2MiB"});
  CHECK(refused.code == 1);
  CHECK(contains(refused.err, "guarantee"));

  CHECK(one.info().share == 1);
  CHECK(two.info().share == 1);
  CHECK(one.info().memory_guarantee == 0);

  const cli_result chosen =
      run_cli({"set", "dup", "--domain", d.name(), "--table", "gpu-b", "--share", "5"});
  CHECK(chosen.code == 0);
  CHECK(one.info().share == 1);
  CHECK(two.info().share == 5);
}

// ------------------------------------------------------------------------------------------------
// clean
// ------------------------------------------------------------------------------------------------

TEST_CASE("clean removes a table whose only session was killed and keeps one with a live session") {
  test_domain d;
  const pid_t victim = spawn_holder(d, "dead", "victim", 3 * MiB);
  kill_holder(victim);
  session alive("live", d.options("survivor"));
  {
    auto t = table::open("empty", gpushare::open_mode::open_or_create, d.options("x"));
  } // never had a session
  REQUIRE(d.exists("dead"));

  const cli_result dry = run_cli({"clean", "--domain", d.name(), "--dry-run"});
  CHECK(dry.code == 0);
  CHECK(contains(dry.out, "would remove " + d.object_name("dead") + " (1 dead session)"));
  CHECK(contains(dry.out, "would remove " + d.object_name("empty")));
  CHECK(contains(dry.out, "kept " + d.object_name("live") + ": 1 live session"));
  CHECK(contains(dry.out, "would remove 2 of 3 tables (dry run"));
  CHECK(d.exists("dead"));
  CHECK(d.exists("empty"));
  CHECK(d.exists("live"));

  const cli_result r = run_cli({"clean", "--domain", d.name()});
  CHECK(r.code == 0);
  CHECK(contains(r.out, "removed " + d.object_name("dead") + " (1 dead session)"));
  CHECK(contains(r.out, "removed " + d.object_name("empty") + " (no live sessions)"));
  CHECK(contains(r.out, "kept " + d.object_name("live") + ": 1 live session"));
  CHECK(contains(r.out, "removed 2 of 3 tables"));
  CHECK_FALSE(d.exists("dead"));
  CHECK_FALSE(d.exists("empty"));
  CHECK(d.exists("live"));
  auto still = alive.reserve(1 * MiB, 0ms); // the survivor's table is untouched
  CHECK(alive.snapshot().reserved_total == 1 * MiB);
}

TEST_CASE("clean --force removes tables in use and tables of another layout") {
  test_domain d;
  session alive("live", d.options("user"));
  { auto t = table::open("odd", gpushare::open_mode::open_or_create, d.options("x")); }
  {
    const int fd = ::shm_open(d.object_name("odd").c_str(), O_RDWR, 0);
    REQUIRE(fd >= 0);
    void* p =
        ::mmap(nullptr, sizeof(detail::table_header), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(p != MAP_FAILED);
    static_cast<detail::table_header*>(p)->prefix.magic = 0x1234; // not a table any more
    ::munmap(p, sizeof(detail::table_header));
    ::close(fd);
  }
  const cli_result plain = run_cli({"clean", "--domain", d.name()});
  CHECK(plain.code == 0);
  CHECK(contains(plain.out, "kept " + d.object_name("odd") + ": corrupt"));
  CHECK(contains(plain.out, "--force removes it anyway"));
  CHECK(d.exists("odd"));
  CHECK(d.exists("live"));

  const cli_result dry = run_cli({"clean", "--domain", d.name(), "--force", "--dry-run"});
  CHECK(dry.code == 0);
  CHECK(contains(dry.out, "would remove 2 of 2 tables"));
  CHECK(d.exists("odd"));
  CHECK(d.exists("live"));

  const cli_result forced = run_cli({"clean", "--domain", d.name(), "--force"});
  CHECK(forced.code == 0);
  CHECK(contains(forced.out,
                 "removed " + d.object_name("live") + " (--force: it had 1 live session"));
  CHECK(contains(forced.out, "removed " + d.object_name("odd") + " (--force: corrupt"));
  CHECK_FALSE(d.exists("odd"));
  CHECK_FALSE(d.exists("live"));
  // The live session goes on in its now orphaned table, and a newcomer gets a fresh table.
  auto r = alive.reserve(1 * MiB, 0ms);
  session newcomer("live", d.options("newcomer"));
  CHECK(newcomer.snapshot().sessions.size() == 1);
  CHECK(alive.snapshot().sessions.size() == 1);
}

namespace {
// The clean-vs-join race, made to happen: the child's join runs `gpushare clean` right after it
// has opened the table and before it claims a slot.
std::string race_domain;
std::atomic<int>* race_clean_exit = nullptr;
std::atomic<int>* race_removed = nullptr;

void clean_at_join_opened(const char* where) {
  static bool done = false;
  if (done || std::string_view(where) != "join.opened") return;
  done = true;
  *race_clean_exit = run_cli({"clean", "--domain", race_domain}).code;
  *race_removed =
      ::access(
          ("/dev/shm" + detail::table_object_name(race_domain, "gpu", table_access::user)).c_str(),
          F_OK) != 0;
}

/// 0 if session `s` is in the table its name refers to now (found there with its id and pid).
int check_in_named_table(session& s) {
  try {
    const table_snapshot mine = s.snapshot();
    const table_snapshot named = table::open_existing(s.table_name(), 1000ms).snapshot();
    if (named.created_unix_ns != mine.created_unix_ns) return 1; // another incarnation
    for (const auto& i : named.sessions)
      if (i.id == s.id() && i.pid == ::getpid()) return 0;
    return 2;
  } catch (...) {
    return 3; // no table under the name at all
  }
}
} // namespace

TEST_CASE("a join that opened a table just before clean removed it joins the table now named") {
  test_domain d;
  {
    auto t = table::open("gpu", gpushare::open_mode::open_or_create, d.options("x"));
  } // exists, with no session
  test::shared_block<std::atomic<int>> shared(2);
  race_domain = d.name();
  race_clean_exit = &shared[0];
  race_removed = &shared[1];
  shared[0] = -1;
  const pid_t child = test::spawn([&] {
    detail::crash_point_hook = clean_at_join_opened;
    session s("gpu", d.options("joiner"));
    detail::crash_point_hook = nullptr;
    return check_in_named_table(s);
  });
  CHECK(test::wait_exit(child) == 0);
  CHECK(shared[0].load() == 0); // clean ran and succeeded...
  CHECK(shared[1].load() == 1); // ...and removed the table the child had opened
  CHECK(d.exists("gpu"));       // the child's join made a new one
}

TEST_CASE("joins racing repeated cleans always end up in the table under the name") {
  test_domain d;
  test::shared_block<std::atomic<int>> shared(3); // stop, joins, failures
  const pid_t joiner = test::spawn([&] {
    while (shared[0].load() == 0) {
      session s("gpu", d.options("joiner"));
      if (check_in_named_table(s) != 0) shared[2].fetch_add(1);
      shared[1].fetch_add(1);
    }
    return 0;
  });
  int removed_by_cli = 0;
  for (int i = 0; i < 15; ++i) {
    const cli_result r = run_cli({"clean", "--domain", d.name()});
    CHECK(r.code == 0);
    removed_by_cli += contains(r.out, "removed 1 of 1") ? 1 : 0;
    // The library's own remover, many times between two runs of the tool.
    for (int k = 0; k < 200; ++k) (void)remove_unused_table(d.object_name("gpu"));
  }
  shared[0] = 1;
  CHECK(test::wait_exit(joiner) == 0);
  MESSAGE("joins: " << shared[1].load() << ", removals by the tool: " << removed_by_cli);
  CHECK(shared[1].load() > 0);
  CHECK(shared[2].load() == 0);
}

// ------------------------------------------------------------------------------------------------
// metrics
// ------------------------------------------------------------------------------------------------

TEST_CASE("metrics prints HELP and TYPE lines and each session's values with escaped labels") {
  test_domain d;
  session_options o = d.options("we\"ird\\name", 64 * MiB);
  o.share = 4;
  o.priority = priority::high;
  session s("gpu", o);
  auto r = s.reserve(3 * MiB, 0ms);
  {
    scoped_kernel g(s);
    g.set_device_time(1500ms);
  }
  const cli_result m = run_cli({"metrics", "--domain", d.name()});
  REQUIRE(m.code == 0);
  const std::string table_labels =
      "table=\"" + d.object_name("gpu") + "\",key=\"gpu\",domain=\"" + d.name() + "\"";
  const std::string session_labels =
      table_labels + ",session=\"we\\\"ird\\\\name\",slot=\"" + std::to_string(s.id().slot) + "\"";
  // The pid is a label of the info series only: a restarted process continues the others.
  CHECK(contains(m.out, "gpushare_session_info{" + session_labels + ",pid=\"" +
                            std::to_string(::getpid()) + "\"} 1\n"));
  CHECK_FALSE(contains(m.out, "gpushare_session_reserved_bytes{" + session_labels + ",pid="));
  CHECK(contains(m.out, "# HELP gpushare_table_capacity_bytes "));
  CHECK(contains(m.out, "# TYPE gpushare_table_capacity_bytes gauge\n"));
  CHECK(contains(m.out, "gpushare_table_capacity_bytes{" + table_labels + "} 67108864\n"));
  CHECK(contains(m.out, "gpushare_table_committed_bytes{" + table_labels + "} 3145728\n"));
  CHECK(contains(m.out, "gpushare_table_sessions{" + table_labels + "} 1\n"));
  CHECK(contains(m.out, "gpushare_table_up{" + table_labels + "} 1\n"));
  CHECK(contains(m.out, "# TYPE gpushare_session_reserved_bytes gauge\n"));
  CHECK(contains(m.out, "gpushare_session_reserved_bytes{" + session_labels + "} 3145728\n"));
  CHECK(contains(m.out, "gpushare_session_share{" + session_labels + "} 4\n"));
  CHECK(contains(m.out, "gpushare_session_priority{" + session_labels + "} 2\n"));
  CHECK(contains(m.out, "# TYPE gpushare_session_device_seconds_total counter\n"));
  CHECK(contains(m.out, "gpushare_session_device_seconds_total{" + session_labels + "} 1.5\n"));
  CHECK(contains(m.out, "gpushare_session_guards_total{" + session_labels + "} 1\n"));
  CHECK(contains(m.out, "gpushare_session_device_waits_total{" + session_labels + "} 0\n"));
  CHECK(contains(m.out, "gpushare_session_compute_limit_ratio{" + session_labels + "} 1\n"));
  CHECK_FALSE(contains(m.out, "gpushare_device_free_bytes")); // no CUDA session observed it

  // Every sample belongs to the family whose HELP and TYPE lines came just before it.
  std::map<std::string, int> types;
  std::string current;
  for (const auto& line : lines_of(m.out)) {
    if (line.rfind("# HELP ", 0) == 0) {
      current = line.substr(7, line.find(' ', 7) - 7);
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      CHECK(name == current);
      ++types[name];
      continue;
    }
    const std::string name = line.substr(0, line.find_first_of("{ "));
    CHECK(name == current);
    CHECK(types.count(name) == 1);
  }
  for (const auto& [name, count] : types) CHECK(count == 1);
}

// ------------------------------------------------------------------------------------------------
// top
// ------------------------------------------------------------------------------------------------

TEST_CASE("top --iterations 2 prints two frames with the session rows, then exits 0") {
  test_domain d;
  session s("gpu", d.options("topper"));
  const cli_result r =
      run_cli({"top", "--domain", d.name(), "--iterations", "2", "--interval", "0.1"});
  CHECK(r.code == 0);
  CHECK(r.err.empty());
  std::size_t frames = 0, rows = 0;
  for (const auto& line : lines_of(r.out)) {
    frames += line.rfind("gpushare top", 0) == 0 ? 1 : 0;
    rows += contains(line, " topper ") ? 1 : 0;
  }
  CHECK(frames == 2);
  CHECK(rows == 2);
  CHECK_FALSE(contains(r.out, "\x1b[")); // not a terminal: no screen clearing
}

TEST_CASE("top runs until SIGINT and then exits 0") {
  test_domain d;
  session s("gpu", d.options("until-interrupted"));
  running_cli top = start_cli({"top", "--domain", d.name(), "--interval", "0.05"});
  std::string seen;
  char buf[4096];
  while (!contains(seen, "until-interrupted")) {
    const ssize_t n = ::read(top.out, buf, sizeof buf);
    if (n <= 0) break;
    seen.append(buf, static_cast<std::size_t>(n));
  }
  REQUIRE(contains(seen, "until-interrupted"));
  ::kill(top.pid, SIGINT);
  const cli_result r = finish_cli(top);
  CHECK(r.code == 0);
}

// ------------------------------------------------------------------------------------------------
// command line
// ------------------------------------------------------------------------------------------------

TEST_CASE("bad command lines exit 2 with the error and the usage on stderr") {
  const std::vector<std::vector<std::string>> bad = {
      {},
      {"frobnicate"},
      {"--frobnicate"},
      {"status", "--bogus"},
      {"status", "--domain"},
      {"status", "--domain", "bad/domain"},
      {"status", "extra"},
      {"status", "--json=yes"},
      {"status", "--json", "--json"},
      {"top", "--interval", "abc"},
      {"top", "--interval", "0"},
      {"top", "--iterations", "0"},
      {"top", "--iterations", "-3"},
      {"set"},
      {"set", "worker"},
      {"set", "worker", "--share", "abc"},
      {"set", "worker", "--share", "0"},
      {"set", "worker", "--priority", "urgent"},
      {"set", "worker", "--compute-limit", "30"},
      {"set", "worker", "--memory-limit", "12 parsecs"},
      {"set", "worker", "--quantum", "5"},
      {"set", "worker", "other", "--share", "2"},
      {"clean", "--force=yes"},
      {"metrics", "--interval", "1"},
  };
  for (const auto& args : bad) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    CAPTURE(joined);
    const cli_result r = run_cli(args);
    CHECK(r.code == 2);
    CHECK(contains(r.err, "error: "));
    CHECK(contains(r.err, "Usage: gpushare"));
    CHECK(r.out.empty());
  }
  const cli_result value = run_cli({"set", "worker", "--share", "abc"});
  CHECK(contains(value.err, "--share: invalid share \"abc\""));
  CHECK(contains(value.err, "Usage: gpushare set"));
  const cli_result flag = run_cli({"status", "--bogus"});
  CHECK(contains(flag.err, "unknown option '--bogus'"));
  const cli_result missing = run_cli({"status", "--domain"});
  CHECK(contains(missing.err, "option --domain needs a value"));
}

TEST_CASE("--help, <command> --help and --version print to stdout and exit 0") {
  const cli_result help = run_cli({"--help"});
  CHECK(help.code == 0);
  CHECK(contains(help.out, "Usage: gpushare <command>"));
  for (const char* c : {"status", "top", "set", "clean", "metrics"}) {
    CAPTURE(c);
    const cli_result r = run_cli({c, "--help"});
    CHECK(r.code == 0);
    CHECK(contains(r.out, std::string("Usage: gpushare ") + c));
    CHECK(r.err.empty());
    const cli_result h = run_cli({"help", c});
    CHECK(h.code == 0);
    CHECK(h.out == r.out);
  }
  const cli_result v = run_cli({"--version"});
  CHECK(v.code == 0);
  CHECK(v.out == "gpushare " GPUSHARE_VERSION_STRING " (table layout " +
                     std::to_string(table_layout_version) + ")\n");
}

TEST_CASE("mistyped commands and options get a suggestion, and extra arguments are refused") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"stat"}, "error: unknown command 'stat'; did you mean 'status'?\n"},
      {{"stauts"}, "error: unknown command 'stauts'; did you mean 'status'?\n"},
      {{"metric"}, "error: unknown command 'metric'; did you mean 'metrics'?\n"},
      {{"help", "stat"}, "error: unknown command 'stat'; did you mean 'status'?\n"},
      {{"frobnicate"}, "error: unknown command 'frobnicate'\n"},
      {{"--verison"}, "error: unknown option '--verison'; did you mean '--version'?\n"},
      {{"--status"}, "error: unknown option '--status'; did you mean 'status'?\n"},
      {{"status", "--dommain", "x"}, "error: unknown option '--dommain'; did you mean '--domain'?"},
      {{"status", "-json"}, "error: unknown option '-json'; did you mean '--json'?"},
      {{"clean", "--dryrun"}, "error: unknown option '--dryrun'; did you mean '--dry-run'?"},
      {{"top", "--iteration", "2"}, "did you mean '--iterations'?"},
      {{"--version", "extra"}, "error: --version takes no arguments, got 'extra'"},
      {{"help", "status", "extra"}, "error: unexpected extra argument 'extra'"},
      {{"--help", "top", "extra"}, "error: unexpected extra argument 'extra'"},
      {{"status", "extra"}, "error: unexpected argument 'extra'"},
      {{"top", "extra"}, "error: unexpected argument 'extra'"},
      {{"clean", "extra"}, "error: unexpected argument 'extra'"},
      {{"metrics", "extra"}, "error: unexpected argument 'extra'"},
      {{"set", "worker", "other", "--share", "2"}, "error: unexpected extra argument 'other'"},
      {{"status", "--domain", "x", "--all-domains"},
       "error: give --domain or --all-domains, not both"},
  };
  for (const auto& [args, message] : bad) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    CAPTURE(joined);
    const cli_result r = run_cli(args);
    CHECK(r.code == 2);
    CHECK(contains(r.err, message));
    CHECK(contains(r.err, "Usage: gpushare"));
    CHECK(r.out.empty());
  }
  // help takes the command to describe after --help and -h too.
  const cli_result h = run_cli({"--help", "status"});
  CHECK(h.code == 0);
  CHECK(h.out == run_cli({"status", "--help"}).out);
  CHECK(run_cli({"-h", "clean"}).out == run_cli({"clean", "--help"}).out);
  CHECK(run_cli({"help", "help"}).out == run_cli({"--help"}).out);
}

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

#else

TEST_CASE("the command-line tool tests need GPUSHARE_BUILD_TOOLS=ON" * doctest::skip()) {}

#endif
