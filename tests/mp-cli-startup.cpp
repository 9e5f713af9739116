// SPDX-License-Identifier: Apache-2.0
// The gpushare command-line tool and the start-up lock (<gpushare/startup.hpp>): `status` (text
// and JSON) and `metrics` show who holds it, since when and how many wait; `evict` of a stopped
// holder passes it on.
#include <doctest/doctest.h>

#include <sstream>

#include "cli_test_util.hpp"
#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;
using namespace cli_test;

namespace {

/// A forked child that joins `key` as `name` and waits for the start-up lock; it sets `got` once
/// it holds it, then ready()s and exits.
pid_t spawn_waiter(const test_domain& d, const std::string& key, const std::string& name,
                   std::atomic<int>& got) {
  return test::spawn([&d, key, name, &got] {
    session s(key, d.options(name));
    startup_hold h = hold_startup(s, 60s);
    got = 1;
    return 0;
  });
}

/// The value of the first sample line that starts with `start` and contains `part`; "" if none.
std::string sample_of(const std::string& text, const std::string& start,
                      const std::string& part = "") {
  for (const std::string& l : lines_of(text))
    if (l.rfind(start, 0) == 0 && contains(l, part)) return l.substr(l.rfind(' ') + 1);
  return "";
}

} // namespace

TEST_CASE("status and metrics show the start-up lock's holder and its waiters") {
  test_domain d;
  session engine("gpu-s", d.options("engine-a"));
  startup_hold h = hold_startup(engine, 5s);
  test::shared_block<std::atomic<int>> got;
  const pid_t w = spawn_waiter(d, "gpu-s", "engine-b", got[0]);
  REQUIRE(test::eventually([&] { return engine.snapshot().startup_waiters == 1; }, 20000ms));

  const cli_result t = run_cli({"status", "--domain", d.name(), "--interval", "0"});
  REQUIRE(t.code == 0);
  CAPTURE(t.out);
  const std::string slot = std::to_string(engine.id().slot);
  CHECK(contains(t.out, "  start-up lock: held by \"engine-a\" (slot " + slot + ", pid " +
                            std::to_string(::getpid()) + ") for "));
  CHECK(contains(t.out, ", 1 waiting, taken 1 time\n"));

  const cli_result j = run_cli({"status", "--json", "--domain", d.name(), "--interval", "0"});
  REQUIRE(j.code == 0);
  const json doc = parse_json(j.out);
  const json& st = table_of(doc, "gpu-s")["startup"];
  CHECK(st["holder"]["name"].str() == "engine-a");
  CHECK(st["holder"]["pid"].i64() == ::getpid());
  CHECK(st["holder"]["slot"].u64() == engine.id().slot);
  CHECK(st["holder"]["since_unix_ns"].u64() > 0);
  CHECK(st["waiters"].u64() == 1);
  CHECK(st["takes"].u64() == 1);
  CHECK(session_of(table_of(doc, "gpu-s"), "engine-a")["holds_startup"].boolean());
  CHECK(session_of(table_of(doc, "gpu-s"), "engine-b")["waiting_for_startup"].u64() == 1);
  CHECK(session_of(table_of(doc, "gpu-s"), "engine-b")["state"].str() == "waiting");

  const cli_result m = run_cli({"metrics", "--domain", d.name()});
  REQUIRE(m.code == 0);
  CAPTURE(m.out);
  CHECK(contains(m.out, "# TYPE gpushare_table_startup_waiters gauge\n"));
  CHECK(sample_of(m.out, "gpushare_table_startup_waiters{") == "1");
  CHECK(sample_of(m.out, "gpushare_table_startup_takes_total{") == "1");
  CHECK(contains(m.out, "# TYPE gpushare_session_holds_startup gauge\n"));
  CHECK(sample_of(m.out, "gpushare_session_holds_startup{", "\"engine-a\"") == "1");
  CHECK(sample_of(m.out, "gpushare_session_holds_startup{", "\"engine-b\"") == "0");

  h.ready();
  CHECK(test::wait_exit_within(w, 30s) == 0);
  CHECK(got[0] == 1);
  const cli_result after = run_cli({"status", "--json", "--domain", d.name(), "--interval", "0"});
  const json doc2 = parse_json(after.out);
  const json& st2 = table_of(doc2, "gpu-s")["startup"];
  CHECK(st2["holder"].is_null());
  CHECK(st2["takes"].u64() == 2);
  const cli_result text = run_cli({"status", "--domain", d.name(), "--interval", "0"});
  CHECK_FALSE(contains(text.out, "start-up lock")); // free and nobody waits: no line
}

TEST_CASE("the evict command a timed-out waiter is told passes a stopped holder's lock on") {
  test_domain d;
  const pid_t stuck = test::spawn_holding([&d](const std::function<void()>& hold) {
    session s("gpu-e", d.options("stuck-engine"));
    startup_hold h = hold_startup(s, 5s);
    hold();
  });
  REQUIRE(test::stop_process(stuck));
  // A waiter that times out is told the command that releases the lock: run it as given.
  std::string told;
  {
    session impatient("gpu-e", d.options("impatient"));
    try {
      (void)hold_startup(impatient, 100ms);
    } catch (const error& e) {
      CHECK(e.code() == errc::timeout);
      told = e.what();
    }
  }
  CAPTURE(told);
  const auto from = told.find("`gpushare evict ");
  REQUIRE(from != std::string::npos);
  const std::string command = told.substr(from + 10, told.find('`', from + 1) - from - 10);
  std::vector<std::string> args;
  std::istringstream words(command);
  for (std::string w; words >> w;) args.push_back(w);
  REQUIRE(args.size() == 4); // evict <slot> --table <table>
  test::shared_block<std::atomic<int>> got;
  const pid_t w = spawn_waiter(d, "gpu-e", "next-engine", got[0]);
  std::this_thread::sleep_for(200ms);
  CHECK(got[0] == 0);
  const cli_result r = run_cli(args);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(contains(r.out, "evicted session \"stuck-engine\""));
  CHECK(contains(r.out, "its start-up lock passed on"));
  CHECK(test::wait_exit_within(w, 30s) == 0);
  CHECK(got[0] == 1);
  ::kill(stuck, SIGCONT);
  test::kill_and_wait(stuck);
}
