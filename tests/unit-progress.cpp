// SPDX-License-Identifier: Apache-2.0
// The progress line's pure formatting (support/harness/include/harness/progress.hpp): time left,
// counters, fitting to the terminal's width in columns, and the refined estimate.
#include <doctest/doctest.h>

#include <harness/progress.hpp>

TEST_CASE("time left is rounded up to whole seconds and minutes") {
  CHECK(demo::format_time_left(0) == "<1 s");
  CHECK(demo::format_time_left(-3) == "<1 s");
  CHECK(demo::format_time_left(0.2) == "1 s");
  CHECK(demo::format_time_left(4) == "4 s");
  CHECK(demo::format_time_left(59.5) == "1 min");
  CHECK(demo::format_time_left(100) == "1 min 40 s");
  CHECK(demo::format_time_left(3600) == "1 h");
  CHECK(demo::format_time_left(7500) == "2 h 5 min");
}

TEST_CASE("counters name the noun the position and the name") {
  CHECK(demo::counter("scenario", 2, 5, "share") == "scenario 2/5 share");
  CHECK(demo::counter("repeat", 1, 3) == "repeat 1/3");
  CHECK(demo::counter("", 1, 2) == "1/2");
}

TEST_CASE("the line is fitted to the width in columns not bytes") {
  const std::string dot = "\xC2\xB7";
  CHECK(demo::display_columns("a" + dot + "b") == 3);
  CHECK(demo::fit_to_width("a" + dot + "bc", 2) == "a" + dot);
  CHECK(demo::fit_to_width("a" + dot + "bc", 3) == "a" + dot + "b");
  CHECK(demo::fit_to_width("abc", 10) == "abc");
  CHECK(demo::fit_to_width("abc", 0).empty());
  const std::string line = demo::progress_text("showcase: [2/2] fair share", 4, 0);
  CHECK(line == "showcase: [2/2] fair share " + dot + " 4 s left");
  const std::string narrow = demo::progress_text("showcase: [2/2] fair share", 4, 20);
  CHECK(demo::display_columns(narrow) == 20);
  CHECK(narrow == "showcase: [2/2] fair");
}

TEST_CASE("the estimate is scaled by how long the finished parts took") {
  CHECK(demo::refined_seconds_left(100, 0, 0) == doctest::Approx(100));
  CHECK(demo::refined_seconds_left(100, 50, 60) == doctest::Approx(120));
  CHECK(demo::refined_seconds_left(100, 50, 25) == doctest::Approx(50));
}

TEST_CASE("a disabled progress line runs the output it wraps and draws nothing") {
  demo::progress_line line(false);
  line.set("x", 3);
  int printed = 0;
  line.around_output([&] { ++printed; });
  line.clear();
  CHECK(printed == 1);
}
