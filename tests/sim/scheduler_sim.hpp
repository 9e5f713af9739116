// SPDX-License-Identifier: Apache-2.0
// A deterministic discrete-event simulation of compute arbitration. Simulated threads of simulated
// sessions call detail/scheduler.hpp's acquire_step / exit_step / yield_step in session_core's
// order (one step per critical section), sleep as session_core sleeps (on their slot's grant word
// with the step's timeout, or for their compute limit's pause), and are woken as the futex
// protocol wakes them: only when a step returns their slot. The CPU is modelled by its delays: a
// woken or timed-out thread runs after a random latency, and a thread may be descheduled between
// two guards. Used by unit-scheduler-sim (properties over seeded random scenarios) and
// unit-scheduler-cases (named scenarios, one per defect found).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <gpushare/detail/cpu_wait.hpp>
#include <gpushare/detail/slot.hpp>
#include <gpushare/table.hpp>

#include "measures.hpp"

namespace sim {

namespace d = gpushare::detail;
namespace prio = gpushare::priority;
using u64 = std::uint64_t;

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
  int per_iteration = 0;   ///< guards per iteration, then yield() (0: no iterations)
  u64 iteration_pause = 0; ///< host work after an iteration
  bool yields = true;      ///< an iteration ends with yield() (false: only its host work)
  /// Every this many guards (0: never), one lasts stuck_len instead (a guard stopped or hung).
  int stuck_every = 0;
  u64 stuck_len = 0;
  /// The device time its guards account, in ppm of their wall time (set_device_time(): the CUDA
  /// layer's measured time, or 0 for a capture); 1'000'000: the wall time, as a host guard.
  std::uint32_t accounted_ppm = 1'000'000;
};

struct session_spec {
  std::string name;
  int priority = prio::normal;
  std::uint32_t share = 1;
  u64 quantum = 5 * ms;
  std::uint32_t mode = d::handover_at_guard;
  std::uint32_t limit_ppm = 1'000'000;
  std::uint32_t guarantee_ppm = 0;                          ///< its compute guarantee (0: none)
  u64 max_guard = 0;                                        ///< its guard bound (0: none)
  std::uint32_t pause_hold_ppm = d::default_pause_hold_ppm; ///< its pause hold (0: none)
  std::string group;                                        ///< the group it belongs to ("": none)
  std::uint32_t group_share = 1; ///< the group's compute share (every member gives the same)
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
  /// Wakes that end no wait (a signal, a settings change, a peer's spurious bump): a random
  /// sleeping thread is woken every so often, uniformly up to this period (0: never).
  u64 spurious_wake_max = 0;
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
    if (sc_.cpu.spurious_wake_max > 0)
      push(random_.uniform(1, sc_.cpu.spurious_wake_max), ev::spurious, 0);
    const u64 give_up = sc_.duration + 30 * sec; // everyone must have stopped long before
    u64 same_time = 0; // events at one instant: a livelock shows as millions of them
    while (!queue_.empty()) {
      const event e = queue_.top();
      queue_.pop();
      if (e.time > give_up) break;
      same_time = e.time == now_ ? same_time + 1 : 0;
      if (same_time > 1'000'000) {
        FAIL("livelock: a million events at t = " << now_ << " ns");
        break;
      }
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
  enum class ev { join, want, resume, exit, yield, change, mark, spurious };
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
    u64 busy_mark = 0;   ///< busy_total_ when its current wait began
    u64 grants_mark = 0; ///< grants_ when its current wait began
    bool stopped = false;
    bool on_lease = false; ///< its guard entered on its session's lease (no lock)
    int guards_started = 0;
    u64 cpu_wait = 0; ///< time it was runnable but waited for a CPU (latency, deschedules)
    u64 sample_at = 0, sample_wait = 0; ///< its last CPU-wait sample (session_core's, 5 ms apart)
  };

  d::table_view view() { return {header_.get(), slots_.data(), sc_.slot_count}; }
  std::size_t total_threads() const {
    std::size_t n = 0;
    for (const auto& s : sc_.sessions) n += static_cast<std::size_t>(s.threads);
    return n;
  }
  void push(u64 t, ev what, int who, u64 token = 0) { queue_.push({t, seq_++, what, who, token}); }
  /// How long a woken thread waits for a CPU (counted as its CPU wait).
  u64 latency(thread& th) {
    const u64 l = random_.uniform(0, sc_.cpu.wake_latency_max);
    th.cpu_wait += l;
    return l;
  }

  void advance(u64 t) {
    if (t <= now_) return;
    const bool in_window_idle = running_ == 0;
    if (in_window_idle) idle_ns_ += t - now_;
    if (running_ > 0) busy_total_ += t - now_;
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
    case ev::spurious: spurious_wake(); break;
    case ev::mark:
      if (e.who == 0) // warmup: start counting device time
        for (std::size_t k = 0; k < sc_.sessions.size(); ++k)
          device_at_warmup_.push_back(slots_[session_slot_[k]].stats.device_ns);
      else
        for (std::size_t k = 0; k < sc_.sessions.size(); ++k)
          res_->sessions[k].device_ns =
              slots_[session_slot_[k]].stats.device_ns - device_at_warmup_[k];
      break;
    }
  }

  /// As session_core::activate() does, under the lock.
  void join(int k) {
    const session_spec& spec = sc_.sessions[static_cast<std::size_t>(k)];
    d::slot_settings st{};
    st.priority = spec.priority;
    st.share = spec.share;
    st.quantum_ns = spec.quantum;
    st.handover_mode = spec.mode;
    st.compute_limit_ppm = spec.limit_ppm;
    st.compute_guarantee_ppm = spec.guarantee_ppm;
    st.max_guard_ns = spec.max_guard;
    st.pause_hold_ppm = spec.pause_hold_ppm;
    st.memory_limit = UINT64_MAX;
    d::slot_group group{};
    if (!spec.group.empty()) {
      std::memcpy(group.name, spec.group.data(),
                  std::min(spec.group.size(), d::group_capacity - 1));
      group.memory_limit = d::unlimited_group_memory;
      group.share = spec.group_share;
    }
    d::join_slot(view(), session_slot_[static_cast<std::size_t>(k)], {}, st,
                 group); // the library's join
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
    wake(d::end_slot(view(), i, now_)); // the library's own end of a session
    session_result& sr = res_->sessions[static_cast<std::size_t>(k)];
    sr.books_guards = slots_[i].stats.guards;
    sr.books_device_ns = slots_[i].stats.device_ns;
  }

  void change(int c) {
    const auto& ch = sc_.changes[static_cast<std::size_t>(c)];
    wake(d::apply_settings(view(), session_slot_[static_cast<std::size_t>(ch.session)], ch.what,
                           "simulated session", "simulated table", now_));
  }

  /// A wake that ends no wait (a signal): a random sleeping thread runs its loop again.
  void spurious_wake() {
    std::vector<std::size_t> sleepers;
    for (std::size_t j = 0; j < threads_.size(); ++j)
      if (threads_[j].sleeping) sleepers.push_back(j);
    if (!sleepers.empty()) {
      thread& th = threads_[sleepers[random_.uniform(0, sleepers.size() - 1)]];
      th.sleeping = false;
      ++th.token;
      push(now_ + latency(th), ev::resume, static_cast<int>(&th - threads_.data()), th.token);
    }
    if (now_ < sc_.duration)
      push(now_ + random_.uniform(1, sc_.cpu.spurious_wake_max), ev::spurious, 0);
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
      push(now_ + latency(th), ev::resume, static_cast<int>(j), th.token);
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
    if (!th.acq.registered && now_ - th.sample_at >= d::cpu_wait_sample_period_ns) {
      // session_core samples its thread's run-queue wait (cpu_wait.hpp) as it starts to acquire
      if (th.sample_at != 0)
        d::note_cpu_wait(slots_[th.slot],
                         static_cast<std::uint32_t>(d::mul_div(th.cpu_wait - th.sample_wait,
                                                               1'000'000, now_ - th.sample_at)));
      th.sample_at = now_;
      th.sample_wait = th.cpu_wait;
    }
    const d::acquire_result r =
        d::acquire_step(view(), th.slot, now_, th.as_guard, th.acq, liveness);
    if (!waited_before && th.acq.waited) {
      th.idle_mark = idle_ns_;
      th.busy_mark = busy_total_;
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
      push(now_ + r.sleep_ns + latency(th), ev::resume, j, th.token);
      break;
    case d::acquire_result::pause:
      ++th.token;
      push(now_ + std::min(r.sleep_ns, liveness) + latency(th), ev::resume, j, th.token);
      break;
    }
  }

  u64 grants_seen() const { return header_->handovers; }

  void end_wait(thread& th) {
    const u64 waited = now_ - th.acq.wait_start;
    session_result& sr = res_->sessions[static_cast<std::size_t>(th.session)];
    sr.waits.push_back({th.acq.wait_start, now_});
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
    u64 allowed = quanta * grace + holders * (d::watch_period_ns + cpu);
    // The reservation keeps the device up to reserve_ns for a holder descheduled by the CPU, when
    // some session's threads measurably wait for one (cpu_wait_ppm): a CPU delay too.
    if (std::any_of(slots_.begin(), slots_.end(), [](const d::slot_record& s) {
          return d::is_active(s) && s.compute.cpu_wait_ppm >= d::reserve_cpu_wait_ppm;
        }))
      allowed += holders * d::reserve_ns;
    // A holder below its share may keep the device through its pauses for its pause hold: up to
    // pause_hold times the device time it used, plus one pause of pause_hold_burst_ns.
    std::uint32_t hold = 0;
    for (const auto& s : sc_.sessions) hold = std::max(hold, s.pause_hold_ppm);
    if (hold > 0)
      allowed += d::mul_div(busy_total_ - th.busy_mark, hold, 1'000'000) +
                 holders * d::pause_hold_burst_ns;
    // A higher class may keep its gaps from a lower waiter up to a quarter of its device time
    // (its lower-class idle debt, drained by 1/4): that much idle is allowed too.
    const int mine = sc_.sessions[static_cast<std::size_t>(th.session)].priority;
    if (std::any_of(sc_.sessions.begin(), sc_.sessions.end(),
                    [&](const session_spec& s) { return s.priority > mine; }))
      allowed += (busy_total_ - th.busy_mark) / 4 + d::idle_grace_at_guard_ns * holders;
    res_->worst_wait_idle = std::max(res_->worst_wait_idle, idle);
    if (idle > allowed) res_->idle_excess_ns = std::max(res_->idle_excess_ns, idle - allowed);
  }

  void start_guard(int j) {
    thread& th = threads_[static_cast<std::size_t>(j)];
    const session_spec& spec = sc_.sessions[static_cast<std::size_t>(th.session)];
    if (running_ > 0 && running_session_ != th.session) ++res_->overlaps;
    for (const thread& o : threads_) // (a session its cap holds back cannot run: no inversion)
      if (o.acq.registered && o.session != th.session &&
          slots_[o.slot].settings.priority > slots_[th.slot].settings.priority &&
          !d::paced(slots_[o.slot], now_) && !d::owed_guarantee(slots_[th.slot], now_))
        ++res_->priority_inversions;
    running_session_ = th.session;
    ++running_;
    ++res_->guards_total;
    th.guard_start = now_;
    th.guard_len = random_.uniform(spec.work.guard_min, spec.work.guard_max);
    if (spec.work.stuck_every > 0 && ++th.guards_started % spec.work.stuck_every == 0)
      th.guard_len = spec.work.stuck_len;
    session_result& sr = res_->sessions[static_cast<std::size_t>(th.session)];
    if (now_ >= sc_.warmup && now_ < sc_.duration) ++sr.guards;
    if (now_ >= probe_at_) sr.first_guard_after = std::min(sr.first_guard_after, now_);
    sr.intervals.push_back({now_, now_ + th.guard_len});
    ++sr.all_guards;
    sr.all_guard_ns += accounted(spec, th.guard_len);
    push(now_ + th.guard_len, ev::exit, j);
  }

  void exit(int j) {
    thread& th = threads_[static_cast<std::size_t>(j)];
    const session_spec& spec = sc_.sessions[static_cast<std::size_t>(th.session)];
    --running_;
    const u64 used = accounted(spec, now_ - th.guard_start);
    if (th.on_lease) { // session_core::exit_on_lease
      th.on_lease = false;
      d::slot_record& s = slots_[th.slot];
      s.lease_used_ns.fetch_add(used);
      s.lease_exits.fetch_add(1);
      s.lease_last_exit_ns.store(now_);
      s.lease_guards.fetch_sub(1);
      if (s.lease.load() != 1) wake(d::lease_exit_step(view(), th.slot, now_));
    } else {
      wake(d::exit_step(view(), th.slot, th.guard_start, used, now_));
    }
    if (spec.work.per_iteration > 0 && ++th.in_iteration == spec.work.per_iteration) {
      th.in_iteration = 0;
      if (spec.work.yields)
        push(now_, ev::yield, j);
      else
        push(now_ + iteration_pause(th), ev::want, j);
      return;
    }
    const u64 pause = random_.uniform(spec.work.pause_min, spec.work.pause_max);
    th.ran += th.guard_len + pause;
    push(now_ + pause + deschedule(th), ev::want, j);
  }

  /// The device time a guard of `spec` that ran `wall` ns accounts.
  static u64 accounted(const session_spec& spec, u64 wall) {
    return d::mul_div(wall, spec.work.accounted_ppm, 1'000'000);
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
    const u64 wait = random_.uniform(0, sc_.cpu.deschedule_max);
    th.cpu_wait += wait;
    return wait;
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
  u64 busy_total_ = 0; ///< time some guard ran, over the whole run
  int running_ = 0;
  int running_session_ = -1;
  std::size_t stopped_ = 0;
  result* res_ = nullptr;
};

inline result simulate(const scenario& sc, u64 probe_at = UINT64_MAX) {
  simulation s(sc, probe_at);
  return s.run();
}

} // namespace sim
