// SPDX-License-Identifier: Apache-2.0
// `gpushare top`'s history and fitting (tools/cli_top_history.hpp, tools/cli_top.hpp), as pure
// functions on made-up samples: the sparkline's levels, the minute's buckets, a history per session
// that starts afresh in a reused slot and forgets a session that left, and (seeded random) that no
// line of a frame is wider than the width asked for, from 20 to 200 columns.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cli_top.hpp"

using namespace gpushare;
using namespace gpushare::cli;

namespace {

constexpr std::uint64_t s_ns = 1'000'000'000;

session_info session_named(std::string name, std::uint32_t slot, std::uint64_t device_ns) {
  session_info i;
  i.name = std::move(name);
  i.id.slot = slot;
  i.id.generation = 1;
  i.pid = static_cast<std::int32_t>(1000 + slot);
  i.share = 1;
  i.device_ns = device_ns;
  return i;
}

/// A sample of one table holding `sessions`, read at monotonic `at_ns`.
sample sample_of(std::vector<session_info> sessions, std::uint64_t at_ns) {
  table_reading t;
  t.entry.object_name = "/gpushare.u0.test";
  t.entry.key = "test";
  t.entry.domain = "u0";
  table_snapshot s;
  s.object_name = t.entry.object_name;
  s.key = "test";
  s.domain = "u0";
  s.capacity = 1ull << 30;
  s.slot_count = 64;
  s.sessions = std::move(sessions);
  t.snapshot = std::move(s);
  t.taken_ns = at_ns;
  sample out;
  out.tables.push_back(std::move(t));
  out.taken_unix_ns = 1'700'000'000ull * s_ns;
  return out;
}

std::string glyphs(const std::vector<std::optional<double>>& v) { return sparkline(v, false); }

} // namespace

TEST_CASE("the sparkline has eight levels of the whole device and a blank for no value") {
  CHECK(glyphs({0.0, 12.5, 12.6, 25.0, 25.1, 50.0, 87.5, 87.6, 100.0}) == "__..:-*##");
  CHECK(glyphs({std::nullopt, -5.0, 250.0, std::nan("")}) == " _# ");
  CHECK(sparkline({0.0, 100.0, std::nullopt}, true) == "\u2581\u2588 ");
  CHECK(columns_of(sparkline({1.0, 40.0, 70.0, 99.0}, true)) == 4);
}

TEST_CASE("the minute's buckets are the time-weighted share of the points that cover them") {
  const std::uint64_t now = 1000 * s_ns;
  std::deque<share_point> points;
  // The last 30 s at 100%, the 10 s before at 0%; nothing before.
  points.push_back({now - 40 * s_ns, now - 30 * s_ns, 0.0});
  points.push_back({now - 30 * s_ns, now, 100.0});
  const auto b = history_buckets(points, now, 6); // 10 s each
  REQUIRE(b.size() == 6);
  CHECK_FALSE(b[0].has_value());
  CHECK_FALSE(b[1].has_value());
  CHECK(*b[2] == doctest::Approx(0.0));
  CHECK(*b[3] == doctest::Approx(100.0));
  CHECK(*b[5] == doctest::Approx(100.0));
  const auto half = history_buckets(points, now - 25 * s_ns, 12); // 5 s each
  CHECK(*half[11] == doctest::Approx(100.0));
  CHECK(*half[10] == doctest::Approx(0.0));
  const auto one = history_buckets(points, now, 1); // the whole minute: 30 of 40 covered s busy
  CHECK(*one[0] == doctest::Approx(75.0));
  CHECK(history_buckets(points, now, 0).empty());
}

TEST_CASE("a history per session: none for a new session, afresh in a reused slot, gone sessions "
          "forgotten") {
  share_history h;
  sample a = sample_of({session_named("busy", 1, 0), session_named("idle", 2, 0)}, 10 * s_ns);
  h.record(nullptr, a);
  const table_reading& ta = a.tables[0];
  CHECK(h.of(ta, ta.snapshot->sessions[0]).empty()); // one sample: nothing used yet
  sample b = sample_of({session_named("busy", 1, s_ns), session_named("idle", 2, 0)}, 11 * s_ns);
  h.record(&a, b);
  const table_reading& tb = b.tables[0];
  REQUIRE(h.of(tb, tb.snapshot->sessions[0]).size() == 1);
  CHECK(h.of(tb, tb.snapshot->sessions[0]).back().percent == doctest::Approx(100.0));
  CHECK(h.of(tb, tb.snapshot->sessions[1]).back().percent == doctest::Approx(0.0));
  // Slot 2 now holds another session (a new generation): its history starts empty; "idle" left.
  session_info reused = session_named("newcomer", 2, 0);
  reused.id.generation = 2;
  sample c = sample_of({session_named("busy", 1, 2 * s_ns), reused}, 12 * s_ns);
  h.record(&b, c);
  const table_reading& tc = c.tables[0];
  CHECK(h.of(tc, tc.snapshot->sessions[0]).size() == 2);
  CHECK(h.of(tc, tc.snapshot->sessions[1]).empty());
  CHECK(h.sessions() == 2);
  // Points older than the minute are dropped.
  sample d = sample_of({session_named("busy", 1, 3 * s_ns)}, 80 * s_ns);
  h.record(&c, d);
  const table_reading& td = d.tables[0];
  REQUIRE(h.of(td, td.snapshot->sessions[0]).size() == 1);
  CHECK(h.sessions() == 1);
}

TEST_CASE("fit_lines cuts each line to the width in columns without splitting a glyph") {
  const std::string line = "ab" + sparkline({100.0, 100.0, 100.0}, true) + "cdef";
  CHECK(fit_lines(line, 9) == line);
  CHECK(fit_lines(line, 5) == "ab\u2588\u2588>");
  CHECK(fit_lines("short\nlonger line\n", 6) == "short\nlonge>\n");
  CHECK(widest_line("ab\n" + line + "\n") == 9);
}

TEST_CASE("no line of a frame is wider than the width (seeded random tables, 20 to 200 "
          "columns)") {
  std::mt19937_64 rng(30);
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyz-_.0123456789<>\"&";
  for (int round = 0; round < 200; ++round) {
    CAPTURE(round);
    std::vector<session_info> first, second;
    const std::size_t n = 1 + rng() % 6;
    for (std::uint32_t k = 0; k < n; ++k) {
      std::string name;
      for (std::size_t c = 0, len = 1 + rng() % 40; c < len; ++c)
        name += alphabet[rng() % alphabet.size()];
      first.push_back(session_named(name, k, 0));
      session_info later = first.back();
      later.device_ns = rng() % (2 * s_ns);
      later.share = static_cast<std::uint32_t>(1 + rng() % 1000);
      second.push_back(later);
    }
    const sample a = sample_of(first, 5 * s_ns), b = sample_of(second, 7 * s_ns);
    share_history h;
    h.record(nullptr, a);
    h.record(&a, b);
    const std::size_t width = 20 + rng() % 181;
    CAPTURE(width);
    const top_view v{width, rng() % 2 == 0};
    const std::string frame = top_frame(&a, b, domain_choice{}, h, v);
    CHECK(widest_line(frame) <= width);
    for (const auto& s : second) // every session is shown, perhaps cut short
      CHECK(frame.find(safe_text(s.name).substr(0, 3)) != std::string::npos);
  }
}
