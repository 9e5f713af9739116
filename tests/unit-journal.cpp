// SPDX-License-Identifier: Apache-2.0
// The journal (detail/journal.hpp) as pure functions on an unmapped table: writers add lock-free,
// a folder applies under "the lock" (a mutex here). Each entry must be applied exactly once,
// whatever the interleaving of writes and folds, and as the lost update would have been.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <gpushare/detail/journal.hpp>
#include <gpushare/detail/slot.hpp>

namespace d = gpushare::detail;
using u64 = std::uint64_t;

namespace {
constexpr u64 ms = 1'000'000;

struct fake_table {
  explicit fake_table(std::uint32_t n = 4) : header(std::make_unique<d::table_header>()), slots(n) {
    header->capacity = 1ull << 40;
  }
  d::table_view view() {
    return {header.get(), slots.data(), static_cast<std::uint32_t>(slots.size())};
  }
  d::slot_record& join(std::uint32_t i) {
    d::slot_settings st{};
    st.share = 1;
    st.quantum_ns = 5 * ms;
    st.compute_limit_ppm = 1'000'000;
    st.memory_limit = header->capacity;
    d::join_slot(view(), i, {}, st); // the library's own join
    return slots[i];
  }
  std::unique_ptr<d::table_header> header;
  std::vector<d::slot_record> slots;
};
} // namespace

TEST_CASE("journal: every entry is applied exactly once, whatever the interleaving with folds") {
  for (const bool holder : {true, false}) {
    for (u64 seed = 1; seed <= 8; ++seed) {
      CAPTURE(holder);
      CAPTURE(seed);
      fake_table t;
      const d::table_view v = t.view();
      d::slot_record& s = t.join(1);
      t.join(2); // another session, untouched
      constexpr int writers = 3, per_writer = 4000;
      // What the writers will journal, decided up front so the expected books are known.
      struct entry {
        int kind;
        u64 value;
      };
      std::vector<std::vector<entry>> plan(writers);
      u64 exits = 0, used = 0, device = 0, shrink = 0, device_waiters = 0, memory_waiters = 0;
      std::mt19937_64 g(seed);
      for (auto& p : plan)
        for (int k = 0; k < per_writer; ++k) {
          const entry e{static_cast<int>(g() % 5), 1 + g() % 1000};
          p.push_back(e);
          if (e.kind == 0) ++exits, used += e.value;
          if (e.kind == 1) device += e.value;
          if (e.kind == 2) shrink += e.value;
          if (e.kind == 3) ++device_waiters;
          if (e.kind == 4) ++memory_waiters;
        }
      // The state the lost updates were about: guards running, threads waiting, bytes held.
      std::mutex lock; // stands for the table lock
      const u64 extra = 12345;
      d::set_usage(*t.header, s, shrink + extra, 0, 0);
      s.compute.active_guards = static_cast<std::uint32_t>(exits);
      for (u64 k = 0; k < device_waiters; ++k) d::add_waiter(v, 1, 0);
      s.memory.waiting = static_cast<std::uint32_t>(memory_waiters);
      t.header->memory_waiters = static_cast<std::uint32_t>(memory_waiters);
      if (holder) {
        t.header->holder = 2;
        t.header->holder_generation = s.generation;
        t.header->holder_started = 1;
      }
      std::atomic<int> done{0};
      std::atomic<u64> attempts{0}; // folds attempted so far
      std::vector<std::thread> threads;
      for (int w = 0; w < writers; ++w)
        threads.emplace_back([&, w] {
          u64 now = 1'000 * ms;
          int k = 0;
          for (const entry& e : plan[static_cast<std::size_t>(w)]) {
            if (++k % 500 == 0) { // let a fold come between: the interleaving is certain
              const u64 seen = attempts.load();
              while (attempts.load() == seen) std::this_thread::yield();
            }
            now += 1'000;
            switch (e.kind) {
            case 0: d::journal_guard_exit(*t.header, s, now - e.value, e.value, now); break;
            case 1: d::journal_device_time(*t.header, s, e.value); break;
            case 2: d::journal_shrink(*t.header, s, e.value); break;
            case 3: d::journal_device_waiter(*t.header, s); break;
            default: d::journal_memory_waiter(*t.header, s); break;
            }
          }
          done.fetch_add(1);
        });
      u64 folds = 0;
      const auto fold = [&] {
        const std::lock_guard<std::mutex> l(lock);
        if (d::fold_journals(v, 2'000'000 * ms, [](std::int64_t) {}).folded) ++folds;
        attempts.fetch_add(1);
      };
      while (done.load() < writers) fold();
      for (auto& th : threads) th.join();
      fold();                           // what a locker after the last write folds
      CHECK(folds >= per_writer / 500); // folds came between the writes
      CHECK(s.stats.guards == exits);
      CHECK(s.compute.active_guards == 0);
      CHECK(s.stats.device_ns == used + device);
      CHECK(s.memory.reserved == extra);
      CHECK(t.header->reserved_total == extra);
      CHECK(s.compute.wants_device == 0);
      CHECK(t.header->device_waiters.load() == 0);
      CHECK(s.memory.waiting == 0);
      CHECK(t.header->memory_waiters == 0);
      CHECK_FALSE(d::journal_holds(s));
      CHECK(t.header->journal_pending.load() == 0);
    }
  }
}

TEST_CASE("journal: a folded guard exit releases the device at the exit's own time") {
  fake_table t;
  const d::table_view v = t.view();
  d::slot_record& a = t.join(0);
  d::slot_record& b = t.join(1);
  d::acquire_state as;
  REQUIRE(d::acquire_step(v, 0, 0, true, as, 100 * ms).what == d::acquire_result::granted);
  d::acquire_state bs;
  REQUIRE(d::acquire_step(v, 1, 1 * ms, true, bs, 100 * ms).what == d::acquire_result::wait);
  // a's exit, at 6 ms (its 5 ms quantum used), cannot take the lock: journaled. Nothing
  // changes until someone folds.
  d::journal_guard_exit(*t.header, a, 0, 6 * ms, 6 * ms);
  CHECK(a.compute.active_guards == 1);
  CHECK(d::current_holder(v) == 0);
  std::vector<std::int64_t> woken;
  // b's re-check at 500 ms (any locker) folds it first.
  const d::fold_result r =
      d::fold_journals(v, 500 * ms, [&](std::int64_t w) { woken.push_back(w); });
  CHECK(r.folded);
  CHECK(a.compute.active_guards == 0);
  CHECK(a.stats.guards == 1);
  CHECK(a.stats.device_ns == 6 * ms);
  CHECK(a.compute.last_active_ns == 6 * ms); // its own time, not the fold's
  REQUIRE(woken.size() == 1);
  CHECK(woken[0] == 1); // handed over to the waiter
  CHECK(d::current_holder(v) == 1);
  CHECK(t.header->holder_since_ns == 6 * ms);
  CHECK(b.compute.wants_device == 1); // still registered until its own acquire_step takes the grant
}

TEST_CASE("journal: a session joining a slot never inherits its predecessor's journal") {
  fake_table t;
  d::slot_record& s = t.join(3);
  d::journal_guard_exit(*t.header, s, 1, 2, 3);
  d::journal_shrink(*t.header, s, 100);
  d::journal_device_waiter(*t.header, s);
  d::journal_lease_exit(*t.header, s);
  REQUIRE(d::journal_holds(s));
  s.state.store(d::slot_free); // its session ended (reclaimed): the journal went with it
  t.join(3);
  CHECK_FALSE(d::journal_holds(s));
  CHECK(s.journal_first_start_ns.load() == 0);
  CHECK(s.journal_last_exit_ns.load() == 0);
  // A fold meanwhile leaves free slots alone.
  d::journal_shrink(*t.header, t.slots[0], 7); // slot 0 is free
  const d::fold_result r = d::fold_journals(t.view(), 10, [](std::int64_t) {});
  CHECK(r.folded);
  CHECK(t.slots[0].memory.reserved == 0);
}

// Two lease guards end after a waiter ended the lease and neither can take the lock: two journal
// entries, and the fold releases the device once, to the waiter. A corrupt count (a foreign or
// damaged table) is folded the same way, in one step: it once bounded a loop of 2^32 steps.
TEST_CASE("journal: lease exits fold into one release, whatever their count says") {
  for (const std::uint32_t entries : {2u, 0xffff'ffffu}) {
    CAPTURE(entries);
    fake_table t;
    d::table_view v = t.view();
    d::slot_record& a = t.join(0);
    d::slot_record& b = t.join(1);
    d::acquire_state as;
    REQUIRE(d::acquire_step(v, 0, 0, true, as, 100 * ms).what == d::acquire_result::granted);
    REQUIRE(d::exit_step(v, 0, 0, 1 * ms, 1 * ms) == d::nobody); // nobody waits: a lease
    REQUIRE(a.lease.load() == 1);
    a.lease_guards.store(2); // two guards enter on the lease
    d::acquire_state bs;     // b arrives at 2 ms: the lease ends, a is busy, b waits
    REQUIRE(d::acquire_step(v, 1, 2 * ms, true, bs, 100 * ms).what == d::acquire_result::wait);
    REQUIRE(a.lease.load() == 0);
    for (int g = 0; g < 2; ++g) { // each exit as exit_on_lease, then a journaled locked part
      a.lease_used_ns.fetch_add(3 * ms);
      a.lease_exits.fetch_add(1);
      a.lease_last_exit_ns.store(4 * ms);
      a.lease_guards.fetch_sub(1);
      d::journal_lease_exit(*t.header, a);
    }
    a.journal_lease_exits.store(entries);
    std::vector<std::int64_t> woken;
    const d::fold_result r =
        d::fold_journals(v, 9 * ms, [&](std::int64_t w) { woken.push_back(w); });
    CHECK(r.folded);
    CHECK(a.journal_lease_exits.load() == 0);
    CHECK(a.lease_exits.load() == 0);
    CHECK(a.stats.guards == 3); // the locked guard and the two on the lease
    CHECK(a.stats.guards_on_lease == 2);
    CHECK(a.stats.device_ns == 1 * ms + 6 * ms);
    REQUIRE(woken.size() == 1);
    CHECK(woken[0] == 1);
    CHECK(d::current_holder(v) == 1);
    CHECK(b.compute.wants_device == 1);
    CHECK_FALSE(d::journal_holds(a));
  }
}
