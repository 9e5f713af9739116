// SPDX-License-Identifier: Apache-2.0
// Idle guarantees lent as reclaimable memory (detail/budget.hpp, detail/reclaim.hpp; docs/
// design.md section 15) as pure functions of the table state: when a loan is made, how it is
// called back, what a missed call writes off, and a seeded random simulation that checks the
// promises at every step (the budget invariant, what sessions hold never above the capacity, and
// a guaranteed growth served by its deadline).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include <gpushare/detail/group.hpp>
#include <gpushare/detail/journal.hpp>
#include <gpushare/detail/memory_queue.hpp>
#include <gpushare/detail/reclaim.hpp>
#include <gpushare/detail/slot.hpp>

namespace d = gpushare::detail;

namespace {
constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t s_ns = 1'000'000'000;

struct loan_table {
  explicit loan_table(std::uint64_t capacity, std::uint32_t n = 4)
      : header(std::make_unique<d::table_header>()), slots(n) {
    header->capacity = capacity;
  }
  d::slot_record& join(std::uint32_t i, std::uint64_t guarantee = 0, int priority = 0) {
    d::slot_settings st{};
    st.priority = priority;
    st.share = 1;
    st.memory_limit = UINT64_MAX;
    st.memory_guarantee = guarantee;
    st.quantum_ns = 5'000'000;
    d::join_slot(view(), i, {}, st, {});
    return slots[i];
  }
  d::table_view view() {
    return {header.get(), slots.data(), static_cast<std::uint32_t>(slots.size())};
  }
  /// What grow_loop() decides for slot `i` growing by `bytes` (`prompt`: it has a watcher):
  /// granted as its own, granted on loan, or not now (decide_grow, applied as grow_loop does).
  d::budget_verdict grow(std::uint32_t i, std::uint64_t bytes, d::memory_kind kind,
                         bool prompt = true, std::uint64_t ticket = 0, std::uint64_t now = 0) {
    const d::grow_decision g = d::decide_grow(
        view(), i, bytes, kind, prompt && kind == d::memory_kind::reclaimable, ticket, now);
    if (g.verdict == d::budget_verdict::granted)
      d::apply_grow(*header, slots[i], bytes, g.kind, g.on_loan);
    return g.verdict;
  }
  d::reclaim_look ask(std::uint32_t w, std::uint64_t bytes, std::uint64_t now,
                      std::uint64_t deadline = 2 * s_ns) {
    std::vector<std::uint32_t> asked;
    return d::ask_for_reclaim(view(), w, bytes, now, deadline, asked);
  }
  std::uint64_t asked(std::uint32_t i) const {
    return slots[i].reclaim.asked.load(std::memory_order_relaxed);
  }
  /// Totals rebuilt from the slots equal the ones kept step by step.
  void check_totals() {
    const std::uint64_t kept[] = {header->committed_total, header->held_total, header->lent_total,
                                  header->reserved_total};
    d::recompute_totals(view());
    CHECK(kept[0] == header->committed_total);
    CHECK(kept[1] == header->held_total);
    CHECK(kept[2] == header->lent_total);
    CHECK(kept[3] == header->reserved_total);
  }
  std::unique_ptr<d::table_header> header;
  std::vector<d::slot_record> slots;
};
} // namespace

TEST_CASE("loans: a reclaimable growth that does not fit borrows an idle guarantee") {
  loan_table t(1000 * MiB);
  t.join(0, 600 * MiB); // the lender: 600 MiB guaranteed, nothing held
  d::slot_record& b = t.join(1);
  REQUIRE(t.grow(1, 400 * MiB, d::memory_kind::fixed) == d::budget_verdict::granted);
  CHECK(t.header->committed_total == 1000 * MiB); // full: 600 guaranteed, 400 held
  // Fixed memory, or a session that does not answer at once, waits as before.
  CHECK(t.grow(1, 300 * MiB, d::memory_kind::fixed) == d::budget_verdict::not_now);
  CHECK(t.grow(1, 300 * MiB, d::memory_kind::reclaimable, false) == d::budget_verdict::not_now);
  // Reclaimable memory of a session with a watcher is lent out of the idle guarantee.
  CHECK(t.grow(1, 300 * MiB, d::memory_kind::reclaimable) == d::budget_verdict::granted);
  CHECK(b.memory.reserved == 700 * MiB);
  CHECK(b.loan.borrowed == 300 * MiB);
  CHECK(b.reclaim.reclaimable == 300 * MiB);
  CHECK(t.header->committed_total == 1000 * MiB); // a loan is not a commitment
  CHECK(t.header->held_total == 700 * MiB);
  CHECK(t.header->lent_total == 300 * MiB);
  CHECK(t.header->loans == 1);
  // Never past the capacity in what sessions hold: 700 MiB + 301 MiB is 1 MiB too much.
  CHECK(t.grow(1, 301 * MiB, d::memory_kind::reclaimable) == d::budget_verdict::not_now);
  t.check_totals();
}

TEST_CASE("loans: none while another session waits for memory, and none inside a group") {
  loan_table t(1000 * MiB);
  t.join(0, 600 * MiB);
  t.join(1);
  d::slot_record& c = t.join(2);
  REQUIRE(t.grow(1, 400 * MiB, d::memory_kind::fixed) == d::budget_verdict::granted);
  d::add_memory_waiter(*t.header, c);
  CHECK(t.grow(1, 100 * MiB, d::memory_kind::reclaimable) == d::budget_verdict::not_now);
  d::memory_wait_ended(*t.header, c, 1);
  d::slot_record& b = t.slots[1];
  b.group.memory_limit = UINT64_MAX;
  std::copy_n("team", 5, b.group.name);
  CHECK(t.grow(1, 100 * MiB, d::memory_kind::reclaimable) == d::budget_verdict::not_now);
  b.group.name[0] = '\0';
  CHECK(t.grow(1, 100 * MiB, d::memory_kind::reclaimable) == d::budget_verdict::granted);
}

TEST_CASE("loans: the guaranteed session's growth calls the loan back, from any class") {
  loan_table t(1000 * MiB);
  d::slot_record& a = t.join(0, 600 * MiB, -5); // the lender, of a lower class than the borrower
  d::slot_record& b = t.join(1, 0, 5);
  REQUIRE(t.grow(1, 400 * MiB, d::memory_kind::fixed) == d::budget_verdict::granted);
  REQUIRE(t.grow(1, 500 * MiB, d::memory_kind::reclaimable) == d::budget_verdict::granted);
  // 450 MiB within its guarantee: 350 MiB more than the capacity leaves beside what is held.
  CHECK(d::check_grow_in(t.view(), 0, 450 * MiB) == d::budget_verdict::not_now);
  d::add_memory_waiter(*t.header, a);
  const d::reclaim_look look = t.ask(0, 450 * MiB, 0);
  CHECK(look.sent == 1);
  CHECK(look.outstanding);
  CHECK(t.asked(1) == 350 * MiB);
  CHECK(b.loan.call == 1);
  CHECK(t.header->loan_calls == 1);
  // Asking again adds nothing: the call out covers it.
  CHECK(t.ask(0, 450 * MiB, 1).sent == 0);
  // A partial answer keeps the call standing (a loan must come back) and does not skip it.
  d::apply_shrink(*t.header, b, 100 * MiB, d::memory_kind::reclaimable);
  d::answer_reclaim(*t.header, b, b.reclaim.seq.load(), 100 * MiB, 2);
  CHECK(t.asked(1) == 250 * MiB);
  CHECK(b.reclaim.skip_until_ns == 0);
  d::apply_shrink(*t.header, b, 250 * MiB, d::memory_kind::reclaimable);
  d::answer_reclaim(*t.header, b, b.reclaim.seq.load(), 250 * MiB, 3);
  CHECK(t.asked(1) == 0);
  CHECK(b.loan.call == 0);
  CHECK(d::check_grow_in(t.view(), 0, 450 * MiB) == d::budget_verdict::granted);
  t.check_totals();
}

TEST_CASE("loans: while a loan is called back, no session of any class grows into the room") {
  loan_table t(1000 * MiB);
  d::slot_record& a = t.join(0, 600 * MiB, 0);
  d::slot_record& b = t.join(1, 0, 0);
  t.join(2, 0, 9); // a higher class than the caller's
  REQUIRE(t.grow(1, 400 * MiB, d::memory_kind::fixed) == d::budget_verdict::granted);
  REQUIRE(t.grow(1, 500 * MiB, d::memory_kind::reclaimable) == d::budget_verdict::granted);
  d::apply_shrink(*t.header, b, 300 * MiB); // committed 700 MiB, held 600 MiB
  d::add_memory_waiter(*t.header, a);
  (void)t.ask(0, 600 * MiB, 0); // 200 MiB of the loan called back
  REQUIRE(t.asked(1) == 200 * MiB);
  // It would fit both bounds, but it would take what the call frees for the caller.
  CHECK(d::check_grow_in(t.view(), 2, 300 * MiB) == d::budget_verdict::granted);
  CHECK(t.grow(2, 300 * MiB, d::memory_kind::fixed) == d::budget_verdict::not_now);
  (void)d::expire_reclaim(t.view(), 2 * s_ns); // written off at the deadline
  CHECK(d::check_grow_in(t.view(), 0, 600 * MiB) == d::budget_verdict::granted);
}

TEST_CASE("loans: a loan call missed by its deadline is written off, and the borrower's own "
          "releases absorb it") {
  loan_table t(1000 * MiB);
  d::slot_record& a = t.join(0, 600 * MiB);
  d::slot_record& b = t.join(1);
  REQUIRE(t.grow(1, 400 * MiB, d::memory_kind::fixed) == d::budget_verdict::granted);
  REQUIRE(t.grow(1, 500 * MiB, d::memory_kind::reclaimable) == d::budget_verdict::granted);
  d::add_memory_waiter(*t.header, a);
  const d::reclaim_look look = t.ask(0, 600 * MiB, 0, 2 * s_ns);
  CHECK(t.asked(1) == 500 * MiB);
  CHECK(look.next_ns == 2 * s_ns);
  // Before the deadline nothing changes; at it, the loan's asked bytes leave the borrower.
  CHECK(d::expire_reclaim(t.view(), 2 * s_ns - 1) == 2 * s_ns);
  CHECK(d::expire_reclaim(t.view(), 2 * s_ns) == 2 * s_ns); // made room: look again now
  CHECK(b.memory.reserved == 400 * MiB);
  CHECK(b.loan.borrowed == 0);
  CHECK(b.loan.written_off == 500 * MiB);
  CHECK(b.loan.write_offs == 1);
  CHECK(b.reclaim.skip_until_ns == 0);
  CHECK(t.header->loan_write_offs == 1);
  CHECK(t.header->loan_written_off == 500 * MiB);
  CHECK(d::check_grow_in(t.view(), 0, 600 * MiB) == d::budget_verdict::granted);
  d::apply_grow(*t.header, a, 600 * MiB);
  t.check_totals();
  // The borrower, resumed, releases its loaned reservation: the table took it already.
  d::apply_shrink(*t.header, b, 500 * MiB, d::memory_kind::reclaimable);
  CHECK(b.memory.reserved == 400 * MiB);
  CHECK(b.loan.written_off == 0);
  d::apply_shrink(*t.header, b, 400 * MiB);
  CHECK(b.memory.reserved == 0);
  t.check_totals();
}

TEST_CASE("loans: memory on loan becomes fixed only where the table has room for it") {
  loan_table t(1000 * MiB);
  t.join(0, 600 * MiB);
  d::slot_record& b = t.join(1);
  REQUIRE(t.grow(1, 400 * MiB, d::memory_kind::fixed) == d::budget_verdict::granted);
  REQUIRE(t.grow(1, 200 * MiB, d::memory_kind::reclaimable) == d::budget_verdict::granted);
  CHECK_FALSE(d::mark_memory(*t.header, b, 200 * MiB, d::memory_kind::fixed));
  CHECK(b.loan.borrowed == 200 * MiB); // refused: nothing changed
  t.check_totals();
  d::set_usage(*t.header, t.slots[0], 0, 0, 300 * MiB); // the lender lowers its guarantee
  CHECK(d::mark_memory(*t.header, b, 200 * MiB, d::memory_kind::fixed));
  CHECK(b.loan.borrowed == 0);
  CHECK(t.header->committed_total == 900 * MiB);
  t.check_totals();
}

TEST_CASE("loans: a shrink journaled without the lock returns loans and absorbs write-offs") {
  loan_table t(1000 * MiB);
  t.join(0, 600 * MiB);
  d::slot_record& b = t.join(1);
  REQUIRE(t.grow(1, 400 * MiB, d::memory_kind::fixed) == d::budget_verdict::granted);
  REQUIRE(t.grow(1, 300 * MiB, d::memory_kind::reclaimable) == d::budget_verdict::granted);
  d::journal_shrink(*t.header, b, 300 * MiB, d::memory_kind::reclaimable);
  d::fold_journals(t.view(), 0, [](std::int64_t) {});
  CHECK(b.memory.reserved == 400 * MiB);
  CHECK(b.loan.borrowed == 0);
  CHECK(b.reclaim.reclaimable == 0);
  t.check_totals();
}

TEST_CASE("loans: a growth that only partly needs a loan borrows only that part") {
  loan_table t(1000 * MiB);
  t.join(0, 600 * MiB); // the lender
  d::slot_record& b = t.join(1);
  t.join(2); // b's class, no guarantee
  REQUIRE(t.grow(1, 300 * MiB, d::memory_kind::fixed) == d::budget_verdict::granted);
  // 100 MiB of the capacity is nobody's: 100 MiB of the 250 are b's own, 150 on loan.
  REQUIRE(t.grow(1, 250 * MiB, d::memory_kind::reclaimable) == d::budget_verdict::granted);
  CHECK(b.loan.borrowed == 150 * MiB); // before: 250 MiB, the whole growth
  CHECK(t.header->committed_total == 1000 * MiB);
  CHECK(t.header->lent_total == 150 * MiB);
  t.check_totals();
  // So the room is gone for the others (before: 100 MiB committed to nobody, which c took) ...
  CHECK(t.grow(2, 100 * MiB, d::memory_kind::fixed) == d::budget_verdict::not_now);
  // ... and the lender's call writes off what was lent, no more.
  d::add_memory_waiter(*t.header, t.slots[0]);
  (void)t.ask(0, 600 * MiB, 0, 2 * s_ns);
  CHECK(t.asked(1) == 150 * MiB); // before: 250 MiB, after c's growth
  (void)d::expire_reclaim(t.view(), 2 * s_ns);
  CHECK(b.loan.written_off == 150 * MiB);
  CHECK(b.memory.reserved == 400 * MiB);
  CHECK(d::check_grow_in(t.view(), 0, 600 * MiB) == d::budget_verdict::granted);
  t.check_totals();
}

TEST_CASE("loans: guaranteed reserves that wait together are all served at one deadline") {
  loan_table t(1000 * MiB);
  for (std::uint32_t i = 0; i < 3; ++i) t.join(i, 200 * MiB); // three guarantees, idle
  d::slot_record& lender_of_all = t.join(3);
  REQUIRE(t.grow(3, 400 * MiB, d::memory_kind::fixed) == d::budget_verdict::granted);
  REQUIRE(t.grow(3, 600 * MiB, d::memory_kind::reclaimable) == d::budget_verdict::granted);
  REQUIRE(lender_of_all.loan.borrowed == 600 * MiB);
  for (std::uint32_t i = 0; i < 3; ++i) {
    d::add_memory_waiter(*t.header, t.slots[i]);
    (void)t.ask(i, 200 * MiB, i, 2 * s_ns); // one after another, at once
  }
  CHECK(t.asked(3) == 600 * MiB); // before: 200 MiB: each counted the others' calls as its own
  (void)d::expire_reclaim(t.view(), 2 * s_ns); // the borrower never answers
  for (std::uint32_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(t.grow(i, 200 * MiB, d::memory_kind::fixed) == d::budget_verdict::granted);
    d::memory_wait_ended(*t.header, t.slots[i], 2 * s_ns);
  }
  t.check_totals();
}

TEST_CASE("loans: a late answer to a call written off does not lower the next call") {
  loan_table t(1000 * MiB);
  d::slot_record& a = t.join(0, 600 * MiB);
  d::slot_record& b = t.join(1);
  REQUIRE(t.grow(1, 400 * MiB, d::memory_kind::fixed) == d::budget_verdict::granted);
  REQUIRE(t.grow(1, 500 * MiB, d::memory_kind::reclaimable) == d::budget_verdict::granted);
  d::add_memory_waiter(*t.header, a);
  (void)t.ask(0, 300 * MiB, 0, 2 * s_ns);
  REQUIRE(t.asked(1) == 200 * MiB);
  const auto seen = static_cast<std::uint32_t>(b.reclaim.seq.load()); // b's watcher sees it, stops
  (void)d::expire_reclaim(t.view(), 2 * s_ns);                        // written off
  REQUIRE(t.grow(0, 300 * MiB, d::memory_kind::fixed) == d::budget_verdict::granted);
  d::memory_wait_ended(*t.header, a, 2 * s_ns);
  // a grows again, within its guarantee: a new call, for 300 MiB.
  d::add_memory_waiter(*t.header, a);
  (void)t.ask(0, 300 * MiB, 3 * s_ns, 2 * s_ns);
  REQUIRE(t.asked(1) == 300 * MiB);
  // b resumes and answers the first call: it releases the 200 MiB the table wrote off.
  d::apply_shrink(*t.header, b, 200 * MiB, d::memory_kind::reclaimable);
  d::answer_reclaim(*t.header, b, seen, 200 * MiB, 3 * s_ns);
  CHECK(t.asked(1) == 300 * MiB); // before: 100 MiB, and a asked again after it
  CHECK(b.loan.call == 1);
  t.check_totals();
}

namespace {

/// A reservation as its session sees it.
struct held_block {
  std::uint64_t bytes;
  d::memory_kind kind;
};

/// The seeded simulation's state: the table, and each session's own view of its reservations.
struct loan_sim {
  loan_sim(std::uint32_t seed, std::uint32_t n) : rng(seed), t(1000 * MiB, n), blocks(n) {}
  std::uint64_t pick(std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  }
  /// Session `i`'s handler: releases reclaimable reservations, newest first, until `asked` is
  /// covered; returns what it gave.
  std::uint64_t give_back(std::uint32_t i, std::uint64_t asked) {
    std::uint64_t given = 0;
    auto& v = blocks[i];
    for (auto it = v.end(); it != v.begin() && given < asked;) {
      --it;
      if (it->kind != d::memory_kind::reclaimable) continue;
      d::apply_shrink(*t.header, t.slots[i], it->bytes, it->kind);
      given += it->bytes;
      it = v.erase(it);
    }
    return given;
  }
  /// The properties that hold after every step.
  void check() {
    const d::table_header& h = *t.header;
    CHECK(h.committed_total <= h.capacity);
    CHECK(h.held_total <= h.capacity);
    for (std::uint32_t i = 0; i < t.slots.size(); ++i) {
      const d::slot_record& s = t.slots[i];
      CHECK(s.loan.borrowed <= s.reclaim.reclaimable);
      CHECK(s.reclaim.reclaimable <= s.memory.reserved);
      std::uint64_t mine = 0;
      for (const held_block& b : blocks[i]) mine += b.bytes;
      CHECK(mine - s.loan.written_off == s.memory.reserved); // the session and the table agree
    }
    t.check_totals();
  }
  std::mt19937_64 rng;
  loan_table t;
  std::vector<std::vector<held_block>> blocks;
};

/// A waiting reserve of the simulation (at most one per session), with its place in the queue.
struct pending {
  std::uint32_t slot;
  std::uint64_t bytes, start, first_look;
  bool within_guarantee;
  std::uint64_t ticket = 0;
};

/// Slot `i`'s reserve of `bytes` begins to wait at `now`, as grow_loop() registers it.
pending begin_wait(loan_sim& m, std::uint32_t i, std::uint64_t bytes, std::uint64_t now,
                   bool within) {
  d::add_memory_waiter(*m.t.header, m.t.slots[i]);
  const std::uint64_t ticket = d::take_queue_ticket(*m.t.header);
  d::queue_look(m.t.slots[i], ticket, bytes, now);
  return pending{i, bytes, now, 0, within, ticket};
}

/// How a session answers requests: at once, late (stopped for a while, then it answers the
/// request it saw, with that request's seq), or never (hung).
enum class answering { prompt, late, never };

/// A late session's answer to come: the request it saw (its seq and bytes) and when it answers.
struct late_answer {
  std::uint32_t seq = 0;
  std::uint64_t bytes = 0, due = 0;
  bool set = false;
};

constexpr std::uint64_t sim_deadline = 2 * s_ns;

/// The sessions that answer: prompt ones give what they are asked now; late ones note the
/// request they see, and answer it (maybe after its deadline wrote it off) when it is due.
void answer_requests(loan_sim& m, const std::vector<answering>& how, std::vector<late_answer>& late,
                     std::uint64_t now) {
  for (std::uint32_t j = 0; j < m.t.slots.size(); ++j) {
    d::slot_record& s = m.t.slots[j];
    const auto seq = static_cast<std::uint32_t>(s.reclaim.seq.load());
    if (how[j] == answering::prompt && m.t.asked(j) != 0) {
      d::answer_reclaim(*m.t.header, s, seq, m.give_back(j, m.t.asked(j)), now);
    } else if (how[j] == answering::late) {
      late_answer& l = late[j];
      if (!l.set && m.t.asked(j) != 0) {
        l = {seq, m.t.asked(j), now + m.pick(1000, 3000) * 1'000'000, true};
      } else if (l.set && now >= l.due) {
        d::answer_reclaim(*m.t.header, s, l.seq, m.give_back(j, l.bytes), now);
        l.set = false;
      }
    }
  }
}

/// Waiter `w` looks at `now`: it asks (expired calls are written off first), the sessions
/// answer, and it tries again. Returns true when it is granted. A wait within its guarantee,
/// whose calls went out at its first look (grow_loop looks at once), must be served by their
/// deadline, however many others wait with it.
bool waiter_look(loan_sim& m, pending& w, std::uint64_t now, const std::vector<answering>& how,
                 std::vector<late_answer>& late) {
  d::slot_record& ws = m.t.slots[w.slot];
  (void)m.t.ask(w.slot, w.bytes, now, sim_deadline);
  if (w.first_look == 0) w.first_look = now;
  answer_requests(m, how, late, now);
  if (m.t.grow(w.slot, w.bytes, d::memory_kind::fixed, false, w.ticket, now) ==
      d::budget_verdict::granted) {
    m.blocks[w.slot].push_back({w.bytes, d::memory_kind::fixed});
    d::queue_leave(ws, w.ticket);
    d::memory_wait_ended(*m.t.header, ws, now - w.start);
    d::memory_waiter_gone(m.t.view(), ws);
    return true;
  }
  d::queue_look(ws, w.ticket, w.bytes, now);
  if (w.within_guarantee) CHECK(now < w.first_look + sim_deadline);
  return false;
}

/// A growth granted on loan borrows only what did not fit: after it, the capacity nobody had
/// committed is gone (or, with loans out, what nobody held). Before: the whole growth was lent.
void check_loan_grant(const loan_sim& m, std::uint64_t borrowed_before, std::uint64_t held_before,
                      std::uint32_t i, std::uint64_t bytes) {
  const d::table_header& h = *m.t.header;
  const std::uint64_t lent = m.t.slots[i].loan.borrowed - borrowed_before;
  if (lent == 0) return;
  CHECK(lent <= bytes);
  const bool commitment_full = h.committed_total == h.capacity;
  const bool held_full = held_before + (bytes - lent) >= h.capacity; // (only with loans out)
  CHECK((commitment_full || held_full));
}

/// One random action of session `i`: a release, or a growth that is granted (as its own or on
/// loan), dropped, or (fixed memory, the session not waiting yet) becomes a waiter. A session
/// with a guarantee mostly releases (its guarantee stays idle, to be lent, until a burst).
void random_action(loan_sim& m, std::uint32_t i, std::uint64_t now, bool prompt,
                   std::vector<pending>& waiting) {
  const bool guaranteed = m.t.slots[i].settings.memory_guarantee != 0;
  if ((m.pick(0, 2) == 0 || (guaranteed && m.pick(0, 3) != 0)) && !m.blocks[i].empty()) {
    const std::size_t k = m.pick(0, m.blocks[i].size() - 1);
    d::apply_shrink(*m.t.header, m.t.slots[i], m.blocks[i][k].bytes, m.blocks[i][k].kind);
    m.blocks[i].erase(m.blocks[i].begin() + static_cast<std::ptrdiff_t>(k));
    return;
  }
  const d::slot_record& s = m.t.slots[i];
  if (guaranteed && m.pick(0, 3) != 0) return; // its growths come in bursts
  const std::uint64_t bytes = m.pick(1, 300) * MiB;
  // Sessions without a guarantee grow mostly caches (reclaimable): the borrowers.
  const bool cache = s.settings.memory_guarantee == 0 ? m.pick(0, 3) != 0 : m.pick(0, 1) != 0;
  const auto kind = cache ? d::memory_kind::reclaimable : d::memory_kind::fixed;
  const std::uint64_t borrowed_before = s.loan.borrowed, held_before = m.t.header->held_total;
  const bool is_waiting =
      std::any_of(waiting.begin(), waiting.end(), [&](const pending& p) { return p.slot == i; });
  if (is_waiting) return; // its thread waits
  if (m.t.grow(i, bytes, kind, prompt, 0, now) == d::budget_verdict::granted) {
    m.blocks[i].push_back({bytes, kind});
    check_loan_grant(m, borrowed_before, held_before, i, bytes);
  } else if (kind == d::memory_kind::fixed &&
             d::check_grow_in(m.t.view(), i, bytes) != d::budget_verdict::exceeds_capacity) {
    // It waits. Within its guarantee, loans are all that can stand in its way.
    const bool within =
        d::sat_add(d::sat_sub(d::held(s), s.loan.borrowed), bytes) <= s.settings.memory_guarantee;
    waiting.push_back(begin_wait(m, i, bytes, now, within));
  }
}

/// Now and then every session with room left in its guarantee reserves part of it at the same
/// moment: reserves within guarantees that wait together, while loans may hold their room.
void guaranteed_burst(loan_sim& m, std::uint64_t now, std::vector<pending>& waiting) {
  for (std::uint32_t i = 0; i < m.t.slots.size(); ++i) {
    const d::slot_record& s = m.t.slots[i];
    const std::uint64_t own = d::sat_sub(d::held(s), s.loan.borrowed);
    const std::uint64_t idle = d::sat_sub(s.settings.memory_guarantee, own) / MiB;
    const bool is_waiting =
        std::any_of(waiting.begin(), waiting.end(), [&](const pending& p) { return p.slot == i; });
    if (idle == 0 || is_waiting) continue;
    const std::uint64_t bytes = m.pick(1, idle) * MiB;
    if (m.t.grow(i, bytes, d::memory_kind::fixed, false, 0, now) == d::budget_verdict::granted)
      m.blocks[i].push_back({bytes, d::memory_kind::fixed});
    else
      waiting.push_back(begin_wait(m, i, bytes, now, true));
  }
}

} // namespace

TEST_CASE("loans: a seeded random simulation - the budget and the capacity hold, a growth on loan "
          "borrows only what did not fit, and growths within guarantees that wait together, with "
          "answers late or missing, are each served by their deadline") {
  for (std::uint32_t seed = 1; seed <= 300; ++seed) {
    CAPTURE(seed);
    const std::uint32_t n = static_cast<std::uint32_t>(3 + seed % 5);
    loan_sim m(seed, n);
    std::vector<bool> prompt(n);
    std::vector<answering> how(n);
    std::vector<late_answer> late(n);
    std::uint64_t left = 1000 * MiB;
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint64_t g = m.pick(0, 2) != 0 ? m.pick(0, left / MiB / 2) * MiB : 0;
      left -= g;
      m.t.join(i, g, static_cast<int>(m.pick(0, 2)));
      prompt[i] = m.pick(0, 3) != 0;
      how[i] = static_cast<answering>(m.pick(0, 2)); // a third late, a third hung when asked
    }
    std::uint64_t now = 0;
    std::vector<pending> waiting;
    for (int step = 0; step < 160; ++step) {
      now += m.pick(0, 400) * 1'000'000; // reserves often wait at the same time
      std::shuffle(waiting.begin(), waiting.end(), m.rng);
      for (std::size_t k = 0; k < waiting.size();) {
        if (waiter_look(m, waiting[k], now, how, late))
          waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(k));
        else
          ++k;
      }
      answer_requests(m, how, late, now);
      m.check();
      if (m.pick(0, 9) == 0) guaranteed_burst(m, now, waiting);
      for (auto actions = m.pick(1, 2); actions > 0; --actions) {
        const auto i = static_cast<std::uint32_t>(m.pick(0, n - 1));
        random_action(m, i, now, prompt[i], waiting);
        m.check();
      }
    }
  }
}
