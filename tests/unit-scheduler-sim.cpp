// SPDX-License-Identifier: Apache-2.0
// A deterministic discrete-event simulation of compute arbitration. Simulated threads of simulated
// sessions call detail/scheduler.hpp's acquire_step / exit_step / yield_step in session_core's
// order (one step per critical section), sleep as session_core sleeps (on their slot's grant word
// with the step's timeout, or for their compute limit's pause), and are woken as the futex
// protocol wakes them: only when a step returns their slot. The CPU is modelled by its delays: a
// woken or timed-out thread runs after a random latency, and a thread may be descheduled between
// two guards. Seeded random scenarios and named ones are checked for properties.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <vector>

#include <gpushare/detail/slot.hpp>
#include <gpushare/table.hpp>

namespace d = gpushare::detail;
namespace prio = gpushare::priority;
using u64 = std::uint64_t;

namespace {
constexpr u64 us = 1'000;
constexpr u64 ms = 1'000'000;
constexpr u64 sec = 1'000'000'000;
constexpr u64 liveness = 100 * ms; // session_core's liveness_recheck_ns

/// splitmix64: small, fast and the same on every platform (std distributions are not).
struct rng {
  u64 state;
  u64 next() {
    u64 z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  u64 uniform(u64 lo, u64 hi) { return hi <= lo ? lo : lo + next() % (hi - lo + 1); }
  bool chance(double p) { return static_cast<double>(next() >> 11) * 0x1.0p-53 < p; }
};

/// What one thread of a session does, over and over.
struct workload {
  u64 guard_min = 1 * ms, guard_max = 1 * ms; ///< length of a guard (uniform)
  u64 pause_min = 0, pause_max = 0;           ///< host work between two guards (uniform)
  int per_iteration = 0;   ///< guards per iteration, then yield() (0: never yields)
  u64 iteration_pause = 0; ///< host work after an iteration
};

struct session_spec {
  std::string name;
  int priority = prio::normal;
  std::uint32_t share = 1;
  u64 quantum = 5 * ms;
  std::uint32_t mode = d::handover_at_guard;
  std::uint32_t limit_ppm = 1'000'000;
  int threads = 1;
  u64 stagger = 0; ///< thread k starts k * stagger after the session
  workload work;
  u64 start = 0;         ///< joins then
  u64 stop = UINT64_MAX; ///< its threads stop wanting the device then; it leaves when all did
};

/// The CPU's part: delays the scheduler cannot control. A thread that has run for about a
/// timeslice (guards and host work) loses the CPU at its next guard boundary for up to
/// deschedule_max, as on a CPU it shares with other busy processes.
struct cpu_noise {
  u64 wake_latency_max = 0; ///< a woken or timed-out thread runs after up to this long
  u64 timeslice = 0;        ///< mean run time between two deschedulings (0: never)
  u64 deschedule_max = 0;   ///< how long it then waits for a CPU, at most
};

struct scenario {
  std::vector<session_spec> sessions;
  cpu_noise cpu;
  u64 duration = 2 * sec;
  u64 warmup = 300 * ms; ///< measurements start then
  u64 seed = 1;
  std::uint32_t slot_count = 16;
  std::vector<std::uint32_t> slot_of; ///< session -> slot (empty: session k in slot 2k + 1)
  /// Settings changes through the table (as `gpushare set` makes them): at a time, for a session.
  struct change {
    u64 at;
    int session;
    gpushare::settings_change what;
  };
  std::vector<change> changes;
  /// Every class floor at the start (as after months of accounted device time): newcomers start
  /// there.
  u64 initial_floor = 0;
};

/// Guard intervals of one session, for window checks.
struct interval {
  u64 start, end;
};

struct session_result {
  u64 device_ns = 0; ///< accounted device time in [warmup, duration]
  u64 guards = 0;    ///< guards started in [warmup, duration]
  u64 max_wait = 0;  ///< longest wait for the device that ended in [warmup, duration]
  u64 first_guard_after = UINT64_MAX;   ///< when its first guard started at or after `probe_at`
  u64 all_guards = 0, all_guard_ns = 0; ///< every guard it ran, and their time (the truth)
  u64 books_guards = 0, books_device_ns = 0; ///< what its slot said when it left (the books)
  std::vector<interval> intervals;
};

struct result {
  std::vector<session_result> sessions;
  u64 window = 0;              ///< duration - warmup
  u64 busy_ns = 0;             ///< time some guard ran, in [warmup, duration]
  u64 overlaps = 0;            ///< guards that started while another session's guard ran
  u64 priority_inversions = 0; ///< guards started while a thread of a higher class waited
  u64 idle_excess_ns = 0;      ///< worst (idle during a wait) - (its allowance), when positive
  u64 worst_wait_idle = 0;     ///< the largest idle time seen during one wait
  u64 handovers = 0;
  u64 watcher_wakes = 0; ///< wakes of waiting threads that did not end their wait
  u64 guards_total = 0;
  u64 lease_guards = 0;   ///< guards that entered on their session's lease
  bool clean_end = false; ///< after everyone stopped: no waiters, empty mask, no holder

  double fraction(std::size_t k) const {
    u64 total = 0;
    for (const auto& s : sessions) total += s.device_ns;
    return total ? static_cast<double>(sessions[k].device_ns) / static_cast<double>(total) : 0;
  }
  double busy() const { return static_cast<double>(busy_ns) / static_cast<double>(window); }
};

class simulation {
public:
  explicit simulation(const scenario& sc, u64 probe_at = UINT64_MAX)
      : sc_(sc), probe_at_(probe_at), random_{sc.seed},
        header_(std::make_unique<d::table_header>()), slots_(sc.slot_count) {}

  result run() {
    result r;
    r.sessions.resize(sc_.sessions.size());
    r.window = sc_.duration - sc_.warmup;
    res_ = &r;
    for (u64& floor : header_->min_vtime) floor = sc_.initial_floor;
    for (std::size_t k = 0; k < sc_.sessions.size(); ++k) {
      const std::uint32_t slot =
          sc_.slot_of.empty() ? static_cast<std::uint32_t>(2 * k + 1) : sc_.slot_of[k];
      REQUIRE(slot < sc_.slot_count);
      session_slot_.push_back(slot);
      alive_threads_.push_back(sc_.sessions[k].threads);
      push(sc_.sessions[k].start, ev::join, static_cast<int>(k));
    }
    for (std::size_t c = 0; c < sc_.changes.size(); ++c)
      push(sc_.changes[c].at, ev::change, static_cast<int>(c));
    push(sc_.warmup, ev::mark, 0);
    push(sc_.duration, ev::mark, 1);
    const u64 give_up = sc_.duration + 30 * sec; // everyone must have stopped long before
    while (!queue_.empty()) {
      const event e = queue_.top();
      queue_.pop();
      if (e.time > give_up) break;
      advance(e.time);
      handle(e);
    }
    r.handovers = header_->handovers;
    r.clean_end = stopped_ == total_threads() && header_->device_waiters.load() == 0 &&
                  std::all_of(std::begin(header_->waiting_mask), std::end(header_->waiting_mask),
                              [](u64 w) { return w == 0; }) &&
                  d::current_holder(view()) == d::nobody;
    return r;
  }

private:
  enum class ev { join, want, resume, exit, yield, change, mark };
  struct event {
    u64 time;
    u64 seq;
    ev what;
    int who; ///< thread, session or change index
    u64 token;
    bool operator>(const event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
  };
  struct thread {
    int session;
    std::uint32_t slot;
    d::acquire_state acq;
    bool as_guard = true;
    bool sleeping = false;  ///< in futex_wait on its slot's grant word
    std::uint32_t seen = 0; ///< the grant word it read before sleeping
    u64 token = 0;          ///< bumped to cancel its pending timeout
    u64 guard_start = 0;
    u64 guard_len = 0;
    int in_iteration = 0;
    u64 ran = 0;         ///< run time since it was last descheduled
    u64 slice = 0;       ///< run time after which it is descheduled next
    u64 idle_mark = 0;   ///< idle_ns_ when its current wait began
    u64 grants_mark = 0; ///< grants_ when its current wait began
    bool stopped = false;
    bool on_lease = false; ///< its guard entered on its session's lease (no lock)
  };

  d::table_view view() { return {header_.get(), slots_.data(), sc_.slot_count}; }
  std::size_t total_threads() const {
    std::size_t n = 0;
    for (const auto& s : sc_.sessions) n += static_cast<std::size_t>(s.threads);
    return n;
  }
  void push(u64 t, ev what, int who, u64 token = 0) { queue_.push({t, seq_++, what, who, token}); }
  u64 latency() { return random_.uniform(0, sc_.cpu.wake_latency_max); }

  void advance(u64 t) {
    if (t <= now_) return;
    const bool in_window_idle = running_ == 0;
    if (in_window_idle) idle_ns_ += t - now_;
    // Busy time inside [warmup, duration].
    if (running_ > 0) {
      const u64 a = std::max(now_, sc_.warmup), b = std::min(t, sc_.duration);
      if (b > a) res_->busy_ns += b - a;
    }
    now_ = t;
  }

  void handle(const event& e) {
    switch (e.what) {
    case ev::join: join(e.who); break;
    case ev::want: want(e.who); break;
    case ev::resume:
      if (e.token == threads_[static_cast<std::size_t>(e.who)].token) resume(e.who);
      break;
    case ev::exit: exit(e.who); break;
    case ev::yield: yield(e.who); break;
    case ev::change: change(e.who); break;
    case ev::mark:
      if (e.who == 0) // warmup: start counting device time
        for (std::size_t k = 0; k < sc_.sessions.size(); ++k)
          device_at_warmup_.push_back(slots_[session_slot_[k]].device_ns);
      else
        for (std::size_t k = 0; k < sc_.sessions.size(); ++k)
          res_->sessions[k].device_ns = slots_[session_slot_[k]].device_ns - device_at_warmup_[k];
      break;
    }
  }

  /// As session_core::activate() does, under the lock.
  void join(int k) {
    const session_spec& spec = sc_.sessions[static_cast<std::size_t>(k)];
    d::slot_record& s = slots_[session_slot_[static_cast<std::size_t>(k)]];
    d::reset_slot_for_join(s);
    ++s.generation;
    s.priority = spec.priority;
    s.share = spec.share;
    s.quantum_ns = spec.quantum;
    s.handover_mode = spec.mode;
    s.compute_limit_ppm = spec.limit_ppm;
    s.vtime = d::class_floor(*header_, spec.priority);
    s.state.store(d::slot_active);
    for (int j = 0; j < spec.threads; ++j) {
      thread th;
      th.session = k;
      th.slot = session_slot_[static_cast<std::size_t>(k)];
      threads_.push_back(th);
      push(now_ + static_cast<u64>(j) * spec.stagger, ev::want,
           static_cast<int>(threads_.size() - 1));
    }
  }

  /// Leaves, as session_core::leave() does: end_session_locked (forget_slot, clear the slot).
  void leave(int k) {
    const std::uint32_t i = session_slot_[static_cast<std::size_t>(k)];
    wake(d::forget_slot(view(), i, now_));
    session_result& sr = res_->sessions[static_cast<std::size_t>(k)];
    sr.books_guards = slots_[i].guards;
    sr.books_device_ns = slots_[i].device_ns;
    slots_[i].state.store(d::slot_free);
  }

  void change(int c) {
    const auto& ch = sc_.changes[static_cast<std::size_t>(c)];
    wake(d::apply_settings(view(), session_slot_[static_cast<std::size_t>(ch.session)], ch.what,
                           "simulated session", now_));
  }

  /// A step returned `slot` to wake: its sleeping threads whose word changed run after a latency.
  void wake(std::int64_t slot) {
    if (slot == d::nobody) return;
    const std::uint32_t word = slots_[static_cast<std::size_t>(slot)].grant_word.load();
    for (std::size_t j = 0; j < threads_.size(); ++j) {
      thread& th = threads_[j];
      if (th.slot != static_cast<std::uint32_t>(slot) || !th.sleeping || th.seen == word) continue;
      th.sleeping = false;
      ++th.token; // cancels its timeout
      push(now_ + latency(), ev::resume, static_cast<int>(j), th.token);
    }
  }

  void want(int j) {
    thread& th = threads_[static_cast<std::size_t>(j)];
    const session_spec& spec = sc_.sessions[static_cast<std::size_t>(th.session)];
    if (now_ >= std::min(spec.stop, sc_.duration)) {
      th.stopped = true;
      ++stopped_;
      if (--alive_threads_[static_cast<std::size_t>(th.session)] == 0) leave(th.session);
      return;
    }
    th.as_guard = true;
    th.acq = {};
    d::slot_record& s = slots_[th.slot];
    if (s.lease.load() == 1) { // session_core::try_enter_on_lease (one step: no race to model)
      s.lease_guards.fetch_add(1);
      th.on_lease = true;
      ++res_->lease_guards;
      start_guard(j);
      return;
    }
    acquire(j);
  }

  void resume(int j) {
    thread& th = threads_[static_cast<std::size_t>(j)];
    th.sleeping = false;
    const bool was_waiting = th.acq.registered;
    acquire(j);
    if (was_waiting && th.acq.registered) ++res_->watcher_wakes;
  }

  /// session_core::acquire_device, one pass of its loop.
  void acquire(int j) {
    thread& th = threads_[static_cast<std::size_t>(j)];
    const bool waited_before = th.acq.waited;
    const d::acquire_result r =
        d::acquire_step(view(), th.slot, now_, th.as_guard, th.acq, liveness);
    if (!waited_before && th.acq.waited) {
      th.idle_mark = idle_ns_;
      th.grants_mark = grants_seen();
    }
    wake(r.wake);
    switch (r.what) {
    case d::acquire_result::granted:
      if (th.acq.waited) end_wait(th);
      if (th.as_guard)
        start_guard(j);
      else
        push(now_ + iteration_pause(th), ev::want, j);
      break;
    case d::acquire_result::wait:
      th.seen = slots_[th.slot].grant_word.load();
      th.sleeping = true;
      ++th.token;
      push(now_ + r.sleep_ns + latency(), ev::resume, j, th.token);
      break;
    case d::acquire_result::pause:
      ++th.token;
      push(now_ + std::min(r.sleep_ns, liveness) + latency(), ev::resume, j, th.token);
      break;
    }
  }

  u64 grants_seen() const { return header_->handovers; }

  void end_wait(thread& th) {
    const u64 waited = now_ - th.acq.wait_start;
    session_result& sr = res_->sessions[static_cast<std::size_t>(th.session)];
    if (now_ >= sc_.warmup && now_ <= sc_.duration) sr.max_wait = std::max(sr.max_wait, waited);
    // The idle the device had during this wait, against what the idle budget allows: each holder
    // during the wait may leave it idle for its idle grace per quantum it holds, plus one watch
    // period before a waiter notices a gap, plus the CPU's latencies (a woken thread, a
    // descheduled holder).
    const u64 idle = idle_ns_ - th.idle_mark;
    const u64 holders = 1 + (grants_seen() - th.grants_mark);
    u64 grace = 0, quantum = UINT64_MAX;
    for (const auto& s : sc_.sessions) {
      grace = std::max(grace, s.mode == d::handover_at_yield ? d::idle_grace_at_yield_ns
                                                             : d::idle_grace_at_guard_ns);
      quantum = std::min(quantum, s.quantum);
    }
    const u64 quanta = holders + waited / quantum;
    const u64 cpu = 2 * sc_.cpu.wake_latency_max + sc_.cpu.deschedule_max;
    const u64 allowed = quanta * grace + holders * (d::watch_period_ns + cpu);
    res_->worst_wait_idle = std::max(res_->worst_wait_idle, idle);
    if (idle > allowed) res_->idle_excess_ns = std::max(res_->idle_excess_ns, idle - allowed);
  }

  void start_guard(int j) {
    thread& th = threads_[static_cast<std::size_t>(j)];
    const session_spec& spec = sc_.sessions[static_cast<std::size_t>(th.session)];
    if (running_ > 0 && running_session_ != th.session) ++res_->overlaps;
    for (const thread& o : threads_)
      if (o.acq.registered && o.session != th.session &&
          slots_[o.slot].priority > slots_[th.slot].priority)
        ++res_->priority_inversions;
    running_session_ = th.session;
    ++running_;
    ++res_->guards_total;
    th.guard_start = now_;
    th.guard_len = random_.uniform(spec.work.guard_min, spec.work.guard_max);
    session_result& sr = res_->sessions[static_cast<std::size_t>(th.session)];
    if (now_ >= sc_.warmup && now_ < sc_.duration) ++sr.guards;
    if (now_ >= probe_at_) sr.first_guard_after = std::min(sr.first_guard_after, now_);
    sr.intervals.push_back({now_, now_ + th.guard_len});
    ++sr.all_guards;
    sr.all_guard_ns += th.guard_len;
    push(now_ + th.guard_len, ev::exit, j);
  }

  void exit(int j) {
    thread& th = threads_[static_cast<std::size_t>(j)];
    const session_spec& spec = sc_.sessions[static_cast<std::size_t>(th.session)];
    --running_;
    if (th.on_lease) { // session_core::exit_on_lease
      th.on_lease = false;
      d::slot_record& s = slots_[th.slot];
      s.lease_used_ns.fetch_add(now_ - th.guard_start);
      s.lease_exits.fetch_add(1);
      s.lease_last_exit_ns.store(now_);
      s.lease_guards.fetch_sub(1);
      if (s.lease.load() != 1) wake(d::lease_exit_step(view(), th.slot, now_));
    } else {
      wake(d::exit_step(view(), th.slot, th.guard_start, now_ - th.guard_start, now_));
    }
    if (spec.work.per_iteration > 0 && ++th.in_iteration == spec.work.per_iteration) {
      th.in_iteration = 0;
      push(now_, ev::yield, j);
      return;
    }
    const u64 pause = random_.uniform(spec.work.pause_min, spec.work.pause_max);
    th.ran += th.guard_len + pause;
    push(now_ + pause + deschedule(th), ev::want, j);
  }

  /// session_core::yield(): hand over if due, then get the device back before returning.
  void yield(int j) {
    thread& th = threads_[static_cast<std::size_t>(j)];
    const std::int64_t w = d::yield_step(view(), th.slot, now_);
    if (w == d::nobody) {
      push(now_ + iteration_pause(th), ev::want, j);
      return;
    }
    wake(w);
    th.as_guard = false;
    th.acq = {};
    acquire(j);
  }

  u64 iteration_pause(thread& th) {
    const u64 pause = sc_.sessions[static_cast<std::size_t>(th.session)].work.iteration_pause;
    th.ran += pause;
    return pause + deschedule(th);
  }
  /// How long `th` waits for a CPU now: nothing until it has used up its timeslice.
  u64 deschedule(thread& th) {
    if (sc_.cpu.timeslice == 0) return 0;
    if (th.slice == 0) th.slice = random_.uniform(sc_.cpu.timeslice / 2, 3 * sc_.cpu.timeslice / 2);
    if (th.ran < th.slice) return 0;
    th.ran = 0;
    th.slice = 0;
    return random_.uniform(0, sc_.cpu.deschedule_max);
  }

  const scenario& sc_;
  u64 probe_at_;
  rng random_;
  std::unique_ptr<d::table_header> header_;
  std::vector<d::slot_record> slots_;
  std::vector<std::uint32_t> session_slot_;
  std::vector<int> alive_threads_;
  std::vector<thread> threads_;
  std::vector<u64> device_at_warmup_;
  std::priority_queue<event, std::vector<event>, std::greater<event>> queue_;
  u64 seq_ = 0;
  u64 now_ = 0;
  u64 idle_ns_ = 0;
  int running_ = 0;
  int running_session_ = -1;
  std::size_t stopped_ = 0;
  result* res_ = nullptr;
};

result simulate(const scenario& sc, u64 probe_at = UINT64_MAX) {
  simulation s(sc, probe_at);
  return s.run();
}

session_spec busy(std::string name, std::uint32_t share = 1, u64 guard = 1 * ms,
                  int priority = prio::normal) {
  session_spec s;
  s.name = std::move(name);
  s.share = share;
  s.priority = priority;
  s.work.guard_min = s.work.guard_max = guard;
  return s;
}

/// Device time `sc`'s sessions may use in any window of `window` at their cap, plus one guard
/// per thread (pacing is per thread: concurrent threads may each start one guard).
bool caps_hold(const scenario& sc, const result& r, u64 window) {
  for (std::size_t k = 0; k < sc.sessions.size(); ++k) {
    const session_spec& s = sc.sessions[k];
    if (s.limit_ppm >= 1'000'000) continue;
    const u64 allowed = d::mul_div(window + d::cap_burst_ns, s.limit_ppm, 1'000'000) +
                        static_cast<u64>(s.threads) * s.work.guard_max;
    for (u64 from = 0; from + window <= sc.duration; from += window / 10) {
      u64 used = 0;
      for (const interval& i : r.sessions[k].intervals) {
        const u64 a = std::max(i.start, from), b = std::min(i.end, from + window);
        if (b > a) used += b - a;
      }
      if (used > allowed) {
        MESSAGE("session " << s.name << " used " << used << " ns in [" << from << ", "
                           << from + window << "), allowed " << allowed);
        return false;
      }
    }
  }
  return true;
}

/// A random scenario: 2-4 sessions of random classes, shares, quanta, handover points, threads,
/// guard lengths, pauses and caps, on a CPU with random delays.
scenario random_scenario(u64 seed) {
  rng g{seed * 7919};
  scenario sc;
  sc.seed = seed;
  sc.duration = 2 * sec;
  const int n = static_cast<int>(g.uniform(2, 4));
  for (int k = 0; k < n; ++k) {
    session_spec s;
    s.name = std::string("s").append(std::to_string(k));
    s.priority = g.chance(0.7) ? prio::normal : (g.chance(0.5) ? prio::low : prio::high);
    s.share = static_cast<std::uint32_t>(g.uniform(1, 4));
    s.quantum = g.uniform(1, 5) * ms;
    if (g.chance(0.2)) {
      s.mode = d::handover_at_yield;
      s.work.per_iteration = static_cast<int>(g.uniform(2, 6));
      s.work.iteration_pause = g.chance(0.5) ? g.uniform(0, 3) * ms : 0;
    }
    s.threads = g.chance(0.8) ? 1 : static_cast<int>(g.uniform(2, 3));
    s.stagger = g.uniform(0, 700) * us;
    s.work.guard_min = g.uniform(20, 500) * us;
    s.work.guard_max = s.work.guard_min + g.uniform(0, 1500) * us;
    if (g.chance(0.4)) {
      s.work.pause_min = g.uniform(0, 100) * us;
      s.work.pause_max = s.work.pause_min + g.uniform(0, 300) * us;
    }
    if (g.chance(0.15)) s.limit_ppm = static_cast<std::uint32_t>(g.uniform(20, 70)) * 10'000;
    if (g.chance(0.2)) s.start = g.uniform(0, 500) * ms;
    if (g.chance(0.2)) s.stop = g.uniform(1000, 1900) * ms;
    sc.sessions.push_back(s);
  }
  sc.cpu.wake_latency_max = g.uniform(0, 2000) * us;
  if (g.chance(0.7)) {
    sc.cpu.timeslice = g.uniform(3, 20) * ms;
    sc.cpu.deschedule_max = g.uniform(0, 5000) * us;
  }
  return sc;
}

/// Busy sessions of one class with mixed guard lengths: their device time must follow shares.
scenario busy_scenario(u64 seed, bool noisy) {
  rng g{seed * 104729};
  scenario sc;
  sc.seed = seed;
  sc.duration = 5 * sec;
  sc.warmup = 500 * ms;
  const int n = static_cast<int>(g.uniform(2, 4));
  for (int k = 0; k < n; ++k) {
    session_spec s = busy(std::string("b").append(std::to_string(k)),
                          static_cast<std::uint32_t>(g.uniform(1, 4)));
    s.quantum = g.uniform(2, 6) * ms;
    s.work.guard_min = g.uniform(20, 800) * us;
    s.work.guard_max = s.work.guard_min + g.uniform(0, 1200) * us;
    sc.sessions.push_back(s);
  }
  if (noisy) { // each session keeps the CPU at least ~90% of the time: its share is reachable
    sc.cpu.wake_latency_max = g.uniform(100, 1000) * us;
    sc.cpu.timeslice = g.uniform(10, 30) * ms;
    sc.cpu.deschedule_max = g.uniform(500, 2000) * us;
  }
  return sc;
}

double expected_fraction(const scenario& sc, std::size_t k) {
  double total = 0;
  for (const auto& s : sc.sessions) total += s.share;
  return sc.sessions[k].share / total;
}
} // namespace

// ---------------------------------------------------------------------------------------------
// Properties over seeded random scenarios
// ---------------------------------------------------------------------------------------------

TEST_CASE("simulation, random scenarios: exclusion, priority, caps, idle bound, clean end") {
  for (u64 seed = 1; seed <= 60; ++seed) {
    const scenario sc = random_scenario(seed);
    CAPTURE(seed);
    const result r = simulate(sc);
    CHECK(r.overlaps == 0);            // never two sessions' guards at once
    CHECK(r.priority_inversions == 0); // no lower-class guard starts while a higher class waits
    CHECK(caps_hold(sc, r, 1 * sec));  // a capped session stays within its cap over any second
    CHECK(r.idle_excess_ns == 0);      // the device idles only as long as the budget allows
    CHECK(r.clean_end);                // no waiter count, mask bit or holder is left behind
    CHECK(r.guards_total > 0);
    // The books: every guard and every nanosecond, entered on a lease or under the lock.
    for (const auto& sr : r.sessions) {
      CHECK(sr.books_guards == sr.all_guards);
      CHECK(sr.books_device_ns == sr.all_guard_ns);
    }
    // The highest class present makes progress (lower ones may legitimately wait for it).
    int top = prio::low;
    for (const auto& s : sc.sessions) top = std::max(top, s.priority);
    for (std::size_t k = 0; k < sc.sessions.size(); ++k)
      if (sc.sessions[k].priority == top && sc.sessions[k].start < sc.warmup &&
          sc.sessions[k].stop > sc.duration)
        CHECK(r.sessions[k].guards > 0);
  }
}

TEST_CASE("simulation, busy sessions with mixed guard lengths get their shares within 2 points") {
  for (bool noisy : {false, true}) {
    for (u64 seed = 1; seed <= 25; ++seed) {
      const scenario sc = busy_scenario(seed, noisy);
      CAPTURE(noisy);
      CAPTURE(seed);
      const result r = simulate(sc);
      CHECK(r.overlaps == 0);
      for (std::size_t k = 0; k < sc.sessions.size(); ++k) {
        CAPTURE(k);
        CHECK(std::abs(r.fraction(k) - expected_fraction(sc, k)) <= 0.02);
      }
      if (!noisy) CHECK(r.busy() >= 0.999); // busy sessions leave the device no idle time
    }
  }
}

TEST_CASE("simulation: n equal busy sessions wait at most (n - 1) x (quantum + longest guard)") {
  for (int n = 2; n <= 6; ++n) {
    for (u64 seed = 1; seed <= 4; ++seed) {
      scenario sc;
      sc.seed = seed;
      sc.duration = 3 * sec;
      sc.warmup = 300 * ms;
      rng g{seed};
      u64 longest = 0;
      for (int k = 0; k < n; ++k) {
        session_spec s = busy(std::string("e").append(std::to_string(k)));
        s.work.guard_min = g.uniform(50, 500) * us;
        s.work.guard_max = s.work.guard_min + g.uniform(0, 1000) * us;
        longest = std::max(longest, s.work.guard_max);
        sc.sessions.push_back(s);
      }
      CAPTURE(n);
      CAPTURE(seed);
      const result r = simulate(sc);
      const u64 bound = static_cast<u64>(n - 1) * (5 * ms + longest);
      for (std::size_t k = 0; k < sc.sessions.size(); ++k) {
        CAPTURE(k);
        CHECK(r.sessions[k].max_wait <= bound);
        CHECK(std::abs(r.fraction(k) - 1.0 / n) <= 0.02);
      }
    }
  }
}

TEST_CASE("simulation, metamorphic: scaling all times or permuting slots leaves fractions alone") {
  for (u64 seed = 1; seed <= 10; ++seed) {
    const scenario base = busy_scenario(seed, false);
    const result r0 = simulate(base);
    CAPTURE(seed);
    for (u64 factor : {2u, 5u}) {
      scenario scaled = base;
      scaled.duration *= factor;
      scaled.warmup *= factor;
      for (auto& s : scaled.sessions) {
        s.quantum *= factor;
        s.work.guard_min *= factor;
        s.work.guard_max *= factor;
      }
      const result r = simulate(scaled);
      for (std::size_t k = 0; k < base.sessions.size(); ++k)
        CHECK(std::abs(r.fraction(k) - r0.fraction(k)) <= 0.01);
    }
    scenario permuted = base;
    permuted.slot_of.clear();
    for (std::size_t k = 0; k < base.sessions.size(); ++k)
      permuted.slot_of.push_back(static_cast<std::uint32_t>(13 - 3 * k)); // reversed, spread
    const result r = simulate(permuted);
    for (std::size_t k = 0; k < base.sessions.size(); ++k)
      CHECK(std::abs(r.fraction(k) - r0.fraction(k)) <= 0.01);
  }
}

// ---------------------------------------------------------------------------------------------
// Named scenarios: each was a defect of an earlier scheduler
// ---------------------------------------------------------------------------------------------

TEST_CASE("simulation: busy sessions descheduled by the CPU keep 3:1 and 1:1:2") {
  // The collapse towards 1:1 under CPU contention: a busy session descheduled between two guards
  // was treated as a newcomer and lost the credit it had earned.
  for (u64 seed = 1; seed <= 5; ++seed) {
    for (const std::vector<std::uint32_t>& shares :
         {std::vector<std::uint32_t>{3, 1}, std::vector<std::uint32_t>{1, 1, 2}}) {
      scenario sc;
      sc.seed = seed;
      sc.duration = 6 * sec;
      sc.warmup = 500 * ms;
      for (std::size_t k = 0; k < shares.size(); ++k)
        sc.sessions.push_back(busy(std::string("w").append(std::to_string(k)), shares[k]));
      sc.cpu = {1 * ms, 12 * ms, 3 * ms}; // a CPU shared with other busy processes
      const result r = simulate(sc);
      CAPTURE(seed);
      for (std::size_t k = 0; k < shares.size(); ++k) {
        CAPTURE(k);
        CHECK(std::abs(r.fraction(k) - expected_fraction(sc, k)) <= 0.02);
      }
    }
  }
}

TEST_CASE("simulation: shares hold when virtual time starts near 2^64 (months of device time)") {
  // Issue 13, item 9: the class floor never decreased and vtime saturated at 2^64 - 1, where
  // every session is equal: 3:1 became 1:1 after ~213 days busy at share 1.
  for (const u64 start : {u64{1} << 62, UINT64_MAX - 1'000 * ms, UINT64_MAX}) {
    scenario sc;
    sc.duration = 3 * sec;
    sc.warmup = 500 * ms;
    sc.initial_floor = start;
    sc.sessions = {busy("three", 3), busy("one", 1)};
    const result r = simulate(sc);
    CAPTURE(start);
    CHECK(r.overlaps == 0);
    CHECK(std::abs(r.fraction(0) - 0.75) <= 0.02);
    CHECK(std::abs(r.fraction(1) - 0.25) <= 0.02);
    CHECK(r.clean_end);
  }
}

TEST_CASE("simulation: a holder with short pauses does not keep an idle device from a busy peer") {
  struct pattern {
    u64 guard, pause;
  };
  for (const pattern p : {pattern{10 * us, 150 * us}, pattern{2 * us, 190 * us}}) {
    scenario sc;
    sc.duration = 3 * sec;
    session_spec pauser = busy("pauser", 1, p.guard);
    pauser.work.pause_min = pauser.work.pause_max = p.pause;
    sc.sessions = {pauser, busy("peer")};
    const result r = simulate(sc);
    CAPTURE(p.guard);
    MESSAGE("guards of " << p.guard / 1000.0 << " us with pauses of " << p.pause / 1000.0
                         << " us: device busy " << r.busy() * 100 << "%, peer's longest wait "
                         << r.sessions[1].max_wait / 1e6 << " ms");
    CHECK(r.busy() >= 0.90); // was 11.8% and 2.0%
    // The peer waits at most one quantum of the pauser's, plus its idle budget and a guard.
    CHECK(r.sessions[1].max_wait <= 5 * ms + d::idle_grace_at_guard_ns + 1 * ms);
    CHECK(r.sessions[0].guards > 1000); // and the pauser still runs
  }
}

TEST_CASE(
    "simulation: a lone session runs on its lease, and a newcomer ends it at the next boundary") {
  for (const std::uint32_t mode : {d::handover_at_guard, d::handover_at_yield}) {
    scenario sc;
    sc.duration = 3 * sec;
    sc.warmup = 1300 * ms;
    session_spec lone = busy("lone", 1, 1 * ms);
    lone.work.pause_min = 20 * us;
    lone.work.pause_max = 80 * us;
    lone.mode = mode;
    if (mode == d::handover_at_yield) lone.work.per_iteration = 4;
    session_spec late = busy("late");
    late.start = 1 * sec;
    sc.sessions = {lone, late};
    const result r = simulate(sc, late.start);
    CAPTURE(mode);
    const u64 first_wait = r.sessions[1].first_guard_after - late.start;
    const double late_share =
        static_cast<double>(r.sessions[1].device_ns) /
        static_cast<double>(r.sessions[0].device_ns + r.sessions[1].device_ns);
    MESSAGE("mode " << mode << ": " << r.lease_guards << " of " << r.guards_total
                    << " guards on a lease; the newcomer's first wait " << first_wait / 1e6
                    << " ms, later ones at most " << r.sessions[1].max_wait / 1e6 << " ms; it got "
                    << late_share * 100 << "%");
    CHECK(r.lease_guards > 500); // alone for a second: on the lease, no lock
    CHECK(r.overlaps == 0);
    CHECK(r.clean_end);
    // The newcomer waits, as without a lease, for at most a quantum and the guards that end it
    // (an at_yield holder: its iteration of 4 guards), plus the idle grace.
    CHECK(first_wait <= 5 * ms + 4 * (1 * ms + 80 * us) + d::idle_grace_at_guard_ns);
    CHECK(late_share == doctest::Approx(0.5).epsilon(0.04));
    for (const auto& sr : r.sessions) {
      CHECK(sr.books_guards == sr.all_guards);
      CHECK(sr.books_device_ns == sr.all_guard_ns);
    }
  }
}

TEST_CASE("simulation: a higher class holder with pauses lets the lower class use the gaps") {
  scenario sc;
  sc.duration = 3 * sec;
  session_spec high = busy("high", 1, 500 * us, prio::high);
  high.work.pause_min = high.work.pause_max = 150 * us;
  sc.sessions = {high, busy("low", 1, 1 * ms, prio::low)};
  const result r = simulate(sc);
  MESSAGE("high with pauses: low gets " << r.fraction(1) * 100 << "%, device busy "
                                        << r.busy() * 100 << "%");
  CHECK(r.fraction(1) >= 0.10); // was 0% while the device idled 23% of the time
  CHECK(r.busy() >= 0.85);
  CHECK(r.priority_inversions == 0);
  // The high class still waits at most one low-class guard.
  CHECK(r.sessions[0].max_wait <= 1 * ms + d::watch_period_ns);
}

TEST_CASE("simulation: overlapping guards of several threads do not hold the device forever") {
  SUBCASE("against a higher class") {
    scenario sc;
    sc.duration = 3 * sec;
    session_spec two = busy("two-threads", 1, 1 * ms, prio::normal);
    two.threads = 2;
    two.stagger = 500 * us; // its guards always overlap: it never has none running
    session_spec high = busy("high", 1, 200 * us, prio::high);
    high.work.pause_min = high.work.pause_max = 3 * ms;
    sc.sessions = {two, high};
    const result r = simulate(sc);
    MESSAGE("high waits at most " << r.sessions[1].max_wait / 1e6 << " ms; high got "
                                  << r.sessions[1].guards << " guards");
    CHECK(r.priority_inversions == 0);
    CHECK(r.sessions[1].max_wait <= 1 * ms); // the running guards drain: at most one guard
    CHECK(r.sessions[1].guards > 500);       // was 0: it waited the whole run
  }
  SUBCASE("against an equal peer") {
    scenario sc;
    sc.duration = 3 * sec;
    session_spec two = busy("two-threads");
    two.threads = 2;
    two.stagger = 500 * us;
    sc.sessions = {two, busy("peer")};
    const result r = simulate(sc);
    MESSAGE("peer's share of accounted device time: " << r.fraction(1) * 100 << "%");
    CHECK(std::abs(r.fraction(1) - 0.5) <= 0.03); // was 0%
  }
}

TEST_CASE("simulation: an at_yield holder that never yields is held to its backstop") {
  for (u64 pause : {u64{0}, 10 * ms}) {
    scenario sc;
    sc.duration = 5 * sec;
    session_spec lazy = busy("never-yields");
    lazy.mode = d::handover_at_yield; // and it never calls yield()
    lazy.work.pause_max = pause;      // host work of up to `pause` after each guard
    sc.sessions = {lazy, busy("peer")};
    const result r = simulate(sc);
    CAPTURE(pause);
    MESSAGE("peer's share next to a holder that never yields (pauses up to "
            << pause / 1e6 << " ms): " << r.fraction(1) * 100 << "%, longest wait "
            << r.sessions[1].max_wait / 1e6 << " ms");
    CHECK(std::abs(r.fraction(1) - 0.5) <= 0.05); // was 0%
    // It waits at most the backstop (16 quanta, at least 100 ms) and one more guard.
    CHECK(r.sessions[1].max_wait <=
          std::max(16 * lazy.quantum, d::yield_backstop_min_ns) + pause + 1 * ms);
  }
}

TEST_CASE("simulation: a priority change reaches its new split within about two quanta") {
  struct move {
    int from, to; ///< session 0's class before and after; session 1 stays normal
  };
  for (const move m : {move{prio::low, prio::normal}, move{prio::high, prio::normal}}) {
    scenario sc;
    sc.duration = 3 * sec;
    sc.warmup = 1500 * ms; // measure from the change on
    sc.sessions = {busy("moved", 1, 1 * ms, m.from), busy("stays")};
    gpushare::settings_change to;
    to.priority = m.to;
    sc.changes.push_back({1 * sec, 0, to});
    const u64 probe = 1 * sec;
    const result r = simulate(sc, probe);
    CAPTURE(m.from);
    // The session that was starved runs within about two quanta (plus a guard) of the change.
    const std::size_t starved = m.from < m.to ? 0 : 1;
    CHECK(r.sessions[starved].first_guard_after <= probe + 2 * 5 * ms + 1 * ms);
    MESSAGE("moved from class " << m.from << ": split after the change " << r.fraction(0) << " / "
                                << r.fraction(1));
    CHECK(std::abs(r.fraction(0) - 0.5) <= 0.02); // was 100% (or 0%) for seconds
  }
}

TEST_CASE("simulation: a capped session stays at its cap, with one thread or several") {
  for (int threads : {1, 3}) {
    scenario sc;
    sc.duration = 4 * sec;
    session_spec capped = busy("capped", 1, 700 * us);
    capped.limit_ppm = 300'000;
    capped.threads = threads;
    capped.stagger = 100 * us;
    sc.sessions = {capped};
    const result r = simulate(sc);
    CAPTURE(threads);
    CHECK(caps_hold(sc, r, 1 * sec));
    const double used =
        static_cast<double>(r.sessions[0].device_ns) / static_cast<double>(r.window);
    MESSAGE(threads << " thread(s) capped at 30%: used " << used * 100 << "%");
    CHECK(used >= 0.25);
  }
}

TEST_CASE("simulation: a waiter is woken far less often than once per holder guard") {
  // The watch: one waiter re-checks a holder that runs short guards once per watch period,
  // instead of being woken at every guard exit.
  scenario sc;
  sc.duration = 2 * sec;
  session_spec shorty = busy("short-guards", 1, 20 * us);
  shorty.quantum = 1 * sec; // holds for long: its peer waits through ~50,000 guards
  sc.sessions = {shorty, busy("peer")};
  sc.sessions[1].quantum = 1 * sec;
  const result r = simulate(sc);
  MESSAGE(r.guards_total << " guards (" << r.lease_guards << " on a lease), " << r.watcher_wakes
                         << " wake-ups of a waiter");
  CHECK(r.watcher_wakes * 10 <= r.guards_total);
  CHECK(r.idle_excess_ns == 0);
}
