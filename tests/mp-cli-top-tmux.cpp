// SPDX-License-Identifier: Apache-2.0
// `gpushare top` in a real terminal (CTest labels "multiprocess" and "tmux"): Debian's tmux runs it
// in a detached session of a chosen size, and the test reads the screen with `capture-pane`. Three
// forked sessions: "busy" in guards all the time, "calm" idle, "gone", which leaves (SIGKILL).
// Checked: each shows its state and configured share, the busy one's minute fills with high glyphs
// and the idle one's stays at the lowest, the one killed leaves the screen, and no line is wider
// than the terminal, at 300 columns (the full view) and at 44 (the compact one). Skipped, with a
// message, without tmux.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gpushare/gpushare.hpp>

#include "cli_test_util.hpp"
#include "test_util.hpp"

using namespace gpushare;
using namespace cli_test;
using namespace std::chrono_literals;

namespace {

const char* const tmux = "/usr/bin/tmux";
const std::string full_block = "\u2588", seven_eighths = "\u2587", lowest = "\u2581";

/// A tmux server of its own (its socket named after this process), killed at the end.
struct tmux_server {
  std::string socket = "gpushare-top-test-" + std::to_string(::getpid());

  std::string run(const std::string& args) const {
    const test::command_result r = test::run_command(
        std::string(tmux).append(" -L ").append(socket).append(" ").append(args) + " 2>&1");
    CHECK_MESSAGE(r.exit_code == 0, "tmux " << args << ": " << r.output);
    return r.output;
  }
  /// The screen of the session, one line per row, trailing spaces cut; a line that wrapped is
  /// joined again (-J), so a line wider than the terminal shows as one.
  std::string screen() const { return run("capture-pane -p -J -t top"); }

  ~tmux_server() {
    test::run_command(
        std::string(tmux).append(" -L ").append(socket).append(" kill-server >/dev/null 2>&1"));
  }
};

/// A child whose session runs guards back to back (its share of the device ~100%), share 3.
pid_t spawn_busy(const test_domain& d) {
  return test::spawn_holding([&](const std::function<void()>& hold) {
    session_options o = d.options("busy", 64ull << 20);
    o.share = 3;
    session s("gpu", o);
    std::thread([&s] {
      for (;;) {
        scoped_kernel g(s);
        std::this_thread::sleep_for(5ms);
      }
    }).detach();
    hold();
  });
}

/// The line of the screen that shows session `name`, or "".
std::string line_of(const std::string& screen, const std::string& name) {
  for (const auto& l : lines_of(screen))
    if (contains(l, " " + name + " ")) return l;
  return "";
}

/// The terminal columns of a line (its bytes that do not continue a UTF-8 sequence).
std::size_t columns_of_line(const std::string& line) {
  std::size_t n = 0;
  for (const char c : line) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

/// Runs top in a detached tmux session `width` columns wide and checks what it shows.
void check_top_in(std::size_t width, bool compact) {
  CAPTURE(width);
  test_domain d;
  children kids;
  kids.pids = {spawn_busy(d), spawn_holder(d, "gpu", "calm", 0, 64ull << 20),
               spawn_holder(d, "gpu", "gone", 0, 64ull << 20)};
  const pid_t leaving = kids.pids[2];
  tmux_server server;
  // -u: UTF-8 whatever the environment says; env LANG: top's own locale check.
  server.run(std::string("-u -f /dev/null new-session -d -s top -x ")
                 .append(std::to_string(width))
                 .append(" -y 30 'env LANG=C.UTF-8 GPUSHARE_DOMAIN= ")
                 .append(GPUSHARE_CLI_PATH)
                 .append(" top --domain ")
                 .append(d.name())
                 .append(" --interval 0.2; sleep 600'"));
  server.run("set-option -t top remain-on-exit on");
  std::string screen;
  // Ten refreshes give the busy session's minute a few full glyphs (each glyph is 2 s of the
  // minute in the full view, 60 s / width in the compact one).
  CHECK_MESSAGE(test::eventually(
                    [&] {
                      std::this_thread::sleep_for(200ms);
                      screen = server.screen();
                      const std::string b = line_of(screen, "busy");
                      return count_of(b, full_block) + count_of(b, seven_eighths) >= 2;
                    },
                    30s),
                "the screen:\n"
                    << screen);
  const std::string b = line_of(screen, "busy"), i = line_of(screen, "calm");
  REQUIRE_MESSAGE(!b.empty(), screen);
  REQUIRE_MESSAGE(!i.empty(), screen);
  REQUIRE_MESSAGE(!line_of(screen, "gone").empty(), screen);
  CHECK(contains(b, "running"));
  CHECK(contains(i, "idle"));
  CHECK(contains(b, "  3  ")); // its configured share
  CHECK(contains(i, lowest));
  CHECK_FALSE(contains(i, full_block));
  CHECK(contains(screen, compact ? "MINUTE" : "LAST MINUTE"));
  CHECK(contains(screen, "RESERVED") != compact); // the compact view leaves the rest out
  for (const auto& l : lines_of(screen)) CHECK(columns_of_line(l) <= width);

  kids.kill(leaving);
  CHECK_MESSAGE(test::eventually(
                    [&] {
                      std::this_thread::sleep_for(200ms);
                      screen = server.screen();
                      return line_of(screen, "gone").empty() && !line_of(screen, "busy").empty();
                    },
                    30s),
                "the screen:\n"
                    << screen);
}

} // namespace

TEST_CASE("top in a 300-column terminal: the full view with each session's minute") {
  if (::access(tmux, X_OK) != 0) {
    MESSAGE("GPUSHARE_SKIP: tmux is not installed (Debian: apt-get install -y tmux)");
    return;
  }
  check_top_in(300, false);
}

TEST_CASE("top in a 44-column terminal: the compact view, no line wider than the terminal") {
  if (::access(tmux, X_OK) != 0) {
    MESSAGE("GPUSHARE_SKIP: tmux is not installed (Debian: apt-get install -y tmux)");
    return;
  }
  check_top_in(44, true);
}
