// SPDX-License-Identifier: Apache-2.0
// Cooperative reclaim (detail/reclaim.hpp) as pure functions of the table state: the choice rule,
// requests, deadlines, answers and withdrawal, with chosen cases and a seeded random simulation
// that checks the rule's properties at every step (docs/design.md section 15).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include <gpushare/detail/group.hpp>
#include <gpushare/detail/journal.hpp>
#include <gpushare/detail/reclaim.hpp>
#include <gpushare/detail/slot.hpp>

namespace d = gpushare::detail;

namespace {
constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t s_ns = 1'000'000'000;

/// A heap-allocated table state of `n` slots (the layout is the shared one, unmapped).
struct fake_table {
  explicit fake_table(std::uint64_t capacity, std::uint32_t n = 8)
      : header(std::make_unique<d::table_header>()), slots(n) {
    header->capacity = capacity;
  }
  /// Joins slot `i` and reserves `reserved` bytes, `reclaimable` of them reclaimable.
  d::slot_record& join(std::uint32_t i, int priority, std::uint64_t reserved = 0,
                       std::uint64_t reclaimable = 0, std::uint64_t guarantee = 0) {
    d::slot_settings st{};
    st.priority = priority;
    st.share = 1;
    st.memory_limit = UINT64_MAX;
    st.memory_guarantee = guarantee;
    st.quantum_ns = 5'000'000;
    d::join_slot(view(), i, {}, st, {});
    d::slot_record& s = slots[i];
    d::apply_grow(*header, s, reserved - reclaimable);
    d::apply_grow(*header, s, reclaimable, d::memory_kind::reclaimable);
    return s;
  }
  d::table_view view() {
    return {header.get(), slots.data(), static_cast<std::uint32_t>(slots.size())};
  }
  /// Waiter `w` (counted as a memory waiter) looks once at `now` for `bytes`.
  d::reclaim_look ask(std::uint32_t w, std::uint64_t bytes, std::uint64_t now,
                      std::uint64_t deadline = 2 * s_ns) {
    std::vector<std::uint32_t> asked;
    return d::ask_for_reclaim(view(), w, bytes, now, deadline, asked);
  }
  std::uint64_t asked(std::uint32_t i) const {
    return slots[i].reclaim.asked.load(std::memory_order_relaxed);
  }
  /// Slot `i` answers: gives back what it is asked for (at most what it can) and says so.
  void answer(std::uint32_t i) {
    d::slot_record& s = slots[i];
    const std::uint64_t give = std::min(asked(i), s.reclaim.reclaimable);
    d::apply_shrink(*header, s, give, d::memory_kind::reclaimable);
    d::answer_reclaim(*header, s, s.reclaim.seq.load(), give, 0);
  }
  std::unique_ptr<d::table_header> header;
  std::vector<d::slot_record> slots;
};
} // namespace

TEST_CASE("reclaim: the choice takes the lowest class first, then the most above its guarantee") {
  std::vector<d::reclaim_candidate> c = {
      {0, 3, 100, 50}, {1, 1, 10, 10}, {2, 1, 300, 30}, {3, 2, 500, 500}};
  const auto asks = d::choose_reclaim(c, 60);
  // Class 1 first: slot 2 (300 above its guarantee) before slot 1 (10), then class 2.
  REQUIRE(asks.size() == 3);
  CHECK(asks[0] == d::reclaim_ask{2, 30});
  CHECK(asks[1] == d::reclaim_ask{1, 10});
  CHECK(asks[2] == d::reclaim_ask{3, 20});
  CHECK(d::choose_reclaim(c, 0).empty());
  // More than all of them can give: each is asked for all it can give.
  const auto all = d::choose_reclaim(c, 10'000);
  std::uint64_t sum = 0;
  for (const auto& a : all) sum += a.bytes;
  CHECK(sum == 590);
}

TEST_CASE("reclaim: a waiting reserve asks lower classes only, never below a guarantee") {
  fake_table t(1000 * MiB);
  t.join(0, 1, 400 * MiB, 300 * MiB, 250 * MiB); // low class: 150 MiB above its guarantee
  t.join(1, 9, 300 * MiB, 300 * MiB);            // the waiter's own class: never asked
  t.join(2, 9, 200 * MiB);                       // the waiter: high class
  t.header->memory_waiters = 1;
  t.slots[2].memory.waiting = 1;
  // It wants 300 MiB: 200 MiB over the capacity; only slot 0 may be asked, for 150 MiB at most.
  const auto look = t.ask(2, 300 * MiB, 10);
  CHECK(look.sent == 1);
  CHECK(look.outstanding);
  CHECK(t.asked(0) == 150 * MiB);
  CHECK(t.asked(1) == 0);
  CHECK(t.asked(2) == 0);
  CHECK(t.slots[2].reclaim.wanted == 200 * MiB);
  CHECK(t.slots[0].reclaim.asked_by == 3);
  CHECK(look.next_ns == 10 + 2 * s_ns);
  // Asking again covers nothing new: the request out counts.
  CHECK(t.ask(2, 300 * MiB, 20).sent == 0);
  CHECK(t.asked(0) == 150 * MiB);
  // A waiter of the lowest class asks nobody.
  t.slots[0].memory.waiting = 1;
  CHECK(t.ask(0, 500 * MiB, 30).sent == 0);
}

TEST_CASE("reclaim: an answer serves the waiter; the last waiter's end withdraws what is left") {
  fake_table t(1000 * MiB);
  t.join(0, 1, 500 * MiB, 500 * MiB);
  t.join(1, 2, 300 * MiB, 300 * MiB);
  t.join(2, 9, 100 * MiB);
  t.header->memory_waiters = 1;
  t.slots[2].memory.waiting = 1;
  t.ask(2, 400 * MiB, 0); // 300 MiB over: slot 0 (the lowest class) alone is asked
  CHECK(t.asked(0) == 300 * MiB);
  CHECK(t.asked(1) == 0);
  CHECK(d::check_grow_in(t.view(), 2, 400 * MiB) == d::budget_verdict::not_now);
  t.answer(0);
  CHECK(t.asked(0) == 0);
  CHECK(d::check_grow_in(t.view(), 2, 400 * MiB) == d::budget_verdict::granted);
  CHECK(t.slots[0].reclaim.answered == 1);
  CHECK(t.header->reclaim_given == 300 * MiB);
  // Another demand, then the waiter gives up: nothing stays asked.
  d::apply_grow(*t.header, t.slots[2], 400 * MiB);
  t.ask(2, 300 * MiB, 5);
  CHECK(t.asked(0) + t.asked(1) == 300 * MiB);
  d::memory_wait_ended(*t.header, t.slots[2], 1);
  d::memory_waiter_gone(t.view(), t.slots[2]);
  CHECK(t.asked(0) == 0);
  CHECK(t.asked(1) == 0);
  CHECK(t.slots[2].reclaim.wanted == 0);
  CHECK(t.header->reclaim_withdrawn >= 1);
}

TEST_CASE("reclaim: a request not answered by its deadline is skipped, and the next one asked") {
  fake_table t(1000 * MiB);
  t.join(0, 1, 500 * MiB, 500 * MiB, 0); // asked first (most above its guarantee), never answers
  t.join(1, 1, 400 * MiB, 400 * MiB, 0);
  t.join(2, 9, 100 * MiB);
  t.header->memory_waiters = 1;
  t.ask(2, 300 * MiB, 0, s_ns);
  CHECK(t.asked(0) == 300 * MiB);
  CHECK(t.asked(1) == 0);
  // Before the deadline nothing changes; at it, slot 0 is skipped and slot 1 asked.
  CHECK(t.ask(2, 300 * MiB, s_ns - 1, s_ns).sent == 0);
  const auto look = t.ask(2, 300 * MiB, s_ns, s_ns);
  CHECK(look.sent == 1);
  CHECK(t.asked(0) == 0);
  CHECK(t.asked(1) == 300 * MiB);
  CHECK(t.slots[0].reclaim.skipped == 1);
  CHECK(t.header->reclaim_skipped == 1);
  // Slot 1 misses its deadline too: nobody is left to ask until the skips end.
  CHECK(t.ask(2, 300 * MiB, 2 * s_ns, s_ns).sent == 0);
  CHECK(t.asked(1) == 0);
  const std::uint64_t back = 2 * s_ns + d::reclaim_skip_ns;
  CHECK(t.ask(2, 300 * MiB, back, s_ns).sent == 1);
  CHECK(t.asked(0) == 300 * MiB);
  // Its memory stays its own throughout: skipping takes nothing away.
  CHECK(t.slots[0].memory.reserved == 500 * MiB);
}

TEST_CASE("reclaim: when the group's limit binds, only members of the group are asked") {
  fake_table t(1000 * MiB);
  d::slot_group g{};
  g.name[0] = 'g';
  g.memory_limit = 300 * MiB;
  g.share = 1;
  d::slot_settings st{};
  st.share = 1;
  st.memory_limit = UINT64_MAX;
  st.quantum_ns = 5'000'000;
  st.priority = 1;
  d::join_slot(t.view(), 0, {}, st, g); // a low member holding 200 MiB of cache
  d::apply_grow(*t.header, t.slots[0], 200 * MiB, d::memory_kind::reclaimable);
  t.join(1, 1, 100 * MiB, 100 * MiB); // an outsider of the same low class
  st.priority = 9;
  d::join_slot(t.view(), 2, {}, st, g); // the waiter, a member of the high class
  t.header->memory_waiters = 1;
  t.ask(2, 150 * MiB, 0); // the table has room; the group lacks 50 MiB
  CHECK(t.asked(0) == 50 * MiB);
  CHECK(t.asked(1) == 0);
}

TEST_CASE("reclaim: a shrink journaled without the lock lowers the reclaimable bytes too") {
  fake_table t(1000 * MiB);
  auto& s = t.join(0, 1, 300 * MiB, 200 * MiB);
  d::journal_shrink(*t.header, s, 150 * MiB, d::memory_kind::reclaimable);
  d::fold_journals(t.view(), 0, [](std::int64_t) {});
  CHECK(s.memory.reserved == 150 * MiB);
  CHECK(s.reclaim.reclaimable == 50 * MiB);
  // Reclaimable bytes never exceed what it reserves.
  d::apply_shrink(*t.header, s, 140 * MiB);
  CHECK(s.reclaim.reclaimable == 10 * MiB);
}

namespace {

/// One step's properties, after waiter `w` looked: what the choice rule promises.
void check_look(fake_table& t, std::uint32_t w, const std::vector<std::uint64_t>& before,
                const std::vector<std::uint64_t>& givable_before, std::uint64_t need) {
  const int wp = t.slots[w].settings.priority;
  std::uint64_t sent = 0, could = 0;
  int highest_asked = -1;
  for (std::uint32_t j = 0; j < t.slots.size(); ++j) {
    const d::slot_record& s = t.slots[j];
    const std::uint64_t delta = t.asked(j) - std::min(t.asked(j), before[j]);
    sent += delta;
    could += givable_before[j];
    // Never more than it can give above its guarantee.
    CHECK(t.asked(j) <=
          std::min({s.reclaim.reclaimable, s.memory.reserved, d::above_guarantee(s)}));
    if (delta == 0) continue;
    CHECK(j != w);
    CHECK(s.settings.priority < wp); // only strictly lower classes
    highest_asked = std::max(highest_asked, s.settings.priority);
  }
  // No lower class was left with bytes to give while a higher one was asked.
  for (std::uint32_t j = 0; j < t.slots.size(); ++j)
    if (givable_before[j] > 0 && t.slots[j].settings.priority < highest_asked)
      CHECK(d::givable(t.slots[j]) == 0);
  // It asks for what is lacking, as far as the candidates can give: no more, no less.
  CHECK(sent == std::min(need, could));
}

} // namespace

TEST_CASE("reclaim: a seeded random simulation keeps the rule's properties at every step") {
  for (std::uint32_t seed = 1; seed <= 200; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    const auto pick = [&](std::uint64_t lo, std::uint64_t hi) {
      return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
    };
    const std::uint32_t n = static_cast<std::uint32_t>(pick(3, 8));
    fake_table t(1000 * MiB, n);
    std::vector<bool> answers(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint64_t reserved = pick(0, 120) * MiB; // 8 sessions fit the capacity
      t.join(i, static_cast<int>(pick(0, 4)), reserved, pick(0, reserved / MiB) * MiB,
             pick(0, 100) * MiB);
      answers[i] = pick(0, 3) != 0; // a quarter never answer
    }
    std::uint64_t now = 0;
    for (int step = 0; step < 60; ++step) {
      now += pick(0, 800) * 1'000'000;
      const auto w = static_cast<std::uint32_t>(pick(0, n - 1));
      const std::uint64_t bytes = pick(1, 400) * MiB;
      if (d::check_grow_in(t.view(), w, bytes) != d::budget_verdict::not_now) {
        if (d::check_grow_in(t.view(), w, bytes) == d::budget_verdict::granted)
          d::apply_grow(*t.header, t.slots[w], bytes, d::memory_kind::reclaimable);
        continue;
      }
      d::add_memory_waiter(*t.header, t.slots[w]);
      (void)d::expire_reclaim(t.view(), now); // (what the look does first)
      std::vector<std::uint64_t> before(n), givable_before(n);
      std::uint64_t covered = 0;
      const d::reclaim_need need = d::shortfall_of(t.view(), w, bytes);
      for (std::uint32_t j = 0; j < n; ++j) {
        before[j] = t.asked(j);
        if (!d::may_ask(t.view(), w, j, need.group_binds)) continue;
        covered += t.asked(j);
        if (t.slots[j].reclaim.skip_until_ns <= now) givable_before[j] = d::givable(t.slots[j]);
      }
      t.ask(w, bytes, now);
      check_look(t, w, before, givable_before, need.shortfall - std::min(need.shortfall, covered));
      // Those that answer give back what they are asked; once the asks cover the shortfall
      // and every asked session answered, the demand is served at once.
      bool all_answered = true;
      for (std::uint32_t j = 0; j < n; ++j)
        if (t.asked(j) != 0) {
          if (answers[j])
            t.answer(j);
          else
            all_answered = false;
        }
      const std::uint64_t could =
          std::accumulate(givable_before.begin(), givable_before.end(), std::uint64_t{0});
      if (all_answered && covered == 0 && could >= need.shortfall)
        CHECK(d::check_grow_in(t.view(), w, bytes) == d::budget_verdict::granted);
      // The waiter gives up or is served: once nobody waits, no request stands.
      if (pick(0, 1) == 0 || d::check_grow_in(t.view(), w, bytes) == d::budget_verdict::granted) {
        d::memory_wait_ended(*t.header, t.slots[w], 1);
        d::memory_waiter_gone(t.view(), t.slots[w]);
        if (t.header->memory_waiters == 0)
          for (std::uint32_t j = 0; j < n; ++j) CHECK(t.asked(j) == 0);
      }
      // The budget invariant holds throughout: asking moves no byte.
      d::recompute_totals(t.view());
      std::uint64_t reserved = 0;
      for (const auto& s : t.slots) reserved += s.memory.reserved;
      CHECK(reserved <= t.header->capacity);
    }
  }
}

TEST_CASE("reclaim: while requests are out for a waiter, others of its class or below wait") {
  fake_table t(1000 * MiB);
  t.join(0, 1, 600 * MiB, 600 * MiB); // the cache, asked
  t.join(1, 1, 0);                    // another low session
  t.join(2, 9, 300 * MiB);            // the waiter
  t.join(3, 9, 0);                    // a peer of the waiter's class
  t.join(4, 10, 0);                   // a class above the waiter's
  t.slots[2].memory.waiting = 1;
  t.header->memory_waiters = 1;
  t.ask(2, 300 * MiB, 0); // 200 MiB lacking: the cache is asked
  REQUIRE(t.asked(0) == 200 * MiB);
  CHECK_FALSE(d::held_for_reclaim(t.view(), 2, MiB)); // the waiter itself
  CHECK(d::held_for_reclaim(t.view(), 0, MiB));       // the giver cannot grow its cache back
  CHECK(d::held_for_reclaim(t.view(), 1, MiB));       // nor can a lower class take what it gives
  CHECK(d::held_for_reclaim(t.view(), 3, MiB));       // nor an equal one
  CHECK_FALSE(d::held_for_reclaim(t.view(), 4, MiB)); // a higher class is not held
  t.join(5, 1, 0, 0, 100 * MiB); // a low session with an idle guarantee (joined now: full)
  // A growth within its own guarantee takes nothing the waiter could get: not held (before, it
  // waited for as long as the waiter's requests were renewed). Past its guarantee, it is held.
  CHECK_FALSE(d::held_for_reclaim(t.view(), 5, 100 * MiB));
  CHECK(d::held_for_reclaim(t.view(), 5, 101 * MiB));
  // Once the waiter stops waiting, nobody is held, whatever request is still out.
  t.slots[2].memory.waiting = 0;
  CHECK_FALSE(d::held_for_reclaim(t.view(), 1, MiB));
  t.slots[2].memory.waiting = 1;
  t.answer(0);
  CHECK_FALSE(d::held_for_reclaim(t.view(), 1, MiB)); // no request out
}
