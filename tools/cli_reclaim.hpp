// SPDX-License-Identifier: Apache-2.0
// Cooperative reclaim (docs/design.md section 15) as the tool shows it: the RECLAIMABLE and
// ASKED columns, the "reclaim:" line and the hint under a session waiting for memory in
// `gpushare status`, the "reclaim" objects of its JSON, and the gpushare_reclaim_* and
// gpushare_session_reclaim* families of `gpushare metrics`; and idle guarantees lent as
// reclaimable memory: the BORROWED column, the "(loan)" mark of a loan call under ASKED, the
// "loans:" line, the loan fields and "loans" object of the JSON, and the gpushare_loan* and
// gpushare_session_borrowed_bytes / gpushare_session_loan_write_offs_total families.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <gpushare/table.hpp>
#include <gpushare/types.hpp>

#include "cli_format.hpp"
#include "cli_json.hpp"
#include "cli_prometheus.hpp"

namespace gpushare::cli {

/// Whether the RECLAIMABLE and ASKED columns are shown: a session of `s` holds reclaimable
/// memory, is asked to give some back, or lacks bytes for a waiting reserve.
inline bool any_reclaim(const table_snapshot& s) {
  for (const session_info& i : s.sessions)
    if (i.reclaim.reclaimable > 0 || i.reclaim.asked > 0 || i.reclaim.wanted > 0) return true;
  return false;
}

/// Whether the BORROWED column is shown: a session of `s` holds memory on loan.
inline bool any_borrowed(const table_snapshot& s) {
  for (const session_info& i : s.sessions)
    if (i.reclaim.borrowed > 0) return true;
  return false;
}

/// The ASKED cell: "344.00 MiB", with " (loan)" when what it is asked for calls a loan back.
inline std::string asked_cell(const session_info& i) {
  std::string out = bytes_text(i.reclaim.asked);
  if (i.reclaim.loan_call) out.append(" (loan)");
  return out;
}

/// "  loans: 768.00 MiB idle guarantees, 512.00 MiB lent now (768.00 MiB held), 1 loan made, 1
/// loan call, 1 call written off (344.00 MiB)\n"; "" until something was lent in the table's
/// life (idle guarantees and held bytes alone are no loan: most tables have them).
inline std::string loans_text(const table_snapshot& s) {
  const table_snapshot::loan_figures& l = s.loans;
  if (!(l.lent || l.loans || l.calls || l.write_offs || l.written_off)) return "";
  return std::string("  loans: ")
      .append(bytes_text(l.idle_guarantees))
      .append(" idle guarantees, ")
      .append(bytes_text(l.lent))
      .append(" lent now (")
      .append(bytes_text(l.held))
      .append(" held), ")
      .append(plural(l.loans, "loan"))
      .append(" made, ")
      .append(plural(l.calls, "loan call"))
      .append(", ")
      .append(plural(l.write_offs, "call"))
      .append(" written off (")
      .append(bytes_text(l.written_off))
      .append(")\n");
}

/// Whether any of the table's reclaim counters is not zero.
inline bool any_reclaim_counter(const table_snapshot::reclaim_counters& c) {
  return c.requests || c.answered || c.skipped || c.withdrawn || c.given || c.grants ||
         c.grant_ns || c.grant_max_ns;
}

/// "  reclaim: 3 requests, 1 answered, 1 skipped, 1 withdrawn, 376.00 MiB given back, 1 grant
/// (first request to grant: mean 120 ms, max 120 ms)\n"; "" while every counter is zero.
inline std::string reclaim_text(const table_snapshot& s) {
  const table_snapshot::reclaim_counters& c = s.reclaim;
  if (!any_reclaim_counter(c)) return "";
  std::string out = "  reclaim: " + plural(c.requests, "request") + ", " +
                    std::to_string(c.answered) + " answered, " + std::to_string(c.skipped) +
                    " skipped, " + std::to_string(c.withdrawn) + " withdrawn, " +
                    bytes_text(c.given) + " given back, " + plural(c.grants, "grant");
  if (c.grants > 0)
    out += " (first request to grant: mean " + duration_text(c.grant_ns / c.grants) + ", max " +
           duration_text(c.grant_max_ns) + ")";
  return out + "\n";
}

/// `"cache" (slot 3)`.
inline std::string session_label(const session_info& i) {
  return safe_text(quote(i.name)) + " (slot " + std::to_string(i.id.slot) + ")";
}

/// What waiter `w` counts on or why nothing comes: the requests out to sessions of lower classes
/// ("asked: "cache" (slot 3) for 376.00 MiB, deadline in 1.20 s"), else the lower-class holders
/// not asked for now (they missed a deadline or gave nothing lately), else that no lower-class
/// session can give anything.
inline std::string reclaim_prospect(const table_snapshot& s, const session_info& w) {
  std::string asked, skipped;
  bool holders = false;
  for (const session_info& i : s.sessions) {
    if (i.id.slot == w.id.slot || i.priority >= w.priority) continue;
    const session_info::reclaim_figures& r = i.reclaim;
    if (r.asked > 0)
      asked += (asked.empty() ? "asked: " : "; ") + session_label(i) + " for " +
               bytes_text(r.asked) + ", " +
               (r.deadline_in_ns > 0 ? "deadline in " + duration_text(r.deadline_in_ns)
                                     : std::string("deadline passed"));
    else if (r.reclaimable > 0 && r.skipped_now)
      skipped += (skipped.empty() ? "" : ", ") + session_label(i);
    const std::uint64_t held = saturating_add(i.reserved, i.external);
    holders = holders || (r.reclaimable > 0 && held > i.memory_guarantee);
  }
  if (!asked.empty()) return asked;
  if (!skipped.empty())
    return "not asked for now (missed a deadline or gave nothing lately): " + skipped +
           "; it waits for releases";
  if (!holders)
    return "no session of a lower class holds reclaimable memory above its guarantee: it waits "
           "for releases";
  return "nobody is asked now: it waits for releases";
}

/// For each session of `s` whose waiting reserves lack bytes: who is asked for how much and by
/// when, or why nobody is.
inline std::string reclaim_hints(const table_snapshot& s) {
  std::string out;
  for (const session_info& w : s.sessions)
    if (w.reclaim.wanted > 0)
      out += "  hint: " + session_label(w) + " waits for memory, " + bytes_text(w.reclaim.wanted) +
             " lacking; " + reclaim_prospect(s, w) + "\n";
  return out;
}

/// "reclaim": a session's reclaim figures (asked_by_slot null when nobody asks it).
inline void session_reclaim_json(json_writer& w, const session_info& i) {
  const session_info::reclaim_figures& r = i.reclaim;
  w.key("reclaim");
  w.begin_object();
  w.field("reclaimable_bytes", r.reclaimable);
  w.field("asked_bytes", r.asked);
  w.field("deadline_in_ns", r.deadline_in_ns);
  w.key("asked_by_slot");
  if (r.asked_by_slot)
    w.number(*r.asked_by_slot);
  else
    w.null();
  w.field("wanted_bytes", r.wanted);
  w.field("skipped_now", r.skipped_now);
  w.field("requests", r.requests);
  w.field("answered", r.answered);
  w.field("skipped", r.skipped);
  w.field("given_bytes", r.given);
  w.field("borrowed_bytes", r.borrowed);
  w.field("loans", r.loans);
  w.field("write_offs", r.write_offs);
  w.field("loan_call", r.loan_call);
  w.end_object();
}

/// "reclaim": the table's reclaim counters over its life.
inline void table_reclaim_json(json_writer& w, const table_snapshot& s) {
  const table_snapshot::reclaim_counters& c = s.reclaim;
  w.key("reclaim");
  w.begin_object();
  w.field("requests", c.requests);
  w.field("answered", c.answered);
  w.field("skipped", c.skipped);
  w.field("withdrawn", c.withdrawn);
  w.field("given_bytes", c.given);
  w.field("grants", c.grants);
  w.field("grant_ns", c.grant_ns);
  w.field("grant_max_ns", c.grant_max_ns);
  w.end_object();
}

/// "loans": the table's idle guarantees, what is lent and held now, and its loans over its life.
inline void table_loans_json(json_writer& w, const table_snapshot& s) {
  const table_snapshot::loan_figures& l = s.loans;
  w.key("loans");
  w.begin_object();
  w.field("idle_guarantee_bytes", l.idle_guarantees);
  w.field("lent_bytes", l.lent);
  w.field("held_bytes", l.held);
  w.field("loans", l.loans);
  w.field("calls", l.calls);
  w.field("write_offs", l.write_offs);
  w.field("written_off_bytes", l.written_off);
  w.end_object();
}

/// The table's loan families (after the reclaim families).
inline void declare_loan_metrics(exposition& x) {
  x.declare("gpushare_loans_idle_guarantee_bytes", "gauge",
            "Bytes guaranteed to sessions that they do not hold now.");
  x.declare("gpushare_loans_lent_bytes", "gauge",
            "Bytes of idle guarantees on loan now as reclaimable memory.");
  x.declare("gpushare_loans_held_bytes", "gauge", "Bytes the sessions hold now, on loan or not.");
  x.declare("gpushare_loans_total", "counter", "Growths granted on loan out of idle guarantees.");
  x.declare("gpushare_loan_calls_total", "counter",
            "Reclaim requests that called a loan back for a guaranteed session.");
  x.declare("gpushare_loan_write_offs_total", "counter",
            "Loan calls that passed their deadline unanswered: their bytes were written off.");
  x.declare("gpushare_loan_written_off_bytes_total", "counter",
            "Bytes of loans written off at the deadline of their call.");
}

/// The table's reclaim families (after the table families), then its loan families.
inline void declare_reclaim_metrics(exposition& x) {
  x.declare("gpushare_reclaim_requests_total", "counter",
            "Requests to give reclaimable memory back, sent by waiting reserves.");
  x.declare("gpushare_reclaim_answered_total", "counter", "Reclaim requests answered.");
  x.declare("gpushare_reclaim_skipped_total", "counter",
            "Reclaim requests that passed their deadline unanswered.");
  x.declare("gpushare_reclaim_withdrawn_total", "counter",
            "Reclaim requests withdrawn because no reserve waited any more.");
  x.declare("gpushare_reclaim_given_bytes_total", "counter",
            "Bytes the answers to reclaim requests gave back.");
  x.declare("gpushare_reclaim_grants_total", "counter",
            "Waiting reserves granted after they had sent reclaim requests.");
  x.declare("gpushare_reclaim_grant_seconds_total", "counter",
            "Time from the first reclaim request of a waiting reserve to its grant, summed.");
  x.declare("gpushare_reclaim_grant_max_seconds", "gauge",
            "Longest time from the first reclaim request of a waiting reserve to its grant.");
  declare_loan_metrics(x);
}

/// The session reclaim families (after the other session families).
inline void declare_session_reclaim_metrics(exposition& x) {
  x.declare("gpushare_session_reclaimable_bytes", "gauge",
            "Bytes of the session's reservations that it gives back when asked.");
  x.declare("gpushare_session_reclaim_asked_bytes", "gauge",
            "Bytes the session is asked to give back now.");
  x.declare("gpushare_session_reclaim_wanted_bytes", "gauge",
            "Bytes the session's waiting reserves lack now.");
  x.declare("gpushare_session_reclaim_requests_total", "counter",
            "Reclaim requests sent to the session.");
  x.declare("gpushare_session_reclaim_answered_total", "counter",
            "Reclaim requests the session answered.");
  x.declare("gpushare_session_reclaim_skipped_total", "counter",
            "Reclaim requests to the session that passed their deadline unanswered.");
  x.declare("gpushare_session_reclaim_given_bytes_total", "counter",
            "Bytes the session gave back when asked.");
  x.declare("gpushare_session_borrowed_bytes", "gauge",
            "Bytes of the session's reclaimable memory on loan out of other sessions' idle "
            "guarantees.");
  x.declare("gpushare_session_loan_write_offs_total", "counter",
            "Loan calls to the session that passed their deadline: their bytes were written off.");
}

/// The samples of the table's reclaim counters and loan figures; `labels` are its table's.
inline void reclaim_samples(exposition& x, const label_set& labels, const table_snapshot& s) {
  const table_snapshot::reclaim_counters& c = s.reclaim;
  x.sample("gpushare_reclaim_requests_total", labels, c.requests);
  x.sample("gpushare_reclaim_answered_total", labels, c.answered);
  x.sample("gpushare_reclaim_skipped_total", labels, c.skipped);
  x.sample("gpushare_reclaim_withdrawn_total", labels, c.withdrawn);
  x.sample("gpushare_reclaim_given_bytes_total", labels, c.given);
  x.sample("gpushare_reclaim_grants_total", labels, c.grants);
  x.sample("gpushare_reclaim_grant_seconds_total", labels, fixed_decimal(c.grant_ns, 9));
  x.sample("gpushare_reclaim_grant_max_seconds", labels, fixed_decimal(c.grant_max_ns, 9));
  const table_snapshot::loan_figures& l = s.loans;
  x.sample("gpushare_loans_idle_guarantee_bytes", labels, l.idle_guarantees);
  x.sample("gpushare_loans_lent_bytes", labels, l.lent);
  x.sample("gpushare_loans_held_bytes", labels, l.held);
  x.sample("gpushare_loans_total", labels, l.loans);
  x.sample("gpushare_loan_calls_total", labels, l.calls);
  x.sample("gpushare_loan_write_offs_total", labels, l.write_offs);
  x.sample("gpushare_loan_written_off_bytes_total", labels, l.written_off);
}

/// The reclaim samples of one live session; `l` holds its labels.
inline void session_reclaim_samples(exposition& x, const label_set& l, const session_info& i) {
  const session_info::reclaim_figures& r = i.reclaim;
  x.sample("gpushare_session_reclaimable_bytes", l, r.reclaimable);
  x.sample("gpushare_session_reclaim_asked_bytes", l, r.asked);
  x.sample("gpushare_session_reclaim_wanted_bytes", l, r.wanted);
  x.sample("gpushare_session_reclaim_requests_total", l, r.requests);
  x.sample("gpushare_session_reclaim_answered_total", l, r.answered);
  x.sample("gpushare_session_reclaim_skipped_total", l, r.skipped);
  x.sample("gpushare_session_reclaim_given_bytes_total", l, r.given);
  x.sample("gpushare_session_borrowed_bytes", l, r.borrowed);
  x.sample("gpushare_session_loan_write_offs_total", l, r.write_offs);
}

} // namespace gpushare::cli
