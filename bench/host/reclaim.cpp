// SPDX-License-Identifier: Apache-2.0
// reclaim/demand_to_grant: how long a high-class reserve that needs memory a low-class process
// holds as reclaimable waits until it is granted, when the holder answers on its watcher thread
// (docs/design.md section 15), next to a futex round trip between the same two processes (the
// floor: the waiter's request wakes the holder, the holder's release wakes the waiter).
// reclaim/loan_call_to_grant: the same for a guaranteed session reserving within its guarantee
// while a borrower holds part of it on loan (section 15, "Lent guarantees").
#include <benchmark/benchmark.h>

#include <mutex>

#include "support.hpp"

namespace {

using namespace bench_host;

constexpr std::uint32_t reclaim_target = 300;                 // demands per run
constexpr std::uint64_t reclaim_deadline_ns = 30'000'000'000; // stop collecting after 30 s
constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t cache_bytes = 800 * MiB;  // of the table's 1 GiB: the holder's cache
constexpr std::uint64_t demand_bytes = 600 * MiB; // the waiter's reserve: 376 MiB must come back
// With loans: the waiter is guaranteed 768 MiB; the borrower holds 256 MiB of its own and a
// 512 MiB cache on loan; the waiter's 600 MiB need 344 MiB of the loan back.
constexpr std::uint64_t guarantee_bytes = 768 * MiB;
constexpr std::uint64_t own_bytes = 256 * MiB;
constexpr std::uint64_t loan_bytes = 512 * MiB;

struct reclaim_stage {
  std::atomic<std::uint32_t> ready{0};  // processes joined
  std::atomic<std::uint32_t> full{0};   // rounds the holder's cache was whole for
  std::atomic<std::uint32_t> done{0};   // rounds the waiter finished (its memory released)
  std::atomic<std::uint32_t> ping{0};   // round trips: the waiter's side
  std::atomic<std::uint32_t> pong{0};   // round trips: the holder's side
  std::atomic<std::uint32_t> failed{0}; // 1: a process gave up
  std::uint32_t count = 0, trips = 0;   // samples taken
  std::uint64_t demand_ns[reclaim_target];
  std::uint64_t trip_ns[reclaim_target];
};

// The low-class holder: a cache of cache_bytes (with `loan`: own_bytes of its own and a cache of
// loan_bytes on loan), given back by its watcher's handler, grown back whole before each round;
// then the round trips' other side.
int reclaim_holder(reclaim_stage& st, const bench_table& t, bool loan) {
  gpushare::session_options o = t.options("cache");
  o.priority = gpushare::priority::low;
  gpushare::session s(t.key(), o);
  std::mutex m;
  gpushare::reservation own;
  gpushare::reservation cache;
  s.on_reclaim([&](std::uint64_t asked) {
    const std::lock_guard<std::mutex> l(m);
    const std::uint64_t give = std::min(asked, cache.size());
    cache.shrink(give);
    return give;
  });
  s.watch_reclaim(); // first: a loan is made only to a session that answers at once
  const std::uint64_t whole = loan ? loan_bytes : cache_bytes;
  if (loan) own = s.reserve(own_bytes, std::chrono::seconds(10));
  {
    const std::lock_guard<std::mutex> l(m);
    cache = s.reserve_reclaimable(whole, std::chrono::seconds(10));
  }
  count_up(st.ready);
  for (std::uint32_t round = 0; round < reclaim_target; ++round) {
    if (!wait_at_least_for(st.done, round, reclaim_deadline_ns)) return 1;
    {
      const std::lock_guard<std::mutex> l(m);
      cache.grow(whole - cache.size(), std::chrono::seconds(10));
    }
    count_up(st.full);
  }
  for (std::uint32_t i = 1; i <= reclaim_target; ++i) {
    if (!wait_at_least_for(st.ping, i, reclaim_deadline_ns)) return 1;
    count_up(st.pong);
  }
  return 0;
}

// The high-class waiter (with `loan`: the guaranteed session, of the holder's class): each round
// reserves demand_bytes once the cache is whole, and records the time to the grant; then the
// round trips.
int reclaim_waiter(reclaim_stage& st, const bench_table& t, bool loan) {
  gpushare::session_options o = t.options("urgent");
  o.priority = loan ? gpushare::priority::low : gpushare::priority::high;
  if (loan) o.memory_guarantee = gpushare::memory_amount::of_bytes(guarantee_bytes);
  gpushare::session s(t.key(), o);
  count_up(st.ready);
  for (std::uint32_t round = 0; round < reclaim_target; ++round) {
    if (!wait_at_least_for(st.full, round + 1, reclaim_deadline_ns)) return 1;
    const std::uint64_t t0 = now_ns();
    gpushare::reservation r = s.reserve(demand_bytes, std::chrono::seconds(10));
    st.demand_ns[st.count++] = now_ns() - t0;
    r.release();
    count_up(st.done);
  }
  for (std::uint32_t i = 1; i <= reclaim_target; ++i) {
    const std::uint64_t t0 = now_ns();
    count_up(st.ping);
    if (!wait_at_least_for(st.pong, i, reclaim_deadline_ns)) return 1;
    st.trip_ns[st.trips++] = now_ns() - t0;
  }
  return 0;
}

double percentile_us(std::vector<std::uint64_t> ns, double q) {
  std::sort(ns.begin(), ns.end());
  return static_cast<double>(ns[static_cast<std::size_t>(q * static_cast<double>(ns.size() - 1))]) /
         1e3;
}

// reclaim/demand_to_grant: 300 demands, each served by the holder's watcher giving back the 376
// MiB lacking; time is the median. The same two processes then time 300 futex round trips.
// reclaim/loan_call_to_grant (`loan`): 300 reserves within a guarantee, each served by the
// borrower's watcher giving back 344 MiB of its loan. The lender joins first.
void reclaim_run(benchmark::State& state, bool loan) {
  bench_table t(loan ? "loan" : "reclaim");
  const double load_start = load1();
  shared_block<reclaim_stage> st;
  if (!st) {
    state.SkipWithError("mmap failed");
    return;
  }
  for (auto _ : state) {
    const auto holder_main = [&] { return reclaim_holder(*st, t, loan); };
    const auto waiter_main = [&] { return reclaim_waiter(*st, t, loan); };
    const pid_t first = loan ? spawn(waiter_main) : spawn(holder_main);
    if (!wait_at_least_for(st->ready, 1, 10'000'000'000)) st->failed = 1;
    const pid_t second = loan ? spawn(holder_main) : spawn(waiter_main);
    const bool ok = reap(second) && reap(first) && st->failed == 0;
    if (!ok || st->count < reclaim_target || st->trips < reclaim_target) {
      state.SkipWithError("a reclaim process failed");
      return;
    }
    const std::vector<std::uint64_t> d(st->demand_ns, st->demand_ns + st->count);
    state.SetIterationTime(percentile_us(d, 0.5) / 1e6);
  }
  const std::vector<std::uint64_t> d(st->demand_ns, st->demand_ns + st->count);
  const std::vector<std::uint64_t> r(st->trip_ns, st->trip_ns + st->trips);
  reclaim_series& out = loan ? ratios.loan : ratios.reclaim;
  out.p50_us.push_back(percentile_us(d, 0.5));
  out.p99_us.push_back(percentile_us(d, 0.99));
  out.trip_p50_us.push_back(percentile_us(r, 0.5));
  out.trip_p99_us.push_back(percentile_us(r, 0.99));
  out.load.push_back(load_start);
  state.counters["samples"] = static_cast<double>(d.size());
  state.counters["p50_us"] = out.p50_us.back();
  state.counters["p99_us"] = out.p99_us.back();
  state.counters["trip_p50_us"] = out.trip_p50_us.back();
  state.counters["trip_p99_us"] = out.trip_p99_us.back();
  state.counters["load1"] = load_start;
}
void reclaim_demand_to_grant(benchmark::State& state) { reclaim_run(state, false); }
void reclaim_loan_call_to_grant(benchmark::State& state) { reclaim_run(state, true); }
BENCHMARK(reclaim_loan_call_to_grant)
    ->Name("reclaim/loan_call_to_grant")
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(reclaim_demand_to_grant)
    ->Name("reclaim/demand_to_grant")
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMicrosecond);

} // namespace
