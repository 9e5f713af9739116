// SPDX-License-Identifier: Apache-2.0
// Notices (<gpushare/notices.hpp>): the library writes to no stream but through the process's
// notice handler; each notice is also kept, as a value, by the session that raised it.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace gs = gpushare;

namespace {
/// Runs `body` in a forked child (the once-per-process record starts empty there) whose stderr is
/// captured; checks that it returned true and returns what it wrote.
std::string in_child(const std::function<bool()>& body) {
  int code = -1;
  std::string err = test::child_stderr(
      [&] {
        if (!body()) ::_exit(1); // after body's locals (sessions, tables) are gone
      },
      &code);
  CHECK(code == 0);
  return err;
}
} // namespace

TEST_CASE("a capacity notice goes to the handler once per process and stays on every session") {
  test::unique_table t("notice-capacity", 1ull << 30); // created with 1 GiB
  gs::session creator = t.join("creator");
  CHECK(creator.notices().empty());
  const std::string err = in_child([&] {
    std::vector<gs::notice> got;
    gs::set_notice_handler([&](const gs::notice& n) { got.push_back(n); });
    gs::session_options o = t.options("a");
    o.capacity = 2ull << 30; // asks for another capacity: the table keeps its own
    gs::session a(t.key(), o);
    o.name = std::string("b");
    gs::session b(t.key(), o);
    return got.size() == 1 && got[0].severity == gs::notice::kind::note &&
           got[0].text.find("1.00 GiB") != std::string::npos && a.notices().size() == 1 &&
           a.notices()[0] == got[0] && b.notices().size() == 1 && // b keeps its own, not given
           b.notices()[0].text.find("session 'b' asked for a table capacity of 2.00 GiB") == 0;
  });
  CAPTURE(err);
  CHECK(err.empty()); // the handler took it: nothing on stderr
}

TEST_CASE("the default handler writes each notice as one line on stderr, an empty one drops them") {
  test::unique_table t("notice-default", 1ull << 30);
  gs::session creator = t.join("creator");
  const auto join_asking_other_capacity = [&] {
    gs::session_options o = t.options("x");
    o.capacity = 3ull << 30;
    gs::session s(t.key(), o);
    return s.notices().size() == 1;
  };
  const std::string shown = in_child(join_asking_other_capacity);
  CAPTURE(shown);
  CHECK(shown.rfind("gpushare: ", 0) == 0);
  CHECK(shown.find("1.00 GiB") != std::string::npos);
  CHECK(std::count(shown.begin(), shown.end(), '\n') == 1);
  const std::string dropped = in_child([&] {
    const gs::notice_handler previous = gs::set_notice_handler({});
    return previous && join_asking_other_capacity(); // the default was there; still kept
  });
  CHECK(dropped.empty());
}

TEST_CASE("a warning is marked as one, by the default handler too") {
  const std::string err = in_child([] {
    ::setenv("GPUSHARE_PRIORTY", "high", 1);
    test::unique_table t("notice-warning");
    gs::session s = t.join("w");
    return s.notices().size() == 1 && s.notices()[0].severity == gs::notice::kind::warning &&
           s.notices()[0].text.find("GPUSHARE_PRIORITY") != std::string::npos;
  });
  CHECK(err.find("gpushare: warning: environment variable GPUSHARE_PRIORTY") == 0);
}
