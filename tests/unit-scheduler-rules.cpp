// SPDX-License-Identifier: Apache-2.0
// The rules added for issue 23's scheduler cases, one by one, as pure functions of the table
// state (the scenarios that found them are in unit-scheduler-cases.cpp).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <gpushare/detail/cpu_wait.hpp>
#include <gpushare/detail/posix.hpp>
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

TEST_CASE("case 1: accounting raises the class floor to the contenders, the holder included") {
  fake_table t;
  const d::table_view v = t.view();
  d::slot_record& a = t.join(0);
  d::acquire_state st;
  REQUIRE(d::acquire_step(v, 0, 0, true, st, liveness).what == d::acquire_result::granted);
  d::exit_step(v, 0, 0, 300 * ms, 300 * ms); // 300 ms alone: the floor follows it
  CHECK(d::class_floor(*t.header, prio::normal) == a.compute.vtime);
  d::slot_record& b = t.join(1); // a newcomer starts level, not 300 ms behind
  CHECK(b.compute.vtime == a.compute.vtime);
}

TEST_CASE("case 2: no reservation for a session that does not wait for a CPU") {
  fake_table t;
  d::slot_record& p = t.join(0);
  d::slot_record& s = t.join(1);
  t.hold(0, 0, 10 * ms);
  p.compute.vtime = 0;
  s.compute.vtime = 20 * ms * 1000; // far ahead: p is owed
  p.compute.last_active_ns = 10 * ms;
  t.header->quantum_used_ns = 3 * ms; // a busy turn so far
  p.compute.cpu_wait_ppm = 0;
  CHECK(d::reserved_for(*t.header, p, true, s, 11 * ms) == 0); // host work: no reservation
  p.compute.cpu_wait_ppm = d::reserve_cpu_wait_ppm;
  CHECK(d::reserved_for(*t.header, p, true, s, 11 * ms) == 9 * ms); // descheduled: kept
  p.settings.compute_limit_ppm = 300'000;
  p.compute.cap_vclock_ns = 50 * ms; // its cap holds it back anyway: nothing to keep the device for
  CHECK(d::reserved_for(*t.header, p, true, s, 11 * ms) == 0);
}

TEST_CASE("case 2: a CPU-wait sample is the share of wall time spent runnable but not running") {
  CHECK(d::parse_run_delay("123 456 7\n") == std::optional<std::uint64_t>(456));
  CHECK_FALSE(d::parse_run_delay("123").has_value());
  CHECK_FALSE(d::parse_run_delay("x 1 2").has_value());
  d::slot_record s{};
  d::note_cpu_wait(s, 1'000'000);
  CHECK(s.compute.cpu_wait_ppm == 250'000); // 1/4 weight to a new sample
  d::note_cpu_wait(s, 2'000'000);           // clamped to 100%
  CHECK(s.compute.cpu_wait_ppm == 437'500);
  // A sleeping thread waits for no CPU: its samples are small (none at all without schedstat).
  d::thread_schedstat stat;
  (void)stat.sample(d::monotonic_ns());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::optional<std::uint32_t> w = stat.sample(d::monotonic_ns());
  if (w) CHECK(*w < 500'000);
  // Samples closer than the period are refused.
  CHECK_FALSE(stat.sample(d::monotonic_ns()).has_value());
}

TEST_CASE("case 3: the idle debt is a leaky bucket, drained by device time") {
  fake_table t;
  d::slot_record& h = t.join(0, prio::high);
  t.join(1, prio::low);
  h.compute.idle_debt_ns = h.compute.lower_debt_ns = 1 * ms;
  d::account_device_time(t.view(), h, 2 * ms, true, 0);
  CHECK(h.compute.idle_debt_ns == 875 * us);  // 1/16 of the device time: for equal waiters
  CHECK(h.compute.lower_debt_ns == 500 * us); // 1/4: for lower classes
  CHECK(d::lower_class_may_take(h, 0));
  CHECK(d::hands_gaps_over(h));
  d::account_device_time(t.view(), h, 2 * ms, true, 0);
  CHECK_FALSE(d::lower_class_may_take(h, 0)); // 0: it idles less than a quarter of its time
  CHECK(d::hands_gaps_over(h));               // 750 us: more than 1/16
  CHECK_FALSE(d::lower_class_may_take(t.slots[2], d::idle_grace_at_guard_ns - 1));
  CHECK(d::lower_class_may_take(t.slots[2], d::idle_grace_at_guard_ns));
}

TEST_CASE("case 5: the holder's own registered threads come before a lower class") {
  fake_table t;
  const d::table_view v = t.view();
  d::slot_record& h = t.join(0, prio::high);
  t.join(1, prio::low);
  d::add_waiter(v, 1, 0);
  t.hold(0, 0, 1 * ms);
  h.compute.lower_debt_ns = 10 * ms; // spent: the lower class would get its gaps
  d::add_waiter(v, 0, 1 * ms);       // a thread of the holder, woken, not yet running
  // The lower waiter does not take the gap...
  d::take_result r = d::try_take(v, 1, 2 * ms, liveness);
  CHECK_FALSE(r.granted);
  CHECK(d::current_holder(v) == 0);
  // ...and the holder's next exit wakes its own threads instead of handing over.
  CHECK(d::release_at_guard_exit(v, 0, 3 * ms) == 0);
  CHECK(d::current_holder(v) == 0);
  // Without its own threads waiting, the gap is the lower class's.
  d::remove_waiters(v, 0);
  CHECK(d::release_at_guard_exit(v, 0, 4 * ms) == 1);
  CHECK(d::current_holder(v) == 1);
}

TEST_CASE("case 6: a watcher woken early arms its watch again; another session's is respected") {
  fake_table t;
  const d::table_view v = t.view();
  t.join(0);
  t.join(1);
  t.join(2);
  t.hold(0, 0, 10 * ms);
  d::add_waiter(v, 1, 10 * ms);
  CHECK(d::watch(v, t.slots[0], 1, 10 * ms, liveness) == 200 * us);
  CHECK(t.header->watcher == 2);
  CHECK(d::watch(v, t.slots[0], 2, 10 * ms + 10 * us, liveness) == liveness); // slot 1 watches
  CHECK(d::watch(v, t.slots[0], 1, 10 * ms + 50 * us, liveness) == 150 * us); // its own: again
  // The watcher's session stops waiting: the watch is off, the next waiter arms its own.
  d::remove_waiters(v, 1);
  CHECK(t.header->watcher == 0);
  CHECK(t.header->watch_until_ns == 0);
  CHECK(d::watch(v, t.slots[0], 2, 10 * ms + 60 * us, liveness) == 140 * us);
}

TEST_CASE("case 7: a paced waiter is no candidate; it is woken to sleep out its pause") {
  fake_table t;
  const d::table_view v = t.view();
  d::slot_record& capped = t.join(0);
  t.join(1);
  capped.settings.compute_limit_ppm = 300'000;
  capped.compute.cap_vclock_ns = 20 * ms; // paced until 20 ms
  d::add_waiter(v, 0, 0);                 // the capped session has waited longest...
  d::add_waiter(v, 1, 1 * ms);
  CHECK(d::best_waiter(v, d::nobody, 5 * ms) == 1);  // ...but is paced at 5 ms: no candidate
  CHECK(d::best_waiter(v, d::nobody, 25 * ms) == 0); // its pause is over
  d::remove_waiters(v, 1);
  const std::uint32_t word = capped.grant_word.load();
  CHECK(d::grant_next(v, 5 * ms) == 0); // woken, not granted
  CHECK(d::current_holder(v) == d::nobody);
  CHECK(capped.grant_word.load() != word);
}

TEST_CASE("case 8: a turn past two quanta of wall time is charged the time it did not account") {
  fake_table t;
  d::slot_record& s = t.join(0);
  t.hold(0, 0, 0);
  t.header->quantum_used_ns = 6 * ms; // accounted 6 ms in 10 ms of wall time: over half
  d::charge_wall(t.view(), s, 10 * ms);
  CHECK(t.header->quantum_used_ns == 6 * ms); // within two quanta: nothing
  CHECK(s.compute.vtime == 0);
  d::charge_wall(t.view(), s, 11 * ms);
  CHECK(t.header->quantum_used_ns == 11 * ms);
  CHECK(s.compute.vtime == 5 * ms * 1000); // the unaccounted 5 ms, at share 1
}

TEST_CASE("issue 40, C10: a turn accounting less than half its wall time is charged past one "
          "quantum") {
  // Before: past two quanta whatever it accounted: a peer waited 11 ms (two quanta and a guard)
  // behind guards accounting 0-10% of their wall time, against a quantum and a guard.
  fake_table t;
  d::slot_record& s = t.join(0);
  t.hold(0, 0, 0);
  t.header->quantum_used_ns = 1 * ms; // accounted 1 ms in 5 ms of wall time
  d::charge_wall(t.view(), s, 5 * ms);
  CHECK(t.header->quantum_used_ns == 1 * ms); // within one quantum: nothing
  d::charge_wall(t.view(), s, 6 * ms);
  CHECK(t.header->quantum_used_ns == 6 * ms);
  CHECK(s.compute.vtime == 5 * ms * 1000); // the unaccounted 5 ms, at share 1
}

TEST_CASE("a compute guarantee: the clock, and the class an owed waiter claims") {
  fake_table t;
  d::slot_record& s = t.join(0, prio::low);
  CHECK(d::claim_priority(s, 10 * ms) == prio::low);     // no guarantee: its own class
  s.settings.compute_guarantee_ppm = 100'000;            // 10%
  CHECK(d::claim_priority(s, 10 * ms) == 8 + prio::low); // owed: above every class
  CHECK(d::claim_priority(s, d::no_time) == prio::low);  // time not known: not looked at
  // 1 ms of device time covers 10 ms of wall time at 10%, from no earlier than 100 ms ago.
  d::account_device_time(t.view(), s, 1 * ms, true, 500 * ms);
  CHECK(s.compute.guarantee_vclock_ns == 410 * ms);
  CHECK_FALSE(d::owed_guarantee(s, 410 * ms)); // it has had what covers its time until then
  CHECK(d::owed_guarantee(s, 411 * ms));       // owed again after
}

TEST_CASE(
    "max_guard: a waiter revokes a holder past its bound, counting it; no bound, no revocation") {
  fake_table t;
  const d::table_view v = t.view();
  d::slot_record& h = t.join(0);
  d::slot_record& w = t.join(1);
  t.hold(0, 0, 0);
  h.compute.active_guards = 1;       // inside a guard...
  h.compute.last_active_ns = 1 * ms; // ...entered at 1 ms, and nothing since
  CHECK_FALSE(d::try_take(v, 1, 5000 * ms, liveness).granted); // no bound: it waits
  h.settings.max_guard_ns = 100 * ms;
  d::take_result r = d::try_take(v, 1, 50 * ms, liveness);
  CHECK_FALSE(r.granted);
  CHECK(r.recheck_ns == 51 * ms); // it re-checks at the bound
  r = d::try_take(v, 1, 101 * ms, liveness);
  CHECK(r.granted); // revoked: the device is the waiter's while the guard still runs
  CHECK(d::current_holder(v) == 1);
  CHECK(h.stats.revocations == 1);
  CHECK(t.header->revocations == 1);
  // The revoked guard's exit accounts its time and decides nothing.
  CHECK(d::exit_step(v, 0, 1 * ms, 200 * ms, 201 * ms) == d::nobody);
  CHECK(h.stats.device_ns == 200 * ms);
  CHECK(h.compute.active_guards == 0);
  CHECK(d::current_holder(v) == 1);
  // A table-wide default applies to sessions without their own bound.
  h.settings.max_guard_ns = 0;
  t.header->default_max_guard_ns = 30 * ms;
  CHECK(d::max_guard_of(*t.header, h) == 30 * ms);
  w.settings.max_guard_ns = 5 * ms;
  CHECK(d::max_guard_of(*t.header, w) == 5 * ms);
}
