// SPDX-License-Identifier: Apache-2.0
// The gpushare tool's pure functions for cooperative reclaim (tools/cli_reclaim.hpp): when the
// RECLAIMABLE and ASKED columns show, the "reclaim:" line, the hint under a session waiting for
// memory in each of its cases, and the reclaim fields of status --json and metrics; for lent
// guarantees, when the BORROWED column shows, the "(loan)" mark under ASKED, the "loans:" line,
// and the loan fields of status --json and metrics.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cli_metrics.hpp"
#include "cli_reclaim.hpp"
#include "cli_status.hpp"

using namespace gpushare;
using namespace gpushare::cli;

namespace {

constexpr std::uint64_t MiB = 1ull << 20;

session_info named(const std::string& name, std::uint32_t slot, int priority) {
  session_info i;
  i.id = {slot, 1};
  i.name = name;
  i.priority = priority;
  return i;
}

/// A session of class `priority` holding `reclaimable` bytes of its `reserved`.
session_info holding(const std::string& name, std::uint32_t slot, int priority,
                     std::uint64_t reserved, std::uint64_t reclaimable) {
  session_info i = named(name, slot, priority);
  i.reserved = reserved;
  i.reclaim.reclaimable = reclaimable;
  return i;
}

/// A session of the high class whose waiting reserves lack `wanted` bytes.
session_info waiter(std::uint32_t slot, std::uint64_t wanted) {
  session_info i = named("urgent", slot, priority::high);
  i.waiting_for_memory = 1;
  i.reclaim.wanted = wanted;
  return i;
}

table_snapshot table_of(std::vector<session_info> sessions) {
  table_snapshot s;
  s.object_name = "/gpushare.d.u0.k";
  s.key = std::string("k");
  s.domain = std::string("d");
  s.slot_count = 8;
  s.sessions = std::move(sessions);
  return s;
}

/// `parts` on lines of their own, each after the first indented by `indent` spaces.
std::string joined(std::size_t indent, const std::vector<std::string>& parts) {
  std::string out;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    if (k > 0) out.append("\n").append(indent, ' ');
    out += parts[k];
  }
  return out + "\n";
}

} // namespace

TEST_CASE("reclaim columns show when a session holds reclaimable memory is asked or lacks bytes") {
  CHECK_FALSE(any_reclaim(table_of({named("a", 1, priority::low)})));
  CHECK(any_reclaim(table_of({holding("a", 1, priority::low, 10 * MiB, 1)})));
  CHECK(any_reclaim(table_of({waiter(2, 5)})));
  session_info asked = named("a", 1, priority::low);
  asked.reclaim.asked = 3;
  CHECK(any_reclaim(table_of({asked})));
}

TEST_CASE("the reclaim line shows once a counter moves and gives the grant times") {
  table_snapshot s = table_of({});
  CHECK(reclaim_text(s) == "");
  s.reclaim.withdrawn = 1;
  CHECK(reclaim_text(s) ==
        "  reclaim: 0 requests, 0 answered, 0 skipped, 1 withdrawn, 0 B given back, 0 grants\n");
  s.reclaim = {3, 2, 1, 0, 376 * MiB, 2, 300'000'000, 250'000'000};
  CHECK(reclaim_text(s) == "  reclaim: 3 requests, 2 answered, 1 skipped, 0 withdrawn, 376.00 MiB "
                           "given back, 2 grants (first request to grant: mean 150 ms, max "
                           "250 ms)\n");
}

TEST_CASE("the waiter's hint names who is asked for how much and by when") {
  session_info a = holding("cache", 3, priority::low, 800 * MiB, 800 * MiB);
  a.reclaim.asked = 300 * MiB;
  a.reclaim.deadline_in_ns = 1'234'000'000;
  session_info b = holding("kv", 4, priority::normal, 100 * MiB, 100 * MiB);
  b.reclaim.asked = 76 * MiB; // overdue: not skipped yet
  session_info same = holding("peer", 5, priority::high, 500 * MiB, 500 * MiB);
  same.reclaim.asked = 1; // asked by someone else: of the waiter's own class, no help to it
  const table_snapshot s = table_of({waiter(1, 376 * MiB), a, b, same});
  CHECK(reclaim_hints(s) ==
        "  hint: \"urgent\" (slot 1) waits for memory, 376.00 MiB lacking; asked: \"cache\" (slot "
        "3) for 300.00 MiB, deadline in 1.23 s; \"kv\" (slot 4) for 76.00 MiB, deadline passed\n");
}

TEST_CASE("the waiter's hint says why nobody is asked") {
  session_info skipped = holding("deaf", 3, priority::low, 800 * MiB, 800 * MiB);
  skipped.reclaim.skipped_now = true;
  CHECK(reclaim_hints(table_of({waiter(1, MiB), skipped})) ==
        "  hint: \"urgent\" (slot 1) waits for memory, 1.00 MiB lacking; not asked for now (missed "
        "a deadline or gave nothing lately): \"deaf\" (slot 3); it waits for releases\n");
  // Reclaimable memory within its guarantee cannot be asked for, nor a higher class's.
  session_info kept = holding("kept", 3, priority::low, 800 * MiB, 800 * MiB);
  kept.memory_guarantee = 800 * MiB;
  const session_info above = holding("boss", 4, priority::critical, 800 * MiB, 800 * MiB);
  const std::string none = "  hint: \"urgent\" (slot 1) waits for memory, 1.00 MiB lacking; no "
                           "session of a lower class holds reclaimable memory above its "
                           "guarantee: it waits for releases\n";
  CHECK(reclaim_hints(table_of({waiter(1, MiB), kept, above})) == none);
  // A lower-class holder that is not asked (its group is not the one whose limit binds).
  const session_info other = holding("other", 3, priority::low, 800 * MiB, 800 * MiB);
  CHECK(reclaim_hints(table_of({waiter(1, MiB), other})) ==
        "  hint: \"urgent\" (slot 1) waits for memory, 1.00 MiB lacking; nobody is asked now: it "
        "waits for releases\n");
  CHECK(reclaim_hints(table_of({other})) == "");
}

TEST_CASE("status text and JSON and metrics carry the reclaim figures") {
  session_info a = holding("cache", 3, priority::low, 800 * MiB, 800 * MiB);
  a.reclaim.asked = 376 * MiB;
  a.reclaim.deadline_in_ns = 2'000'000'000;
  a.reclaim.asked_by_slot = 1;
  a.reclaim.requests = 2;
  a.reclaim.answered = 1;
  a.reclaim.given = 5;
  sample now;
  table_reading t;
  t.entry.object_name = "/gpushare.d.u0.k";
  t.snapshot = table_of({waiter(1, 376 * MiB), a});
  t.snapshot->reclaim = {2, 1, 0, 0, 5, 1, 7'000'000, 7'000'000};
  now.tables.push_back(t);

  const std::string text = status_text(nullptr, now, domain_choice{});
  CHECK(text.find("RECLAIMABLE") != std::string::npos);
  CHECK(text.find("  reclaim: 2 requests, 1 answered, 0 skipped, 0 withdrawn, 5 B given back, 1 "
                  "grant (first request to grant: mean 7 ms, max 7 ms)\n") != std::string::npos);
  CHECK(text.find("asked: \"cache\" (slot 3) for 376.00 MiB, deadline in 2.00 s\n") !=
        std::string::npos);

  const std::string json = status_json(nullptr, now, std::nullopt, 0);
  const std::vector<std::string> fields = {
      joined(12, {"\"reclaim\": {", "\"reclaimable_bytes\": 0,", "\"asked_bytes\": 0,",
                  "\"deadline_in_ns\": 0,", "\"asked_by_slot\": null,",
                  "\"wanted_bytes\": 394264576,"}),
      joined(12,
             {"\"asked_bytes\": 394264576,", "\"deadline_in_ns\": 2000000000,",
              "\"asked_by_slot\": 1,", "\"wanted_bytes\": 0,", "\"skipped_now\": false,",
              "\"requests\": 2,", "\"answered\": 1,", "\"skipped\": 0,", "\"given_bytes\": 5,"}),
      joined(8, {"\"reclaim\": {", "\"requests\": 2,", "\"answered\": 1,", "\"skipped\": 0,",
                 "\"withdrawn\": 0,", "\"given_bytes\": 5,", "\"grants\": 1,",
                 "\"grant_ns\": 7000000,", "\"grant_max_ns\": 7000000"})};
  for (const std::string& field : fields)
    CHECK_MESSAGE(json.find(field) != std::string::npos, field);

  const std::string m = metrics_text(now);
  const std::string labels = "{table=\"/gpushare.d.u0.k\",key=\"k\",domain=\"d\"";
  const std::string cache = labels +
                            ",session=\"cache\",slot=\"3\",pod=\"\",namespace=\"\",container=\"\","
                            "slurm_job_id=\"\",slurm_step_id=\"\",group=\"\"}";
  const std::vector<std::string> lines = {
      "# TYPE gpushare_reclaim_grant_seconds_total "
      "counter\ngpushare_reclaim_grant_seconds_total" +
          labels + "} 0.007\n",
      "# TYPE gpushare_reclaim_grant_max_seconds gauge\ngpushare_reclaim_grant_max_seconds" +
          labels + "} 0.007\n",
      "gpushare_reclaim_requests_total" + labels + "} 2\n",
      "gpushare_reclaim_given_bytes_total" + labels + "} 5\n",
      "# TYPE gpushare_session_reclaimable_bytes gauge\n",
      "gpushare_session_reclaimable_bytes" + cache + " 838860800\n",
      "gpushare_session_reclaim_asked_bytes" + cache + " 394264576\n",
      "gpushare_session_reclaim_requests_total" + cache + " 2\n",
      "gpushare_session_reclaim_given_bytes_total" + cache + " 5\n",
      "# HELP gpushare_session_reclaim_wanted_bytes "};
  for (const std::string& line : lines) CHECK_MESSAGE(m.find(line) != std::string::npos, line);
}

TEST_CASE("the borrowed column and the loan mark show only for loans") {
  session_info lender = named("lender", 1, priority::normal);
  lender.memory_guarantee = 768 * MiB;
  const session_info plain = holding("cache", 2, priority::low, 768 * MiB, 512 * MiB);
  CHECK_FALSE(any_borrowed(table_of({lender, plain})));
  session_info borrower = plain;
  borrower.reclaim.borrowed = 512 * MiB;
  CHECK(any_borrowed(table_of({lender, borrower})));
  borrower.reclaim.asked = 344 * MiB;
  CHECK(asked_cell(borrower) == "344.00 MiB");
  borrower.reclaim.loan_call = true;
  CHECK(asked_cell(borrower) == "344.00 MiB (loan)");
}

TEST_CASE("the loans line shows once something was lent") {
  table_snapshot s = table_of({});
  CHECK(loans_text(s) == "");
  s.loans.idle_guarantees = 768 * MiB; // guarantees and holdings alone: nothing lent yet
  s.loans.held = 256 * MiB;
  CHECK(loans_text(s) == "");
  s.loans = {};
  s.loans.written_off = 1;
  CHECK(loans_text(s) == "  loans: 0 B idle guarantees, 0 B lent now (0 B held), 0 loans made, 0 "
                         "loan calls, 0 calls written off (1 B)\n");
  s.loans = {768 * MiB, 512 * MiB, 768 * MiB, 1, 1, 1, 344 * MiB};
  CHECK(loans_text(s) == "  loans: 768.00 MiB idle guarantees, 512.00 MiB lent now (768.00 MiB "
                         "held), 1 loan made, 1 loan call, 1 call written off (344.00 MiB)\n");
}

namespace {

/// A lender waiting for 344 MiB of its guarantee and a borrower asked for them by a loan call,
/// in one table of a sample.
sample loan_sample() {
  session_info lender = named("lender", 1, priority::normal);
  lender.memory_guarantee = 768 * MiB;
  lender.waiting_for_memory = 1;
  lender.reclaim.wanted = 344 * MiB;
  session_info b = holding("cache", 3, priority::low, 768 * MiB, 512 * MiB);
  b.reclaim.borrowed = 512 * MiB;
  b.reclaim.asked = 344 * MiB;
  b.reclaim.loan_call = true;
  b.reclaim.loans = 2;
  b.reclaim.write_offs = 1;
  sample now;
  table_reading t;
  t.entry.object_name = "/gpushare.d.u0.k";
  t.snapshot = table_of({lender, b});
  t.snapshot->loans = {768 * MiB, 512 * MiB, 768 * MiB, 2, 3, 1, 100};
  now.tables.push_back(t);
  return now;
}

} // namespace

TEST_CASE("status text carries the loan figures") {
  const sample now = loan_sample();
  const std::string text = status_text(nullptr, now, domain_choice{});
  CHECK(text.find("  loans: 768.00 MiB idle guarantees, 512.00 MiB lent now (768.00 MiB held), 2 "
                  "loans made, 3 loan calls, 1 call written off (100 B)\n") != std::string::npos);
  const std::size_t header = text.find("RECLAIMABLE");
  REQUIRE(header != std::string::npos);
  CHECK(text.find("ASKED    BORROWED", header) != std::string::npos);
  CHECK(text.find("344.00 MiB (loan)  512.00 MiB") != std::string::npos);
}

TEST_CASE("status JSON and metrics carry the loan figures") {
  const sample now = loan_sample();
  const std::string json = status_json(nullptr, now, std::nullopt, 0);
  const std::vector<std::string> fields = {
      joined(12, {"\"given_bytes\": 0,", "\"borrowed_bytes\": 536870912,", "\"loans\": 2,",
                  "\"write_offs\": 1,", "\"loan_call\": true"}),
      joined(12, {"\"given_bytes\": 0,", "\"borrowed_bytes\": 0,", "\"loans\": 0,",
                  "\"write_offs\": 0,", "\"loan_call\": false"}),
      joined(8, {"\"loans\": {", "\"idle_guarantee_bytes\": 805306368,",
                 "\"lent_bytes\": 536870912,", "\"held_bytes\": 805306368,", "\"loans\": 2,",
                 "\"calls\": 3,", "\"write_offs\": 1,", "\"written_off_bytes\": 100"})};
  for (const std::string& field : fields)
    CHECK_MESSAGE(json.find(field) != std::string::npos, field);

  const std::string m = metrics_text(now);
  const std::string labels = "{table=\"/gpushare.d.u0.k\",key=\"k\",domain=\"d\"";
  const std::string cache = labels +
                            ",session=\"cache\",slot=\"3\",pod=\"\",namespace=\"\",container=\"\","
                            "slurm_job_id=\"\",slurm_step_id=\"\",group=\"\"}";
  const std::vector<std::string> lines = {
      "# TYPE gpushare_loans_idle_guarantee_bytes gauge\ngpushare_loans_idle_guarantee_bytes" +
          labels + "} 805306368\n",
      "# TYPE gpushare_loans_lent_bytes gauge\ngpushare_loans_lent_bytes" + labels +
          "} 536870912\n",
      "# TYPE gpushare_loans_held_bytes gauge\ngpushare_loans_held_bytes" + labels +
          "} 805306368\n",
      "# TYPE gpushare_loans_total counter\ngpushare_loans_total" + labels + "} 2\n",
      "# TYPE gpushare_loan_calls_total counter\ngpushare_loan_calls_total" + labels + "} 3\n",
      "# TYPE gpushare_loan_write_offs_total counter\ngpushare_loan_write_offs_total" + labels +
          "} 1\n",
      "# TYPE gpushare_loan_written_off_bytes_total counter\n"
      "gpushare_loan_written_off_bytes_total" +
          labels + "} 100\n",
      "# TYPE gpushare_session_borrowed_bytes gauge\n",
      "gpushare_session_borrowed_bytes" + cache + " 536870912\n",
      "# TYPE gpushare_session_loan_write_offs_total counter\n",
      "gpushare_session_loan_write_offs_total" + cache + " 1\n",
      "# HELP gpushare_loans_lent_bytes "};
  for (const std::string& line : lines) CHECK_MESSAGE(m.find(line) != std::string::npos, line);
}
