// SPDX-License-Identifier: Apache-2.0
// The state behind a gpushare::session: its table, its slot, and the operations it makes on them.
// Kept on the heap (shared with the session's reservations) so a moved session or a reservation
// that outlives its session never dangles.
//
// This header defines the class, its leaving and its short operations. The longer jobs are
// defined in headers of their own, included at the end of this one, so that whoever includes
// this header gets all of them:
//   session_join.hpp  joining: open the table, claim a slot, activate it; the join notices
//   waits.hpp         waiting for memory (grow) and for the device (acquire_device)
//   guard.hpp         a guard's entry and exit: on the lease without the lock, or locked
//   reclaim_session.hpp  answering requests to give memory back: the handler and its watcher
//   messages.hpp      the long texts of errors and notices (free functions)
// An update that cannot take the table lock goes into the slot's journal (journal.hpp) through
// locked_or_journaled() below.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <gpushare/detail/budget.hpp>
#include <gpushare/detail/crash_point.hpp>
#include <gpushare/detail/fork_guard.hpp>
#include <gpushare/detail/futex.hpp>
#include <gpushare/detail/journal.hpp>
#include <gpushare/detail/liveness.hpp>
#include <gpushare/detail/messages.hpp>
#include <gpushare/detail/reclaim.hpp>
#include <gpushare/detail/settings.hpp>
#include <gpushare/detail/snapshot.hpp>
#include <gpushare/detail/table_core.hpp>
#include <gpushare/table_types.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// The longest a waiter sleeps before re-checking for dead sessions that may hold memory.
inline constexpr std::uint64_t liveness_recheck_ns = 100'000'000; // 100 ms
inline constexpr std::uint64_t wait_forever_ns = UINT64_MAX;

class session_core final : public fork_registry::member {
public:
  /// Joins the table for `key` (session_join.hpp).
  session_core(std::string_view key, const resolved_options& r);
  session_core(const session_core&) = delete;
  session_core& operator=(const session_core&) = delete;
  ~session_core() { leave(); }

  /// Why the table's capacity is not the one this session asked for (messages.hpp; empty if it
  /// is). One of the notices of its join.
  std::string capacity_mismatch_text() const {
    return detail::capacity_mismatch_text(facts_, table_);
  }
  /// What its join had to tell (<gpushare/notices.hpp>): kept here whether or not the process's
  /// handler was given them (it is given each once per process).
  const std::vector<notice>& notices() const noexcept { return notices_; }

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
    // A guard of another thread may be between its lease operation's check of joined_ and its
    // lock-free updates of the slot's lease counters (guard.hpp): once the slot is free, a new
    // session may own it, and those updates would land on it. Wait for them (issue 40, A1-A2).
    wait_for_lease_operations();
    stop_reclaim_watcher(); // it reads the slot: it ends before the slot can be reused
    // No journal write may land in the slot once it can be reclaimed and reused: wait for any
    // write in progress (the writers check joined_ under this mutex, so later ones do nothing).
    { const std::lock_guard<std::mutex> barrier(journal_mutex_); }
    try {
      locked g(*this);
      g.released_memory();
      slot_record& s = own();
      if (holds(s)) {
        // Our own waiting threads (device, pacing, memory) must see the end now, not at their
        // next re-check: bump their words under the lock, wake them after.
        s.grant_word.fetch_add(1, std::memory_order_release);
        g.wake_after(table_.end_session_locked(slot_));
        g.wake_own_threads();
      }
      crash_point("leave.cleared");
    } catch (...) {
      // Could not take the lock (a stopped peer holds it): dropping the liveness lock below
      // makes the slot dead, and the next process that looks reclaims it. Our own threads see
      // joined_ == false at their next re-check (check_usable()) and give up.
    }
    unlock_byte(table_.fd(), slot_lock_byte(slot_));
  }

  void forked_into_child() noexcept override {
    inherited_ = true;
    // The watcher thread does not exist in the child: its handle is dropped (an atomic store:
    // ThreadSanitizer carries the parent's threads' accesses into the child), never joined.
    watcher_.store(nullptr, std::memory_order_relaxed);
    const int fd = table_.mapping().fd();
    table_.mapping().abandon_fd();
    if (fd >= 0) ::close(fd);
  }

  // ---- memory (waits.hpp) -------------------------------------------------------------------

  /// Grows this session's reservations by `bytes`, waiting up to `timeout_ns` for memory to be
  /// released (wait_forever_ns: no bound); past it, throws errc::timeout. While it waits it asks
  /// sessions of lower priority classes to give reclaimable memory back (reclaim.hpp).
  void grow(std::uint64_t bytes, std::uint64_t timeout_ns, memory_kind kind = memory_kind::fixed);
  /// Grows this session's reservations by `bytes` if they fit now (after reclaiming the memory
  /// of dead sessions); false if they do not. Never waits for live sessions, never asks them.
  [[nodiscard]] bool try_grow(std::uint64_t bytes, memory_kind kind = memory_kind::fixed);

  /// Releases `bytes` of this session's reservations. Never loses them: if the table lock cannot
  /// be had (a stopped peer holds it), the release goes into the slot's journal, which the next
  /// process to lock the table applies (or the session's end returns them).
  void shrink(std::uint64_t bytes, memory_kind kind = memory_kind::fixed) noexcept {
    if (!joined_ || inherited_ || bytes == 0) return;
    locked_or_journaled(
        [&](locked& g, slot_record& s) {
          apply_shrink(table_.header(), s, bytes, kind);
          g.released_memory();
        },
        [&](table_header& h, slot_record& s) { journal_shrink(h, s, bytes, kind); });
  }

  // ---- reclaim (reclaim_session.hpp) ----------------------------------------------------------

  /// What the application gives back when asked: called with the bytes asked for, returns the
  /// bytes it gave back (by releasing reclaimable reservations).
  using reclaim_handler = std::function<std::uint64_t(std::uint64_t)>;
  /// `bytes` of this session's reservations become reclaimable (or stop being).
  void mark_reclaimable(std::uint64_t bytes, memory_kind kind);
  /// Registers (or, empty, removes) the handler that answers requests to give memory back.
  void on_reclaim(reclaim_handler h);
  /// Bytes this session is asked to give back now (0: none): one relaxed load.
  std::uint64_t reclaim_requested() const noexcept {
    if (!joined_.load(std::memory_order_relaxed) || inherited_) return 0;
    return table_.slot(slot_).reclaim.asked.load(std::memory_order_relaxed);
  }
  /// If a request it has not answered yet stands and a handler is registered: calls the handler
  /// (without the table lock) and records its answer. Returns the bytes it said it gave back.
  /// The handler's exception propagates (the request then stands until its deadline).
  std::uint64_t answer_reclaim();
  /// answer_reclaim() where nothing may throw (a guard's exit): an exception is dropped.
  void answer_reclaim_quietly() noexcept;
  /// Starts a thread that answers requests as they come (idempotent); leave() stops it.
  void start_reclaim_watcher();
  /// Whether its reclaimable growths may borrow idle guarantees when it answers at once.
  void accept_loans(bool on) noexcept { accept_loans_.store(on, std::memory_order_relaxed); }

  /// Records memory this session uses outside reservations (e.g. its CUDA context).
  void set_external(std::uint64_t bytes) {
    check_usable();
    locked g(*this);
    slot_record& s = own_checked();
    const bool less = bytes < s.memory.external;
    set_usage(table_.header(), s, s.memory.reserved, bytes, s.settings.memory_guarantee);
    if (less) g.released_memory();
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

  // ---- the device (guard.hpp) ---------------------------------------------------------------

  /// Blocks until this session may put work on the device and enters a guarded region.
  /// `requested_ns` is the monotonic time the guard was asked for; returns the time the region
  /// starts (after any wait). `timeout_ns`: the longest it waits (wait_forever_ns: no bound);
  /// past it, throws errc::timeout naming the session that holds the device.
  std::uint64_t enter_guard(std::uint64_t requested_ns, std::uint64_t timeout_ns = wait_forever_ns);
  /// Work a guard leaves in flight past its end (the CUDA layer's queued regions): an exit that
  /// hands the device over waits for it first, while the guard still counts as running, so that
  /// no peer is granted the device with it still queued (guard.hpp, "Draining at the exit").
  struct exit_drain {
    void* context = nullptr;
    bool (*pending)(void* context) noexcept = nullptr; ///< is any of it still in flight?
    /// Waits for it (bounded by the caller's drain timeout); returns its device time.
    std::uint64_t (*drain)(void* context) noexcept = nullptr;
    /// Its estimated device time, not yet in used_ns (asked only when a handover is near).
    std::uint64_t (*estimate)(void* context) noexcept = nullptr;
  };

  /// Ends, at `now`, a guarded region that started at `start_ns` and used `used_ns` of device
  /// time. Never lost: if the table lock cannot be had, the exit goes into the slot's journal,
  /// which the next process to lock the table applies, whether or not this session ever calls
  /// gpushare again (journal.hpp).
  void exit_guard(std::uint64_t start_ns, std::uint64_t used_ns, std::uint64_t now,
                  const exit_drain* drain = nullptr) noexcept;
  /// A guard's entry on this session's lease (scheduler.hpp, "The lease"): without the table
  /// lock, when the session holds the device and nobody else waits. Returns whether it entered;
  /// if not, the caller takes the locked way (enter_guard).
  bool try_enter_on_lease() noexcept;
  /// Ends a guard that entered on the lease, at `now`, having used `used_ns` of device time:
  /// without the lock while the lease lasts.
  void exit_on_lease(std::uint64_t used_ns, std::uint64_t now,
                     const exit_drain* drain = nullptr) noexcept;

  /// How a guard entered: when it got the device, and whether on the lease (guard.hpp).
  struct guard_entry {
    std::uint64_t start_ns = 0;
    bool on_lease = false;
  };
  /// The entry of every guard (gpushare::scoped_kernel and cuda::scoped_kernel): on the lease
  /// while it lasts, else the locked way, waiting at most `timeout_ns` (enter_guard).
  guard_entry begin_guard(std::uint64_t requested_ns, std::uint64_t timeout_ns = wait_forever_ns);
  /// The exit of every guard, at `now`, having used `used_ns` of device time: the way `e`
  /// entered (exit_on_lease or exit_guard).
  /// `drain`, if given, is the work the guard leaves in flight (exit_drain).
  void end_guard(const guard_entry& e, std::uint64_t used_ns, std::uint64_t now,
                 const exit_drain* drain = nullptr) noexcept;

  // ---- work left on the GPU past a guard's end (sched_gpu.hpp; implemented in guard.hpp) ----

  /// Whether a session of a higher (lower) priority class than this one asked for the device
  /// within the last class_active_window_ns. Lock-free hints.
  bool higher_class_active(std::uint64_t now) noexcept;
  bool lower_class_active(std::uint64_t now) noexcept;
  /// Marks this session's work as still in flight on the GPU, finished by `until_ns` at the
  /// latest: until then, or until gpu_work_finished(mark), no session of a lower class is
  /// granted the device. Returns the mark (0: not joined, nothing marked). Lock-free.
  std::uint64_t mark_gpu_work(std::uint64_t until_ns) noexcept;
  /// The work marked `mark` finished: clears the mark (unless a later one replaced it) and wakes
  /// the session waiting for it. Safe from a CUDA host function (no lock, no allocation, no
  /// CUDA call); a no-op once the slot holds a later session.
  void gpu_work_finished(std::uint64_t mark) noexcept;
  /// session::linger: keep the device through its gaps against lower classes until now + `ns`
  /// (the scheduler caps it at max_linger_ns after its last guard). Lock-free.
  void linger(std::uint64_t ns) noexcept;

  /// Accounts `used_ns` of device time measured after its guard ended (the CUDA layer learns a
  /// region's time only when the region's work has finished on the device).
  void add_device_time(std::uint64_t used_ns) noexcept {
    if (!joined_ || inherited_ || used_ns == 0) return;
    locked_or_journaled(
        [&](locked&, slot_record& s) {
          const bool holder = current_holder(table_.view()) == slot_;
          account_device_time(table_.view(), s, used_ns, holder, monotonic_ns());
        },
        [&](table_header& h, slot_record& s) { journal_device_time(h, s, used_ns); });
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
  bool handover_due(std::uint64_t pending_ns) noexcept;

  /// A cheap moment to give way: hands the device to a waiter that should run now and returns
  /// once this session has it back. One relaxed load when nobody waits.
  void yield();

  /// Times this session's hold on the device was revoked at its guard bound so far (a lock-free
  /// read: scoped_kernel::revoked() compares it before and after a guard).
  std::uint64_t revocations() const noexcept {
    if (!joined_.load(std::memory_order_relaxed) || inherited_) return 0;
    return std::atomic_ref<std::uint64_t>(table_.slot(slot_).stats.revocations)
        .load(std::memory_order_relaxed);
  }

  // ---- settings and observation -------------------------------------------------------------

  session_info info() {
    check_usable();
    locked g(*this);
    session_info i = read_session(own_checked(), slot_);
    i.holds_startup = startup_holder(table_.view()) == static_cast<std::int64_t>(slot_);
    return i;
  }

  void configure(const settings_change& c) {
    check_usable();
    locked g(*this);
    own_checked();
    g.wake_after(
        apply_settings(table_.view(), slot_, c, "session '" + facts_.name + "'", table_.name()));
    if (c.memory_guarantee.has_value()) g.released_memory();
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

  session_id id() const noexcept { return {slot_, generation_}; }
  const std::string& name() const noexcept { return facts_.name; }
  const std::string& table_name() const noexcept { return table_.name(); }
  bool joined() const noexcept { return joined_ && !inherited_; }
  table_core& core() noexcept { return table_; }

private:
  /// The table lock, taken for this session (its guard folds every journal first), with the
  /// wakes the caller asks for sent right after unlocking (table_core::guard: the one way to wake).
  class locked {
  public:
    explicit locked(session_core& c) : c_(&c), g_(c.table_) {}
    /// Memory was released under this lock: memory waiters are woken at the unlock.
    void released_memory() noexcept { g_.released_memory(); }
    /// Wakes slot `slot` (nobody: nothing) after unlocking.
    void wake_after(std::int64_t slot) noexcept { g_.wake_after(slot); }
    /// Wakes this session's own waiting threads (device, pacing and memory waits) after
    /// unlocking: the session ended (leave()).
    void wake_own_threads() noexcept {
      g_.wake_after(c_->slot_);
      g_.wake_memory_waiters();
    }
    void unlock() noexcept { g_.unlock(); }

  private:
    session_core* c_;
    table_core::guard g_;
  };

  /// Runs `update(g, slot)` under the table lock if this session still holds its slot. If the
  /// lock cannot be had (a stopped peer holds it), writes `entry` into the slot's journal
  /// instead (journal()), which the next locker of any process applies: the update is not lost.
  template <class Update, class Entry>
  void locked_or_journaled(Update&& update, Entry&& entry) noexcept {
    try {
      locked g(*this);
      slot_record& s = own();
      if (holds(s)) update(g, s);
    } catch (...) {
      journal(entry);
    }
  }

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

  slot_record& own() noexcept { return table_.slot(slot_); }

  /// Whether slot `s` still holds this session (a peer reclaims it only if our liveness lock is
  /// gone). Call under the table lock.
  bool holds(const slot_record& s) const noexcept {
    return s.state.load(std::memory_order_relaxed) == slot_active && s.generation == generation_;
  }

  /// Our slot, after checking it is still ours (a peer reclaims it only if our liveness lock is
  /// gone, e.g. after someone removed and recreated the table by hand).
  slot_record& own_checked() {
    slot_record& s = own();
    if (!holds(s))
      throw error(errc::session_closed, closed_text(facts_, table_, s, slot_, generation_));
    return s;
  }

  void check_usable() const {
    if (inherited_)
      throw error(errc::session_closed, "session '" + facts_.name +
                                            "' belongs to the parent process; a forked child "
                                            "must open its own session");
    if (!joined_)
      throw error(errc::session_closed, "session '" + facts_.name + "' has left its table");
  }

  // Joining (session_join.hpp).
  void join_table(const resolved_options& r, create_params p);
  void claim_slot();
  bool activate(const resolved_options& r);
  std::uint64_t resolve_memory_settings(const resolved_options& r, const table_header& h);
  slot_group group_for_join(const resolved_options& r, std::uint64_t guarantee) const;
  void raise_join_notices(std::string_view key, const std::vector<notice>& resolved);

  // Waits (waits.hpp).
  /// What a memory wait does when its deadline passes.
  enum class past_deadline { throw_timeout, return_false };
  /// Why a thread asks for the device: to enter a guard (counted active once granted), or to
  /// get it back after yield().
  enum class device_claim { guard, after_yield };
  /// How a thread that stops waiting by an exception takes itself off the waiter counts.
  enum class uncount { under_lock, in_journal };
  static uncount uncount_after(const error& e) noexcept;
  void reclaim_dead_when_due(std::uint64_t& next_check);
  /// One reserve's wait: what grow_loop() carries from one look to the next.
  struct memory_wait {
    std::uint64_t bytes = 0;
    memory_kind kind = memory_kind::fixed;
    std::uint64_t timeout_ns = 0;
    std::uint64_t start = 0;
    std::uint64_t deadline = 0;
    std::uint64_t first_ask = 0; ///< when requests were first out for it (0: never)
    bool waiting = false;        ///< counted as a memory waiter
    bool may_borrow = false;     ///< reclaimable, and this session answers at once (a watcher)
    std::uint64_t ticket = 0;    ///< its place among the waiting reserves (memory_queue.hpp)
  };
  bool answers_at_once();
  bool grow_until(std::uint64_t bytes, std::uint64_t timeout_ns, past_deadline then,
                  memory_kind kind);
  bool grow_loop(memory_wait& w, past_deadline then);
  std::uint64_t ask_and_sleep(locked& g, memory_wait& w, std::uint64_t now,
                              std::uint64_t next_check);
  void stop_waiting(slot_record& s, const memory_wait& w) noexcept;
  void forget_memory_wait(uncount how, std::uint64_t ticket) noexcept;
  std::uint64_t acquire_device(device_claim claim, std::uint64_t start, std::uint64_t deadline,
                               std::uint64_t timeout_ns);
  std::uint64_t acquire_loop(device_claim claim, std::uint64_t start, std::uint64_t deadline,
                             std::uint64_t timeout_ns, acquire_state& st);
  void forget_registration(uncount how) noexcept;

  // The lease (guard.hpp).
  static void leave_lease_guard(slot_record& s) noexcept;
  void lease_exit_locked(std::uint64_t now) noexcept;
  /// A lease operation in flight (try_enter_on_lease, exit_on_lease): counted from before its
  /// check of joined_ to after its last update of the slot, so that leave(), which clears
  /// joined_ first, can wait for every operation that saw it set (wait_for_lease_operations).
  class lease_operation {
  public:
    explicit lease_operation(session_core& c) noexcept : c_(c) {
      c_.lease_ops_.fetch_add(1, std::memory_order_seq_cst);
    }
    lease_operation(const lease_operation&) = delete;
    lease_operation& operator=(const lease_operation&) = delete;
    ~lease_operation() { c_.lease_ops_.fetch_sub(1, std::memory_order_seq_cst); }
    /// Whether the session is still joined (and not a forked child's copy): read after the
    /// operation is counted, so leave() either sees it counted or it sees joined_ cleared.
    bool joined() const noexcept {
      return c_.joined_.load(std::memory_order_seq_cst) && !c_.inherited_;
    }

  private:
    session_core& c_;
  };
  void wait_for_lease_operations() const noexcept;
  std::atomic<std::uint32_t> lease_ops_{0}; ///< lease operations in flight (lease_operation)

  table_core table_;
  session_facts facts_;         ///< what messages say about this session; set at join
  std::vector<notice> notices_; ///< what its join had to tell; set at join
  std::uint32_t slot_ = 0;
  std::uint32_t generation_ = 0;
  std::atomic<bool> joined_{false};
  std::atomic<std::uint32_t> gpu_marks_{0}; ///< marks made (mark_gpu_work)
  /// The session's priority class as last read under the lock (join, each device wait): what
  /// the lock-free paths (class activity, marks) use.
  std::atomic<int> priority_{0};
  /// Set in a forked child (forked_into_child). Atomic although no thread of the child reads it
  /// concurrently: ThreadSanitizer carries the parent's threads' accesses into the child and
  /// reported the child's write against a parent thread's read (a forked gpushare CLI then exited
  /// 66 under TSan).
  std::atomic<bool> inherited_{false};
  std::atomic<std::uint32_t> own_waiters_{0}; ///< this process's threads counted in device_waiters
  std::atomic<std::uint64_t> throttled_ns_{
      0};                    ///< compute-limit pauses not yet added to the slot's stats
  std::mutex journal_mutex_; ///< held by each journal write; leave() waits for it (journal())

  // Reclaim (reclaim_session.hpp).
  void stop_reclaim_watcher() noexcept;
  void watch_reclaim() noexcept;
  std::uint64_t reclaim_deadline_ns_ = default_reclaim_deadline_ns; ///< its requests' deadline
  std::mutex reclaim_mutex_; ///< guards handler_, and starting and stopping the watcher
  std::shared_ptr<const reclaim_handler> handler_;
  std::atomic<std::thread*> watcher_{nullptr}; ///< owned: deleted by stop_reclaim_watcher()
  std::atomic<bool> watcher_stop_{false};
  std::atomic<bool> answering_{false};         ///< a thread runs the handler now
  std::atomic<bool> accept_loans_{true};       ///< see accept_loans()
  std::atomic<std::uint32_t> answered_seq_{0}; ///< the request (slot's reclaim.seq) last answered
};

} // namespace detail
} // namespace v0
} // namespace gpushare

// The definitions of the members declared above, by job (each includes this header first).
#include <gpushare/detail/guard.hpp>
#include <gpushare/detail/reclaim_session.hpp>
#include <gpushare/detail/session_join.hpp>
#include <gpushare/detail/waits.hpp>
