// SPDX-License-Identifier: Apache-2.0
// The rules that keep a higher class's latency next to a lower class (issue 41;
// detail/sched_gpu.hpp; docs/design.md section 12, "Guards on streams", rules 3 and 4, and
// section 11, "Linger"), as pure functions of the table state: marks of work still on the GPU,
// the classes' activity, and a holder that lingers. A seeded random check drives takeovers of
// random tables and compares each grant with the rule stated independently.
#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include <gpushare/detail/scheduler.hpp>
#include <gpushare/detail/slot.hpp>
#include <gpushare/options.hpp>

#include "sched_fake_table.hpp"

namespace d = gpushare::detail;
namespace prio = gpushare::priority;
using u64 = std::uint64_t;

namespace {
constexpr u64 us = 1'000;
constexpr u64 ms = 1'000'000;
constexpr u64 liveness = 100 * ms;

using sched_test::fake_table;
} // namespace

TEST_CASE("a mark of a higher class's work holds a lower class back from a free device until it "
          "is cleared or its deadline passes; its own class and higher ones are not held") {
  fake_table t(5);
  const d::table_view v = t.view();
  d::slot_record& high = t.join(0, prio::high);
  t.join(1, prio::low);
  t.join(2, prio::high);
  t.join(3, prio::normal);
  const u64 mark = d::gpu_mark_word(high.generation, 7);
  d::mark_gpu_work(high, mark, 10 * ms);
  // The device is free (nobody holds it): the lower class waits until the deadline.
  d::take_result r = d::try_take(v, 1, 4 * ms, liveness);
  CHECK_FALSE(r.granted);
  CHECK(r.recheck_ns == 6 * ms);
  CHECK(high.gpu_watcher.load() == 2); // slot 1 + 1: the host function wakes it
  CHECK(d::current_holder(v) == d::nobody);
  // The same class, and a class between (normal < high), are judged by their claim.
  CHECK(d::gpu_work_left(v, 2, 4 * ms) == 0); // high: its own class
  CHECK(d::gpu_work_left(v, 3, 4 * ms) == 6 * ms);
  // Cleared with another mark: nothing changes; with its own: the watcher is returned.
  CHECK(d::clear_gpu_mark(high, mark + 1) == 0);
  CHECK(d::gpu_work_left(v, 1, 5 * ms) == 5 * ms);
  CHECK(d::clear_gpu_mark(high, mark) == 2); // slot 1 + 1: it asked last
  CHECK(d::gpu_work_left(v, 1, 5 * ms) == 0);
  r = d::try_take(v, 1, 5 * ms, liveness);
  CHECK(r.granted);
  // A deadline past: no wait. A deadline more than 1 s ahead: ignored (a corrupt word).
  d::mark_gpu_work(high, mark, 10 * ms);
  CHECK(d::gpu_work_left(v, 1, 10 * ms) == 0);
  d::mark_gpu_work(high, mark, 10 * ms + d::max_gpu_mark_ns + 1);
  CHECK(d::gpu_work_left(v, 1, 10 * ms) == 0);
  // A free slot's mark is not looked at.
  d::mark_gpu_work(high, mark, 20 * ms);
  high.state.store(d::slot_free);
  CHECK(d::gpu_work_left(v, 1, 10 * ms) == 0);
}

TEST_CASE("a holder's exit does not hand the device to a lower waiter while another session's "
          "work is marked; its own mark is not looked at by its exit (drained), but is by a "
          "takeover of its gap") {
  fake_table t;
  const d::table_view v = t.view();
  d::slot_record& h = t.join(0, prio::normal);
  t.join(1, prio::low);
  d::slot_record& other = t.join(2, prio::high);
  d::add_waiter(v, 1, 0);
  t.hold(0, 0, 0);
  h.compute.lower_debt_ns = 10 * ms; // its gaps are the lower class's
  const u64 own = d::gpu_mark_word(h.generation, 1), others = d::gpu_mark_word(other.generation, 1);
  d::mark_gpu_work(h, own, 50 * ms);
  d::mark_gpu_work(other, others, 8 * ms);
  // Without the other's mark the exit would hand over (its own is drained by then).
  CHECK(d::gpu_work_left(v, 1, 2 * ms, 0) == 6 * ms);
  CHECK(d::release_at_guard_exit(v, 0, 2 * ms) == 1); // kept; the waiter is woken to watch
  CHECK(d::current_holder(v) == 0);
  CHECK(other.gpu_watcher.load() == 2); // slot 1 + 1
  d::take_result r = d::try_take(v, 1, 3 * ms, liveness);
  CHECK_FALSE(r.granted);
  CHECK(r.recheck_ns == 47 * ms); // the holder's own work too holds a takeover of its gap
  CHECK(d::clear_gpu_mark(other, others) == 2);
  r = d::try_take(v, 1, 4 * ms, liveness);
  CHECK_FALSE(r.granted);
  CHECK(r.recheck_ns == 46 * ms);
  CHECK(d::clear_gpu_mark(h, own) == 2); // its host function, after the work finished
  r = d::try_take(v, 1, 5 * ms, liveness);
  CHECK(r.granted);
  CHECK(d::current_holder(v) == 1);
}

TEST_CASE("class activity: a class counts as active for 100 ms after it last asked, refreshed at "
          "most once a millisecond") {
  d::table_header h{};
  CHECK_FALSE(d::classes_active(h, 0, 7, 1 * ms));
  d::note_class_active(h, prio::high, 10 * ms);
  CHECK(h.class_active_ns[prio::high].load() == 10 * ms);
  d::note_class_active(h, prio::high, 10 * ms + 500 * us); // within a millisecond: no write
  CHECK(h.class_active_ns[prio::high].load() == 10 * ms);
  d::note_class_active(h, prio::high, 12 * ms);
  CHECK(h.class_active_ns[prio::high].load() == 12 * ms);
  CHECK(d::classes_active(h, prio::high, 7, 12 * ms + d::class_active_window_ns - 1));
  CHECK_FALSE(d::classes_active(h, prio::high, 7, 12 * ms + d::class_active_window_ns));
  CHECK_FALSE(d::classes_active(h, prio::high + 1, 7, 13 * ms)); // only classes above
  CHECK_FALSE(d::classes_active(h, 0, prio::high - 1, 13 * ms));
  d::note_class_active(h, -1, 13 * ms); // out of range: ignored
  d::note_class_active(h, 8, 13 * ms);
  CHECK(d::classes_active(h, -5, 20, 13 * ms)); // clamped ranges
}

TEST_CASE("a lingering holder keeps its gaps from lower classes, at most 10 ms after its last "
          "guard, and never from its own class's rules") {
  fake_table t;
  const d::table_view v = t.view();
  d::slot_record& h = t.join(0, prio::high);
  t.join(1, prio::low);
  t.hold(0, 0, 1 * ms);              // between guards since 1 ms
  h.compute.lower_debt_ns = 10 * ms; // spent: without linger the lower class takes the gap
  CHECK(d::try_take(v, 1, 2 * ms, liveness).granted);
  // Again, lingering until 6 ms: the lower class waits until then, then takes the gap.
  t.hold(0, 0, 1 * ms);
  h.linger_until_ns.store(6 * ms);
  d::take_result r = d::try_take(v, 1, 2 * ms, liveness);
  CHECK_FALSE(r.granted);
  CHECK(r.recheck_ns >= 1);
  CHECK(d::idle_left(*t.header, h, t.slots[1], 2 * ms) == 4 * ms);
  CHECK(d::try_take(v, 1, 6 * ms, liveness).granted);
  // A linger far ahead counts for 10 ms after the holder's last guard only.
  t.hold(0, 0, 1 * ms);
  h.linger_until_ns.store(UINT64_MAX);
  CHECK(d::linger_left(*t.header, h, 5 * ms) == 6 * ms);
  CHECK_FALSE(d::try_take(v, 1, 10 * ms, liveness).granted);
  CHECK(d::try_take(v, 1, 11 * ms, liveness).granted);
  // At its guard's exit, the lingering holder keeps the device from a lower waiter.
  t.hold(0, 0, 0);
  d::add_waiter(v, 1, 0);
  h.linger_until_ns.store(20 * ms);
  (void)d::release_at_guard_exit(v, 0, 12 * ms);
  CHECK(d::current_holder(v) == 0);
  h.linger_until_ns.store(0); // linger(0): over
  CHECK(d::try_take(v, 1, 13 * ms, liveness).granted);
}

TEST_CASE("a lingering session that freed the device keeps it from lower classes only") {
  fake_table t;
  const d::table_view v = t.view();
  d::slot_record& h = t.join(0, prio::high);
  t.join(1, prio::low);
  t.join(2, prio::high);
  // It freed the device at its last guard's exit, at 1 ms, and lingers until 5 ms.
  t.header->holder = 0;
  t.header->last_holder = 1;
  t.header->last_holder_generation = h.generation;
  t.header->holder_idle_since_ns = 1 * ms;
  h.linger_until_ns.store(5 * ms);
  CHECK(d::free_device_wait(v, 1, 0, 2 * ms) == 3 * ms);
  const d::take_result r = d::try_take(v, 1, 2 * ms, liveness);
  CHECK_FALSE(r.granted);
  CHECK(r.recheck_ns == 3 * ms);
  CHECK(d::free_device_wait(v, 2, 0, 2 * ms) == 0); // its own class: not held
  CHECK(d::try_take(v, 1, 5 * ms, liveness).granted);
}

TEST_CASE("seeded random tables: a takeover is never granted below a live mark of a higher "
          "class, and always when the only obstacle was a mark that ended") {
  std::mt19937_64 rng(41041);
  for (int round = 0; round < 3000; ++round) {
    fake_table t(6);
    const d::table_view v = t.view();
    const u64 now = 100 * ms;
    std::vector<int> prio_of(6);
    for (std::uint32_t i = 0; i < 6; ++i) {
      prio_of[i] = static_cast<int>(rng() % 4);
      d::slot_record& s = t.join(i, prio_of[i]);
      if (rng() % 2)
        d::mark_gpu_work(s,
                         d::gpu_mark_word(s.generation, 1 + static_cast<std::uint32_t>(rng() % 9)),
                         now - 5 * ms + rng() % (10 * ms));
    }
    const auto taker = static_cast<std::uint32_t>(rng() % 6);
    // Independently: the longest live mark of a higher class than the taker's.
    u64 expect = 0;
    for (std::uint32_t j = 0; j < 6; ++j) {
      if (j == taker || prio_of[j] <= prio_of[taker]) continue;
      const u64 until = t.slots[j].gpu_until_ns.load();
      if (t.slots[j].gpu_mark.load() != 0 && until > now) expect = std::max(expect, until - now);
    }
    CAPTURE(round);
    const d::take_result r = d::try_take(v, taker, now, liveness); // the device is free
    if (expect > 0) {
      CHECK_FALSE(r.granted);
      CHECK(r.recheck_ns == expect);
      CHECK(d::current_holder(v) == d::nobody);
    } else {
      CHECK(r.granted);
      CHECK(d::current_holder(v) == static_cast<std::int64_t>(taker));
    }
  }
}
