// SPDX-License-Identifier: Apache-2.0
// The memory waiters' order (detail/memory_queue.hpp; docs/design.md section 8, "Waiters'
// order") as pure functions of the table state: a higher class first, first come first served
// within a class, a large reserve not starved by smaller ones, a guarantee never queued, and a
// waiter that stopped looking (SIGSTOP) holding nobody back for good. Chosen cases, then a
// seeded random simulation that checks, at every grant, that no waiter ahead of the grantee was
// left unable to fit (asked of a copy of the table with the real budget check).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include <gpushare/detail/reclaim.hpp>
#include <gpushare/detail/slot.hpp>

namespace d = gpushare::detail;

namespace {
constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t ms = 1'000'000;

struct queue_table {
  explicit queue_table(std::uint64_t capacity, std::uint32_t n = 8)
      : header(std::make_unique<d::table_header>()), slots(n) {
    header->capacity = capacity;
  }
  d::slot_record& join(std::uint32_t i, int priority = 0, std::uint64_t guarantee = 0) {
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
  /// One look of slot `i`'s reserve of `bytes` (place `ticket`, 0: not waiting) at `now`, as
  /// grow_loop() makes it: granted (applied), or not.
  bool look(std::uint32_t i, std::uint64_t bytes, std::uint64_t ticket, std::uint64_t now) {
    const d::grow_decision g =
        d::decide_grow(view(), i, bytes, d::memory_kind::fixed, false, ticket, now);
    if (g.verdict != d::budget_verdict::granted) return false;
    d::apply_grow(*header, slots[i], bytes, g.kind, g.on_loan);
    return true;
  }
  /// Slot `i`'s reserve of `bytes` begins to wait at `now`: its place.
  std::uint64_t wait(std::uint32_t i, std::uint64_t bytes, std::uint64_t now) {
    d::add_memory_waiter(*header, slots[i]);
    const std::uint64_t ticket = d::take_queue_ticket(*header);
    d::queue_look(slots[i], ticket, bytes, now);
    return ticket;
  }
  /// A waiting reserve looks at `now`: granted (it stops waiting) or not (its look is noted).
  bool waiter_look(std::uint32_t i, std::uint64_t bytes, std::uint64_t ticket, std::uint64_t now) {
    if (look(i, bytes, ticket, now)) {
      d::queue_leave(slots[i], ticket);
      d::memory_wait_ended(*header, slots[i], 0);
      return true;
    }
    d::queue_look(slots[i], ticket, bytes, now);
    return false;
  }
  std::unique_ptr<d::table_header> header;
  std::vector<d::slot_record> slots;
};
} // namespace

TEST_CASE("memory queue: a large reserve is not starved by smaller ones that come after it") {
  queue_table t(1000 * MiB);
  t.join(0);
  t.join(1); // the large reserve
  t.join(2); // small reserves, one after another
  REQUIRE(t.look(0, 1000 * MiB, 0, 0));
  const std::uint64_t large = t.wait(1, 500 * MiB, 0);
  // The holder gives back 100 MiB at a time; a small reserve of 100 MiB arrives each time.
  for (int k = 1; k <= 4; ++k) {
    CAPTURE(k);
    d::apply_shrink(*t.header, t.slots[0], 100 * MiB);
    CHECK_FALSE(t.waiter_look(1, 500 * MiB, large, k * ms)); // not yet enough for it
    CHECK_FALSE(t.look(2, 100 * MiB, 0, k * ms)); // before: granted, and the large one starved
  }
  d::apply_shrink(*t.header, t.slots[0], 100 * MiB);
  CHECK(t.waiter_look(1, 500 * MiB, large, 5 * ms));
  d::apply_shrink(*t.header, t.slots[0], 100 * MiB);
  CHECK(t.look(2, 100 * MiB, 0, 6 * ms)); // nobody waits ahead of it now
  CHECK(t.header->queue_holds == 0);      // (counted by grow_loop, not by the pure decision)
}

TEST_CASE("memory queue: first come first served within a class, a higher class first") {
  queue_table t(1000 * MiB);
  t.join(0);
  t.join(1, 0);
  t.join(2, 0);
  t.join(3, 5);
  REQUIRE(t.look(0, 1000 * MiB, 0, 0));
  const std::uint64_t first = t.wait(1, 200 * MiB, 0);
  const std::uint64_t second = t.wait(2, 200 * MiB, 1 * ms);
  d::apply_shrink(*t.header, t.slots[0], 200 * MiB);
  CHECK_FALSE(t.waiter_look(2, 200 * MiB, second, 2 * ms)); // the second looks first: it waits
  CHECK(t.waiter_look(1, 200 * MiB, first, 2 * ms));
  // A higher class that comes later goes first, and the lower class waits behind it.
  const std::uint64_t high = t.wait(3, 200 * MiB, 3 * ms);
  d::apply_shrink(*t.header, t.slots[0], 200 * MiB);
  CHECK_FALSE(t.waiter_look(2, 200 * MiB, second, 4 * ms));
  CHECK(t.waiter_look(3, 200 * MiB, high, 4 * ms));
  d::apply_shrink(*t.header, t.slots[0], 200 * MiB);
  CHECK(t.waiter_look(2, 200 * MiB, second, 5 * ms));
  // A growth that leaves every waiter ahead of it fitting is not held; one that does not is.
  d::apply_shrink(*t.header, t.slots[0], 300 * MiB); // 300 MiB free
  const std::uint64_t mid = t.wait(1, 150 * MiB, 6 * ms);
  CHECK(t.look(2, 100 * MiB, 0, 6 * ms)); // 200 MiB left: the 150 MiB ahead still fit
  d::queue_leave(t.slots[1], mid);
  d::remove_memory_waiters(*t.header, t.slots[1], 1);
  const std::uint64_t big = t.wait(1, 250 * MiB, 7 * ms);
  CHECK_FALSE(t.look(2, 100 * MiB, 0, 7 * ms)); // 100 MiB would be left: 250 would not fit
  d::apply_shrink(*t.header, t.slots[0], 100 * MiB);
  CHECK(t.waiter_look(1, 250 * MiB, big, 8 * ms));
}

TEST_CASE("memory queue: a growth within its guarantee is never queued") {
  queue_table t(1000 * MiB);
  t.join(0);
  t.join(1, 9);
  t.join(2, 0, 300 * MiB); // a low class with an idle guarantee
  REQUIRE(t.look(0, 700 * MiB, 0, 0));
  const std::uint64_t high = t.wait(1, 200 * MiB, 0); // 0 MiB free: 300 are guaranteed to slot 2
  CHECK(t.look(2, 300 * MiB, 0, 1 * ms));             // its own room: nobody else can have it
  CHECK_FALSE(t.waiter_look(1, 200 * MiB, high, 1 * ms));
}

TEST_CASE("memory queue: a waiter that stops looking holds the others back for 2 s, not for good") {
  queue_table t(1000 * MiB);
  t.join(0);
  t.join(1);
  t.join(2);
  REQUIRE(t.look(0, 1000 * MiB, 0, 0));
  (void)t.wait(1, 500 * MiB, 0); // then stopped (SIGSTOP): it looks no more
  d::apply_shrink(*t.header, t.slots[0], 100 * MiB);
  CHECK_FALSE(t.look(2, 100 * MiB, 0, d::queue_stale_ns));
  CHECK(t.look(2, 100 * MiB, 0, d::queue_stale_ns + 1)); // stale: no longer ahead of anyone
  // Continued, it looks again and is ahead again, with its old place.
  d::queue_look(t.slots[1], t.slots[1].queue.ticket, 500 * MiB, d::queue_stale_ns + 2);
  d::apply_shrink(*t.header, t.slots[0], 100 * MiB);
  CHECK_FALSE(t.look(2, 100 * MiB, 0, d::queue_stale_ns + 3));
  // Its session ends (killed and reclaimed, or left): its place goes with the slot.
  d::end_slot(t.view(), 1, d::queue_stale_ns + 4);
  CHECK(t.look(2, 100 * MiB, 0, d::queue_stale_ns + 4));
}

namespace {

/// A waiting reserve of the simulation.
struct queued {
  std::uint32_t slot;
  std::uint64_t bytes, ticket;
  bool stopped;
};

/// Would slot `j`'s waiting reserve fit now? Asked of a copy of the table, with the budget's own
/// check (no queue, no holds): independent of the rule under test.
bool fits_in(queue_table& t, std::uint32_t j, std::uint64_t bytes) {
  return d::check_grow_in(t.view(), j, bytes) == d::budget_verdict::granted;
}

/// Slot `i`'s growth of `bytes` was just granted at `now` (ticket: its place, 0 if it did not
/// wait): every waiter ahead of it (a higher class, its class and an earlier place, or any
/// reserve within its own guarantee) that has looked within queue_stale_ns still fits, unless
/// the growth was within i's guarantee.
void check_grant(queue_table& t, const std::vector<queued>& waiting, std::uint32_t i,
                 std::uint64_t ticket, bool within_guarantee, std::uint64_t now) {
  if (within_guarantee) return;
  for (const queued& w : waiting) {
    const d::slot_record& s = t.slots[w.slot];
    if (w.slot == i || w.ticket == ticket || now - s.queue.looked_ns > d::queue_stale_ns) continue;
    const int pj = s.settings.priority, pi = t.slots[i].settings.priority;
    const bool promised = d::commitment(s, s.memory.reserved + w.bytes, s.memory.external,
                                        s.settings.memory_guarantee) <= d::commitment(s);
    const bool ahead = promised || pj > pi || (pj == pi && (ticket == 0 || w.ticket < ticket));
    if (!ahead || s.queue.ticket != w.ticket) continue; // (its session's entry is its oldest)
    INFO("granted slot " << i << " (place " << ticket << "), ahead: slot " << w.slot << " place "
                         << w.ticket << ", " << w.bytes / MiB << " MiB");
    CHECK(fits_in(t, w.slot, w.bytes));
  }
}

} // namespace

TEST_CASE("memory queue: a seeded random simulation - no grant leaves a waiter ahead of it unable "
          "to fit, and every reserve is served once the memory comes back") {
  for (std::uint32_t seed = 1; seed <= 300; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    auto pick = [&](std::uint64_t lo, std::uint64_t hi) {
      return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
    };
    const auto n = static_cast<std::uint32_t>(3 + seed % 6);
    queue_table t(1000 * MiB, n);
    std::uint64_t guarantees = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint64_t g = pick(0, 3) == 0 ? pick(0, 150) * MiB : 0;
      guarantees += g;
      t.join(i, static_cast<int>(pick(0, 2)), guarantees <= 600 * MiB ? g : 0);
    }
    std::vector<queued> waiting;
    std::vector<std::vector<std::uint64_t>> held(n);
    std::uint64_t now = 0;
    auto is_waiting = [&](std::uint32_t i) {
      return std::any_of(waiting.begin(), waiting.end(),
                         [&](const queued& q) { return q.slot == i; });
    };
    auto grant = [&](std::uint32_t i, std::uint64_t bytes, std::uint64_t ticket) {
      const d::slot_record& s = t.slots[i];
      const bool within = d::commitment(s, s.memory.reserved + bytes, s.memory.external,
                                        s.settings.memory_guarantee) <= d::commitment(s);
      if (!t.look(i, bytes, ticket, now)) return false;
      held[i].push_back(bytes);
      check_grant(t, waiting, i, ticket, within, now);
      return true;
    };
    for (int step = 0; step < 200; ++step) {
      now += pick(0, 300) * ms;
      // The waiters look, in random order; a stopped one does not; one in ten stops or resumes.
      std::shuffle(waiting.begin(), waiting.end(), rng);
      for (std::size_t k = 0; k < waiting.size();) {
        queued& w = waiting[k];
        if (pick(0, 9) == 0) w.stopped = !w.stopped;
        if (!w.stopped && grant(w.slot, w.bytes, w.ticket)) {
          d::queue_leave(t.slots[w.slot], w.ticket);
          d::memory_wait_ended(*t.header, t.slots[w.slot], 0);
          waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(k));
        } else {
          if (!w.stopped) d::queue_look(t.slots[w.slot], w.ticket, w.bytes, now);
          ++k;
        }
      }
      // A session releases, or reserves (granted, or it waits), or dies (its slot reclaimed).
      const auto i = static_cast<std::uint32_t>(pick(0, n - 1));
      const auto what = pick(0, 19);
      if (what < 8 && !held[i].empty()) {
        const std::size_t k = pick(0, held[i].size() - 1);
        d::apply_shrink(*t.header, t.slots[i], held[i][k]);
        held[i].erase(held[i].begin() + static_cast<std::ptrdiff_t>(k));
      } else if (what == 19) {
        (void)d::reclaim_slot(t.view(), i, now);
        std::erase_if(waiting, [&](const queued& q) { return q.slot == i; });
        held[i].clear();
        const d::slot_settings st = t.slots[i].settings;
        t.join(i, st.priority, st.memory_guarantee);
      } else if (!is_waiting(i)) {
        const std::uint64_t bytes = pick(1, 400) * MiB;
        if (!grant(i, bytes, 0) &&
            d::check_grow_in(t.view(), i, bytes) != d::budget_verdict::exceeds_capacity)
          waiting.push_back({i, bytes, t.wait(i, bytes, now), false});
      }
    }
    // Then everyone resumes, nobody reserves more, and the holders give everything back: every
    // reserve still waiting (each fits in the capacity alone) is served, in order.
    for (queued& w : waiting) w.stopped = false;
    for (int round = 0; round < 64 && !waiting.empty(); ++round) {
      now += 10 * ms;
      for (std::uint32_t i = 0; i < n; ++i) {
        if (held[i].empty()) continue;
        d::apply_shrink(*t.header, t.slots[i], held[i].back());
        held[i].pop_back();
      }
      std::sort(waiting.begin(), waiting.end(),
                [](const queued& a, const queued& b) { return a.ticket > b.ticket; });
      for (std::size_t k = 0; k < waiting.size();) {
        queued& w = waiting[k];
        if (grant(w.slot, w.bytes, w.ticket)) {
          d::queue_leave(t.slots[w.slot], w.ticket);
          d::memory_wait_ended(*t.header, t.slots[w.slot], 0);
          // what it got goes back at once, as a reserve that was used and released
          d::apply_shrink(*t.header, t.slots[w.slot], w.bytes);
          held[w.slot].pop_back();
          waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(k));
        } else {
          d::queue_look(t.slots[w.slot], w.ticket, w.bytes, now);
          ++k;
        }
      }
    }
    CHECK(waiting.empty());
  }
}
