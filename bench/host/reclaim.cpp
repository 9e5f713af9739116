// SPDX-License-Identifier: Apache-2.0
// reclaim/demand_to_grant: how long a high-class reserve that needs memory a low-class process
// holds as reclaimable waits until it is granted, when the holder answers on its watcher thread
// (docs/design.md section 15), next to a futex round trip between the same two processes (the
// floor: the waiter's request wakes the holder, the holder's release wakes the waiter).
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

// The low-class holder: a cache of cache_bytes, given back by its watcher's handler, grown back
// whole before each round; then the round trips' other side.
int reclaim_holder(reclaim_stage& st, const bench_table& t) {
  gpushare::session_options o = t.options("cache");
  o.priority = gpushare::priority::low;
  gpushare::session s(t.key(), o);
  std::mutex m;
  gpushare::reservation cache = s.reserve_reclaimable(cache_bytes, std::chrono::seconds(10));
  s.on_reclaim([&](std::uint64_t asked) {
    const std::lock_guard<std::mutex> l(m);
    const std::uint64_t give = std::min(asked, cache.size());
    cache.shrink(give);
    return give;
  });
  s.watch_reclaim();
  count_up(st.ready);
  for (std::uint32_t round = 0; round < reclaim_target; ++round) {
    if (!wait_at_least_for(st.done, round, reclaim_deadline_ns)) return 1;
    {
      const std::lock_guard<std::mutex> l(m);
      cache.grow(cache_bytes - cache.size(), std::chrono::seconds(10));
    }
    count_up(st.full);
  }
  for (std::uint32_t i = 1; i <= reclaim_target; ++i) {
    if (!wait_at_least_for(st.ping, i, reclaim_deadline_ns)) return 1;
    count_up(st.pong);
  }
  return 0;
}

// The high-class waiter: each round reserves demand_bytes once the cache is whole, and records
// the time to the grant; then the round trips.
int reclaim_waiter(reclaim_stage& st, const bench_table& t) {
  gpushare::session_options o = t.options("urgent");
  o.priority = gpushare::priority::high;
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
void reclaim_demand_to_grant(benchmark::State& state) {
  bench_table t("reclaim");
  const double load_start = load1();
  shared_block<reclaim_stage> st;
  if (!st) {
    state.SkipWithError("mmap failed");
    return;
  }
  for (auto _ : state) {
    const pid_t holder = spawn([&] { return reclaim_holder(*st, t); });
    if (!wait_at_least_for(st->ready, 1, 10'000'000'000)) st->failed = 1;
    const pid_t waiter = spawn([&] { return reclaim_waiter(*st, t); });
    const bool ok = reap(waiter) && reap(holder) && st->failed == 0;
    if (!ok || st->count < reclaim_target || st->trips < reclaim_target) {
      state.SkipWithError("a reclaim process failed");
      return;
    }
    const std::vector<std::uint64_t> d(st->demand_ns, st->demand_ns + st->count);
    state.SetIterationTime(percentile_us(d, 0.5) / 1e6);
  }
  const std::vector<std::uint64_t> d(st->demand_ns, st->demand_ns + st->count);
  const std::vector<std::uint64_t> r(st->trip_ns, st->trip_ns + st->trips);
  reclaim_series& out = ratios.reclaim;
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
BENCHMARK(reclaim_demand_to_grant)
    ->Name("reclaim/demand_to_grant")
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMicrosecond);

} // namespace
