// SPDX-License-Identifier: Apache-2.0
// Cooperative reclaim (docs/design.md section 15): a reserve that waits asks sessions of lower
// priority classes that hold reclaimable memory to give some back, and waits; nobody is killed.
//
//   - Only reserves that wait may ask (budget_verdict::not_now: within their own limit and their
//     group's), and only sessions of a strictly lower priority class are asked. Asks are never
//     for more than a session holds above its guarantee, so nobody is asked below it.
//   - The choice (choose_reclaim): lowest class first, then the one most above its guarantee,
//     then the lowest slot; each is asked for what it can give until the shortfall is covered.
//     Requests already out count towards the shortfall: a waiter asks only for what they lack.
//   - A request has a deadline. One not answered by then is skipped (cleared, counted, and that
//     session is not asked again for reclaim_skip_ns), never killed.
//   - Requests live only while a reserve waits: when the table's last memory waiter stops
//     waiting, every request still out is withdrawn (withdraw_reclaim).
//   - Idle guarantees are lent (may_borrow): a reclaimable growth that does not fit may be
//     granted on loan while nobody else waits for memory and what sessions hold stays within the
//     capacity. A growth that the loans stand in the way of calls them back (call_loans), whatever
//     the classes; a loan call unanswered by its deadline is written off (write_off_loan), so
//     that growth is served within the deadline.
// Everything here runs under the table lock, except the owner's lock-free look at `asked`.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include <gpushare/detail/budget.hpp>
#include <gpushare/detail/group.hpp>
#include <gpushare/detail/layout.hpp>
#include <gpushare/detail/memory_queue.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// After missing a deadline a session is not asked again for this long.
inline constexpr std::uint64_t reclaim_skip_ns = 10'000'000'000; // 10 s
/// The deadline of a request when the waiting session sets none (session_options).
inline constexpr std::uint64_t default_reclaim_deadline_ns = 2'000'000'000; // 2 s

/// A session that could be asked, as the choice sees it.
struct reclaim_candidate {
  std::uint32_t slot = 0;
  int priority = 0;
  std::uint64_t above_guarantee = 0; ///< max(reserved + external - guarantee, 0)
  std::uint64_t givable = 0;         ///< what it can still be asked for (see givable())
};

/// One request: ask `slot` for `bytes` more.
struct reclaim_ask {
  std::uint32_t slot = 0;
  std::uint64_t bytes = 0;
  friend bool operator==(const reclaim_ask&, const reclaim_ask&) = default;
};

/// Bytes slot `s` holds above its guarantee: what giving back can lower its commitment by.
inline std::uint64_t above_guarantee(const slot_record& s) noexcept {
  return sat_sub(sat_add(s.memory.reserved, s.memory.external), s.settings.memory_guarantee);
}

/// Bytes slot `s` can still be asked for: its reclaimable bytes (never more than it reserves),
/// no more than it holds above its guarantee, less what it is asked for already.
inline std::uint64_t givable(const slot_record& s) noexcept {
  const std::uint64_t can =
      std::min({s.reclaim.reclaimable, s.memory.reserved, above_guarantee(s)});
  return sat_sub(can, s.reclaim.asked.load(std::memory_order_relaxed));
}

/// The choice rule, a pure function: asks covering `need` bytes from `c` (reordered: lowest
/// priority class first, then the most above its guarantee, then the lowest slot), each for at
/// most its givable bytes. Covers less than `need` when the candidates cannot give more.
inline std::vector<reclaim_ask> choose_reclaim(std::span<reclaim_candidate> c, std::uint64_t need) {
  std::sort(c.begin(), c.end(), [](const reclaim_candidate& a, const reclaim_candidate& b) {
    if (a.priority != b.priority) return a.priority < b.priority;
    if (a.above_guarantee != b.above_guarantee) return a.above_guarantee > b.above_guarantee;
    return a.slot < b.slot;
  });
  std::vector<reclaim_ask> asks;
  for (const reclaim_candidate& k : c) {
    if (need == 0) break;
    const std::uint64_t b = std::min(k.givable, need);
    if (b == 0) continue;
    asks.push_back({k.slot, b});
    need -= b;
  }
  return asks;
}

/// What waiter `w` lacks to grow by `bytes`, and whether its group's limit is what binds.
struct reclaim_need {
  std::uint64_t shortfall = 0; ///< bytes of commitments that must go before it fits
  bool group_binds = false;    ///< only members of its group can help
};

inline reclaim_need shortfall_of(const table_view& t, std::uint32_t w, std::uint64_t bytes) {
  const table_header& h = *t.header;
  const slot_record& s = t.slots[w];
  const std::uint64_t after = commitment(s, sat_add(s.memory.reserved, bytes), s.memory.external,
                                         s.settings.memory_guarantee);
  const std::uint64_t table_total = sat_add(sat_sub(h.committed_total, commitment(s)), after);
  reclaim_need n{sat_sub(table_total, h.capacity), false};
  if (has_group(s)) {
    const std::uint64_t group_total = sat_add(group_committed(t, group_name(s), w), after);
    const std::uint64_t over = sat_sub(group_total, s.group.memory_limit);
    if (over > 0) n = {std::max(over, n.shortfall), true};
  }
  return n;
}

/// May waiter `w` ask slot `j` at all (ignoring what it holds)?
inline bool may_ask(const table_view& t, std::uint32_t w, std::uint32_t j, bool group_binds) {
  const slot_record& s = t.slots[j];
  if (j == w || s.state.load(std::memory_order_relaxed) != slot_active) return false;
  const slot_record& ws = t.slots[w];
  if (s.settings.priority >= ws.settings.priority) return false; // strictly lower classes only
  return !group_binds || member_of(s, group_name(ws));
}

/// Clears the request to slot `s` (answered, skipped or withdrawn).
inline void clear_request(slot_record& s) noexcept {
  s.reclaim.asked.store(0, std::memory_order_relaxed);
  s.reclaim.asked_ns = 0;
  s.reclaim.deadline_ns = 0;
  s.loan.call = 0;
}

/// Skips every request whose deadline has passed by `now`; a loan call's unanswered bytes are
/// written off instead (its borrower is not skipped: loans must come back). Returns the earliest
/// deadline still ahead (UINT64_MAX: none), when a waiter must look again, or `now` when a
/// write-off made room.
inline std::uint64_t expire_reclaim(const table_view& t, std::uint64_t now) noexcept {
  std::uint64_t next = UINT64_MAX;
  for (std::uint32_t j = 0; j < t.slot_count; ++j) {
    slot_record& s = t.slots[j];
    if (s.state.load(std::memory_order_relaxed) != slot_active ||
        s.reclaim.asked.load(std::memory_order_relaxed) == 0)
      continue;
    if (s.reclaim.deadline_ns > now) {
      next = std::min(next, s.reclaim.deadline_ns);
      continue;
    }
    ++s.reclaim.skipped;
    ++t.header->reclaim_skipped;
    if (s.loan.call != 0) {
      write_off_loan(*t.header, s, s.reclaim.asked.load(std::memory_order_relaxed));
      next = now;
    } else {
      s.reclaim.skip_until_ns = sat_add(now, reclaim_skip_ns);
    }
    clear_request(s);
  }
  return next;
}

/// Withdraws every request still out (nobody waits for memory any more).
inline void withdraw_reclaim(const table_view& t) noexcept {
  for (std::uint32_t j = 0; j < t.slot_count; ++j) {
    slot_record& s = t.slots[j];
    if (s.state.load(std::memory_order_relaxed) != slot_active ||
        s.reclaim.asked.load(std::memory_order_relaxed) == 0)
      continue;
    clear_request(s);
    ++t.header->reclaim_withdrawn;
  }
}

/// A memory waiter of slot `s` stopped waiting: what it lacked is no longer shown once none of
/// its threads waits, and no request stands once nobody in the table waits.
inline void memory_waiter_gone(const table_view& t, slot_record& s) noexcept {
  if (s.memory.waiting == 0) s.reclaim.wanted = 0;
  if (t.header->memory_waiters == 0) withdraw_reclaim(t);
}

/// What a waiting reserve did about reclaim in one look.
struct reclaim_look {
  std::uint32_t sent = 0;             ///< new requests
  bool outstanding = false;           ///< requests that may help it are out (new or earlier)
  std::uint64_t next_ns = UINT64_MAX; ///< the earliest deadline ahead: look again by then
};

/// Asks slot `j` for `bytes` more on behalf of waiter `w` (a new request's deadline is `now +
/// deadline_ns`), recording it in `look` and `asked`.
inline void send_request(const table_view& t, std::uint32_t w, std::uint32_t j, std::uint64_t bytes,
                         std::uint64_t now, std::uint64_t deadline_ns, reclaim_look& look,
                         std::vector<std::uint32_t>& asked) {
  slot_record& s = t.slots[j];
  if (s.reclaim.asked.load(std::memory_order_relaxed) == 0) {
    s.reclaim.asked_ns = now;
    s.reclaim.deadline_ns = sat_add(now, deadline_ns);
  }
  s.reclaim.asked.store(sat_add(s.reclaim.asked.load(std::memory_order_relaxed), bytes),
                        std::memory_order_relaxed);
  s.reclaim.asked_by = w + 1;
  s.reclaim.seq.fetch_add(1, std::memory_order_release);
  ++s.reclaim.requests;
  ++t.header->reclaim_requests;
  asked.push_back(j);
  look.next_ns = std::min(look.next_ns, s.reclaim.deadline_ns);
  ++look.sent;
  look.outstanding = true;
}

/// May slot `i` be granted `bytes` on loan out of idle guarantees, its growth not fitting
/// otherwise (check_grow() said not_now, so it is within its own limit)? Only outside a group,
/// while no other session's reserve waits (a loan never takes what a waiter waits for, and none
/// is made while loans are being called back), and while what every session holds stays within
/// the capacity. (The borrower's own side adds that it answers
/// requests at once: a watcher thread and a handler.)
inline bool may_borrow(const table_view& t, std::uint32_t i, std::uint64_t bytes) noexcept {
  const table_header& h = *t.header;
  const slot_record& s = t.slots[i];
  return !has_group(s) && h.memory_waiters <= s.memory.waiting &&
         sat_add(h.held_total, bytes) <= h.capacity; // its own limit: check_grow said not_now
}

/// Waiter `w` cannot grow by `bytes` because loans hold what it needs: it calls back what the
/// loan calls out do not cover, from any class, the largest borrower first. What they must cover
/// is what every reserve that waits for loans needs, not only this one's: each waiter once
/// counted the calls made for the others as covering its own need, and guaranteed reserves that
/// came together were served one deadline after another (issue 40, B5).
inline void call_loans(const table_view& t, std::uint32_t w, std::uint64_t bytes, std::uint64_t now,
                       std::uint64_t deadline_ns, reclaim_look& look,
                       std::vector<std::uint32_t>& asked) {
  const table_header& h = *t.header;
  // Loans stand in its way only when its commitment fits (a loan is no commitment: calling one
  // back frees held room, never commitment). Then the others' calls count it too. A waiter
  // whose commitment does not fit calls nothing back: its ordinary requests come first (before,
  // it called loans that could not help it, renewed at each deadline, and each call held every
  // class, guaranteed reserves included; found by unit-loans' simulation).
  const bool commitment_fits = shortfall_of(t, w, bytes).shortfall == 0;
  t.slots[w].loan.waiting_bytes = commitment_fits ? bytes : 0;
  if (h.lent_total == 0 || !commitment_fits) return;
  std::uint64_t others = 0;
  for (std::uint32_t j = 0; j < t.slot_count; ++j) {
    const slot_record& s = t.slots[j];
    if (j != w && s.state.load(std::memory_order_relaxed) == slot_active && s.memory.waiting > 0)
      others = sat_add(others, s.loan.waiting_bytes);
  }
  if (sat_add(h.held_total, bytes) <= h.capacity) return; // this one's growth is not blocked
  const std::uint64_t over = sat_sub(sat_add(sat_add(h.held_total, bytes), others), h.capacity);
  std::uint64_t covered = 0;
  std::vector<reclaim_candidate> c;
  for (std::uint32_t j = 0; j < t.slot_count; ++j) {
    const slot_record& s = t.slots[j];
    if (j == w || s.state.load(std::memory_order_relaxed) != slot_active) continue;
    const std::uint64_t out = s.reclaim.asked.load(std::memory_order_relaxed);
    if (s.loan.call != 0) covered = sat_add(covered, out);
    const std::uint64_t can = sat_sub(std::min(s.loan.borrowed, s.reclaim.reclaimable), out);
    if (can > 0) c.push_back({j, 0, s.loan.borrowed, can});
  }
  if (covered > 0) look.outstanding = true;
  for (const reclaim_ask& a : choose_reclaim(c, sat_sub(over, covered))) {
    slot_record& s = t.slots[a.slot];
    send_request(t, w, a.slot, a.bytes, now, deadline_ns, look, asked);
    if (s.loan.call == 0) s.loan.call_seq = s.reclaim.seq.load(std::memory_order_relaxed);
    s.loan.call = 1;
    ++t.header->loan_calls;
  }
}

/// Waiter `w`, which cannot grow by `bytes` now, asks for what the requests out do not cover
/// (docs/design.md section 15); each new request's deadline is `now + deadline_ns`. Records
/// what it lacks in its slot (reclaim.wanted). Wakes nobody: the caller bumps the asked slots'
/// seq words, which it returns in `asked` (their owners' watchers sleep on them).
inline reclaim_look ask_for_reclaim(const table_view& t, std::uint32_t w, std::uint64_t bytes,
                                    std::uint64_t now, std::uint64_t deadline_ns,
                                    std::vector<std::uint32_t>& asked) {
  reclaim_look look;
  look.next_ns = expire_reclaim(t, now);
  const reclaim_need n = shortfall_of(t, w, bytes);
  t.slots[w].reclaim.wanted = n.shortfall;
  std::uint64_t covered = 0;
  std::vector<reclaim_candidate> c;
  for (std::uint32_t j = 0; j < t.slot_count; ++j) {
    if (!may_ask(t, w, j, n.group_binds)) continue;
    const slot_record& s = t.slots[j];
    covered = sat_add(covered, s.reclaim.asked.load(std::memory_order_relaxed));
    if (s.reclaim.skip_until_ns > now) continue;
    if (const std::uint64_t g = givable(s); g > 0)
      c.push_back({j, s.settings.priority, above_guarantee(s), g});
  }
  look.outstanding = covered > 0;
  for (const reclaim_ask& a : choose_reclaim(c, sat_sub(n.shortfall, covered)))
    send_request(t, w, a.slot, a.bytes, now, deadline_ns, look, asked);
  call_loans(t, w, bytes, now, deadline_ns, look, asked);
  return look;
}

/// Whether a growth of slot `i` must wait because memory is being given back for another
/// session's waiting reserve of `i`'s class or above: a request that session asked is out. The
/// bytes an answer gives back are for that waiter; without this rule a lower class (or the giver
/// itself, growing its cache back) could take them first, and the waiter would ask again. The
/// hold lasts while requests are out: at most their deadline. A loan call holds every class: the
/// bytes a borrower gives back (or that its deadline writes off) are the caller's, whatever the
/// classes, which is what bounds the caller's wait by one deadline. A growth of `bytes` within
/// slot `i`'s guarantee (its commitment stays) takes no room an ordinary request frees: the
/// guarantee is committed already. Only a loan call holds it (the room it takes is held room).
/// Nor does a loan call hold a reserve that waits for loans itself: every call counts it. Before
/// (issue 40), a higher class's requests, renewed for as long as its reserve waited, held a
/// guaranteed reserve past its deadline, and so did a loan call made after its first look
/// (found by unit-loans' simulation).
inline bool held_for_reclaim(const table_view& t, std::uint32_t i, std::uint64_t bytes) noexcept {
  const slot_record& me = t.slots[i];
  const int mine = me.settings.priority;
  const bool within_guarantee =
      commitment(me, sat_add(me.memory.reserved, bytes), me.memory.external,
                 me.settings.memory_guarantee) <= commitment(me);
  // A reserve that waits for loans is counted in every loan call (call_loans): what the calls
  // free is its as much as the caller's.
  const bool counted_in_calls = me.memory.waiting > 0 && me.loan.waiting_bytes >= bytes;
  for (std::uint32_t j = 0; j < t.slot_count; ++j) {
    const slot_record& s = t.slots[j];
    if (s.state.load(std::memory_order_relaxed) != slot_active ||
        s.reclaim.asked.load(std::memory_order_relaxed) == 0)
      continue;
    const std::uint32_t by = s.reclaim.asked_by;
    if (by == 0 || by > t.slot_count || by - 1 == i) continue;
    const slot_record& asker = t.slots[by - 1];
    if (asker.state.load(std::memory_order_relaxed) == slot_active && asker.memory.waiting > 0 &&
        ((asker.settings.priority >= mine && !within_guarantee) ||
         (s.loan.call != 0 && !counted_in_calls)))
      return true;
  }
  return false;
}

/// What one look of a reserve decides (session_core::grow_loop): the verdict, and, when granted,
/// the kind its bytes are booked as and how many are on loan.
struct grow_decision {
  budget_verdict verdict;
  memory_kind kind;
  std::uint64_t on_loan = 0;
  bool queued = false; ///< it fitted, but a waiting reserve ahead would not have after it
};

/// Slot `i` asks to grow by `bytes` of `kind`; `may_borrow_now`: the growth is reclaimable and
/// its session answers requests at once (a watcher); `ticket`: its place if it waits already
/// (0: it does not). Granted if it fits, nothing given back is held for another's waiting reserve
/// (held_for_reclaim) and no waiting reserve ahead of it would not fit after it (queued_behind);
/// else, when may_borrow() allows, on loan out of idle guarantees, only the part that does not
/// fit counted as borrowed (loan_part).
inline grow_decision decide_grow(const table_view& t, std::uint32_t i, std::uint64_t bytes,
                                 memory_kind kind, bool may_borrow_now, std::uint64_t ticket = 0,
                                 std::uint64_t now = 0) noexcept {
  grow_decision d{check_grow_in(t, i, bytes), kind};
  if (d.verdict == budget_verdict::granted && held_for_reclaim(t, i, bytes))
    d.verdict = budget_verdict::not_now; // what is given back is for a higher class's reserve
  if (d.verdict == budget_verdict::granted && queued_behind(t, i, bytes, ticket, now)) {
    d.verdict = budget_verdict::not_now; // a reserve ahead of it waits for that room
    d.queued = true;
  }
  if (d.verdict == budget_verdict::not_now && may_borrow_now && may_borrow(t, i, bytes)) {
    d.verdict = budget_verdict::granted; // on loan out of idle guarantees
    d.kind = memory_kind::loan;
    d.on_loan = loan_part(*t.header, t.slots[i], bytes);
  }
  return d;
}

/// A waiting reserve that had requests out for it was granted `waited_ns` after its first.
inline void note_reclaim_grant(table_header& h, std::uint64_t waited_ns) noexcept {
  ++h.reclaim_grants;
  h.reclaim_grant_ns = sat_add(h.reclaim_grant_ns, waited_ns);
  h.reclaim_grant_max_ns = std::max(h.reclaim_grant_max_ns, waited_ns);
}

/// Slot `s` answered at `now` the request it saw at `seq`, saying it gave back `given` bytes: the
/// request is cleared (or, if a newer one came meanwhile, lowered by what was given). One that
/// gave something may be asked again at once; one that gave nothing is not asked again for
/// reclaim_skip_ns (asking again at once would only run its handler again for nothing).
inline void answer_reclaim(table_header& h, slot_record& s, std::uint32_t seq, std::uint64_t given,
                           std::uint64_t now) noexcept {
  ++s.reclaim.answered;
  ++h.reclaim_answered;
  s.reclaim.given = sat_add(s.reclaim.given, given);
  h.reclaim_given = sat_add(h.reclaim_given, given);
  const std::uint64_t left = sat_sub(s.reclaim.asked.load(std::memory_order_relaxed), given);
  if (s.loan.call != 0) { // a loan call stands until it is met or its deadline writes it off
    // An answer to a request older than this call (a call its deadline wrote off, then a new
    // one) gave back what was already written off: it lowers nothing (issue 40, B6).
    if (static_cast<std::int32_t>(seq - s.loan.call_seq) < 0) return;
    if (left == 0)
      clear_request(s);
    else
      s.reclaim.asked.store(left, std::memory_order_relaxed);
    return;
  }
  s.reclaim.skip_until_ns = given == 0 ? sat_add(now, reclaim_skip_ns) : 0;
  if (s.reclaim.seq.load(std::memory_order_relaxed) == seq || left == 0)
    clear_request(s);
  else
    s.reclaim.asked.store(left, std::memory_order_relaxed);
}

} // namespace detail
} // namespace v0
} // namespace gpushare
