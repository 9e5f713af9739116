// SPDX-License-Identifier: Apache-2.0
// The state behind a gpushare::session: its table, its slot, and the join/leave/budget protocol.
// Kept on the heap (shared with the session's reservations) so a moved session or a reservation
// that outlives its session never dangles.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gpushare/detail/budget.hpp>
#include <gpushare/detail/cpu_wait.hpp>
#include <gpushare/detail/fork_guard.hpp>
#include <gpushare/detail/join_notices.hpp>
#include <gpushare/detail/slot.hpp>
#include <gpushare/detail/table_core.hpp>
#include <gpushare/table.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// "created by pid 4242 (uid 1000) at 2026-11-22 21:03:11 UTC": who made the table and when, from
/// its header (the pid is in the creator's PID namespace) and its file's owner.
inline std::string creation_text(const table_header& h, int fd) {
  std::string t = "created by pid " + std::to_string(h.creator_pid);
  struct stat st {};
  if (::fstat(fd, &st) == 0) t += " (uid " + std::to_string(st.st_uid) + ")";
  const std::time_t secs = static_cast<std::time_t>(h.created_unix_ns / 1'000'000'000u);
  std::tm tm{};
  char when[32];
  if (h.created_unix_ns != 0 && ::gmtime_r(&secs, &tm) != nullptr &&
      std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm) != 0)
    t += std::string(" at ") + when;
  return t;
}

/// True the first time this process asks about `what`: for notices printed once per process.
inline bool first_time_in_process(const std::string& what) {
  static std::mutex m;
  static std::set<std::string> seen;
  const std::lock_guard<std::mutex> lock(m);
  return seen.insert(what).second;
}

/// The longest a waiter sleeps before re-checking for dead sessions that may hold memory.
inline constexpr std::uint64_t liveness_recheck_ns = 100'000'000; // 100 ms
inline constexpr std::uint64_t wait_forever_ns = UINT64_MAX;
/// How many times a join starts over because the table it opened was removed meanwhile.
inline constexpr int max_join_attempts = 64;

class session_core final : public fork_registry::member {
public:
  session_core(std::string_view key, const session_options& opts) {
    const resolved_options r = resolve_options(opts);
    create_params p;
    p.domain = r.domain;
    p.key = std::string(key);
    p.access = r.access;
    p.capacity = r.capacity;
    p.open_timeout_ns = to_ns(r.open_timeout);
    name_ = r.name;
    // No fork() in this process until the slot is claimed, activated and registered: a child
    // forked in between would inherit the slot's liveness lock unknown to the fork registry and
    // keep this session alive after this process died (issue 13, item 11).
    const fork_registry::no_fork_scope no_fork;
    // `gpushare clean` may remove the table between our opening it and our joining it; then
    // activate() finds the name no longer refers to our file, and we join the table that the
    // name refers to now (docs/cli.md, "The clean protocol").
    for (int attempt = 1;; ++attempt) {
      table_ = table_core(mapped_table::open_or_create(p));
      crash_point("join.opened");
      claim_slot();
      crash_point("join.claimed");
      bool active = false;
      try {
        active = activate(r);
      } catch (...) {
        unlock_byte(table_.fd(), slot_lock_byte(slot_));
        throw;
      }
      if (active) break;
      unlock_byte(table_.fd(), slot_lock_byte(slot_));
      if (attempt == max_join_attempts)
        throw error(errc::table_busy,
                    "table '" + table_.name() + "' was removed " + std::to_string(attempt) +
                        " times while session '" + name_ +
                        "' was joining it; is `gpushare clean` running in a loop?");
    }
    owner_pid_ = ::getpid();
    created_table_ = table_.mapping().created();
    requested_capacity_ = r.capacity >= max_memory_bytes ? 0 : r.capacity;
    fork_registry::instance().add(this);
    if (const std::string note = capacity_mismatch_text();
        !note.empty() &&
        first_time_in_process(table_.name() + '\n' + std::to_string(requested_capacity_)))
      std::fprintf(stderr, "gpushare: %s\n", note.c_str());
    for (const std::string& w : join_warnings(table_.name(), key)) // each once per process
      if (first_time_in_process(w)) std::fprintf(stderr, "gpushare: warning: %s\n", w.c_str());
  }

  /// Why the table's capacity is not the one this session asked for (empty if it is, or if the
  /// session asked for none): the table existed already, and a table keeps the capacity it was
  /// created with. Printed once per process and table to stderr when the session joins.
  std::string capacity_mismatch_text() const {
    const table_header& h = table_.header();
    if (requested_capacity_ == 0 || created_table_ || h.capacity == requested_capacity_) return {};
    return "session '" + name_ + "' asked for a table capacity of " +
           format_capacity(requested_capacity_) + ", but table '" + table_.name() +
           "' already existed with a capacity of " + format_capacity(h.capacity) + " (" +
           creation_text(h, table_.fd()) +
           "); a table keeps the capacity it was created with, so " + format_capacity(h.capacity) +
           " applies. To use another capacity, remove the table once no session uses it "
           "(`gpushare clean`, or gpushare::table::remove) and the next session creates it anew";
  }

  session_core(const session_core&) = delete;
  session_core& operator=(const session_core&) = delete;
  ~session_core() { leave(); }

  /// Leaves the table: frees the slot and every byte it held. Idempotent.
  ///
  /// Ends the session at once, also for its other threads: a thread waiting for memory or the
  /// device (or pacing for its compute limit) is woken and throws errc::session_closed; a guard
  /// still running in another thread no longer holds the device (its exit is a no-op), so a
  /// waiter of another session may start while that guard's work still runs. Leave only once the
  /// session's guards have ended (docs/design.md, "Leaving").
  ///
  /// Exits that could not be applied earlier (the slot's journal: a lock timeout) need nothing
  /// here: ending the session clears everything its slot held. If the lock cannot be had
  /// either, dropping the liveness lock makes the slot dead, and the next process that looks
  /// (every waiter does, at least every liveness_recheck_ns) reclaims all of it.
  void leave() noexcept {
    if (!joined_.exchange(false)) return;
    fork_registry::instance().remove(this);
    if (inherited_) return; // a forked child's copy: the parent's session is not ours to end
    // No journal write may land in the slot once it can be reclaimed and reused: wait for any
    // write in progress (the writers check joined_ under this mutex, so later ones do nothing).
    { const std::lock_guard<std::mutex> barrier(journal_mutex_); }
    try {
      table_core::guard g(table_);
      slot_record& s = own();
      std::int64_t next = nobody;
      const bool mine = holds(s);
      if (mine) {
        // Our own waiting threads (device, pacing, memory) must see the end now, not at their
        // next re-check: bump their words under the lock, wake them after.
        s.grant_word.fetch_add(1, std::memory_order_release);
        if (s.memory_waiting > 0) table_.header().memory_wake.fetch_add(1);
        next = table_.end_session_locked(slot_);
      }
      crash_point("leave.cleared");
      table_.unlock_after_release(g);
      table_.wake_slot(next);
      if (mine) {
        table_.wake_slot(slot_);
        futex_wake(&table_.header().memory_wake);
      }
    } catch (...) {
      // Could not take the lock (a stopped peer holds it): dropping the liveness lock below
      // makes the slot dead, and the next process that looks reclaims it. Our own threads see
      // joined_ == false at their next re-check (check_usable()) and give up.
    }
    unlock_byte(table_.fd(), slot_lock_byte(slot_));
  }

  void forked_into_child() noexcept override {
    inherited_ = true;
    const int fd = table_.mapping().fd();
    table_.mapping().abandon_fd();
    if (fd >= 0) ::close(fd);
  }

  /// Grows this session's reservations by `bytes`, waiting up to `timeout_ns` for memory to be
  /// released. Returns false only when `timeout_ns == 0` and the memory is not free now.
  bool grow(std::uint64_t bytes, std::uint64_t timeout_ns, bool throw_on_timeout) {
    check_usable();
    const std::uint64_t start = monotonic_ns();
    const std::uint64_t deadline =
        timeout_ns == wait_forever_ns ? wait_forever_ns : sat_add(start, timeout_ns);
    bool waiting = false;
    try {
      return grow_loop(bytes, timeout_ns, throw_on_timeout, start, deadline, waiting);
    } catch (const error& e) {
      // A lock timeout, a reclaimed slot or leave(): this thread no longer waits. (The throws
      // of grow_loop itself have already stopped waiting.) After a lock timeout, do not wait
      // for the lock a second time: record the removal.
      if (waiting) forget_memory_wait(e.code() != errc::table_busy);
      throw;
    } catch (...) {
      if (waiting) forget_memory_wait(false);
      throw;
    }
  }

  /// Releases `bytes` of this session's reservations. Never loses them: if the table lock cannot
  /// be had (a stopped peer holds it), the release goes into the slot's journal, which the next
  /// process to lock the table applies (or the session's end returns them).
  void shrink(std::uint64_t bytes) noexcept {
    if (!joined_ || inherited_ || bytes == 0) return;
    try {
      locked g(*this);
      slot_record& s = own();
      if (!holds(s)) return;
      apply_shrink(table_.header(), s, bytes);
      g.released_memory();
    } catch (...) {
      journal([&](table_header& h, slot_record& s) { journal_shrink(h, s, bytes); });
    }
  }

  /// Blocks until this session may put work on the device and enters a guarded region.
  /// `requested_ns` is the monotonic time the guard was asked for; returns the time the region
  /// starts (after any wait). `timeout_ns`: the longest it waits (wait_forever_ns: no bound);
  /// past it, throws errc::timeout naming the session that holds the device.
  std::uint64_t enter_guard(std::uint64_t requested_ns,
                            std::uint64_t timeout_ns = wait_forever_ns) {
    check_usable();
    const std::uint64_t deadline =
        timeout_ns == wait_forever_ns ? wait_forever_ns : sat_add(requested_ns, timeout_ns);
    return acquire_device(true, requested_ns, deadline, timeout_ns);
  }

  /// Ends, at `now`, a guarded region that started at `start_ns` and used `used_ns` of device
  /// time. Never lost: if the table lock cannot be had, the exit goes into the slot's journal,
  /// which the next process to lock the table applies, whether or not this session ever calls
  /// gpushare again (journal.hpp).
  void exit_guard(std::uint64_t start_ns, std::uint64_t used_ns, std::uint64_t now) noexcept {
    if (!joined_ || inherited_) return;
    try {
      locked g(*this);
      if (!holds(own())) return;
      const std::int64_t wake = exit_step(table_.view(), slot_, start_ns, used_ns, now);
      crash_point("guard.exit");
      g.unlock();
      table_.wake_slot(wake);
    } catch (...) {
      journal([&](table_header& h, slot_record& s) {
        journal_guard_exit(h, s, start_ns, used_ns, now);
      });
    }
  }

  /// A guard's entry on this session's lease (scheduler.hpp, "The lease"): without the table
  /// lock, when the session holds the device and nobody else waits. Returns whether it entered;
  /// if not, the caller takes the locked way (enter_guard). A joined session's slot is its own
  /// (only its leaving or its death frees it), so the slot is read without the lock.
  bool try_enter_on_lease() noexcept {
    // (A journal cannot hold a locked guard's exit while the lease lasts: the lease is granted
    // only under the lock, which folds every journal first, and only with no guard running.)
    if (!joined_.load(std::memory_order_relaxed) || inherited_) return false;
    slot_record& s = own();
    if (s.lease.load(std::memory_order_acquire) != 1) return false;
    s.lease_guards.fetch_add(1, std::memory_order_seq_cst);
    if (s.lease.load(std::memory_order_seq_cst) == 1) return true;
    // A settler ended the lease meanwhile and may have counted this entry as a running guard:
    // take it back, and do the locked part of an exit in case the settler waits for it.
    leave_lease_guard(s);
    lease_exit_locked(monotonic_ns());
    return false;
  }

  /// Ends a guard that entered on the lease, at `now`, having used `used_ns` of device time:
  /// without the lock while the lease lasts.
  void exit_on_lease(std::uint64_t used_ns, std::uint64_t now) noexcept {
    if (!joined_.load(std::memory_order_relaxed) || inherited_) return; // left: nothing is ours
    slot_record& s = own();
    s.lease_used_ns.fetch_add(used_ns, std::memory_order_relaxed);
    s.lease_exits.fetch_add(1, std::memory_order_relaxed);
    s.lease_last_exit_ns.store(now, std::memory_order_relaxed);
    leave_lease_guard(s); // (publishes the two adds above)
    if (s.lease.load(std::memory_order_seq_cst) == 1) return;
    lease_exit_locked(now);
  }

  /// Accounts `used_ns` of device time measured after its guard ended (the CUDA layer learns a
  /// region's time only when the region's work has finished on the device).
  void add_device_time(std::uint64_t used_ns) noexcept {
    if (!joined_ || inherited_ || used_ns == 0) return;
    try {
      locked g(*this);
      slot_record& s = own();
      if (!holds(s)) return;
      const bool holder = current_holder(table_.view()) == slot_;
      account_device_time(table_.header(), s, used_ns, holder, monotonic_ns());
    } catch (...) {
      journal([&](table_header& h, slot_record& s) { journal_device_time(h, s, used_ns); });
    }
  }

  /// Whether a thread of another session waits for the device now (a lock-free hint: exact
  /// enough to decide whether to drain in-flight work before a guard ends).
  bool others_waiting() const noexcept {
    if (!joined_ || inherited_) return false;
    const std::uint32_t all = table_.header().device_waiters.load(std::memory_order_relaxed);
    if (all == 0) return false;
    return all > own_waiters_.load(std::memory_order_relaxed);
  }

  /// Whether ending this session's guard now would hand the device to a waiter
  /// (scheduler.hpp, handover_due_at_exit), `pending_ns` being the estimated device time the
  /// exit will account. Takes the table lock; true when it cannot be had.
  bool handover_due(std::uint64_t pending_ns) noexcept {
    if (!joined_ || inherited_) return false;
    try {
      locked g(*this);
      return handover_due_at_exit(table_.view(), slot_, monotonic_ns(), pending_ns);
    } catch (...) {
      return true;
    }
  }

  /// Whether a thread of any session of the table waits for memory now. Takes the table lock;
  /// true when the lock cannot be had (the caller then frees what it can, the safe side).
  bool memory_waiters() noexcept {
    if (!joined_ || inherited_) return false;
    try {
      locked g(*this);
      return table_.header().memory_waiters > 0;
    } catch (...) {
      return true;
    }
  }

  /// A cheap moment to give way: hands the device to a waiter that should run now and returns
  /// once this session has it back. One relaxed load when nobody waits.
  void yield() {
    if (!joined_ || inherited_) return;
    if (table_.header().device_waiters.load(std::memory_order_relaxed) == 0) return;
    {
      locked g(*this);
      own_checked();
      const std::int64_t wake = yield_step(table_.view(), slot_, monotonic_ns());
      if (wake == nobody) return;
      crash_point("yield.handed_over");
      g.unlock();
      table_.wake_slot(wake);
    }
    acquire_device(false, monotonic_ns(), wait_forever_ns, wait_forever_ns);
  }

  /// Records memory this session uses outside reservations (e.g. its CUDA context).
  void set_external(std::uint64_t bytes) {
    check_usable();
    locked g(*this);
    slot_record& s = own_checked();
    const bool less = bytes < s.external;
    set_usage(table_.header(), s, s.reserved, bytes, s.memory_guarantee);
    if (less) g.released_memory();
  }

  session_info info() {
    check_usable();
    locked g(*this);
    return read_session(own_checked(), slot_);
  }

  void configure(const settings_change& c) {
    check_usable();
    locked g(*this);
    own_checked();
    const std::int64_t wake =
        apply_settings(table_.view(), slot_, c, "session '" + name_ + "'", table_.name());
    if (c.memory_guarantee.has_value()) g.released_memory();
    g.unlock();
    table_.wake_slot(wake);
  }

  table_snapshot snapshot() {
    check_usable();
    return take_snapshot(table_); // its lock folds every journal first
  }

  /// Whether updates of this session (guard exits, releases, waiter removals, device time) wait
  /// in its slot's journal because the table lock could not be had when they happened. The next
  /// process that locks the table applies them.
  bool pending() const noexcept {
    return joined_.load(std::memory_order_relaxed) && !inherited_ &&
           journal_holds(table_.slot(slot_));
  }

  /// Times this session's hold on the device was revoked at its guard bound so far (a lock-free
  /// read: scoped_kernel::revoked() compares it before and after a guard).
  std::uint64_t revocations() const noexcept {
    if (!joined_.load(std::memory_order_relaxed) || inherited_) return 0;
    return std::atomic_ref<std::uint64_t>(table_.slot(slot_).revocations)
        .load(std::memory_order_relaxed);
  }

  session_id id() const noexcept { return {slot_, generation_}; }
  const std::string& name() const noexcept { return name_; }
  const std::string& table_name() const noexcept { return table_.name(); }
  bool joined() const noexcept { return joined_ && !inherited_; }
  table_core& core() noexcept { return table_; }

private:
  /// Writes an update that could not take the table lock into this session's slot's journal
  /// (journal.hpp), where the next locker of any process applies it. Nothing is written once the
  /// session has left (leave() waits for a write in progress before its slot can be reused).
  template <class F> void journal(F&& write) noexcept {
    try {
      const std::lock_guard<std::mutex> l(journal_mutex_);
      if (!joined_.load(std::memory_order_relaxed) || inherited_) return;
      write(table_.header(), own());
    } catch (...) {
      // std::mutex::lock failing (EDEADLK, ...): nothing better to do than what a lost exit did
      // before; the session's end still returns everything.
    }
  }

  /// The table lock, taken for this session (its guard folds every journal first), and the
  /// wakes the caller calls for, sent right after unlocking.
  class locked {
  public:
    explicit locked(session_core& c) : c_(&c), g_(c.table_) {}
    locked(const locked&) = delete;
    locked& operator=(const locked&) = delete;
    ~locked() { unlock(); }
    /// Memory was released under this lock: memory waiters are woken at the unlock.
    void released_memory() noexcept { released_ = true; }
    /// Wakes slot `slot` (nobody: nothing) after unlocking.
    void wake_after(std::int64_t slot) noexcept {
      if (slot != nobody) wake_ = slot;
    }
    void unlock() noexcept {
      if (!c_) return;
      table_core& t = c_->table_;
      c_ = nullptr;
      t.unlock_after_release(g_, released_);
      t.wake_slot(wake_);
    }

  private:
    friend class session_core;
    session_core* c_;
    table_core::guard g_;
    bool released_ = false;
    std::int64_t wake_ = nobody;
  };

  slot_record& own() noexcept { return table_.slot(slot_); }

  /// Takes one guard off the slot's lease count, never below 0: a leave() by another thread
  /// (which zeroes the count) may have come between this guard's entry and its exit.
  static void leave_lease_guard(slot_record& s) noexcept {
    std::uint32_t cur = s.lease_guards.load(std::memory_order_relaxed);
    while (cur > 0 && !s.lease_guards.compare_exchange_weak(cur, cur - 1, std::memory_order_seq_cst,
                                                            std::memory_order_relaxed)) {
    }
  }

  /// The locked part of a lease guard's exit once the lease has ended: account it, and release
  /// the device (or hand it over) if it was the last guard running.
  void lease_exit_locked(std::uint64_t now) noexcept {
    try {
      locked g(*this);
      if (!holds(own())) return;
      g.wake_after(lease_exit_step(table_.view(), slot_, now));
    } catch (...) {
      // The lock is stuck (a stopped peer holds it): the guard's time stays in the slot's lease
      // counters, and the locked part of its exit (a release, a handover) goes into the journal,
      // which the next locker applies.
      journal([](table_header& h, slot_record& s) { journal_lease_exit(h, s); });
    }
  }

  /// Whether slot `s` still holds this session (a peer reclaims it only if our liveness lock is
  /// gone). Call under the table lock.
  bool holds(const slot_record& s) const noexcept {
    return s.state.load(std::memory_order_relaxed) == slot_active && s.generation == generation_;
  }

  /// Our slot, after checking it is still ours (a peer reclaims it only if our liveness lock is
  /// gone, e.g. after someone removed and recreated the table by hand).
  slot_record& own_checked() {
    slot_record& s = own();
    if (!holds(s)) throw error(errc::session_closed, closed_text(s));
    return s;
  }

  void check_usable() const {
    if (inherited_)
      throw error(errc::session_closed, "session '" + name_ +
                                            "' belongs to the parent process; a forked child "
                                            "must open its own session");
    if (!joined_) throw error(errc::session_closed, "session '" + name_ + "' has left its table");
  }

  /// The wait loop of grow(). Re-checks for dead sessions (which may hold the memory) whenever
  /// liveness_recheck_ns have passed since the last check, by the clock, however the waits end
  /// (wake-ups by live peers' releases, signals): a waiter woken often still reclaims the dead.
  bool grow_loop(std::uint64_t bytes, std::uint64_t timeout_ns, bool throw_on_timeout,
                 std::uint64_t start, std::uint64_t deadline, bool& waiting) {
    bool reclaimed = false;
    std::uint64_t next_check = 0;
    for (;;) {
      check_usable(); // leave() by another thread ends this wait
      locked g(*this);
      slot_record& s = own_checked();
      const budget_verdict v = check_grow(table_.header(), s, bytes);
      if (v == budget_verdict::granted) {
        apply_grow(table_.header(), s, bytes);
        crash_point("reserve.locked");
        if (waiting) stop_waiting(s, start);
        waiting = false;
        return true;
      }
      if (v != budget_verdict::not_now) {
        if (waiting) stop_waiting(s, start);
        waiting = false;
        throw never_fits(v, s, bytes);
      }
      if (!reclaimed) { // dead sessions may hold what we need: reclaim, then try again at once
        // The totals are derived from the slots; a refusal must not rest on totals a stray
        // writer scribbled, so rebuild them (256 slots: cheap, and only on a refusal).
        recompute_totals(table_.view());
        g.unlock();
        reclaimed = true;
        table_.reclaim_dead();
        next_check = sat_add(monotonic_ns(), liveness_recheck_ns);
        continue;
      }
      const std::uint64_t now = monotonic_ns();
      if (now >= deadline) {
        if (waiting) stop_waiting(own(), start);
        waiting = false;
        if (!throw_on_timeout) return false;
        throw not_available(own(), bytes, timeout_ns);
      }
      if (!waiting) {
        waiting = true;
        ++own().memory_waiting;
        ++table_.header().memory_waiters;
      }
      const std::uint32_t seq = table_.header().memory_wake.load(std::memory_order_acquire);
      crash_point("reserve.waiting");
      g.unlock();
      const std::uint64_t until = std::min(deadline, next_check);
      if (until > now) futex_wait(&table_.header().memory_wake, seq, until - now);
      if (const std::uint64_t after = monotonic_ns(); after >= next_check) {
        table_.reclaim_dead();
        next_check = sat_add(after, liveness_recheck_ns);
      }
    }
  }

  void stop_waiting(slot_record& s, std::uint64_t start) noexcept {
    s.memory_waiting = sat_sub32(s.memory_waiting, 1);
    table_.header().memory_waiters = sat_sub32(table_.header().memory_waiters, 1);
    const std::uint64_t waited = monotonic_ns() - start;
    ++s.reserve_waits;
    s.reserve_wait_ns = sat_add(s.reserve_wait_ns, waited);
    s.reserve_wait_max_ns = std::max(s.reserve_wait_max_ns, waited);
  }

  /// A memory waiter leaves its wait by an exception: uncount it now, or (the lock timed out)
  /// journal it, so that no phantom memory waiter stays counted.
  void forget_memory_wait(bool try_lock) noexcept {
    try {
      if (!try_lock) throw error(errc::table_busy, "");
      locked g(*this);
      slot_record& s = own();
      if (!holds(s)) return;
      s.memory_waiting = sat_sub32(s.memory_waiting, 1);
      table_.header().memory_waiters = sat_sub32(table_.header().memory_waiters, 1);
    } catch (...) {
      journal([](table_header& h, slot_record& s) { journal_memory_waiter(h, s); });
    }
  }

  /// Waits until this session holds the device (and, for a guard, counts it as active). `start`:
  /// when it was asked for; `deadline`: when to give up (errc::timeout). Returns the time it got
  /// the device.
  std::uint64_t acquire_device(bool as_guard, std::uint64_t start, std::uint64_t deadline,
                               std::uint64_t timeout_ns) {
    acquire_state st;
    try {
      return acquire_loop(as_guard, start, deadline, timeout_ns, st);
    } catch (const error& e) { // a lock timeout, the slot was reclaimed, or leave()
      if (st.registered) forget_registration(e.code() != errc::table_busy);
      throw;
    } catch (...) {
      if (st.registered) forget_registration(false);
      throw;
    }
  }

  /// A thread that gives up waiting (an exception) must not stay counted as a waiter: the holder
  /// would keep waking, and handing the device to, a session that no longer waits. If the lock
  /// cannot be had either, the removal goes into the slot's journal (the next locker applies it).
  /// (A grant it got meanwhile needs nothing: a holder with no guard is taken over once its idle
  /// grace is spent.) `try_lock` false: the lock just timed out; do not wait for it again.
  void forget_registration(bool try_lock) noexcept {
    own_waiters_.fetch_sub(1, std::memory_order_relaxed);
    try {
      if (!try_lock) throw error(errc::table_busy, "");
      locked g(*this);
      if (holds(own())) remove_waiters(table_.view(), slot_);
    } catch (...) {
      journal([](table_header& h, slot_record& s) { journal_device_waiter(h, s); });
    }
  }

  std::uint64_t acquire_loop(bool as_guard, std::uint64_t start, std::uint64_t deadline,
                             std::uint64_t timeout_ns, acquire_state& st) {
    std::uint64_t now = start;
    // Dead holders never hand over: look for the dead whenever liveness_recheck_ns have passed
    // since the last look, by the clock, whatever ended the waits in between (signals, wake-ups
    // by a holder's guard exits, a watch's polls).
    std::uint64_t next_check = sat_add(start, liveness_recheck_ns);
    for (bool first = true;; first = false) {
      check_usable(); // leave() by another thread ends this wait
      locked g(*this);
      slot_record& s = own_checked();
      if (!first) now = monotonic_ns();
      if (first) // how much this thread waits for a CPU (the reservation's test; cpu_wait.hpp)
        if (const std::optional<std::uint32_t> w = sample_cpu_wait(now)) note_cpu_wait(s, *w);
      const bool was_registered = st.registered;
      const acquire_result r =
          acquire_step(table_.view(), slot_, now, as_guard, st, liveness_recheck_ns);
      if (st.registered != was_registered)
        own_waiters_.fetch_add(st.registered ? 1u : ~0u, std::memory_order_relaxed);
      if (r.what == acquire_result::granted) {
        if (st.waited) record_wait(s, now - st.wait_start);
        s.cap_throttle_ns =
            sat_add(s.cap_throttle_ns, throttled_ns_.exchange(0, std::memory_order_relaxed));
        g.wake_after(r.wake);
        return now;
      }
      g.wake_after(r.wake);
      if (now >= deadline) {
        if (st.registered) {
          remove_waiters(table_.view(), slot_);
          st.registered = false;
          own_waiters_.fetch_sub(1, std::memory_order_relaxed);
        }
        throw guard_timeout(timeout_ns, now - start);
      }
      const std::uint32_t seq = s.grant_word.load(std::memory_order_acquire);
      const std::uint64_t until =
          std::min({deadline, next_check, sat_add(now, std::max<std::uint64_t>(r.sleep_ns, 1))});
      if (r.what == acquire_result::pause) { // its compute limit: sleep, holding nothing
        // On the grant word, not in sleep_for: leave() wakes it.
        g.unlock();
        futex_wait(&s.grant_word, seq, until > now ? until - now : 1);
        throttled_ns_.fetch_add(monotonic_ns() - now, std::memory_order_relaxed);
      } else {
        crash_point("guard.waiting");
        g.unlock();
        futex_wait(&s.grant_word, seq, until > now ? until - now : 1);
      }
      if (const std::uint64_t after = monotonic_ns(); after >= next_check) {
        table_.reclaim_dead();
        next_check = sat_add(after, liveness_recheck_ns);
      }
    }
  }

  void record_wait(slot_record& s, std::uint64_t waited) noexcept {
    ++s.device_waits;
    s.device_wait_ns = sat_add(s.device_wait_ns, waited);
    s.device_wait_max_ns = std::max(s.device_wait_max_ns, waited);
  }

  void claim_slot();
  bool activate(const resolved_options& r);
  error never_fits(budget_verdict v, const slot_record& s, std::uint64_t bytes) const;
  std::string closed_text(const slot_record& s) const;
  error not_available(const slot_record& s, std::uint64_t bytes, std::uint64_t timeout_ns) const;
  error guard_timeout(std::uint64_t timeout_ns, std::uint64_t waited_ns);

  table_core table_;
  std::string name_;
  bool created_table_ = false;           ///< this session's join created the table
  std::uint64_t requested_capacity_ = 0; ///< its capacity option; 0: none asked for
  /// How its limit and guarantee were given (resolved_options), and the limit they resolved to
  /// at join: messages show the given form while the limit is still that one.
  std::string limit_given_, guarantee_given_;
  std::uint64_t limit_at_join_ = 0;
  std::uint32_t slot_ = 0;
  std::uint32_t generation_ = 0;
  std::int32_t owner_pid_ = 0;
  std::atomic<bool> joined_{false};
  /// Set in a forked child (forked_into_child). Atomic although no thread of the child reads it
  /// concurrently: ThreadSanitizer carries the parent's threads' accesses into the child and
  /// reported the child's write against a parent thread's read (a forked gpushare CLI then exited
  /// 66 under TSan).
  std::atomic<bool> inherited_{false};
  std::atomic<std::uint32_t> own_waiters_{0}; ///< this process's threads counted in device_waiters
  std::atomic<std::uint64_t> throttled_ns_{
      0};                    ///< compute-limit pauses not yet added to the slot's stats
  std::mutex journal_mutex_; ///< held by each journal write; leave() waits for it (journal())
};

/// Takes the liveness lock of a slot: that lock *is* the claim, so concurrent joiners never need
/// the table lock to pick slots and 256 of them do not queue behind each other. Free slots are
/// tried first, from a per-process starting point; a second pass also takes slots whose owner
/// died without leaving (their lock is free), which activate() then cleans.
inline void session_core::claim_slot() {
  const std::uint32_t n = table_.slot_count();
  const std::uint32_t start = static_cast<std::uint32_t>(::getpid()) * 2654435761u % n;
  for (int pass = 0; pass < 2; ++pass) {
    for (std::uint32_t k = 0; k < n; ++k) {
      const std::uint32_t i = (start + k) % n;
      const bool is_free = table_.slot(i).state.load(std::memory_order_acquire) == slot_free;
      if ((pass == 0) != is_free) continue;
      if (try_lock_byte(table_.fd(), slot_lock_byte(i)) == 0) {
        slot_ = i;
        table_.set_own_slot(i);
        return;
      }
    }
  }
  throw error(errc::no_free_slot, "all " + std::to_string(n) + " session slots of table '" +
                                      table_.name() +
                                      "' are held by live sessions; end some or use another "
                                      "GPUSHARE_DOMAIN");
}

/// Activates the claimed slot. Returns false, having changed nothing, if the table's name no
/// longer refers to the file we mapped: `gpushare clean` removed it (under this lock) after we
/// opened it, and a session here would be invisible to every process that opens the name later.
inline bool session_core::activate(const resolved_options& r) {
  const std::uint64_t start_ticks = process_start_ticks(); // file I/O: not under the lock
  for (int attempt = 0;; ++attempt) {
    deferred_wake wake{table_}; // destroyed after the guard below: wakes outside the lock
    table_core::guard g(table_);
    if (!names_same_file(table_.fd(), table_.name())) return false;
    table_header& h = table_.header();
    slot_record& s = own();
    if (s.state.load(std::memory_order_relaxed) == slot_active) { // its owner died; we hold it
      wake.slot = table_.end_session_locked(slot_);
      ++h.sessions_reclaimed;
      // Its memory came back: memory waiters must re-check now, not at their next liveness
      // re-check (bumped under the lock; the wake is sent after the unlock, by `wake`).
      if (h.memory_waiters > 0) {
        h.memory_wake.fetch_add(1, std::memory_order_release);
        wake.memory = true;
      }
    }
    const std::string who = "session '" + name_ + "'";
    check_fraction_has_capacity(who, "memory limit", r.memory_limit, h.capacity, table_.name());
    check_fraction_has_capacity(who, "memory guarantee", r.memory_guarantee, h.capacity,
                                table_.name());
    const std::uint64_t limit = r.memory_limit ? r.memory_limit->resolve(h.capacity) : h.capacity;
    const std::uint64_t guarantee = r.memory_guarantee.resolve(h.capacity);
    limit_given_ = r.memory_limit_given;
    guarantee_given_ = r.memory_guarantee_given;
    limit_at_join_ = limit;
    if (guarantee > limit)
      throw error(errc::invalid_argument, who + ": memory guarantee " + format_bytes(guarantee) +
                                              amount_read_as(guarantee_given_, guarantee) +
                                              " exceeds its limit " + format_capacity(limit) +
                                              amount_read_as(limit_given_, limit));
    s.reserved = s.external = s.memory_guarantee = 0; // a free slot counts nowhere yet
    if (!guarantee_fits(h, s, guarantee)) {
      if (attempt == 0) {
        recompute_totals(table_.view()); // never refuse on scribbled totals (see grow())
        g.unlock();
        table_.reclaim_dead();
        continue;
      }
      throw error(errc::guarantee_unavailable,
                  "session '" + name_ + "': a memory guarantee of " + format_bytes(guarantee) +
                      amount_read_as(guarantee_given_, guarantee) +
                      " cannot be promised in table '" + table_.name() + "': capacity " +
                      format_capacity(h.capacity) + ", already committed " +
                      format_bytes(h.committed_total) + "; lower the guarantee or wait");
    }
    // Nothing of the slot's previous session survives (slot.hpp): only what is set below is
    // not zero. The slot is free and counts nowhere, so the totals need no adjustment.
    reset_slot_for_join(s);
    generation_ = s.generation + 1;
    s.generation = generation_;
    s.pid = ::getpid();
    s.start_time_ticks = start_ticks;
    s.joined_unix_ns = realtime_ns();
    copy_name_to(s.name, name_capacity, name_);
    s.priority = r.priority;
    s.share = r.share;
    s.compute_limit_ppm = r.compute_limit_ppm;
    ++s.settings_seq;
    s.memory_limit = limit;
    s.quantum_ns = r.quantum_ns;
    s.handover_mode =
        r.handover == handover_point::at_yield ? handover_at_yield : handover_at_guard;
    s.max_guard_ns = r.max_guard_ns;
    s.compute_guarantee_ppm = r.compute_guarantee_ppm;
    s.vtime = class_floor(h, r.priority); // a newcomer starts level with its class (see place())
    set_usage(h, s, 0, 0, guarantee);
    ++h.live_sessions;
    crash_point("join.locked");
    s.state.store(slot_active, std::memory_order_release);
    joined_ = true;
    return true;
  }
}

/// Why this session no longer holds its slot (call under the lock): an operator evicted it
/// (`gpushare evict`, table::evict), or a peer reclaimed it (its liveness lock was lost).
inline std::string session_core::closed_text(const slot_record& s) const {
  const table_header& h = table_.header();
  const bool evicted = (s.generation == generation_ && s.evicted_unix_ns != 0) ||
                       (h.last_eviction_slot == slot_ &&
                        h.last_eviction_generation == generation_ && h.last_eviction_unix_ns != 0);
  if (!evicted)
    return "session '" + name_ + "' no longer holds slot " + std::to_string(slot_) + " of table '" +
           table_.name() + "' (was it reclaimed?)";
  const std::uint32_t by = s.generation == generation_ ? s.evicted_by_uid : h.last_eviction_by_uid;
  return "session '" + name_ + "' was evicted from table '" + table_.name() + "' by uid " +
         std::to_string(by) +
         " (`gpushare evict`): its hold on the device and its reservations were given to the "
         "other sessions; open a new session to use the table again";
}

inline error session_core::never_fits(budget_verdict v, const slot_record& s,
                                      std::uint64_t bytes) const {
  if (v == budget_verdict::exceeds_capacity) {
    const table_header& h = table_.header();
    std::string why = "session '" + name_ + "': a reservation of " + format_bytes(bytes) +
                      " exceeds the whole capacity of table '" + table_.name() + "' (" +
                      format_capacity(h.capacity) + ")";
    if (created_table_) {
      why += ", the capacity this session created the table with";
    } else {
      why += ". The table already existed when this session joined: it was " +
             creation_text(h, table_.fd()) + ", and a table keeps the capacity it was created with";
      why += requested_capacity_ != 0 ? std::string(" (this session asked for ") +
                                            format_capacity(requested_capacity_) + ")"
                                      : std::string(" (this session set no capacity)");
      why += ". If it is a table left from an earlier run, remove it once no session uses it "
             "(`gpushare clean`, or gpushare::table::remove) and the next session creates it "
             "with its own capacity";
    }
    return error(errc::exceeds_capacity, why);
  }
  return error(errc::over_limit,
               "session '" + name_ + "': reserving " + format_bytes(bytes) +
                   " would exceed its memory limit of " + format_capacity(s.memory_limit) +
                   (s.memory_limit == limit_at_join_ ? amount_read_as(limit_given_, s.memory_limit)
                                                     : std::string()) +
                   " (reserved " + format_bytes(s.reserved) + ", used outside reservations " +
                   format_bytes(s.external) +
                   "); raise the limit (GPUSHARE_MEMORY_LIMIT or `gpushare "
                   "set`) or reserve less");
}

inline error session_core::not_available(const slot_record& s, std::uint64_t bytes,
                                         std::uint64_t timeout_ns) const {
  const table_header& h = table_.header();
  return error(errc::timeout, "session '" + name_ + "': " + format_bytes(bytes) +
                                  " did not become available in " +
                                  std::to_string(timeout_ns / 1'000'000) + " ms (table '" +
                                  table_.name() + "': capacity " + format_capacity(h.capacity) +
                                  ", committed " + format_bytes(h.committed_total) +
                                  "; this session holds " + format_bytes(s.reserved) + ")");
}

/// The error of a guard that did not get the device by its deadline (call under the lock):
/// names the session that holds the device and how long it has been in its guard, since the
/// usual cause of a long wait is a holder that is stopped (SIGSTOP, a debugger, `docker pause`)
/// or hung inside a guard, which liveness cannot free: it is alive.
inline error session_core::guard_timeout(std::uint64_t timeout_ns, std::uint64_t waited_ns) {
  const table_view& t = table_.view();
  const std::uint64_t now = monotonic_ns();
  std::string why;
  const std::int64_t h = current_holder(t);
  if (h == nobody) {
    why = paced(own(), now) ? "its own compute limit holds it back"
                            : "the device is free but others had the better claim";
  } else if (h == slot_) {
    why = "this session holds the device but must first let its running guards drain";
  } else {
    const slot_record& hs = t.slots[h];
    const std::uint64_t quiet = hs.last_active_ns ? sat_sub(now, hs.last_active_ns) : 0;
    why = "the device is held by session '" + read_bounded(hs.name, name_capacity) + "' (slot " +
          std::to_string(h) + ", pid " + std::to_string(hs.pid) + ")";
    if (busy_guards(hs) > 0)
      why += ", inside a guard with no guard entry or exit for " +
             std::to_string(quiet / 1'000'000) +
             " ms (its quantum: " + std::to_string(hs.quantum_ns / 1'000'000) +
             " ms); is it stopped (SIGSTOP, a debugger, docker pause) or hung in its guard? "
             "`gpushare evict` ends such a session; a guard bound (GPUSHARE_MAX_GUARD, or the "
             "table's default) revokes such a hold by itself";
    else
      why += ", between its guards";
  }
  return error(errc::timeout, "session '" + name_ + "': no turn on the device of table '" +
                                  table_.name() + "' within its guard timeout of " +
                                  std::to_string(timeout_ns / 1'000'000) + " ms (waited " +
                                  std::to_string(waited_ns / 1'000'000) + " ms): " + why);
}

} // namespace detail
} // namespace v0
} // namespace gpushare
