// SPDX-License-Identifier: Apache-2.0
// The chaos test's shared state and its workers (tests/chaos/chaos.cpp has the checker): each
// worker joins, reserves, grows, shrinks, releases, takes guards, yields, changes its settings and
// leaves, over and over, and dies or stops itself at crash points now and then.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <gpushare/gpushare.hpp>
#include <map>
#include <optional>
#include <random>
#include <sched.h>
#include <signal.h>
#include <string>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <vector>

namespace chaos_test {

constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t capacity = 256 * MiB;
constexpr std::uint32_t max_workers = 64;
constexpr std::uint32_t max_intervals = 1u << 20;
// A dead slot must be gone by then. Workers stopped for up to 800 ms (some inside the table lock)
// delay reclaiming: the longest recovery seen in 1,000 kills was 1.15 s.
constexpr std::uint64_t recovery_bound_ns = 3'000'000'000;
constexpr std::uint64_t progress_bound_ns = 15'000'000'000; // an op must complete by then

/// CLOCK_MONOTONIC in nanoseconds, the clock of the table's timestamps.
inline std::uint64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

struct interval {
  std::uint64_t start, end;
  std::uint32_t worker;
};

/// Shared between this process and every worker (an anonymous MAP_SHARED mapping).
struct shared_state {
  std::atomic<std::uint64_t> heartbeat[max_workers]; ///< when worker i last completed an op
  std::atomic<std::int32_t> pid[max_workers];
  std::atomic<std::uint64_t> ops;
  std::atomic<std::uint64_t> guards;
  std::atomic<std::uint64_t> timeouts; ///< reservations refused (timeout or over limit)
  std::atomic<std::uint64_t> busy;     ///< operations refused with table_busy (a stopped peer)
  std::atomic<std::uint64_t> guard_timeouts;        ///< guards that gave up at their deadline
  std::atomic<std::uint64_t> revoked;               ///< guards revoked at their guard bound
  std::atomic<std::uint64_t> evicted;               ///< operations that found their session evicted
  std::atomic<std::uint32_t> in_guard[max_workers]; ///< 1 while worker i is inside a guard
  std::atomic<std::uint64_t> alarms;                ///< SIGALRMs the workers' storms delivered
  std::atomic<std::uint32_t> errors;                ///< unexpected errors in workers
  std::atomic<std::uint64_t> idle_since[max_workers];    ///< 0: in an operation; else idle since
  std::atomic<std::uint64_t> idle_reserved[max_workers]; ///< bytes its reservations hold then
  std::atomic<std::uint64_t> idles;                      ///< idle periods the workers took
  std::atomic<std::uint64_t> idles_after_timeout;        ///< of them, right after a lock-timeout op
  char last_error[512];
  std::atomic<std::uint32_t> next_interval;
  interval intervals[max_intervals];
};

struct options {
  std::uint32_t workers = 8;
  std::uint32_t kills = 300;
  std::uint32_t max_seconds = 110;
  std::uint32_t self_kill_per_mille = 3; ///< chance a crash point kills its process, per 1000
  bool inject_violation = false;         ///< checks the checker: fakes two overlapping guards
  std::string key;
};

// ---------------------------------------------------------------------------------------------
// Worker
// ---------------------------------------------------------------------------------------------

inline std::uint32_t self_kill_per_mille = 0;
inline std::mt19937* worker_rng = nullptr;
inline std::atomic<std::uint64_t> alarm_count{0};

inline std::uint32_t self_stop_per_mille = 0;

/// At a crash point (often inside the table lock): die, or stop until the checker resumes us.
inline void maybe_die_here(const char*) {
  if (!worker_rng) return;
  const std::uint32_t dice = (*worker_rng)() % 1000;
  if (dice < self_kill_per_mille)
    ::kill(::getpid(), SIGKILL);
  else if (dice < self_kill_per_mille + self_stop_per_mille)
    ::kill(::getpid(), SIGSTOP);
}

inline std::string worker_name(std::uint32_t w, std::uint32_t seed) {
  // Appended piece by piece: GCC 12 at -O3 reports `"w" + std::to_string(w)` as a -Wrestrict
  // overlap (a false positive that -Werror makes fatal).
  std::string name = "w";
  name += std::to_string(w);
  name += '-';
  name += std::to_string(seed);
  return name;
}

inline void on_alarm(int) { alarm_count.fetch_add(1, std::memory_order_relaxed); }

/// A SIGALRM every `period_us`, with or without SA_RESTART.
inline void start_storm(bool restart, unsigned period_us) {
  struct sigaction sa {};
  sa.sa_handler = on_alarm;
  sa.sa_flags = restart ? SA_RESTART : 0;
  ::sigaction(SIGALRM, &sa, nullptr);
  const itimerval it{{0, static_cast<suseconds_t>(period_us)},
                     {0, static_cast<suseconds_t>(period_us)}};
  ::setitimer(ITIMER_REAL, &it, nullptr);
}

inline void spin_for(std::uint64_t ns) {
  const std::uint64_t end = now_ns() + ns;
  while (now_ns() < end) {
  }
}

[[noreturn]] inline void worker_main(shared_state& st, std::uint32_t w, const options& o,
                                     std::uint32_t seed, bool in_namespace) {
  std::mt19937 rng(seed * 2654435761u);
  worker_rng = &rng;
  // pid 1 of a PID namespace cannot SIGKILL itself: no crash points there.
  self_kill_per_mille = in_namespace ? 0 : o.self_kill_per_mille;
  self_stop_per_mille = in_namespace ? 0 : o.self_kill_per_mille; // as often as self-kills
  gpushare::detail::crash_point_hook = maybe_die_here;
  // Stopped peers are part of the game: give up on the table lock after 200 ms, not 10 s.
  gpushare::detail::lock_timeout_ns = 200'000'000;
  const unsigned storm = rng() % 4; // 0, 1: none; 2: with SA_RESTART; 3: without
  if (storm >= 2) start_storm(storm == 2, 500 + rng() % 4500);
  std::uint64_t alarms_reported = 0;
  const auto beat = [&] {
    st.heartbeat[w].store(now_ns());
    st.ops.fetch_add(1);
    const std::uint64_t a = alarm_count.load(std::memory_order_relaxed);
    st.alarms.fetch_add(a - alarms_reported);
    alarms_reported = a;
  };
  // Between operations a worker sometimes goes idle for 300 ms to 1 s, calling nothing: usually
  // after an operation that took longer than the lock timeout (an exit may have been lost to
  // it), rarely otherwise. The checker then expects the table to show nothing of it running or
  // waiting (check 5).
  const auto busy = [&] { st.idle_since[w].store(0); };
  const auto maybe_idle = [&](std::uint64_t op_start,
                              const std::vector<gpushare::reservation>& held) {
    const bool slow = now_ns() - op_start >= gpushare::detail::lock_timeout_ns;
    std::uint64_t reserved = 0;
    for (const auto& r : held) reserved += r.size();
    st.idle_reserved[w].store(reserved);
    st.idle_since[w].store(now_ns());
    if (rng() % 100 >= (slow ? 80u : 3u)) return;
    st.idles.fetch_add(1);
    if (slow) st.idles_after_timeout.fetch_add(1);
    const std::uint64_t until = now_ns() + 300'000'000 + rng() % 700'000'000;
    while (now_ns() < until) ::usleep(10'000); // by the clock: alarms cut sleeps short
  };
  const auto note_error = [&](const char* what) {
    if (st.errors.fetch_add(1) == 0)
      std::snprintf(st.last_error, sizeof st.last_error, "worker %u (pid %d): %s", w, ::getpid(),
                    what);
  };
  for (;;) {
    busy();
    try {
      gpushare::session_options so;
      so.domain = "gpusharechaos";
      so.name = worker_name(w, seed);
      so.priority = static_cast<int>(rng() % 3);
      so.share = 1 + rng() % 4;
      so.capacity = capacity;
      if (w % 2 == 0) so.max_guard = std::chrono::milliseconds(300); // revoked when stopped longer
      gpushare::session s(o.key, so);
      beat();
      std::vector<gpushare::reservation> held;
      const int ops = 20 + static_cast<int>(rng() % 200);
      for (int i = 0; i < ops; ++i) {
        busy();
        const std::uint64_t op_start = now_ns();
        const unsigned pick = rng() % 100;
        if (pick < 30) { // reserve, waiting a little
          try {
            held.push_back(s.reserve((1 + rng() % 48) * MiB, std::chrono::milliseconds(50)));
          } catch (const gpushare::error& e) {
            // Both are answers, not failures: memory busy for 50 ms, or this session already
            // holds so much that the request can never fit under its limit.
            if (e.code() != gpushare::errc::timeout && e.code() != gpushare::errc::over_limit)
              throw;
            st.timeouts.fetch_add(1);
          }
        } else if (pick < 40 && !held.empty()) { // grow or shrink one
          auto& r = held[rng() % held.size()];
          if (rng() % 2) {
            try {
              (void)r.try_grow((1 + rng() % 8) * MiB);
            } catch (const gpushare::error& e) {
              if (e.code() != gpushare::errc::over_limit) throw;
              st.timeouts.fetch_add(1);
            }
          } else if (r.size() > MiB) {
            r.shrink(MiB);
          }
        } else if (pick < 55 && !held.empty()) { // release one
          held.erase(held.begin() + static_cast<long>(rng() % held.size()));
        } else if (pick < 90) { // a guard
          std::uint64_t start = 0, end = 0;
          bool revoked = false;
          try {
            gpushare::scoped_kernel g(s, std::chrono::milliseconds(500)); // a holder may be stopped
            st.in_guard[w].store(1);
            start = now_ns();
            // Mostly short guards; one in 8 lasts 20 ms, so the killer often stops a holder
            // inside its guard (the case guard bounds and evictions are for).
            spin_for(rng() % 8 == 0 ? 20'000'000 : 20'000 + rng() % 200'000);
            end = now_ns();
            st.in_guard[w].store(0);
            g.finish();
            revoked = g.revoked();
          } catch (const gpushare::error& e) {
            if (e.code() != gpushare::errc::timeout) throw;
            st.guard_timeouts.fetch_add(1);
            continue;
          }
          (void)s.info(); // evicted meanwhile: session_closed, and the guard was not exclusive
          if (revoked) {
            st.revoked.fetch_add(1);
          } else {
            const std::uint32_t k = st.next_interval.fetch_add(1);
            if (k < max_intervals) st.intervals[k] = {start, end, w};
          }
          st.guards.fetch_add(1);
          maybe_idle(op_start, held); // before the yield: its lock would apply a lost exit
          busy();
          s.yield();
        } else if (pick < 97) { // change its own settings
          gpushare::settings_change c;
          c.share = 1 + rng() % 4;
          if (rng() % 2) c.priority = static_cast<int>(rng() % 3);
          s.configure(c);
        } else {
          break; // leave and join again
        }
        beat();
        maybe_idle(op_start, held);
      }
      busy(); // the reservations' releases and the leave follow
    } catch (const gpushare::error& e) {
      // A peer stopped while holding the table lock: an answer, not a failure (after it, the
      // session is left and joined again, which is what the exit paths must survive).
      if (e.code() == gpushare::errc::table_busy)
        st.busy.fetch_add(1);
      else if (e.code() == gpushare::errc::session_closed &&
               std::string(e.what()).find("evicted") != std::string::npos)
        st.evicted.fetch_add(1); // the checker evicted it: join again
      else
        note_error(e.what());
    } catch (const std::exception& e) {
      note_error(e.what());
    }
    beat();
  }
}

} // namespace chaos_test
