// SPDX-License-Identifier: Apache-2.0
// The tool shows cooperative reclaim (docs/design.md section 15): the RECLAIMABLE and ASKED
// columns, the "reclaim:" line and the hint under a waiting session in `gpushare status`, the
// "reclaim" objects of its JSON, and the gpushare_reclaim_* and gpushare_session_reclaim_*
// families of `gpushare metrics`, for a holder that never answers, one whose watcher gives memory
// back, and a waiter that no session of a lower class can help; and lent guarantees: the
// BORROWED column, the "(loan)" mark under ASKED, the "loans:" line, the loan fields of the JSON
// and the gpushare_loan* families, for a borrower stopped while its loan is called back.
#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "cli_test_util.hpp"

namespace {

using namespace cli_test;
constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t capacity = 1024 * MiB;

session_options with(const test_domain& d, const std::string& name, int priority,
                     std::chrono::milliseconds deadline = 2000ms) {
  session_options o = d.options(name, capacity);
  o.priority = priority;
  o.reclaim_deadline = deadline;
  return o;
}

/// A child joining "gpu" as `name` (low class) with `bytes` of reclaimable memory; with
/// `cooperative`, its watcher gives back what it is asked for.
pid_t spawn_reclaimable(const test_domain& d, const std::string& name, std::uint64_t bytes,
                        bool cooperative) {
  return test::spawn_holding([&](const std::function<void()>& hold) {
    session s("gpu", with(d, name, priority::low));
    reservation cache = s.reserve_reclaimable(bytes, 0ms);
    if (cooperative) {
      s.on_reclaim([&cache](std::uint64_t asked) {
        const std::uint64_t give = std::min(asked, cache.size());
        cache.shrink(give);
        return give;
      });
      s.watch_reclaim();
    }
    hold();
  });
}

const session_info* find(const table_snapshot& s, const std::string& name) {
  for (const auto& i : s.sessions)
    if (i.name == name) return &i;
  return nullptr;
}

table_snapshot snapshot_of(const test_domain& d) {
  return table::open("gpu", gpushare::open_mode::open_existing, d.options("observer")).snapshot();
}

/// The parts of `line` between runs of two spaces or more.
std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> cells;
  std::size_t start = 0;
  while (start < line.size()) {
    std::size_t gap = line.find("  ", start);
    if (gap == std::string::npos) gap = line.size();
    cells.push_back(line.substr(start, gap - start));
    start = line.find_first_not_of(' ', gap);
    if (start == std::string::npos) break;
  }
  return cells;
}

/// The cell of column `title` in the row of session `name` of a status text ("" if none).
std::string cell(const std::string& text, const std::string& name, const std::string& title) {
  std::vector<std::string> header;
  for (const std::string& l : lines_of(text)) {
    const std::vector<std::string> c = cells_of(l);
    if (contains(l, "  SLOT  NAME  ")) header = c;
    if (header.empty() || c.size() != header.size() || c[2] != name) continue;
    for (std::size_t k = 0; k < c.size(); ++k)
      if (header[k] == title) return c[k];
  }
  return "";
}

/// The value of the sample of `family` whose labels contain `part` ("" if none).
std::string metric_value(const std::string& text, const std::string& family,
                         const std::string& part) {
  for (const std::string& l : lines_of(text))
    if (l.rfind(family + "{", 0) == 0 && contains(l, part)) return l.substr(l.rfind(' ') + 1);
  return "";
}

std::string slot_text(const session_info* i) { return "(slot " + std::to_string(i->id.slot) + ")"; }

} // namespace

TEST_CASE("reclaim: status, JSON and metrics show who is asked for what a waiter lacks, the skip "
          "at the deadline, and the grant once the holder is gone") {
  test_domain d;
  const pid_t deaf = spawn_reclaimable(d, "deaf", 800 * MiB, false);
  session urgent("gpu", with(d, "urgent", priority::high, 5000ms));
  std::atomic<bool> granted{false};
  std::thread waiter([&] { // 600 MiB: 376 MiB more than the table has free
    reservation r = urgent.reserve(600 * MiB, 60s);
    granted = r.size() == 600 * MiB;
  });
  REQUIRE(test::eventually([&] {
    const table_snapshot now = snapshot_of(d); // find() points into it
    const session_info* i = find(now, "deaf");
    return i && i->reclaim.asked == 376 * MiB;
  }));
  const table_snapshot snap = snapshot_of(d);
  const session_info* h = find(snap, "deaf");
  const session_info* w = find(snap, "urgent");
  REQUIRE((h && w));
  const std::string waits =
      "  hint: \"urgent\" " + slot_text(w) + " waits for memory, 376.00 MiB lacking; ";

  // Within the 5 s deadline: the columns, the line and the hint name the holder and the bytes.
  const cli_result text = run_cli({"status", "--domain", d.name(), "--interval", "0"});
  CHECK(text.code == 0);
  CHECK(cell(text.out, "deaf", "RECLAIMABLE") == "800.00 MiB");
  CHECK(cell(text.out, "deaf", "ASKED") == "376.00 MiB");
  CHECK(cell(text.out, "urgent", "ASKED") == "0 B");
  CHECK(contains(text.out, "  reclaim: 1 request, 0 answered, 0 skipped, 0 withdrawn, 0 B given "
                           "back, 0 grants\n"));
  CHECK(contains(text.out,
                 waits + "asked: \"deaf\" " + slot_text(h) + " for 376.00 MiB, deadline in "));

  const json doc =
      parse_json(run_cli({"status", "--domain", d.name(), "--interval", "0", "--json"}).out);
  const json& t = table_of(doc, "gpu");
  const json& hr = session_of(t, "deaf")["reclaim"];
  CHECK(hr["reclaimable_bytes"].u64() == 800 * MiB);
  CHECK(hr["asked_bytes"].u64() == 376 * MiB);
  CHECK(hr["asked_by_slot"].u64() == w->id.slot);
  CHECK(hr["deadline_in_ns"].u64() > 0);
  CHECK(hr["deadline_in_ns"].u64() <= 5'000'000'000ull);
  CHECK(hr["requests"].u64() == 1);
  CHECK_FALSE(hr["skipped_now"].boolean());
  const json& wr = session_of(t, "urgent")["reclaim"];
  CHECK(wr["wanted_bytes"].u64() == 376 * MiB);
  CHECK(wr["asked_by_slot"].is_null());
  CHECK(t["reclaim"]["requests"].u64() == 1);
  CHECK(t["reclaim"]["grants"].u64() == 0);

  const cli_result m = run_cli({"metrics", "--domain", d.name()});
  CHECK(m.code == 0);
  CHECK(contains(m.out, "# TYPE gpushare_session_reclaim_asked_bytes gauge\n"));
  CHECK(metric_value(m.out, "gpushare_session_reclaimable_bytes", "session=\"deaf\"") ==
        "838860800");
  CHECK(metric_value(m.out, "gpushare_session_reclaim_asked_bytes", "session=\"deaf\"") ==
        "394264576");
  CHECK(metric_value(m.out, "gpushare_session_reclaim_wanted_bytes", "session=\"urgent\"") ==
        "394264576");
  CHECK(metric_value(m.out, "gpushare_session_reclaim_requests_total", "session=\"deaf\"") == "1");
  CHECK(metric_value(m.out, "gpushare_reclaim_requests_total", d.object_name("gpu")) == "1");

  // Past the deadline the request is skipped, and the waiter waits on for releases.
  REQUIRE(test::eventually([&] { return find(snapshot_of(d), "deaf")->reclaim.skipped == 1; }));
  const cli_result skipped = run_cli({"status", "--domain", d.name(), "--interval", "0"});
  CHECK(contains(skipped.out, waits +
                                  "not asked for now (missed a deadline or gave nothing lately): "
                                  "\"deaf\" " +
                                  slot_text(h) + "; it waits for releases\n"));
  CHECK(contains(skipped.out, "  reclaim: 1 request, 0 answered, 1 skipped, 0 withdrawn, 0 B "
                              "given back, 0 grants\n"));
  CHECK(cell(skipped.out, "deaf", "ASKED") == "0 B");
  const json sj =
      parse_json(run_cli({"status", "--domain", d.name(), "--interval", "0", "--json"}).out);
  const json& sr = session_of(table_of(sj, "gpu"), "deaf")["reclaim"];
  CHECK(sr["skipped"].u64() == 1);
  CHECK(sr["skipped_now"].boolean());
  CHECK(sr["asked_bytes"].u64() == 0);
  CHECK(sr["asked_by_slot"].is_null());
  CHECK(table_of(sj, "gpu")["reclaim"]["skipped"].u64() == 1);
  const cli_result sm = run_cli({"metrics", "--domain", d.name()});
  CHECK(metric_value(sm.out, "gpushare_reclaim_skipped_total", d.object_name("gpu")) == "1");
  CHECK(metric_value(sm.out, "gpushare_session_reclaim_skipped_total", "session=\"deaf\"") == "1");

  // The holder dies: the waiter gets its memory, a grant after requests were out for it.
  kill_holder(deaf);
  waiter.join();
  CHECK(granted.load());
  const cli_result after = run_cli({"status", "--domain", d.name(), "--interval", "0"});
  CHECK(contains(after.out, "  reclaim: 1 request, 0 answered, 1 skipped, 0 withdrawn, 0 B given "
                            "back, 1 grant (first request to grant: mean "));
  CHECK_FALSE(contains(after.out, "hint:"));
  CHECK_FALSE(contains(after.out, "RECLAIMABLE")); // nobody holds reclaimable memory or waits
  const json done =
      parse_json(run_cli({"status", "--domain", d.name(), "--interval", "0", "--json"}).out);
  const json& dc = table_of(done, "gpu")["reclaim"];
  CHECK(dc["grants"].u64() == 1);
  CHECK(dc["grant_max_ns"].u64() >= 5'000'000'000ull); // it waited out the deadline first
  CHECK(session_of(table_of(done, "gpu"), "urgent")["reclaim"]["wanted_bytes"].u64() == 0);
}

TEST_CASE("reclaim: a holder's watcher gives back what a waiter lacks: the grant shows in the "
          "reclaim line, JSON and metrics") {
  test_domain d;
  const pid_t cache = spawn_reclaimable(d, "cache", 800 * MiB, true);
  session urgent("gpu", with(d, "urgent", priority::high));
  reservation r = urgent.reserve(600 * MiB, 20s);
  CHECK(r.size() == 600 * MiB);
  REQUIRE(test::eventually([&] { return find(snapshot_of(d), "cache")->reclaim.answered == 1; }));

  const cli_result text = run_cli({"status", "--domain", d.name(), "--interval", "0"});
  CHECK(text.code == 0);
  CHECK(contains(text.out, "  reclaim: 1 request, 1 answered, 0 skipped, "));
  CHECK(contains(text.out, " withdrawn, 376.00 MiB given back, 1 grant (first request to grant: "
                           "mean "));
  CHECK(cell(text.out, "cache", "RECLAIMABLE") == "424.00 MiB");
  CHECK(cell(text.out, "cache", "ASKED") == "0 B");
  CHECK(cell(text.out, "urgent", "RECLAIMABLE") == "0 B");
  CHECK_FALSE(contains(text.out, "hint:"));

  const json doc =
      parse_json(run_cli({"status", "--domain", d.name(), "--interval", "0", "--json"}).out);
  const json& t = table_of(doc, "gpu");
  const json& c = t["reclaim"];
  CHECK(c["requests"].u64() == 1);
  CHECK(c["answered"].u64() == 1);
  CHECK(c["skipped"].u64() == 0);
  CHECK(c["given_bytes"].u64() == 376 * MiB);
  CHECK(c["grants"].u64() == 1);
  CHECK(c["grant_ns"].u64() > 0);
  CHECK(c["grant_ns"].u64() == c["grant_max_ns"].u64());
  const json& hr = session_of(t, "cache")["reclaim"];
  CHECK(hr["reclaimable_bytes"].u64() == 424 * MiB);
  CHECK(hr["given_bytes"].u64() == 376 * MiB);
  CHECK(hr["answered"].u64() == 1);
  CHECK(hr["asked_bytes"].u64() == 0);
  CHECK(hr["asked_by_slot"].is_null());

  const cli_result m = run_cli({"metrics", "--domain", d.name()});
  const std::string table = d.object_name("gpu");
  CHECK(metric_value(m.out, "gpushare_reclaim_grants_total", table) == "1");
  CHECK(metric_value(m.out, "gpushare_reclaim_given_bytes_total", table) == "394264576");
  CHECK(metric_value(m.out, "gpushare_reclaim_answered_total", table) == "1");
  const std::string total = metric_value(m.out, "gpushare_reclaim_grant_seconds_total", table);
  CHECK(total == metric_value(m.out, "gpushare_reclaim_grant_max_seconds", table));
  CHECK(total != "0");
  CHECK(contains(m.out, "# TYPE gpushare_reclaim_grant_max_seconds gauge\n"));
  CHECK(metric_value(m.out, "gpushare_session_reclaim_given_bytes_total", "session=\"cache\"") ==
        "394264576");
  CHECK(metric_value(m.out, "gpushare_session_reclaim_answered_total", "session=\"cache\"") == "1");
  CHECK(metric_value(m.out, "gpushare_session_reclaimable_bytes", "session=\"cache\"") ==
        "444596224");
  kill_holder(cache);
}

TEST_CASE("reclaim: a table without reclaim shows no columns or line and a waiter no lower class "
          "can help is told it waits for releases") {
  test_domain d;
  const pid_t plain = spawn_holder(d, "gpu", "plain", 800 * MiB, capacity);
  const cli_result quiet = run_cli({"status", "--domain", d.name(), "--interval", "0"});
  CHECK(quiet.code == 0);
  CHECK_FALSE(contains(quiet.out, "RECLAIMABLE"));
  CHECK_FALSE(contains(quiet.out, "ASKED"));
  CHECK_FALSE(contains(quiet.out, "reclaim:"));
  CHECK_FALSE(contains(quiet.out, "BORROWED"));
  CHECK_FALSE(contains(quiet.out, "loans:")); // it holds memory, but nothing was lent
  const json q =
      parse_json(run_cli({"status", "--domain", d.name(), "--interval", "0", "--json"}).out);
  CHECK(table_of(q, "gpu")["reclaim"]["requests"].u64() == 0);
  CHECK(session_of(table_of(q, "gpu"), "plain")["reclaim"]["reclaimable_bytes"].u64() == 0);
  const cli_result qm = run_cli({"metrics", "--domain", d.name()});
  CHECK(metric_value(qm.out, "gpushare_session_reclaimable_bytes", "session=\"plain\"") == "0");
  CHECK(metric_value(qm.out, "gpushare_reclaim_requests_total", d.object_name("gpu")) == "0");

  session urgent("gpu", with(d, "urgent", priority::high));
  std::thread waiter([&] { (void)urgent.reserve(600 * MiB, 60s); });
  REQUIRE(test::eventually([&] {
    const table_snapshot now = snapshot_of(d); // find() points into it
    const session_info* i = find(now, "urgent");
    return i && i->reclaim.wanted == 376 * MiB;
  }));
  const cli_result text = run_cli({"status", "--domain", d.name(), "--interval", "0"});
  kill_holder(plain); // the waiter gets its memory
  waiter.join();
  CHECK(cell(text.out, "urgent", "ASKED") == "0 B");
  CHECK(cell(text.out, "plain", "RECLAIMABLE") == "0 B");
  CHECK_FALSE(contains(text.out, "reclaim:")); // nobody was asked
  CHECK(contains(text.out, "  hint: \"urgent\" (slot " + std::to_string(urgent.id().slot) +
                               ") waits for memory, 376.00 MiB lacking; no session of a lower "
                               "class holds reclaimable memory above its guarantee: it waits for "
                               "releases\n"));
}

namespace {

/// A child joining "gpu" as "cache" (low class) with 256 MiB of its own and a watcher that gives
/// back what it is asked, then 512 MiB of reclaimable cache beyond the table's free memory: lent
/// out of the lender's idle guarantee.
pid_t spawn_borrower(const test_domain& d) {
  return test::spawn_holding([&](const std::function<void()>& hold) {
    session s("gpu", with(d, "cache", priority::low));
    reservation own = s.reserve(256 * MiB, 0ms);
    // The watcher starts before the cache exists (only a session that answers at once is lent
    // anything), so the handler and this thread share `cache` under a mutex.
    std::mutex m;
    std::optional<reservation> cache;
    s.on_reclaim([&cache, &m](std::uint64_t asked) {
      const std::lock_guard<std::mutex> l(m);
      if (!cache) return std::uint64_t{0};
      const std::uint64_t give = std::min(asked, cache->size());
      cache->shrink(give);
      return give;
    });
    s.watch_reclaim();
    std::optional<reservation> lent = s.try_reserve_reclaimable(512 * MiB);
    {
      const std::lock_guard<std::mutex> l(m);
      cache = std::move(lent);
    }
    hold();
  });
}

/// The loan figures of "cache" and of table "gpu" in `gpushare status --json`, as one line:
/// "borrowed loans write_offs loan_call | idle lent held loans calls write_offs written_off".
std::string loan_json(const test_domain& d) {
  const json doc =
      parse_json(run_cli({"status", "--domain", d.name(), "--interval", "0", "--json"}).out);
  const json& t = table_of(doc, "gpu");
  const json& r = session_of(t, "cache")["reclaim"];
  const json& l = t["loans"];
  std::string out = std::to_string(r["borrowed_bytes"].u64() / MiB) + " " +
                    std::to_string(r["loans"].u64()) + " " + std::to_string(r["write_offs"].u64());
  out.append(r["loan_call"].boolean() ? " true |" : " false |");
  for (const char* k : {"idle_guarantee_bytes", "lent_bytes", "held_bytes"})
    out.append(" ").append(std::to_string(l[k].u64() / MiB));
  for (const char* k : {"loans", "calls", "write_offs"})
    out.append(" ").append(std::to_string(l[k].u64()));
  return out.append(" ").append(std::to_string(l["written_off_bytes"].u64() / MiB));
}

/// The loan samples of "cache" and of table "gpu" in `gpushare metrics`, in the order of
/// loan_json (without loan_call), bytes in MiB.
std::string loan_metrics(const test_domain& d) {
  const std::string m = run_cli({"metrics", "--domain", d.name()}).out;
  const std::string table = d.object_name("gpu");
  const auto mib = [&](const std::string& family, const std::string& part) {
    return std::to_string(std::stoull(metric_value(m, family, part)) / MiB);
  };
  std::string out = mib("gpushare_session_borrowed_bytes", "session=\"cache\"") + " " +
                    metric_value(m, "gpushare_session_loan_write_offs_total", "session=\"cache\"");
  out.append(" |");
  for (const char* f : {"gpushare_loans_idle_guarantee_bytes", "gpushare_loans_lent_bytes",
                        "gpushare_loans_held_bytes"})
    out.append(" ").append(mib(f, table));
  for (const char* f :
       {"gpushare_loans_total", "gpushare_loan_calls_total", "gpushare_loan_write_offs_total"})
    out.append(" ").append(metric_value(m, f, table));
  return out.append(" ").append(mib("gpushare_loan_written_off_bytes_total", table));
}

} // namespace

TEST_CASE("loans: status, JSON and metrics show a borrower's loan, the loan call while it is "
          "stopped, and the write-off at the deadline") {
  test_domain d;
  session_options o = with(d, "lender", priority::normal, 5000ms);
  o.memory_guarantee = memory_amount::of_bytes(768 * MiB);
  session lender("gpu", o); // guaranteed 768 MiB of the table's 1 GiB, holding nothing yet
  const pid_t b = spawn_borrower(d);
  REQUIRE(find(lender.snapshot(), "cache")->reclaim.borrowed == 512 * MiB);

  const cli_result text = run_cli({"status", "--domain", d.name(), "--interval", "0"});
  CHECK(text.code == 0);
  CHECK(cell(text.out, "cache", "BORROWED") == "512.00 MiB");
  CHECK(cell(text.out, "cache", "RECLAIMABLE") == "512.00 MiB");
  CHECK(cell(text.out, "cache", "ASKED") == "0 B");
  CHECK(cell(text.out, "lender", "BORROWED") == "0 B");
  CHECK(contains(text.out, "  loans: 768.00 MiB idle guarantees, 512.00 MiB lent now (768.00 MiB "
                           "held), 1 loan made, 0 loan calls, 0 calls written off (0 B)\n"));
  CHECK(loan_json(d) == "512 1 0 false | 768 512 768 1 0 0 0");
  CHECK(loan_metrics(d) == "512 0 | 768 512 768 1 0 0 0");

  // Stopped, the borrower cannot answer the call for 344 MiB of the 600 MiB the lender reserves.
  REQUIRE(test::stop_process(b));
  std::optional<reservation> r;
  std::thread waiter([&] { r = lender.reserve(600 * MiB, 20s); });
  REQUIRE(test::eventually([&] {
    const table_snapshot now = lender.snapshot(); // find() points into it
    const session_info* i = find(now, "cache");
    return i && i->reclaim.asked == 344 * MiB && i->reclaim.loan_call;
  }));
  const cli_result called = run_cli({"status", "--domain", d.name(), "--interval", "0"});
  CHECK(cell(called.out, "cache", "ASKED") == "344.00 MiB (loan)");
  CHECK(cell(called.out, "lender", "ASKED") == "0 B");
  CHECK(contains(called.out, "  loans: 768.00 MiB idle guarantees, 512.00 MiB lent now (768.00 "
                             "MiB held), 1 loan made, 1 loan call, 0 calls written off (0 B)\n"));
  CHECK(loan_json(d) == "512 1 0 true | 768 512 768 1 1 0 0");
  CHECK(loan_metrics(d) == "512 0 | 768 512 768 1 1 0 0");

  // At the deadline the call is written off and the lender gets its 600 MiB.
  waiter.join();
  REQUIRE(r);
  CHECK(r->size() == 600 * MiB);
  const cli_result after = run_cli({"status", "--domain", d.name(), "--interval", "0"});
  CHECK(cell(after.out, "cache", "BORROWED") == "168.00 MiB");
  CHECK(cell(after.out, "cache", "ASKED") == "0 B");
  CHECK(contains(after.out, "  loans: 168.00 MiB idle guarantees, 168.00 MiB lent now (1.00 GiB "
                            "held), 1 loan made, 1 loan call, 1 call written off (344.00 MiB)\n"));
  CHECK(loan_json(d) == "168 1 1 false | 168 168 1024 1 1 1 344");
  CHECK(loan_metrics(d) == "168 1 | 168 168 1024 1 1 1 344");
  ::kill(b, SIGCONT);
  kill_holder(b);
}
