// SPDX-License-Identifier: Apache-2.0
// The journal: exit-path updates that could not take the table lock, kept in the session's own
// slot where any locker applies them.
//
// A guard exit, a release, device time measured after a guard, and the undoing of a waiter
// registration run where they cannot report an error (destructors, unwinding). When the table
// lock times out there (a stopped peer holds it), the update must still reach the table, or the
// table stays wrong: a guard counted active keeps the device forever; a waiter still registered
// is a phantom the holders hand over to. An earlier version kept such updates in the process and
// applied them at the session's next lock, so a session that went idle after a lost update (a
// server between requests) kept the device for as long as it lived (issue 23, item 1).
//
// The rule: each such update is one or two lock-free atomic additions to the slot's journal
// counters (layout.hpp), written by the owner, then a bump of the header's journal_pending.
// Every locker reads journal_pending right after taking the lock and, when it is not 0, folds
// every active slot's journal (fold_journals) before deciding anything: it exchanges the
// counters with 0 and applies them exactly as the lost update would have (exit_step with the
// exit's own time, apply_shrink, remove_waiters, ...). Nobody's cooperation is needed: the next
// process that locks for any reason (a waiter's re-check, at least every 100 ms; a snapshot)
// applies it.
//
// Why no update is lost or applied twice: a writer adds to the counters first and bumps
// journal_pending after (seq_cst); a folder reads journal_pending first, folds the counters, and
// only then subtracts what it read. A fold that misses part of an update (the writer was between
// two additions) leaves the rest in the counters with journal_pending bumped past what the
// folder subtracts, so the next locker folds it. Each counter is exchanged right before it is
// applied, so each addition is applied once. Writes happen only while the session is joined and
// holds its liveness lock (session_core takes its journal mutex for each write and leave() takes
// it before dropping the liveness lock), so a journal always belongs to the slot's current
// session; ending a session discards its journal (reset_slot_for_join() zeroes it for the next
// one).
//
// A folder killed mid-way (issue 40, A3) left journal_pending as it read it: the next locker,
// which takes the dead owner's lock over and repairs the table first (table_core::guard), folds
// what the dead one had not applied. The unit of a fold is one step (a counter or a pair of
// them, exchanged and applied: crash points journal.fold.begin, .step, .slot mark the places
// between); a kill inside a step, between its exchange and the end of its application, loses
// that step's update, as a kill inside any locked update loses the rest of that update (the
// repair rebuilds the totals from the slots, not a slot's own fields). Such a window is a few
// hundred instructions with no system call; the crash test kills at every point between steps.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include <gpushare/detail/budget.hpp>
#include <gpushare/detail/crash_point.hpp>
#include <gpushare/detail/layout.hpp>
#include <gpushare/detail/scheduler.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

// ---------------------------------------------------------------------------------------------
// Writers: the owner of slot `s`, without the table lock
// ---------------------------------------------------------------------------------------------

/// Marks that a journal has something to fold (after the counters are written).
inline void journal_written(table_header& h) noexcept {
  h.journal_pending.fetch_add(1, std::memory_order_seq_cst);
}

/// A guard that started at `start_ns` ended at `now` having used `used_ns`.
inline void journal_guard_exit(table_header& h, slot_record& s, std::uint64_t start_ns,
                               std::uint64_t used_ns, std::uint64_t now) noexcept {
  s.journal_used_ns.fetch_add(used_ns, std::memory_order_seq_cst);
  // The earliest start (it bounds a capped session's burst) and the latest exit.
  std::uint64_t first = s.journal_first_start_ns.load(std::memory_order_relaxed);
  const std::uint64_t start = std::max<std::uint64_t>(start_ns, 1); // 0 means "none"
  while ((first == 0 || start < first) &&
         !s.journal_first_start_ns.compare_exchange_weak(first, start, std::memory_order_seq_cst)) {
  }
  std::uint64_t last = s.journal_last_exit_ns.load(std::memory_order_relaxed);
  while (now > last &&
         !s.journal_last_exit_ns.compare_exchange_weak(last, now, std::memory_order_seq_cst)) {
  }
  s.journal_exits.fetch_add(1, std::memory_order_seq_cst);
  journal_written(h);
}

/// `used_ns` of device time measured after its guard ended (the CUDA layer's late accounting).
inline void journal_device_time(table_header& h, slot_record& s, std::uint64_t used_ns) noexcept {
  s.journal_device_ns.fetch_add(used_ns, std::memory_order_seq_cst);
  journal_written(h);
}

/// `bytes` of reservations released (reclaimable ones when `kind` says so).
inline void journal_shrink(table_header& h, slot_record& s, std::uint64_t bytes,
                           memory_kind kind = memory_kind::fixed) noexcept {
  if (kind == memory_kind::reclaimable)
    s.reclaim.journal_bytes.fetch_add(bytes, std::memory_order_seq_cst);
  s.journal_shrink_bytes.fetch_add(bytes, std::memory_order_seq_cst);
  journal_written(h);
}

/// One thread of the session no longer waits for the device.
inline void journal_device_waiter(table_header& h, slot_record& s) noexcept {
  s.journal_device_waiters.fetch_add(1, std::memory_order_seq_cst);
  journal_written(h);
}

/// One thread of the session no longer waits for memory.
inline void journal_memory_waiter(table_header& h, slot_record& s) noexcept {
  s.journal_memory_waiters.fetch_add(1, std::memory_order_seq_cst);
  journal_written(h);
}

/// A lease guard found its lease ended as it exited: the locked part of its exit is owed.
inline void journal_lease_exit(table_header& h, slot_record& s) noexcept {
  s.journal_lease_exits.fetch_add(1, std::memory_order_seq_cst);
  journal_written(h);
}

/// Whether slot `s` has journal entries not yet folded (a lock-free read, for display).
inline bool journal_holds(const slot_record& s) noexcept {
  return s.journal_exits.load(std::memory_order_relaxed) != 0 ||
         s.journal_device_waiters.load(std::memory_order_relaxed) != 0 ||
         s.journal_memory_waiters.load(std::memory_order_relaxed) != 0 ||
         s.journal_lease_exits.load(std::memory_order_relaxed) != 0 ||
         s.journal_used_ns.load(std::memory_order_relaxed) != 0 ||
         s.journal_device_ns.load(std::memory_order_relaxed) != 0 ||
         s.journal_shrink_bytes.load(std::memory_order_relaxed) != 0;
}

// ---------------------------------------------------------------------------------------------
// The folder: any process, under the table lock
// ---------------------------------------------------------------------------------------------

/// What folding changed that the locker must act on.
struct fold_result {
  bool released_memory = false; ///< reservations or memory waits came back: wake memory waiters
  bool folded = false;          ///< some journal held something
};

/// Applies slot `i`'s journal (under the lock), calling `wake(slot)` for each slot a step
/// decides to wake. Returns whether memory was released.
template <class Wake>
bool fold_journal(const table_view& t, std::uint32_t i, std::uint64_t now, Wake&& wake) noexcept {
  table_header& h = *t.header;
  slot_record& s = t.slots[i];
  bool released = false;
  // Waiters first: a decision below must not hand the device to a thread that no longer waits.
  if (const std::uint32_t n = s.journal_device_waiters.exchange(0, std::memory_order_seq_cst))
    remove_waiters(t, i, n);
  crash_point("journal.fold.step");
  if (const std::uint32_t n = s.journal_memory_waiters.exchange(0, std::memory_order_seq_cst)) {
    remove_memory_waiters(h, s, n);
    released = true; // the waiters' count changed: let the others re-check
  }
  crash_point("journal.fold.step");
  if (const std::uint64_t ns = s.journal_device_ns.exchange(0, std::memory_order_seq_cst))
    account_device_time(t, s, ns, current_holder(t) == i, now);
  crash_point("journal.fold.step");
  const std::uint32_t exits = s.journal_exits.exchange(0, std::memory_order_seq_cst);
  const std::uint64_t used = s.journal_used_ns.exchange(0, std::memory_order_seq_cst);
  const std::uint64_t first = s.journal_first_start_ns.exchange(0, std::memory_order_seq_cst);
  const std::uint64_t last = s.journal_last_exit_ns.exchange(0, std::memory_order_seq_cst);
  if (exits > 0 || used > 0) {
    // As the lost exits would have run, at the last one's time (never later than now). A fold
    // that caught a writer between its additions gets the time without the exit (or the exit
    // without the time): exits_step accounts either, and decides only on exits.
    const std::uint64_t at = last != 0 ? std::min(last, now) : now;
    const std::uint64_t start = first != 0 ? std::min(first, at) : sat_sub(at, used);
    const std::int64_t w = exits_step(t, i, exits, start, used, at);
    if (w != nobody) wake(w);
  }
  crash_point("journal.fold.step");
  // One step accounts every lease exit (fold_lease takes them all) and releases at most once, so
  // the count is not a loop bound: a corrupt one (up to 2^32 - 1) must not hang the folder.
  if (s.journal_lease_exits.exchange(0, std::memory_order_seq_cst) != 0) {
    const std::int64_t w = lease_exit_step(t, i, now);
    if (w != nobody) wake(w);
  }
  crash_point("journal.fold.step");
  // The reclaimable part is journaled before the whole: what is not in this fold's whole yet
  // goes back for the next fold.
  const std::uint64_t part = s.reclaim.journal_bytes.exchange(0, std::memory_order_seq_cst);
  if (const std::uint64_t bytes = s.journal_shrink_bytes.exchange(0, std::memory_order_seq_cst)) {
    const std::uint64_t reclaimable = std::min(part, bytes);
    apply_shrink(h, s, reclaimable, memory_kind::reclaimable);
    apply_shrink(h, s, bytes - reclaimable);
    if (part > reclaimable)
      s.reclaim.journal_bytes.fetch_add(part - reclaimable, std::memory_order_seq_cst);
    released = true;
  } else if (part != 0) {
    s.reclaim.journal_bytes.fetch_add(part, std::memory_order_seq_cst);
  }
  return released;
}

/// Folds every active slot's journal if any was written since the last fold (one relaxed load
/// when none was). Call right after taking the table lock (and repairing it), before any
/// decision. journal_pending goes down only once every slot is folded: a folder killed before
/// leaves it for the next locker.
template <class Wake>
fold_result fold_journals(const table_view& t, std::uint64_t now, Wake&& wake) noexcept {
  fold_result r;
  table_header& h = *t.header;
  if (h.journal_pending.load(std::memory_order_relaxed) == 0) return r;
  const std::uint32_t pending = h.journal_pending.load(std::memory_order_seq_cst);
  r.folded = true;
  crash_point("journal.fold.begin");
  for (std::uint32_t i = 0; i < t.slot_count; ++i) {
    slot_record& s = t.slots[i];
    if (!is_active(s) || !journal_holds(s)) continue;
    if (fold_journal(t, i, now, wake)) r.released_memory = true;
    crash_point("journal.fold.slot");
  }
  h.journal_pending.fetch_sub(pending, std::memory_order_seq_cst);
  return r;
}

} // namespace detail
} // namespace v0
} // namespace gpushare
