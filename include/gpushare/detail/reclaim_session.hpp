// SPDX-License-Identifier: Apache-2.0
// A session's side of cooperative reclaim (docs/design.md section 15), for session_core
// (declared in session_core.hpp): marking reserved bytes reclaimable, the handler that gives
// memory back when another session's reserve asks, and the optional watcher thread that runs
// it as soon as a request comes. Without the watcher the handler runs at yield() and at guard
// exits, where the library looks at the slot's `asked` word (one relaxed load).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include <gpushare/detail/session_core.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// How long the watcher sleeps at most between looks (a wake-up on the slot's seq word ends its
/// sleep at once; this bounds a missed wake-up, e.g. a request written by a process that died
/// before waking it).
inline constexpr std::uint64_t reclaim_watch_period_ns = 100'000'000; // 100 ms

inline void session_core::mark_reclaimable(std::uint64_t bytes, memory_kind kind) {
  check_usable();
  locked g(*this);
  slot_record& s = own_checked();
  if (!mark_memory(table_.header(), s, bytes, kind))
    throw error(errc::guarantee_unavailable, loan_stays_reclaimable_text(facts_, table_, s, bytes));
}

/// Whether a growth of this session may be lent idle guarantees: it accepts loans and a request
/// to it is answered at once, by its watcher thread running its handler.
inline bool session_core::answers_at_once() {
  if (!accept_loans_.load(std::memory_order_relaxed)) return false;
  const std::lock_guard<std::mutex> l(reclaim_mutex_);
  return handler_ != nullptr && watcher_.load(std::memory_order_relaxed) != nullptr;
}

inline void session_core::on_reclaim(reclaim_handler h) {
  check_usable();
  auto p = h ? std::make_shared<const reclaim_handler>(std::move(h)) : nullptr;
  const std::lock_guard<std::mutex> l(reclaim_mutex_);
  handler_ = std::move(p);
}

inline std::uint64_t session_core::answer_reclaim() {
  if (!joined_.load(std::memory_order_relaxed) || inherited_) return 0;
  slot_record& mine = own();
  if (mine.reclaim.asked.load(std::memory_order_relaxed) == 0) return 0;
  if (mine.reclaim.seq.load(std::memory_order_relaxed) ==
      answered_seq_.load(std::memory_order_relaxed))
    return 0; // answered already: a partial answer is not asked again until a new request
  std::shared_ptr<const reclaim_handler> handler;
  {
    const std::lock_guard<std::mutex> l(reclaim_mutex_);
    handler = handler_;
  }
  if (!handler || answering_.exchange(true, std::memory_order_acquire)) return 0;
  struct done_answering {
    std::atomic<bool>& a;
    ~done_answering() { a.store(false, std::memory_order_release); }
  } done{answering_};
  std::uint64_t asked = 0;
  std::uint32_t seq = 0;
  {
    locked g(*this);
    slot_record& s = own_checked();
    asked = s.reclaim.asked.load(std::memory_order_relaxed);
    seq = s.reclaim.seq.load(std::memory_order_relaxed);
    if (asked != 0 && table_.header().memory_waiters == 0) {
      withdraw_reclaim(table_.view()); // nobody waits any more: nothing to give
      asked = 0;
    }
    if (asked == 0) return 0;
  }
  answered_seq_.store(seq, std::memory_order_relaxed);
  const std::uint64_t given = (*handler)(asked); // without the lock: it releases reservations
  crash_point("reclaim.given");
  locked g(*this);
  detail::answer_reclaim(table_.header(), own_checked(), seq, given, monotonic_ns());
  return given;
}

inline void session_core::answer_reclaim_quietly() noexcept {
  try {
    (void)answer_reclaim();
  } catch (...) {
    // A handler that throws (or a session that ended meanwhile) answers nothing: the request
    // stands until its deadline, when the waiter skips this session.
  }
}

inline void session_core::start_reclaim_watcher() {
  check_usable();
  const std::lock_guard<std::mutex> l(reclaim_mutex_);
  if (watcher_.load(std::memory_order_relaxed) != nullptr) return;
  watcher_stop_.store(false, std::memory_order_relaxed);
  watcher_.store(new std::thread([this] { watch_reclaim(); }), std::memory_order_relaxed);
}

/// The watcher's loop: answers each request as it comes, sleeping on the slot's seq word.
inline void session_core::watch_reclaim() noexcept {
  slot_record& s = own();
  while (!watcher_stop_.load(std::memory_order_acquire)) {
    const std::uint32_t seq = s.reclaim.seq.load(std::memory_order_acquire);
    if (s.reclaim.asked.load(std::memory_order_relaxed) != 0) answer_reclaim_quietly();
    if (watcher_stop_.load(std::memory_order_acquire)) break;
    (void)futex_wait(&s.reclaim.seq, seq, reclaim_watch_period_ns);
  }
}

/// Stops and joins the watcher (from leave(), before the slot can be reused). Called on the
/// watcher's own thread (its handler left the session), it is detached instead: it ends at its
/// next look.
inline void session_core::stop_reclaim_watcher() noexcept {
  std::unique_ptr<std::thread> w;
  {
    const std::lock_guard<std::mutex> l(reclaim_mutex_);
    w.reset(watcher_.exchange(nullptr, std::memory_order_relaxed));
    handler_.reset();
  }
  if (!w) return;
  watcher_stop_.store(true, std::memory_order_release);
  (void)futex_wake(&own().reclaim.seq);
  if (w->get_id() == std::this_thread::get_id())
    w->detach();
  else
    w->join();
}

} // namespace detail
} // namespace v0
} // namespace gpushare
