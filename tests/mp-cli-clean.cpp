// SPDX-License-Identifier: Apache-2.0
// The gpushare command-line tool: `clean`, which removes tables that no live session uses, and its
// race with a join. The tool runs as a program against tables that these tests create. Every test
// uses a domain of its own, so no other test's tables can show up in its output.
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

constexpr std::uint64_t MiB = 1ull << 20;

using namespace cli_test;

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
  *race_removed = ::access(table_file(table_name(race_domain, "gpu")).c_str(), F_OK) != 0;
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

namespace {
// A remover that strikes at every join's most exposed point: right after the table is opened.
std::string strike_name;
std::atomic<int>* strike_counts = nullptr; // removed, found in use, attempts

void remove_at_every_join_opened(const char* where) {
  if (std::string_view(where) != "join.opened") return;
  strike_counts[2].fetch_add(1);
  const removal_result r = remove_unused_table(strike_name);
  if (r.status == removal_status::removed) strike_counts[0].fetch_add(1);
  if (r.status == removal_status::in_use) strike_counts[1].fetch_add(1);
}
} // namespace

TEST_CASE("a cleaner that removes the table at every join's opening cannot starve the join") {
  // The join opens the existing empty table, which the cleaner removes; the join starts over and
  // creates the table, claiming its slot before the table is ready, so the cleaner finds it in
  // use. Without that claim, every attempt's table is removed and the join gives up after 64.
  test_domain d;
  {
    auto t = table::open("gpu", gpushare::open_mode::open_or_create, d.options("x"));
  } // exists, with no session
  test::shared_block<std::atomic<int>> shared(3);
  strike_name = d.object_name("gpu");
  strike_counts = &shared[0];
  const pid_t child = test::spawn([&] {
    detail::crash_point_hook = remove_at_every_join_opened;
    session s("gpu", d.options("joiner"));
    detail::crash_point_hook = nullptr;
    return check_in_named_table(s);
  });
  CHECK(test::wait_exit(child) == 0);
  CHECK(shared[0].load() == 1); // the table the join first opened was removed...
  CHECK(shared[1].load() == 1); // ...the one it then created was in use at once...
  CHECK(shared[2].load() == 2); // ...and the join took two attempts
}
