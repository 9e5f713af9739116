// SPDX-License-Identifier: Apache-2.0
// The exporter's live page (`gpushare metrics --listen`, GET / and GET /status.json; CTest labels
// "exporter" and "browser"): Debian's chromium, headless, loads the page against a live table of
// three sessions (forked children: one running, one waiting, one idle) and the test reads the DOM
// it dumps, or (the live case) the DOM of a page left open, over the DevTools protocol, while its
// own refreshes follow the table. Skipped, with a message, where chromium is not installed.
#include <doctest/doctest.h>

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gpushare/gpushare.hpp>

#include "browser_test_util.hpp"
#include "cli_test_util.hpp"
#include "exporter_test_util.hpp"
#include "test_util.hpp"

using namespace gpushare;
using namespace cli_test;
using namespace exporter_test;
using browser_test::live_browser;
using browser_test::scratch_dir;
using namespace std::chrono_literals;

#if GPUSHARE_CLI_HTTPLIB

namespace {

constexpr std::uint64_t MiB = 1ull << 20;

/// A session name with markup and quotes: the page must show it as text.
const std::string hostile_name = "<b id=\"evil\">bold</b>'\"&amp;";
/// The same as dump-dom writes it in a text node (&, <, > escaped; quotes as they are).
const std::string hostile_text = "&lt;b id=\"evil\"&gt;bold&lt;/b&gt;'\"&amp;amp;";

/// The DOM of the page at 127.0.0.1:port after chromium ran its script for 5 s of virtual time
/// (the first fetch and two refreshes). Chromium runs headless with a profile of its own, under
/// `timeout` (killed after 90 s, so a hang fails the test rather than stalling it).
std::string page_dom(const std::string& chromium, int port) {
  scratch_dir profile;
  // (std::string(..).append: GCC 12 at -O3 warns falsely on "literal" + std::string.)
  const std::string command =
      std::string("timeout -k 5 90 '")
          .append(chromium)
          .append("' --headless --no-sandbox --disable-gpu --no-first-run --disable-dev-shm-usage "
                  "--disable-extensions --user-data-dir='")
          .append(profile.path)
          .append("' --virtual-time-budget=5000 --dump-dom http://127.0.0.1:")
          .append(std::to_string(port))
          .append("/ 2>/dev/null");
  const test::command_result r = test::run_command(command);
  CHECK_MESSAGE(r.exit_code == 0, "chromium exited " << r.exit_code << ": " << r.output);
  return r.output;
}

/// The row (<tr ...>...</tr>) whose name cell shows `text` (as dump-dom escapes it), or "".
std::string row_of(const std::string& dom, const std::string& text) {
  for (std::size_t at = 0; (at = dom.find("<td class=\"name", at)) != std::string::npos; ++at) {
    const std::size_t open = dom.find('>', at) + 1;
    if (dom.compare(open, text.size() + 5, text + "</td>") != 0) continue;
    const std::size_t begin = dom.rfind("<tr", at), end = dom.find("</tr>", at);
    return dom.substr(begin, end - begin);
  }
  return "";
}

/// The text of the state cell of `row`, or "".
std::string state_in(const std::string& row) {
  const std::size_t at = row.find("<td class=\"state ");
  if (at == std::string::npos) return "";
  const std::size_t open = row.find('>', at) + 1;
  return row.substr(open, row.find("</td>", open) - open);
}

/// A forked child in table "gpu" of `d` that ran one guard of exactly 250 ms of device time and
/// then holds the device (a guard it never leaves): "running". Share 3, 8 MiB reserved (6 MiB,
/// and 2 MiB reclaimable), limit 32 MiB.
pid_t spawn_running(const test_domain& d) {
  return test::spawn_holding([&](const std::function<void()>& hold) {
    session_options o = d.options("trainer", 64 * MiB);
    o.share = 3;
    o.memory_limit = memory_amount::of_bytes(32 * MiB);
    session s("gpu", o);
    reservation r = s.reserve(6 * MiB, 0ms);
    reservation c = s.reserve_reclaimable(2 * MiB, 0ms);
    {
      scoped_kernel g(s);
      g.set_device_time(250ms);
    }
    scoped_kernel held(s);
    hold();
  });
}

/// A forked child whose thread waits for the device that `spawn_running` holds: "waiting".
pid_t spawn_waiting(const test_domain& d) {
  return test::spawn_holding([&](const std::function<void()>& hold) {
    session s("gpu", d.options(hostile_name, 64 * MiB));
    reservation r = s.reserve(1 * MiB, 0ms);
    std::thread([&s] { scoped_kernel g(s); }).detach();
    hold();
  });
}

/// The session named `name` in the table "gpu" of /status.json, parsed.
json status_session(int port, const std::string& name) {
  const http_response r = get(port, "/status.json");
  REQUIRE(r.complete);
  return session_of(table_of(parse_json(r.body), "gpu"), name);
}

/// The three sessions the browser tests show: running ("trainer"), waiting (the name with
/// markup) and idle ("idle-one", 2 MiB reserved), in that order.
std::vector<pid_t> spawn_three(const test_domain& d) {
  return {spawn_running(d), spawn_waiting(d),
          spawn_holder(d, "gpu", "idle-one", 2 * MiB, 64 * MiB)};
}

} // namespace

TEST_CASE("the live page shows every session with its state and escapes a name with markup") {
  const auto chromium = browser_test::chromium_or_skip();
  if (!chromium) return;
  test_domain d;
  children kids;
  kids.pids = spawn_three(d);
  { session gone("idle-gpu", d.options("gone", 64 * MiB)); } // leaves an empty table behind
  exporter x(d.name());
  // The waiter's thread is blocked once the table says so.
  CHECK(test::eventually(
      [&] {
        std::this_thread::sleep_for(50ms);
        return status_session(x.port(), hostile_name)["state"].str() == "waiting";
      },
      30s));

  const std::string dom = page_dom(*chromium, x.port());
  const std::string trainer = row_of(dom, "trainer"), hostile = row_of(dom, hostile_text),
                    quiet = row_of(dom, "idle-one");
  REQUIRE_MESSAGE(!trainer.empty(), dom);
  REQUIRE_MESSAGE(!hostile.empty(), dom);
  REQUIRE_MESSAGE(!quiet.empty(), dom);
  CHECK(state_in(trainer) == "running");
  CHECK(state_in(hostile) == "waiting");
  CHECK(state_in(quiet) == "idle");
  CHECK(contains(trainer, "<td class=\"name holder\">trainer</td>"));
  CHECK(contains(dom, "device holder: trainer (slot "));
  CHECK(contains(trainer, "8.0 MiB reserved, 2.0 MiB reclaimable, limit 32.0 MiB"));
  CHECK(contains(quiet, "2.0 MiB reserved, 0 B reclaimable, limit none"));
  // After three samples each session has a share line with points; the holder's is near 100%.
  CHECK(contains(trainer, "<polyline points=\""));
  CHECK_FALSE(contains(trainer, "<polyline points=\"\""));
  CHECK(contains(trainer, "%</span>"));
  // The waiter and the idle session have used no device time between the samples.
  CHECK(contains(hostile, "<span> 0.0%</span>"));
  CHECK(contains(quiet, "<span> 0.0%</span>"));
  CHECK(contains(dom, "3 sessions"));
  // Each session's priority (issue 42, B10: the page showed none); an empty table takes one line.
  CHECK(contains(quiet, "<td class=\"priority\">normal</td>"));
  CHECK(contains(dom, "<th>priority</th>"));
  const std::size_t empty = dom.find("table idle-gpu (domain " + d.name() + "): no sessions");
  REQUIRE_MESSAGE(empty != std::string::npos, dom);
  const std::size_t section_end = dom.find("</section>", empty);
  CHECK(dom.substr(empty, section_end - empty).find("<table") == std::string::npos);
  // The markup is text: no element with that id, and the script never ran data as HTML.
  CHECK_FALSE(contains(dom, "<b id=\"evil\">"));
  CHECK(contains(dom, "<p id=\"status\" class=\"note\">updated "));

  // SIGKILL: the session leaves the page (a fresh load, as a refresh would see it).
  kids.kill(kids.pids[2]);
  std::string after;
  CHECK(test::eventually(
      [&] {
        after = page_dom(*chromium, x.port());
        return !row_of(after, "trainer").empty() && row_of(after, "idle-one").empty();
      },
      60s));
  CHECK(contains(after, "2 sessions"));
}

/// The names the open page lists, sorted, one per line.
std::string live_names(live_browser& b) {
  return b
      .evaluate("Array.from(document.querySelectorAll('td.name')).map(e => e.textContent)"
                ".sort().join('\\n')")
      .str();
}

TEST_CASE("the open page follows the table: a session killed by SIGKILL leaves it without a "
          "reload") {
  const auto chromium = browser_test::chromium_or_skip();
  if (!chromium) return;
  test_domain d;
  children kids;
  kids.pids = spawn_three(d);
  exporter x(d.name());
  live_browser page(*chromium, "http://127.0.0.1:" + std::to_string(x.port()) + "/");
  // Sorted as JavaScript sorts them (UTF-16 code units; all ASCII here).
  const std::string all = hostile_name + "\nidle-one\ntrainer";
  std::string names;
  REQUIRE_MESSAGE(test::eventually(
                      [&] {
                        std::this_thread::sleep_for(100ms);
                        names = live_names(page);
                        return names == all;
                      },
                      30s),
                  "the page lists: " << names);
  // A mark in this document: if the page reloaded, it would be gone.
  page.evaluate("window.gpushareTestMark = 31, 0");
  CHECK(page.evaluate("document.getElementById('evil') === null").boolean());

  const auto killed_at = std::chrono::steady_clock::now();
  kids.kill(kids.pids[2]);
  CHECK_MESSAGE(test::eventually(
                    [&] {
                      std::this_thread::sleep_for(100ms);
                      names = live_names(page);
                      return names == hostile_name + "\ntrainer";
                    },
                    30s),
                "the page still lists: " << names);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  MESSAGE("the killed session left the open page after " << took << " s");
  CHECK(page.evaluate("window.gpushareTestMark === 31").boolean());
  CHECK(contains(page.evaluate("document.body.textContent").str(), "2 sessions"));
}

TEST_CASE("status.json is the status document and the page has a strict content policy") {
  test_domain d;
  children kids;
  const pid_t running = spawn_running(d);
  kids.pids.push_back(running);
  const pid_t idle = spawn_holder(d, "gpu", "idle-one", 2 * MiB, 64 * MiB);
  kids.pids.push_back(idle);
  exporter x(d.name());
  const http_response r = get(x.port(), "/status.json");
  REQUIRE(r.complete);
  CHECK(r.status == 200);
  CHECK(r.header("Content-Type") == "application/json");
  const json doc = parse_json(r.body);
  CHECK(doc["schema_version"].u64() == 1);
  CHECK(doc["interval_ns"].u64() == 0);
  const json& t = table_of(doc, "gpu");
  CHECK(t["capacity_bytes"].u64() == 64 * MiB);
  CHECK(t["reserved_bytes"].u64() == 10 * MiB);
  CHECK(t["live_sessions"].u64() == 2);
  const json& s = session_of(t, "trainer");
  CHECK(s["pid"].i64() == running);
  CHECK(s["state"].str() == "running");
  CHECK(s["holds_device"].boolean());
  CHECK(s["share"].u64() == 3);
  CHECK(s["reserved_bytes"].u64() == 8 * MiB);
  CHECK(s["reclaim"]["reclaimable_bytes"].u64() == 2 * MiB);
  CHECK(s["memory_limit_bytes"].u64() == 32 * MiB);
  CHECK(s["device_ns"].u64() == 250'000'000);
  CHECK(s["active_guards"].u64() == 1);
  CHECK(s["recent_device_percent"].is_null());
  const json& i = session_of(t, "idle-one");
  CHECK(i["pid"].i64() == idle);
  CHECK(i["state"].str() == "idle");
  CHECK(i["reserved_bytes"].u64() == 2 * MiB);
  CHECK(i["device_ns"].u64() == 0);

  // The page: HTML with a fresh nonce per response that its CSP names, nothing else allowed.
  const http_response p1 = get(x.port(), "/"), p2 = get(x.port(), "/");
  CHECK(p1.status == 200);
  CHECK(p1.header("Content-Type") == "text/html; charset=utf-8");
  CHECK(p1.header("X-Content-Type-Options") == "nosniff");
  const std::string csp = p1.header("Content-Security-Policy");
  const std::size_t at = csp.find("'nonce-");
  REQUIRE(at != std::string::npos);
  const std::string nonce = csp.substr(at + 7, csp.find('\'', at + 7) - at - 7);
  CHECK(nonce.size() == 32);
  const std::string q = std::string("'nonce-").append(nonce).append("'");
  CHECK(contains(csp, std::string("default-src 'none'; script-src ")
                          .append(q)
                          .append("; style-src ")
                          .append(q)
                          .append("; connect-src 'self'")));
  CHECK(contains(p1.body, std::string("<script nonce=\"").append(nonce).append("\">")));
  CHECK(contains(p1.body, std::string("<style nonce=\"").append(nonce).append("\">")));
  CHECK_FALSE(contains(p1.body, "@NONCE@"));
  CHECK_FALSE(contains(p1.body, "innerHTML"));
  CHECK_FALSE(contains(p1.body, " src="));
  CHECK_FALSE(contains(p1.body, "https:"));
  CHECK(p2.header("Content-Security-Policy") != csp);
}

#else

TEST_CASE("the live page needs cpp-httplib") {
  MESSAGE("GPUSHARE_SKIP: this gpushare tool was built without cpp-httplib (libcpp-httplib-dev)");
}

#endif
