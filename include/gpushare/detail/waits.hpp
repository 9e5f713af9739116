// SPDX-License-Identifier: Apache-2.0
// The waits of a session, for session_core (declared in session_core.hpp):
//   - for memory: grow() / try_grow(), whose loop sleeps on the table's memory_wake word;
//   - for the device: acquire_device(), for a guard (enter_guard) or after yield(), whose loop
//     sleeps on the slot's grant word (or paces for its compute limit).
// A waiter is counted while it waits (memory_waiting / device waiters); one that leaves its wait
// by an exception uncounts itself, under the lock or in the slot's journal. Every waiter looks
// for dead sessions, which may hold what it waits for and never release it, at least every
// liveness_recheck_ns (reclaim_dead_when_due()). Every sleep is followed by this thread's
// interruption check, if any (<gpushare/interrupt.hpp>), and capped at its period.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>

#include <gpushare/detail/cpu_wait.hpp>
#include <gpushare/detail/interrupt.hpp>
#include <gpushare/detail/session_core.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// A thread that stops waiting by an exception uncounts itself under the table lock, except
/// after a lock timeout (errc::table_busy): then it does not wait for the lock a second time and
/// journals its removal.
inline session_core::uncount session_core::uncount_after(const error& e) noexcept {
  return e.code() == errc::table_busy ? uncount::in_journal : uncount::under_lock;
}

/// After a wait: looks for dead sessions if liveness_recheck_ns have passed since the last look
/// (`next_check` is when the next is due), by the clock, however the wait ended (a wake-up by a
/// live peer, a signal, a timeout): a waiter woken often still reclaims the dead.
inline void session_core::reclaim_dead_when_due(std::uint64_t& next_check) {
  if (const std::uint64_t after = monotonic_ns(); after >= next_check) {
    table_.reclaim_dead();
    next_check = sat_add(after, liveness_recheck_ns);
  }
}

// ---- memory -------------------------------------------------------------------------------------

inline void session_core::grow(std::uint64_t bytes, std::uint64_t timeout_ns, memory_kind kind) {
  (void)grow_until(bytes, timeout_ns, past_deadline::throw_timeout, kind);
}

inline bool session_core::try_grow(std::uint64_t bytes, memory_kind kind) {
  return grow_until(bytes, 0, past_deadline::return_false, kind);
}

/// Grows this session's reservations by `bytes`, waiting up to `timeout_ns` for memory to be
/// released; past it, does what `then` says.
inline bool session_core::grow_until(std::uint64_t bytes, std::uint64_t timeout_ns,
                                     past_deadline then, memory_kind kind) {
  check_usable();
  memory_wait w;
  w.bytes = bytes;
  w.kind = kind;
  w.may_borrow = kind == memory_kind::reclaimable && answers_at_once();
  w.timeout_ns = timeout_ns;
  w.start = monotonic_ns();
  w.deadline = timeout_ns == wait_forever_ns ? wait_forever_ns : sat_add(w.start, timeout_ns);
  try {
    return grow_loop(w, then);
  } catch (const error& e) {
    // A lock timeout, a reclaimed slot or leave(): this thread no longer waits. (The throws
    // of grow_loop itself have already stopped waiting.)
    if (w.waiting) forget_memory_wait(uncount_after(e), w.ticket);
    throw;
  } catch (...) {
    if (w.waiting) forget_memory_wait(uncount::in_journal, w.ticket);
    throw;
  }
}

/// The wait loop of grow_until(). A refusal first reclaims the dead and tries again at once;
/// then it waits, counted as a memory waiter (`w.waiting`), asking for reclaimable memory
/// (ask_and_sleep), until a release wakes it, the deadline passes, a request's deadline comes,
/// or the next look for the dead is due.
inline bool session_core::grow_loop(memory_wait& w, past_deadline then) {
  bool reclaimed = false;
  std::uint64_t next_check = 0;
  for (;;) {
    check_usable(); // leave() by another thread ends this wait
    locked g(*this);
    slot_record& s = own_checked();
    const grow_decision d = decide_grow(table_.view(), slot_, w.bytes, w.kind, w.may_borrow,
                                        w.waiting ? w.ticket : 0, monotonic_ns());
    const budget_verdict v = d.verdict;
    if (d.queued) table_.header().queue_holds = sat_add(table_.header().queue_holds, 1);
    if (v == budget_verdict::granted) {
      apply_grow(table_.header(), s, w.bytes, d.kind, d.on_loan);
      // The waiters behind it may fit now: let them look (they sleep until a release).
      if (w.waiting && table_.header().memory_waiters > 1) g.released_memory();
      crash_point("reserve.locked");
      if (w.first_ask != 0) note_reclaim_grant(table_.header(), monotonic_ns() - w.first_ask);
      if (w.waiting) stop_waiting(s, w);
      w.waiting = false;
      return true;
    }
    if (v != budget_verdict::not_now) {
      if (w.waiting) stop_waiting(s, w);
      w.waiting = false;
      throw never_fits(facts_, table_, v, s, w.bytes);
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
    if (now >= w.deadline) {
      if (w.waiting) stop_waiting(own(), w);
      w.waiting = false;
      if (then == past_deadline::return_false) return false;
      throw not_available(facts_, table_, own(), w.bytes, w.timeout_ns);
    }
    if (!w.waiting) {
      w.waiting = true;
      add_memory_waiter(table_.header(), own());
      w.ticket = take_queue_ticket(table_.header());
    }
    queue_look(own(), w.ticket, w.bytes, now);
    next_check = ask_and_sleep(g, w, now, next_check);
  }
}

/// One wait of grow_loop(), under the lock `g` (which it releases): asks sessions of lower
/// classes for reclaimable memory (reclaim.hpp), wakes their watchers, then sleeps on the
/// table's memory word until a release, the wait's deadline, the earliest request deadline or
/// `next_check`. Returns when the next look for the dead is due.
inline std::uint64_t session_core::ask_and_sleep(locked& g, memory_wait& w, std::uint64_t now,
                                                 std::uint64_t next_check) {
  std::vector<std::uint32_t> asked;
  const reclaim_look look =
      ask_for_reclaim(table_.view(), slot_, w.bytes, now, reclaim_deadline_ns_, asked);
  if (look.outstanding && w.first_ask == 0) w.first_ask = now;
  const std::uint32_t seq = table_.header().memory_wake.load(std::memory_order_acquire);
  crash_point("reserve.waiting");
  g.unlock();
  for (const std::uint32_t j : asked) futex_wake(&table_.slot(j).reclaim.seq);
  const std::uint64_t until = std::min({w.deadline, next_check, look.next_ns});
  if (until > now)
    futex_wait(&table_.header().memory_wake, seq, interruptible_sleep_ns(until - now));
  interruption_point(); // may throw: grow_until() uncounts this waiter
  reclaim_dead_when_due(next_check);
  return next_check;
}

/// A memory waiter got its memory or gave up by itself (under the lock): uncount it and record
/// how long it waited; its place in the queue goes. Once nobody waits for memory, no request to
/// give some back stands.
inline void session_core::stop_waiting(slot_record& s, const memory_wait& w) noexcept {
  queue_leave(s, w.ticket);
  memory_wait_ended(table_.header(), s, monotonic_ns() - w.start);
  memory_waiter_gone(table_.view(), s);
}

/// A memory waiter (place `ticket`) leaves its wait by an exception: uncount it now, or journal
/// it, so that no phantom memory waiter stays counted. (A journaled one leaves its place in the
/// slot until the session's waiting count is 0: memory_queue.hpp.)
inline void session_core::forget_memory_wait(uncount how, std::uint64_t ticket) noexcept {
  const auto entry = [](table_header& h, slot_record& s) { journal_memory_waiter(h, s); };
  if (how == uncount::in_journal) {
    journal(entry);
    return;
  }
  locked_or_journaled(
      [&](locked&, slot_record& s) {
        queue_leave(s, ticket);
        remove_memory_waiters(table_.header(), s, 1);
        memory_waiter_gone(table_.view(), s);
      },
      entry);
}

// ---- the device ---------------------------------------------------------------------------------

/// Waits until this session holds the device (and, for a guard, counts it as active). `start`:
/// when it was asked for; `deadline`: when to give up (errc::timeout). Returns the time it got
/// the device.
inline std::uint64_t session_core::acquire_device(device_claim claim, std::uint64_t start,
                                                  std::uint64_t deadline,
                                                  std::uint64_t timeout_ns) {
  acquire_state st;
  try {
    return acquire_loop(claim, start, deadline, timeout_ns, st);
  } catch (const error& e) { // a lock timeout, the slot was reclaimed, or leave()
    if (st.registered) forget_registration(uncount_after(e));
    throw;
  } catch (...) {
    if (st.registered) forget_registration(uncount::in_journal);
    throw;
  }
}

/// A thread that gives up waiting (an exception) must not stay counted as a waiter: the holder
/// would keep waking, and handing the device to, a session that no longer waits. If the lock
/// cannot be had either, the removal goes into the slot's journal (the next locker applies it).
/// (A grant it got meanwhile needs nothing: a holder with no guard is taken over once its idle
/// grace is spent.)
inline void session_core::forget_registration(uncount how) noexcept {
  own_waiters_.fetch_sub(1, std::memory_order_relaxed);
  const auto entry = [](table_header& h, slot_record& s) { journal_device_waiter(h, s); };
  if (how == uncount::in_journal) {
    journal(entry);
    return;
  }
  locked_or_journaled([&](locked&, slot_record&) { remove_waiters(table_.view(), slot_); }, entry);
}

/// The wait loop of acquire_device(): one acquire_step() per critical section, then a sleep on
/// the slot's grant word until a grant, the deadline, the step's own re-check time, or the next
/// look for the dead. Dead holders never hand over: that look happens whenever
/// liveness_recheck_ns have passed since the last, by the clock, whatever ended the waits in
/// between (signals, wake-ups by a holder's guard exits, a watch's polls).
inline std::uint64_t session_core::acquire_loop(device_claim claim, std::uint64_t start,
                                                std::uint64_t deadline, std::uint64_t timeout_ns,
                                                acquire_state& st) {
  std::uint64_t now = start;
  std::uint64_t next_check = sat_add(start, liveness_recheck_ns);
  for (bool first = true;; first = false) {
    check_usable(); // leave() by another thread ends this wait
    locked g(*this);
    slot_record& s = own_checked();
    priority_.store(s.settings.priority, std::memory_order_relaxed); // for lock-free readers
    if (!first) now = monotonic_ns();
    if (first) // how much this thread waits for a CPU (the reservation's test; cpu_wait.hpp)
      if (const std::optional<std::uint32_t> w = sample_cpu_wait(now)) note_cpu_wait(s, *w);
    const bool was_registered = st.registered;
    const acquire_result r = acquire_step(table_.view(), slot_, now, claim == device_claim::guard,
                                          st, liveness_recheck_ns);
    if (st.registered != was_registered)
      own_waiters_.fetch_add(st.registered ? 1u : ~0u, std::memory_order_relaxed);
    g.wake_after(r.wake);
    if (r.what == acquire_result::granted) {
      device_wait_ended(s, st.waited ? now - st.wait_start : no_wait,
                        throttled_ns_.exchange(0, std::memory_order_relaxed));
      return now;
    }
    if (now >= deadline) {
      if (st.registered) {
        remove_waiters(table_.view(), slot_);
        st.registered = false;
        own_waiters_.fetch_sub(1, std::memory_order_relaxed);
      }
      throw guard_timeout(facts_, table_, slot_, timeout_ns, now - start);
    }
    const std::uint32_t seq = s.grant_word.load(std::memory_order_acquire);
    const std::uint64_t until =
        std::min({deadline, next_check, sat_add(now, std::max<std::uint64_t>(r.sleep_ns, 1))});
    if (r.what == acquire_result::pause) { // its compute limit: sleep, holding nothing
      // On the grant word, not in sleep_for: leave() wakes it.
      g.unlock();
      futex_wait(&s.grant_word, seq, interruptible_sleep_ns(until > now ? until - now : 1));
      throttled_ns_.fetch_add(monotonic_ns() - now, std::memory_order_relaxed);
    } else {
      crash_point("guard.waiting");
      g.unlock();
      futex_wait(&s.grant_word, seq, interruptible_sleep_ns(until > now ? until - now : 1));
    }
    interruption_point(); // may throw: acquire_device() uncounts this waiter
    reclaim_dead_when_due(next_check);
  }
}

} // namespace detail
} // namespace v0
} // namespace gpushare
