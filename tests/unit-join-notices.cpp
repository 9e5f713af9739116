// SPDX-License-Identifier: Apache-2.0
// The warnings a session prints when it joins (detail/join_notices.hpp, issue 24 item 2): unknown
// GPUSHARE_* variables with the nearest known one, and other tables for the same key.
#include <doctest/doctest.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gpushare/detail/join_notices.hpp>

#include "test_util.hpp"

namespace d = gpushare::detail;

TEST_CASE("edit distance counts insertions, deletions, substitutions and transpositions") {
  CHECK(d::edit_distance("", "") == 0);
  CHECK(d::edit_distance("abc", "abc") == 0);
  CHECK(d::edit_distance("abc", "ab") == 1);
  CHECK(d::edit_distance("abc", "abxc") == 1);
  CHECK(d::edit_distance("abc", "axc") == 1);
  CHECK(d::edit_distance("abc", "acb") == 1);
  CHECK(d::edit_distance("kitten", "sitting") == 3);
  CHECK(d::edit_distance("GPUSHARE_PRIORTY", "GPUSHARE_PRIORITY") == 1);
}

TEST_CASE("an unknown GPUSHARE_ variable is named with the nearest known one") {
  const auto w = d::unknown_variable_warnings({"GPUSHARE_PRIORTY", "GPUSHARE_SHARE", "PATH",
                                               "GPUSHARE_TEST_CHILD", "GPUSHARE_QUANTUN",
                                               "GPUSHARE_XYZZYPLUGH", "GPUSHARE_MEMORY_LIMTI"});
  REQUIRE(w.size() == 4);
  CHECK(w[0] == "environment variable GPUSHARE_PRIORTY is not one gpushare reads, so it is "
                "ignored; did you mean GPUSHARE_PRIORITY?");
  CHECK(w[1].find("GPUSHARE_QUANTUN") != std::string::npos);
  CHECK(w[1].find("did you mean GPUSHARE_QUANTUM?") != std::string::npos);
  CHECK(w[2].find("GPUSHARE_XYZZYPLUGH") != std::string::npos);
  CHECK(w[2].find("did you mean") == std::string::npos); // nothing near: where to look instead
  CHECK(w[2].find("Configuration") != std::string::npos);
  CHECK(w[3].find("did you mean GPUSHARE_MEMORY_LIMIT?") != std::string::npos);
  CHECK(d::unknown_variable_warnings({"GPUSHARE_DORAIN"})[0].find(
            "did you mean GPUSHARE_DOMAIN or GPUSHARE_DRAIN?") != std::string::npos);
  for (std::string_view k : d::known_variables)
    CHECK(d::unknown_variable_warnings({std::string(k)}).empty());
}

TEST_CASE("any one-letter slip of a known variable suggests that variable (seeded)") {
  std::mt19937_64 g(24);
  const std::string letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ_";
  int checked = 0;
  for (int round = 0; round < 2000; ++round) {
    const std::string_view k = d::known_variables[g() % std::size(d::known_variables)];
    std::string v(k);
    const std::size_t at = 9 + g() % (v.size() - 9); // after "GPUSHARE_"
    switch (g() % 4) {
    case 0: v.erase(at, 1); break;
    case 1: v.insert(at, 1, letters[g() % letters.size()]); break;
    case 2: v[at] = letters[g() % letters.size()]; break;
    default:
      if (at + 1 < v.size()) std::swap(v[at], v[at + 1]);
    }
    CAPTURE(v);
    const auto w = d::unknown_variable_warnings({v});
    if (std::find(std::begin(d::known_variables), std::end(d::known_variables), v) !=
        std::end(d::known_variables)) {
      CHECK(w.empty()); // the slip made another known name (or none happened)
      continue;
    }
    REQUIRE(w.size() == 1);
    // k, or k among the names as near (GPUSHARE_DORAIN: GPUSHARE_DOMAIN or GPUSHARE_DRAIN).
    const std::size_t mean = w[0].find("did you mean ");
    REQUIRE(mean != std::string::npos);
    CHECK(w[0].find(std::string(k) + (w[0].find(" or ", mean) == std::string::npos ? "?" : ""),
                    mean) != std::string::npos);
    CHECK(w[0].back() == '?');
    ++checked;
  }
  CHECK(checked > 1500);
}

TEST_CASE("a table's file name is read for a given key whatever its domain and owner") {
  auto e = gpushare::parse_table_file_name_for_key("gpushare.a.u5.u1000.k", "u1000.k");
  REQUIRE(e.has_value());
  CHECK(e->domain == "a");
  CHECK(e->owner == "u5");
  e = gpushare::parse_table_file_name_for_key("gpushare.a.u5.u1000.k", "k");
  REQUIRE(e.has_value());
  CHECK(e->domain == "a.u5");
  CHECK(e->owner == "u1000");
  e = gpushare::parse_table_file_name_for_key("gpushare.x.y.g100.GPU-1", "GPU-1");
  REQUIRE(e.has_value());
  CHECK(e->domain == "x.y");
  CHECK(e->group);
  CHECK(e->owner_id == 100);
  CHECK_FALSE(gpushare::parse_table_file_name_for_key("gpushare.u5.GPU-1", "GPU-1")); // no domain
  CHECK_FALSE(gpushare::parse_table_file_name_for_key("gpushare.d.x5.GPU-1", "GPU-1"));
  CHECK_FALSE(gpushare::parse_table_file_name_for_key("gpushare.d.u5.GPU-12", "GPU-1"));
  CHECK_FALSE(gpushare::parse_table_file_name_for_key("other.d.u5.GPU-1", "GPU-1"));
}

namespace {
/// Runs `body` in a forked child whose stderr is captured; returns what it wrote.
std::string child_stderr(const std::function<void()>& body) {
  int code = -1;
  std::string out = test::child_stderr(body, &code);
  CHECK(code == 0);
  return out;
}
} // namespace

TEST_CASE("a joining session warns once about a misspelt variable and about a split key") {
  test::unique_table t("notices");
  const std::string other_domain = "gpusharetest2";
  const std::string other =
      d::table_object_name(other_domain, t.key(), gpushare::table_access::user);
  // Alone, with a clean environment: no warning at all.
  const std::string quiet = child_stderr([&] { auto s = t.join("quiet"); });
  CHECK(quiet.find("warning") == std::string::npos);
  gpushare::session first = t.join("first"); // the table of domain gpusharetest stays
  // Same key, another domain, a misspelt variable: both warnings, each once.
  const std::string err = child_stderr([&] {
    ::setenv("GPUSHARE_PRIORTY", "high", 1);
    gpushare::session_options o = t.options("second");
    o.domain = other_domain;
    auto a = gpushare::session(t.key(), o);
    auto b = gpushare::session(t.key(), o); // a second join in the process: no repeat
  });
  const auto both = gpushare::list_tables_for_key(t.key()); // whatever their domains
  ::shm_unlink(other.c_str());
  REQUIRE(both.size() == 2);
  CHECK(both[0].object_name == t.object_name());
  CHECK(both[1].object_name == other);
  CAPTURE(err);
  CHECK(err.find("gpushare: warning: environment variable GPUSHARE_PRIORTY is not one gpushare "
                 "reads, so it is ignored; did you mean GPUSHARE_PRIORITY?\n") !=
        std::string::npos);
  const std::size_t split =
      err.find("this session joined table " + other +
               ", but 1 other table "
               "exists for key \"" +
               t.key() + "\": " + t.object_name() + " (domain \"gpusharetest\", user mode, uid ");
  CHECK(split != std::string::npos);
  CHECK(err.find("GPUSHARE_PRIORTY", err.find("GPUSHARE_PRIORTY") + 1) == std::string::npos);
  CHECK(err.find("this session joined", split + 1) == std::string::npos);
}
