// SPDX-License-Identifier: Apache-2.0
// Chaos test: worker processes join, reserve/grow/shrink/release memory, take guards, yield,
// change their settings and leave, continuously, while this process SIGKILLs random workers at
// random times and starts replacements, and SIGSTOPs others for up to 800 ms (longer than the
// workers' 200 ms table-lock timeout and their guards' 500 ms deadline). Workers also kill or
// stop themselves, rarely, at the protocol's crash points (inside the table lock, mid-join,
// mid-handover), so lock timeouts hit every exit path; a
// quarter of them run under a SIGALRM storm with SA_RESTART and a quarter under one without;
// where this process may create PID namespaces (root), every other worker runs as pid 1 of a
// namespace of its own, so the workers' pids and thread ids collide. A checker verifies
// throughout:
//
//   1. no two completed guards of different workers overlap in time (at most one holder), except
//      guards that lost the device to a guard bound (half the workers set max_guard: a worker
//      stopped inside a guard for longer is revoked, scoped_kernel::revoked()) or whose session
//      was evicted meanwhile (the checker evicts some workers it stopped, as an operator
//      would with `gpushare evict`): exclusivity is not promised for those;
//   2. the table's reserved total equals the sum over its live sessions and the committed total
//      never exceeds the capacity;
//   3. no slot stays owned by a dead process for longer than the recovery bound;
//   4. every live worker makes progress (no operation hangs beyond a bound);
//   5. a worker that has gone idle (no gpushare call; some do right after an operation that hit
//      the lock timeout, so an exit may have been lost then) has nothing left in the table but
//      its reservations: no guard counted running, no thread counted waiting, exactly the bytes
//      its reservations hold. Lost exit updates are applied by whichever process locks next
//      (the journal, detail/journal.hpp), not only by the idle session's next call.
//
// It prints kills, recoveries, the longest recovery and every violation, and exits 1 on any.
//
//   gpushare_chaos                      CI mode: 8 workers, at least 300 kills
//   gpushare_chaos --kills 1000         long mode (docs/benchmarks.md has its figures)
//   gpushare_chaos --workers 16 --kills 2000 --max-seconds 600
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

#include "../support/shared_block.hpp"
#include "worker.hpp"

namespace {

using namespace chaos_test;

// ---------------------------------------------------------------------------------------------
// Checker
// ---------------------------------------------------------------------------------------------

/// Whether `pid` is a live process (not gone, not a zombie).
bool alive(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z' &&
         line[close + 2] != 'X';
}

/// Whether `pid` is stopped (state T).
bool is_stopped(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'T';
}

struct report {
  std::uint32_t kills = 0, self_kills = 0, restarts = 0, stops = 0, long_stops = 0, self_stops = 0;
  std::uint64_t max_recovery_ns = 0, recoveries = 0, budget_checks = 0, budget_checks_busy = 0;
  std::uint64_t idle_checks = 0;    ///< idle workers whose slot check 5 looked at
  std::uint64_t evictions = 0;      ///< sessions this checker evicted
  std::uint64_t stops_in_guard = 0; ///< workers stopped inside a guard
  std::map<std::uint32_t, std::uint64_t> idle_reported; ///< worker -> idle period reported
  std::vector<std::string> violations;
  void violation(std::string s) {
    if (violations.size() < 20) std::fprintf(stderr, "VIOLATION: %s\n", s.c_str());
    violations.push_back(std::move(s));
  }
};

/// Evicts the session of the (stopped) worker whose pid is `target`, if it has one now.
template <class Procs>
void evict_worker(gpushare::table& table, const Procs& procs, pid_t target, report& rep) {
  const auto p =
      std::find_if(procs.begin(), procs.end(), [&](const auto& x) { return x.target == target; });
  if (p == procs.end()) return;
  try {
    for (const auto& id : table.find(p->name)) {
      (void)table.evict(id);
      ++rep.evictions;
    }
  } catch (const gpushare::error& e) {
    // A stopped worker may hold the table lock (table_busy), or the session ended meanwhile.
    if (e.code() != gpushare::errc::table_busy && e.code() != gpushare::errc::invalid_argument)
      rep.violation(std::string("evicting ") + p->name + ": " + e.what());
  }
}

/// The name in slot `s`, read with relaxed loads (the slot may be written meanwhile).
std::string slot_name(const gpushare::detail::slot_record& slot) {
  char name[gpushare::detail::name_capacity];
  for (std::size_t k = 0; k < sizeof name; ++k)
    name[k] = __atomic_load_n(&slot.name[k], __ATOMIC_RELAXED);
  name[sizeof name - 1] = '\0';
  return name;
}

/// 5. Under the table lock (which folds every journal first): a worker idle for over 50 ms shows
///    no running guard and no waiting thread, and exactly the bytes its reservations hold.
template <class Procs>
void check_idle_workers(gpushare::detail::table_core& raw, shared_state& st, const Procs& procs,
                        std::uint32_t workers, report& rep) {
  namespace d = gpushare::detail;
  std::map<std::string, std::uint32_t> slot_of;
  for (std::uint32_t i = 0; i < raw.slot_count(); ++i)
    if (raw.slot(i).state.load(std::memory_order_relaxed) == d::slot_active)
      slot_of[slot_name(raw.slot(i))] = i;
  for (std::uint32_t w = 0; w < workers; ++w) {
    const std::uint64_t since = st.idle_since[w].load();
    const auto it = slot_of.find(procs[w].name);
    if (since == 0 || now_ns() - since < 50'000'000 || it == slot_of.end()) continue;
    const d::slot_record& s = raw.slot(it->second);
    const std::uint32_t running = d::busy_guards(s), waiting = s.compute.wants_device;
    const std::uint32_t memory = s.memory.waiting;
    const std::uint64_t reserved = s.memory.reserved, expected = st.idle_reserved[w].load();
    if (st.idle_since[w].load() != since) continue; // it started an operation meanwhile
    ++rep.idle_checks;
    if ((running != 0 || waiting != 0 || memory != 0 || reserved != expected) &&
        rep.idle_reported[w] != since) { // once per idle period
      rep.idle_reported[w] = since;
      rep.violation("worker " + procs[w].name + ", idle for " +
                    std::to_string((now_ns() - since) / 1'000'000) + " ms, shows " +
                    std::to_string(running) + " guards running, " + std::to_string(waiting) +
                    " threads waiting for the device, " + std::to_string(memory) + " for memory, " +
                    std::to_string(reserved) + " bytes reserved (its reservations hold " +
                    std::to_string(expected) + ")");
    }
  }
}

int run(const options& o) {
  std::optional<test::shared_block<shared_state>> shared; // what the workers report, in shm
  try {
    shared.emplace();
  } catch (const std::bad_alloc&) {
    return 2;
  }
  auto& st = (*shared)[0];

  gpushare::session_options so;
  so.domain = "gpusharechaos";
  so.capacity = capacity;
  auto table = gpushare::table::open(o.key, gpushare::open_mode::open_or_create,
                                     so); // creates it; holds no session
  gpushare::detail::table_core raw(
      gpushare::detail::mapped_table::open_existing(table.object_name(), 1'000'000'000));

  gpushare::detail::lock_timeout_ns = 100'000'000; // this process's budget checks (see 2.)
  std::mt19937 rng(12345);
  // Whether PID namespaces can be made here (root, no sandbox forbidding it).
  const bool namespaces = [] {
    const pid_t pid = ::fork();
    if (pid == 0) std::_Exit(::unshare(CLONE_NEWPID) == 0 ? 0 : 1);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }();
  struct proc {
    pid_t target = -1; ///< the worker, as this process numbers it: signal this one
    pid_t reap = -1;   ///< our child: the worker, or the process that made its namespace
    std::string name;  ///< its session's name (pids inside namespaces mean nothing here)
  };
  std::vector<proc> procs(o.workers);
  std::uint32_t starts = 0, ns_starts = 0;
  std::map<std::string, std::uint64_t> killed_at; ///< workers we killed, until their slot is gone
  std::map<std::string, std::uint64_t> self_dead; ///< died by themselves (crash points)
  std::map<pid_t, std::uint64_t> stopped;         ///< stopped workers, until when
  const auto start_worker = [&](std::uint32_t w) {
    st.heartbeat[w].store(now_ns());
    const std::uint32_t seed = ++starts;
    const bool in_ns = namespaces && w % 2 == 1;
    st.pid[w].store(0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL); // never outlive the checker
      if (!in_ns) worker_main(st, w, o, seed, false);
      // The worker is pid 1 of a new namespace; this process mirrors how it ends.
      if (::unshare(CLONE_NEWPID) != 0) std::_Exit(3);
      const pid_t inner = ::fork();
      if (inner == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        worker_main(st, w, o, seed, true);
      }
      st.pid[w].store(inner);
      int status = 0;
      while (::waitpid(inner, &status, 0) < 0 && errno == EINTR) {
      }
      if (WIFSIGNALED(status)) {
        ::signal(WTERMSIG(status), SIG_DFL);
        ::kill(::getpid(), WTERMSIG(status));
      }
      std::_Exit(WIFEXITED(status) ? WEXITSTATUS(status) : 4);
    }
    proc& p = procs[w];
    p.reap = pid;
    p.target = pid;
    p.name = worker_name(w, seed);
    if (in_ns) {
      ++ns_starts;
      while (st.pid[w].load() == 0) ::usleep(100);
      p.target = st.pid[w].load();
    }
  };
  for (std::uint32_t w = 0; w < o.workers; ++w) start_worker(w);

  report rep;
  const std::uint64_t t0 = now_ns();
  std::uint64_t next_kill = t0 + 20'000'000, next_snapshot = t0;
  while (true) {
    const std::uint64_t now = now_ns();
    const bool enough = rep.kills + rep.self_kills >= o.kills;
    if (enough || now - t0 > std::uint64_t{o.max_seconds} * 1'000'000'000) break;

    // Reap workers that died (killed by us or at a crash point) and start replacements.
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      const auto it =
          std::find_if(procs.begin(), procs.end(), [&](const proc& p) { return p.reap == pid; });
      if (it == procs.end()) continue;
      stopped.erase(it->target);
      if (!killed_at.count(it->name)) {
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
          ++rep.self_kills;
          self_dead[it->name] = now;
        } else {
          rep.violation("worker " + it->name + " exited unexpectedly (status " +
                        std::to_string(status) + ")");
        }
      }
      ++rep.restarts;
      start_worker(static_cast<std::uint32_t>(it - procs.begin()));
    }

    // Resume stopped workers whose time is up. One stopped for long is sometimes evicted first,
    // as an operator would (`gpushare evict`): its session ends while it is stopped.
    for (auto it = stopped.begin(); it != stopped.end();) {
      if (now >= it->second) {
        if (rng() % 4 == 0) evict_worker(table, procs, it->first, rep);
        ::kill(it->first, SIGCONT);
        it = stopped.erase(it);
      } else {
        ++it;
      }
    }

    // Workers that stopped themselves at a crash point (inside the lock, often): resume them
    // after 100 to 700 ms, past the others' lock timeout.
    for (const proc& p : procs) {
      if (p.target <= 0 || stopped.count(p.target) || !is_stopped(p.target)) continue;
      stopped[p.target] = now + 100'000'000 + rng() % 600'000'000;
      ++rep.self_stops;
    }

    // Kill a random worker now and then, or stop one for up to 800 ms (guards wait 500 ms).
    if (now >= next_kill) {
      std::uint32_t w = rng() % o.workers;
      if (rng() % 2 == 0) // half the time, one inside a guard if any (a stopped holder)
        for (std::uint32_t k = 0; k < o.workers; ++k)
          if (st.in_guard[(w + k) % o.workers].load()) {
            w = (w + k) % o.workers;
            break;
          }
      const proc& p = procs[w];
      if (rng() % 5 < 3) {
        if (p.target > 0 && !killed_at.count(p.name)) {
          ::kill(p.target, SIGKILL);
          killed_at[p.name] = now_ns();
          ++rep.kills;
        }
      } else if (p.target > 0 && !stopped.count(p.target)) {
        const std::uint64_t for_ns = 1'000'000 + rng() % 800'000'000;
        if (st.in_guard[w].load()) ++rep.stops_in_guard;
        ::kill(p.target, SIGSTOP);
        stopped[p.target] = now + for_ns;
        ++rep.stops;
        if (for_ns > 200'000'000) ++rep.long_stops;
      }
      next_kill = now + 10'000'000 + rng() % 140'000'000; // 10 to 150 ms
    }

    // 3. Dead processes' slots disappear within the bound (read without the lock, so this
    //    process never does the reclaiming itself).
    std::map<std::string, bool> present;
    for (std::uint32_t i = 0; i < raw.slot_count(); ++i) {
      const auto& slot = raw.slot(i);
      if (slot.state.load(std::memory_order_acquire) == gpushare::detail::slot_active)
        present[slot_name(slot)] = true;
    }
    for (auto* dead : {&killed_at, &self_dead}) {
      for (auto it = dead->begin(); it != dead->end();) {
        const std::uint64_t age = now_ns() - it->second;
        if (!present.count(it->first)) {
          rep.max_recovery_ns = std::max(rep.max_recovery_ns, age);
          ++rep.recoveries;
          it = dead->erase(it);
        } else {
          if (age > recovery_bound_ns) {
            rep.violation("worker " + it->first + " still owns a slot " +
                          std::to_string(age / 1'000'000) + " ms after it died");
            it = dead->erase(it);
          } else {
            ++it;
          }
        }
      }
    }

    // 4. Progress.
    for (std::uint32_t w = 0; w < o.workers; ++w) {
      const std::uint64_t beat = st.heartbeat[w].load();
      if (now > beat && now - beat > progress_bound_ns && alive(procs[w].target)) {
        rep.violation("worker " + procs[w].name + " (pid " + std::to_string(procs[w].target) +
                      ") made no progress for " + std::to_string((now - beat) / 1'000'000) + " ms");
        st.heartbeat[w].store(now);
      }
    }

    // 2. Budget totals, read under the table lock (without reclaiming anything). A worker stopped
    //    inside the lock holds it until this loop resumes it: wait 100 ms at most, then move on.
    if (now >= next_snapshot) try {
        gpushare::detail::table_core::guard g(raw);
        const auto& h = raw.header();
        std::uint64_t sum = 0;
        for (std::uint32_t i = 0; i < raw.slot_count(); ++i) {
          const auto& slot = raw.slot(i);
          if (slot.state.load(std::memory_order_relaxed) == gpushare::detail::slot_active)
            sum += slot.memory.reserved;
        }
        if (sum != h.reserved_total)
          rep.violation("reserved total " + std::to_string(h.reserved_total) +
                        " != sum over live sessions " + std::to_string(sum));
        if (h.committed_total > h.capacity)
          rep.violation("committed " + std::to_string(h.committed_total) + " > capacity " +
                        std::to_string(h.capacity));
        check_idle_workers(raw, st, procs, o.workers, rep);
        ++rep.budget_checks;
        next_snapshot = now + 10'000'000;
      } catch (const gpushare::error& e) {
        if (e.code() != gpushare::errc::table_busy) throw;
        ++rep.budget_checks_busy;
        next_snapshot = now + 10'000'000;
      }
    ::usleep(2000);
  }

  for (const proc& p : procs) ::kill(p.target, SIGKILL);
  for (const proc& p : procs) ::waitpid(p.reap, nullptr, 0);
  const std::uint64_t elapsed = now_ns() - t0;

  if (o.inject_violation) { // proves the overlap check can fail
    const std::uint32_t k = st.next_interval.fetch_add(2);
    if (k + 1 < max_intervals) {
      st.intervals[k] = {t0, t0 + 1000, 0};
      st.intervals[k + 1] = {t0 + 500, t0 + 1500, 1};
    }
  }

  // 1. No two completed guards of different workers overlap.
  const std::uint32_t n = std::min(st.next_interval.load(), max_intervals);
  std::vector<interval> iv(st.intervals, st.intervals + n);
  std::sort(iv.begin(), iv.end(),
            [](const interval& a, const interval& b) { return a.start < b.start; });
  std::uint32_t overlaps = 0;
  // Sorted by start: each interval need only be compared with the latest-ending one before it.
  for (std::uint32_t i = 1, latest = 0; i < n; ++i) {
    if (iv[i].start < iv[latest].end && iv[i].worker != iv[latest].worker) ++overlaps;
    if (iv[i].end > iv[latest].end) latest = i;
  }
  if (overlaps) rep.violation(std::to_string(overlaps) + " overlapping guards of two workers");
  if (st.errors.load())
    rep.violation(std::to_string(st.errors.load()) +
                  " unexpected errors in workers; first: " + st.last_error);
  if (rep.kills + rep.self_kills < o.kills)
    rep.violation("only " + std::to_string(rep.kills + rep.self_kills) + " kills in " +
                  std::to_string(o.max_seconds) + " s");

  const auto final_snap = table.snapshot();
  std::printf("chaos: %u workers, %.1f s\n", o.workers, static_cast<double>(elapsed) / 1e9);
  std::printf("  kills: %u by the killer + %u at crash points (%u restarts)\n", rep.kills,
              rep.self_kills, rep.restarts);
  std::printf("  stops: %u by the killer (%u longer than the workers' 200 ms lock timeout), %u "
              "at crash points (inside the lock, often; resumed after 100-700 ms); %u of %u "
              "workers started in PID namespaces of their own%s\n",
              rep.stops, rep.long_stops, rep.self_stops, ns_starts, starts,
              namespaces ? "" : " (cannot create PID namespaces here: not root?)");
  std::printf("  signals: %llu SIGALRMs delivered to workers under storms; %llu operations "
              "refused with table_busy, %llu guards gave up at their 500 ms deadline\n",
              static_cast<unsigned long long>(st.alarms.load()),
              static_cast<unsigned long long>(st.busy.load()),
              static_cast<unsigned long long>(st.guard_timeouts.load()));
  std::printf("  recoveries observed: %llu, longest %.1f ms (bound %.0f ms)\n",
              static_cast<unsigned long long>(rep.recoveries),
              static_cast<double>(rep.max_recovery_ns) / 1e6,
              static_cast<double>(recovery_bound_ns) / 1e6);
  std::printf("  table: %llu sessions reclaimed, %llu lock repairs, %llu handovers\n",
              static_cast<unsigned long long>(final_snap.sessions_reclaimed),
              static_cast<unsigned long long>(final_snap.lock_repairs),
              static_cast<unsigned long long>(final_snap.handovers));
  std::printf("  work: %llu operations, %llu guards checked for overlap, %llu reservations "
              "refused (timeout or over limit)\n",
              static_cast<unsigned long long>(st.ops.load()), static_cast<unsigned long long>(n),
              static_cast<unsigned long long>(st.timeouts.load()));
  std::printf("  budget checks under the lock: %llu (%llu skipped: a stopped worker held it)\n",
              static_cast<unsigned long long>(rep.budget_checks),
              static_cast<unsigned long long>(rep.budget_checks_busy));
  std::printf("  remedies: %llu workers stopped inside a guard; %llu holds revoked at the 300 ms "
              "bound (%llu revoked guards reported); %llu sessions evicted by the checker (%llu "
              "operations found their session evicted)\n",
              static_cast<unsigned long long>(rep.stops_in_guard),
              static_cast<unsigned long long>(final_snap.revocations),
              static_cast<unsigned long long>(st.revoked.load()),
              static_cast<unsigned long long>(rep.evictions),
              static_cast<unsigned long long>(st.evicted.load()));
  std::printf("  idle workers: %llu idle periods (%llu right after an operation that hit the "
              "lock timeout), %llu checks of an idle worker's slot\n",
              static_cast<unsigned long long>(st.idles.load()),
              static_cast<unsigned long long>(st.idles_after_timeout.load()),
              static_cast<unsigned long long>(rep.idle_checks));
  std::printf("  violations: %zu\n", rep.violations.size());
  ::shm_unlink(table.object_name().c_str());
  return rep.violations.empty() ? 0 : 1;
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "error: %s\nusage: gpushare_chaos [--workers N (2..64, default 8)] [--kills N "
               "(default 300)] [--max-seconds S (default 110)] [--self-kill PER_MILLE (0..1000, "
               "default 3)] [--inject-violation]\n",
               why);
  std::exit(2);
}

std::uint32_t number(const char* flag, const char* v, std::uint32_t lo, std::uint32_t hi) {
  char* end = nullptr;
  const unsigned long n = v ? std::strtoul(v, &end, 10) : 0;
  if (!v || *v == '\0' || *end != '\0' || n < lo || n > hi)
    usage((std::string(flag) + " needs a number from " + std::to_string(lo) + " to " +
           std::to_string(hi))
              .c_str());
  return static_cast<std::uint32_t>(n);
}

} // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--workers")
      o.workers = number("--workers", v, 2, max_workers), ++i;
    else if (a == "--kills")
      o.kills = number("--kills", v, 1, 1'000'000), ++i;
    else if (a == "--max-seconds")
      o.max_seconds = number("--max-seconds", v, 1, 86'400), ++i;
    else if (a == "--self-kill")
      o.self_kill_per_mille = number("--self-kill", v, 0, 1000), ++i;
    else if (a == "--inject-violation")
      o.inject_violation = true;
    else
      usage(("unknown argument " + a).c_str());
  }
  o.key = "chaos-" + std::to_string(::getpid());
  return run(o);
}
