// SPDX-License-Identifier: Apache-2.0
// The remedies for a session stopped or hung inside a guard, through the gpushare tool:
// `gpushare evict`, `gpushare set --max-guard / --compute-guarantee`, `set --table-default`, and
// what status (text and JSON) and metrics show of them. The holders are forked children stopped
// with SIGSTOP inside a guard; a thread of the test waits behind them. Every child is killed and
// reaped when a test ends, however it ends.
#include <doctest/doctest.h>

#include <grp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli_test_util.hpp"
#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;
using namespace cli_test;

namespace {

constexpr std::uint64_t MiB = 1ull << 20;

/// A forked child, killed (SIGKILL works on a stopped process too) and reaped at the end of the
/// test unless the test reaped it.
class child {
public:
  child() = default;
  child(const child&) = delete;
  child& operator=(const child&) = delete;
  ~child() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    test::wait_exit(pid_);
  }
  void adopt(pid_t pid) { pid_ = pid; }
  pid_t pid() const { return pid_; }
  /// Continues it (after SIGSTOP) and waits for its exit code.
  int resume_and_wait() {
    ::kill(pid_, SIGCONT);
    const int code = test::wait_exit(pid_);
    pid_ = -1;
    return code;
  }

private:
  pid_t pid_ = -1;
};

/// What a holder child reports back.
struct holder_report {
  std::atomic<int> step{0};     ///< 1 joined, 2 told to enter its guard, 3 inside it
  std::atomic<int> revoked{-1}; ///< its guard's revoked() once continued
  std::atomic<int> code{-1};    ///< errc of its next guard after that (0: none)
  char message[512] = {};
};

/// A thread of this process whose guard (waiting at most 10 s) is behind the stopped holder.
class guard_waiter {
public:
  explicit guard_waiter(session& s)
      : start_ns_(test::now_ns()), thread_([this, &s] {
          try {
            scoped_kernel k(s, 10s);
            entered_ns_ = test::now_ns();
          } catch (...) {
          }
        }) {}
  ~guard_waiter() { thread_.join(); }
  guard_waiter(const guard_waiter&) = delete;
  guard_waiter& operator=(const guard_waiter&) = delete;
  bool entered() const { return entered_ns_.load() != 0; }
  /// How long its guard waited (valid once entered()).
  std::uint64_t waited_ns() const { return entered_ns_.load() - start_ns_; }

private:
  std::uint64_t start_ns_;
  std::atomic<std::uint64_t> entered_ns_{0};
  std::thread thread_;
};

/// A table "gpu" of a domain of its own, a holder child in it that can be stopped inside its
/// guard, and a waiter behind it. Members are destroyed in reverse order: the holder is killed
/// first, so the waiter always gets in (or times out) and is joined, then the peer leaves.
struct scene {
  test_domain d;
  test::shared_block<holder_report> report;
  std::optional<session> peer;
  std::optional<guard_waiter> waiter;
  child holder;
  static constexpr std::uint64_t capacity = 4096 * MiB;

  std::string object() const { return d.object_name("gpu"); }

  /// Forks the holder: it joins as `name`, reserves `reserve` bytes, and waits to be told to
  /// enter its guard, where it stops itself. Returns once it has joined.
  void start(const std::string& name, std::uint64_t reserve = 0) {
    holder_report& r = report[0];
    holder.adopt(test::spawn([&, name, reserve] {
      session s("gpu", d.options(name, capacity));
      std::optional<reservation> held;
      if (reserve > 0) held = s.reserve(reserve, 0ms);
      r.step = 1;
      while (r.step.load() != 2) ::usleep(1000);
      {
        scoped_kernel k(s);
        r.step = 3;
        ::raise(SIGSTOP); // alive but stopped inside its guard: liveness never frees it
        r.revoked = k.revoked() ? 1 : 0;
      }
      const auto e = test::thrown([&] { scoped_kernel again(s, 2s); });
      r.code = e ? static_cast<int>(e->code()) : 0;
      if (e) std::snprintf(r.message, sizeof r.message, "%s", e->what());
      return 0;
    }));
    REQUIRE(test::eventually([&] { return r.step.load() == 1; }));
  }

  /// Lets the holder enter its guard and waits until it has stopped there.
  void stop_in_guard() {
    report[0].step = 2;
    REQUIRE(test::eventually([&] { return report[0].step.load() == 3; }));
    int status = 0;
    REQUIRE(::waitpid(holder.pid(), &status, WUNTRACED) == holder.pid());
    REQUIRE(WIFSTOPPED(status));
  }

  /// Joins the peer session and starts a guard of it that waits behind the holder.
  void wait_behind() {
    peer.emplace("gpu", d.options("waiter", capacity));
    waiter.emplace(*peer);
  }

  /// The holder's session as the table shows it now.
  std::optional<session_info> holder_info(const std::string& name) const {
    for (const auto& i : table::read_unlocked(object()).sessions)
      if (i.name == name) return i;
    return std::nullopt;
  }
};

/// `status --json` of domain `d`, read once.
json status_json(const test_domain& d) {
  const cli_result r = run_cli({"status", "--json", "--domain", d.name(), "--interval", "0"});
  REQUIRE(r.code == 0);
  return parse_json(r.out);
}

/// The value of the sample of metric `name` whose line contains `part`, or "" if none.
std::string metric_value(const std::string& text, const std::string& name,
                         const std::string& part) {
  for (const std::string& l : lines_of(text))
    if (l.rfind(name + "{", 0) == 0 && contains(l, part)) return l.substr(l.rfind(' ') + 1);
  return "";
}

/// The parts of `line` between runs of two spaces or more ("" first if it starts with such a run;
/// no empty part at its end). Not std::regex: GCC 12 reports false -Wmaybe-uninitialized inside
/// <regex> in the sanitizer builds, where warnings are errors.
std::vector<std::string> split_on_gaps(const std::string& line) {
  std::vector<std::string> cells;
  std::size_t start = 0;
  for (std::size_t i = 0; i < line.size();) {
    if (line[i] != ' ' || i + 1 >= line.size() || line[i + 1] != ' ') {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < line.size() && line[end] == ' ') ++end;
    cells.push_back(line.substr(start, i - start));
    start = i = end;
  }
  if (start < line.size()) cells.push_back(line.substr(start));
  return cells;
}

/// The cell in column `column` of the session row named `name` in status text (cells are
/// separated by two spaces or more), or "" if there is none.
std::string cell_of(const std::string& text, const std::string& name, const std::string& column) {
  std::vector<std::string> titles;
  for (const std::string& l : lines_of(text)) {
    std::vector<std::string> cells = split_on_gaps(l);
    if (!cells.empty() && cells[0].empty()) cells.erase(cells.begin()); // the indentation
    if (cells.size() > 2 && cells[0] == "SLOT") titles = cells;
    if (titles.empty() || cells.size() != titles.size() || cells[1] != name) continue;
    for (std::size_t k = 0; k < titles.size(); ++k)
      if (titles[k] == column) return cells[k];
  }
  return "";
}

/// status (text and JSON) and metrics show the eviction of `before` (and no revocation).
void check_eviction_shown(scene& s, const session_info& before) {
  const cli_result text = run_cli({"status", "--domain", s.d.name(), "--interval", "0"});
  CHECK(contains(text.out, "stuck guards: 1 eviction (last: \"stopped\", slot " +
                               std::to_string(before.id.slot) + ", pid " +
                               std::to_string(s.holder.pid()) + ", by uid " +
                               std::to_string(::geteuid()) + ", "));
  const json doc = status_json(s.d);
  const json& t = table_of(doc, "gpu");
  CHECK(t["evictions"].u64() == 1);
  CHECK(t["revocations"].u64() == 0);
  CHECK(t["default_max_guard_ns"].u64() == 0);
  const json& last = t["last_eviction"];
  CHECK(last["name"].str() == "stopped");
  CHECK(last["slot"].u64() == before.id.slot);
  CHECK(last["generation"].u64() == before.id.generation);
  CHECK(last["pid"].i64() == s.holder.pid());
  CHECK(last["by_uid"].u64() == ::geteuid());
  CHECK(last["unix_ns"].u64() > 0);
  CHECK(t["sessions"].size() == 1);
  const cli_result m = run_cli({"metrics", "--domain", s.d.name()});
  CHECK(contains(m.out, "# TYPE gpushare_table_evictions_total counter\n"));
  CHECK(contains(m.out, "# HELP gpushare_table_evictions_total "));
  CHECK(metric_value(m.out, "gpushare_table_evictions_total", s.object()) == "1");
  CHECK(metric_value(m.out, "gpushare_table_revocations_total", s.object()) == "0");
}

} // namespace

// ------------------------------------------------------------------------------------------------
// evict
// ------------------------------------------------------------------------------------------------

TEST_CASE("evict ends a session stopped inside its guard, and the guard waiting behind it runs") {
  scene s;
  s.start("stopped", 1536 * MiB);
  s.stop_in_guard();
  s.wait_behind();
  std::this_thread::sleep_for(1200ms); // past the 1 s after which status flags a guard
  CHECK_FALSE(s.waiter->entered());    // exclusive: the stopped holder keeps the device

  const cli_result st = run_cli({"status", "--domain", s.d.name(), "--interval", "0"});
  REQUIRE(st.code == 0);
  CAPTURE(st.out);
  CHECK(contains(st.out, "stopped or hung?"));
  CHECK(contains(st.out, "hint: \"stopped\""));
  CHECK(contains(st.out, "`gpushare evict stopped`"));

  const auto before = s.holder_info("stopped");
  REQUIRE(before.has_value());
  CHECK(before->holds_device);
  const cli_result r = run_cli({"evict", "stopped", "--domain", s.d.name()});
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.err.empty());
  CHECK(r.out == "evicted session \"stopped\" (slot " + std::to_string(before->id.slot) + ", pid " +
                     std::to_string(s.holder.pid()) + ") from " + s.object() +
                     ": its device hold and 1.50 GiB of reservations went back to the table\n");
  CHECK(test::eventually([&] { return s.waiter->entered(); }, 2000ms)); // the peer gets in

  const table_snapshot after = table::read_unlocked(s.object());
  CHECK_FALSE(s.holder_info("stopped").has_value());
  CHECK(after.reserved_total == 0);
  CHECK(after.evictions == 1);

  check_eviction_shown(s, *before); // by status (text and JSON) and metrics

  // Continued, the evicted process learns it at its next call.
  CHECK(s.holder.resume_and_wait() == 0);
  CHECK(s.report[0].code.load() == static_cast<int>(errc::session_closed));
  CHECK(contains(s.report[0].message, "evicted"));

  const cli_result again = run_cli({"evict", "stopped", "--domain", s.d.name()});
  CHECK(again.code == 1);
  CHECK(contains(again.err, "gpushare evict: error: no live session named \"stopped\""));
  CHECK(again.out.empty());
}

TEST_CASE("evict finds a session as set does: by name, name:<digits> or slot with --table") {
  test_domain d;
  session mine("gpu-b", d.options("dup"));
  child one, numeric;
  one.adopt(spawn_holder(d, "gpu-a", "dup"));
  numeric.adopt(spawn_holder(d, "gpu-b", "42", 2 * MiB));

  const cli_result nobody = run_cli({"evict", "nobody", "--domain", d.name()});
  CHECK(nobody.code == 1);
  CHECK(contains(nobody.err, "no live session named \"nobody\" in domain \"" + d.name() + "\""));
  const cli_result ambiguous = run_cli({"evict", "dup", "--domain", d.name()});
  CHECK(ambiguous.code == 1);
  CHECK(contains(ambiguous.err, "2 live sessions are named \"dup\""));
  CHECK(contains(ambiguous.err, d.object_name("gpu-a")));
  CHECK(contains(ambiguous.err, "add --table, or give a slot number"));
  const auto a_ids = table::open_existing(d.object_name("gpu-a")).find("dup");
  REQUIRE(a_ids.size() == 1);
  const std::string slot = std::to_string(a_ids[0].slot);
  const cli_result no_table = run_cli({"evict", slot, "--domain", d.name()});
  CHECK(no_table.code == 1);
  CHECK(contains(no_table.err, "a slot number needs --table"));

  const cli_result by_slot = run_cli({"evict", slot, "--table", "gpu-a", "--domain", d.name()});
  CHECK(by_slot.code == 0);
  CHECK(by_slot.out == "evicted session \"dup\" (slot " + slot + ", pid " +
                           std::to_string(one.pid()) + ") from " + d.object_name("gpu-a") +
                           ": it held neither the device nor reservations\n");
  CHECK(table::read_unlocked(d.object_name("gpu-a")).sessions.empty());
  const cli_result by_name = run_cli({"evict", "name:42", "--domain", d.name()});
  CHECK(by_name.code == 0);
  CHECK(contains(by_name.out, "evicted session \"42\""));
  CHECK(contains(by_name.out, ": its 2.00 MiB of reservations went back to the table\n"));
  const table_snapshot b = table::read_unlocked(d.object_name("gpu-b"));
  REQUIRE(b.sessions.size() == 1);
  CHECK(b.sessions[0].name == "dup"); // the other "dup" was left alone
  CHECK(b.reserved_total == 0);
  CHECK(mine.info().share == default_share);
}

TEST_CASE("evict: command-line mistakes exit 2, its help says when to use it") {
  const cli_result none = run_cli({"evict"});
  CHECK(none.code == 2);
  CHECK(contains(none.err, "gpushare evict: error: which session?"));
  CHECK(contains(none.err, "Usage: gpushare evict <session>"));
  const cli_result extra = run_cli({"evict", "a", "b"});
  CHECK(extra.code == 2);
  CHECK(contains(extra.err, "unexpected extra argument 'b'"));
  const cli_result typo = run_cli({"evcit", "x"});
  CHECK(typo.code == 2);
  CHECK(contains(typo.err, "unknown command 'evcit'; did you mean 'evict'?"));
  const cli_result help = run_cli({"evict", "--help"});
  CHECK(help.code == 0);
  CHECK(contains(help.out, "stopped or hung"));
  CHECK(contains(help.out, "killed or restarted"));
  CHECK(contains(help.out, "owner of the table's file, or root"));
  CHECK(run_cli({"help", "evict"}).out == help.out);
  const cli_result main_help = run_cli({"--help"});
  CHECK(contains(main_help.out, "  evict     "));
}

// ------------------------------------------------------------------------------------------------
// set --max-guard, --compute-guarantee, --table-default
// ------------------------------------------------------------------------------------------------

TEST_CASE("set --max-guard 200ms: a stopped holder loses the device, and status counts it") {
  scene s;
  s.start("holder");
  const cli_result set = run_cli({"set", "holder", "--max-guard", "200ms", "--domain", s.d.name()});
  INFO(set.err);
  REQUIRE(set.code == 0);
  CHECK(contains(set.out, "  guard bound: table default (none) -> 200 ms\n"));
  s.stop_in_guard();
  s.wait_behind();
  REQUIRE(test::eventually([&] { return s.waiter->entered(); }, 3000ms));
  CAPTURE(s.waiter->waited_ns());
  CHECK(s.waiter->waited_ns() < 2'000'000'000ull); // before: until the holder is continued

  const auto info = s.holder_info("holder");
  REQUIRE(info.has_value());
  CHECK(info->max_guard_ns == 200'000'000ull);
  CHECK(info->revocations == 1);
  CHECK(info->active_guards == 1); // still stopped inside its guard

  const cli_result text = run_cli({"status", "--domain", s.d.name(), "--interval", "0"});
  CAPTURE(text.out);
  CHECK(contains(text.out, "  stuck guards: 1 revocation\n"));
  CHECK(contains(text.out, "MAXGUARD  REVOKED  STATE"));
  CHECK(cell_of(text.out, "holder", "MAXGUARD") == "200 ms");
  CHECK(cell_of(text.out, "holder", "REVOKED") == "1");
  CHECK(cell_of(text.out, "waiter", "MAXGUARD") == "-");
  CHECK(cell_of(text.out, "waiter", "REVOKED") == "0");
  const json doc = status_json(s.d);
  const json& t = table_of(doc, "gpu");
  CHECK(t["revocations"].u64() == 1);
  CHECK(t["evictions"].u64() == 0);
  CHECK(t["last_eviction"].is_null());
  CHECK(session_of(t, "holder")["max_guard_ns"].u64() == 200'000'000ull);
  CHECK(session_of(t, "holder")["revocations"].u64() == 1);
  CHECK(session_of(t, "waiter")["revocations"].u64() == 0);
  const cli_result m = run_cli({"metrics", "--domain", s.d.name()});
  CHECK(contains(m.out, "# TYPE gpushare_session_revocations_total counter\n"));
  CHECK(contains(m.out, "# TYPE gpushare_table_revocations_total counter\n"));
  CHECK(metric_value(m.out, "gpushare_session_revocations_total", "session=\"holder\"") == "1");
  CHECK(metric_value(m.out, "gpushare_session_revocations_total", "session=\"waiter\"") == "0");
  CHECK(metric_value(m.out, "gpushare_table_revocations_total", s.object()) == "1");

  CHECK(s.holder.resume_and_wait() == 0);
  CHECK(s.report[0].revoked.load() == 1); // its guard learns it lost the device
  CHECK(s.report[0].code.load() == 0);    // and it goes on
}

TEST_CASE(
    "set --table-default --max-guard 200ms bounds the sessions without a bound of their own") {
  scene s;
  s.start("holder");
  const std::vector<std::string> where = {"--domain", s.d.name()};
  auto set = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "set");
    args.insert(args.end(), where.begin(), where.end());
    return run_cli(args);
  };
  const cli_result r = set({"--table-default", "--max-guard", "200ms"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out == "default guard bound of " + s.object() + ": none -> 200 ms\n");
  CHECK(table_of(status_json(s.d), "gpu")["default_max_guard_ns"].u64() == 200'000'000ull);
  const cli_result text = run_cli({"status", "--domain", s.d.name(), "--interval", "0"});
  CHECK(contains(text.out, "  stuck guards: default guard bound 200 ms\n"));

  s.stop_in_guard();
  s.wait_behind();
  CHECK(test::eventually([&] { return s.waiter->entered(); }, 3000ms));
  const auto info = s.holder_info("holder");
  REQUIRE(info.has_value());
  CHECK(info->max_guard_ns == 0); // none of its own: the table's default revoked it
  CHECK(info->revocations == 1);
  CHECK(set({"holder", "--max-guard", "none"}).out ==
        "session \"holder\" (slot " + std::to_string(info->id.slot) + ", pid " +
            std::to_string(s.holder.pid()) + ") in table " + s.object() +
            ":\n  guard bound: table default (200 ms) (unchanged)\n");

  const cli_result with_share = set({"--table-default", "--max-guard", "1s", "--share", "2"});
  CHECK(with_share.code == 2);
  CHECK(contains(with_share.err, "error: --share cannot be used with --table-default"));
  const cli_result no_bound = set({"--table-default"});
  CHECK(no_bound.code == 2);
  CHECK(contains(no_bound.err, "--table-default needs --max-guard DUR|none"));
  const cli_result both = set({"holder", "--table-default", "--max-guard", "1s"});
  CHECK(both.code == 2);
  CHECK(contains(both.err, "give --table-default or a session ('holder'), not both"));
  CHECK(set({"--table-default", "--max-guard", "none"}).out ==
        "default guard bound of " + s.object() + ": 200 ms -> none\n");
  CHECK(s.holder.resume_and_wait() == 0);
  CHECK(s.report[0].revoked.load() == 1);
}

TEST_CASE("set --compute-guarantee 10% is shown by set, the session, status and status --json") {
  test_domain d;
  session w("gpu", d.options("worker"));
  const cli_result r =
      run_cli({"set", "worker", "--compute-guarantee", "10%", "--domain", d.name()});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, "  compute guarantee: none -> 10%\n"));
  CHECK(w.info().compute_guarantee_ppm == 100'000u);
  CHECK(session_of(table_of(status_json(d), "gpu"), "worker")["compute_guarantee_ppm"].u64() ==
        100'000u);
  const cli_result text = run_cli({"status", "--domain", d.name(), "--interval", "0"});
  CHECK(contains(text.out, "CLIMIT  CGUARANTEE"));
  CHECK(cell_of(text.out, "worker", "CGUARANTEE") == "10%");
  const cli_result off =
      run_cli({"set", "worker", "--compute-guarantee", "none", "--domain", d.name()});
  CHECK(contains(off.out, "  compute guarantee: 10% -> none\n"));
  CHECK(w.info().compute_guarantee_ppm == 0u);
  CHECK_FALSE(
      contains(run_cli({"status", "--domain", d.name(), "--interval", "0"}).out, "CGUARANTEE"));
}

TEST_CASE("bad --max-guard and --compute-guarantee values exit 2, naming the flag and the forms") {
  test_domain d;
  session w("gpu", d.options("worker"));
  struct bad {
    std::vector<std::string> args;
    std::string flag, forms;
  };
  const bad cases[] = {
      {{"worker", "--max-guard", "10us"}, "--max-guard", "from 1ms to 1h"},
      {{"worker", "--max-guard", "banana"}, "--max-guard", "from 1ms to 1h"},
      {{"worker", "--compute-guarantee", "150%"}, "--compute-guarantee", "at most 100%"},
      {{"--table-default", "--max-guard", "10us"}, "--max-guard", "from 1ms to 1h"},
  };
  for (const bad& c : cases) {
    std::vector<std::string> args = {"set"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    args.insert(args.end(), {"--domain", d.name()});
    const cli_result r = run_cli(args);
    CAPTURE(r.err);
    CHECK(r.code == 2);
    CHECK(contains(r.err, "gpushare set: error: " + c.flag + ": invalid "));
    CHECK(contains(r.err, c.forms));
    CHECK(contains(r.err, "\"none\""));
    CHECK(contains(r.err, "Usage: gpushare set"));
    CHECK(r.out.empty());
  }
  CHECK(w.info().max_guard_ns == 0);
  CHECK(w.info().compute_guarantee_ppm == 0u);
  CHECK(table::read_unlocked(d.object_name("gpu")).default_max_guard_ns == 0);
}

// ------------------------------------------------------------------------------------------------
// Whose tables: evict follows the library (owner or root), set --table-default set's rule.
// ------------------------------------------------------------------------------------------------

TEST_CASE("root may evict on another user's table, and a group member may not evict") {
  if (::geteuid() != 0) {
    std::printf("GPUSHARE_SKIP: needs root to run the tool as uid 1000\n");
    return;
  }
  constexpr uid_t other = 1000;
  test_domain d;
  // A group table of gid 1000, owned by root: uid 1000 (gid 1000) is a member.
  session_options o = d.options("shared");
  o.access = table_access::group;
  REQUIRE(::setegid(other) == 0);
  std::optional<session> shared;
  try {
    shared.emplace("grp", o);
  } catch (...) {
    (void)::setegid(0);
    throw;
  }
  REQUIRE(::setegid(0) == 0);
  const cli_result member = run_cli({"evict", "shared", "--domain", d.name()}, other);
  CHECK(member.code == 1);
  CHECK(contains(member.err, "refusing to evict from table " + shared->table_name() +
                                 ": it belongs to uid 0 (gid 1000, mode 0660)"));
  CHECK(contains(member.err, "only the owner of a table's file, or root, may evict"));
  CHECK(shared->joined());
  CHECK(table::read_unlocked(shared->table_name()).evictions == 0);

  // A table of uid 1000: set refuses it to root, evict does not.
  test::shared_block<std::atomic<int>> ready;
  child theirs;
  theirs.adopt(test::spawn([&] {
    if (::setgroups(0, nullptr) != 0 || ::setgid(other) != 0 || ::setuid(other) != 0) return 3;
    session s("mine", d.options("theirs"));
    ready[0] = 1;
    for (;;) ::pause();
    return 0;
  }));
  REQUIRE(test::eventually([&] { return ready[0].load() == 1; }));
  const cli_result set = run_cli(
      {"set", "--table-default", "--max-guard", "1s", "--table", "mine", "--domain", d.name()});
  CHECK(set.code == 1);
  CHECK(contains(set.err, "only the owner of a table's file may change its defaults"));
  const cli_result root = run_cli({"evict", "theirs", "--domain", d.name()});
  INFO(root.err);
  CHECK(root.code == 0);
  CHECK(contains(root.out, "evicted session \"theirs\""));
  const std::string object = d.object_name("mine");
  std::string theirs_object = object;
  theirs_object.replace(theirs_object.find(".u0."), 4, ".u1000.");
  const table_snapshot after = table::read_unlocked(theirs_object);
  CHECK(after.sessions.empty());
  CHECK(after.default_max_guard_ns == 0);
  REQUIRE(after.last_eviction.has_value());
  CHECK(after.last_eviction->by_uid == 0u);
}
