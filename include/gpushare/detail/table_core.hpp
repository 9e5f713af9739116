// SPDX-License-Identifier: Apache-2.0
// The mechanics shared by sessions and observers of a table: the lock with crash repair, and the
// reclamation of dead sessions by whichever live process notices them.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <gpushare/detail/budget.hpp>
#include <gpushare/detail/crash_point.hpp>
#include <gpushare/detail/futex.hpp>
#include <gpushare/detail/journal.hpp>
#include <gpushare/detail/liveness.hpp>
#include <gpushare/detail/scheduler.hpp>
#include <gpushare/detail/shm.hpp>
#include <gpushare/detail/slot.hpp>
#include <gpushare/detail/table_lock.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// How long a locker waits for the table lock before reporting a stuck (stopped) holder, unless
/// its table_core was given a timeout of its own (set_lock_timeout: table_open_options and
/// removal_options::lock_timeout, which the CLI uses). Critical sections are a few hundred
/// nanoseconds, so only a stopped or hung process gets near. A test hook: a variable, not a
/// constant, only so that tests can lower it (in a forked child) to reach the lock-timeout paths
/// of sessions quickly; the library and its tools never write it.
inline std::uint64_t lock_timeout_ns = 10'000'000'000ull;
inline constexpr std::int64_t no_slot = -1;

class table_core {
public:
  table_core() = default;
  explicit table_core(mapped_table m) : map_(std::move(m)), pid_(::getpid()) {}
  table_core(table_core&& o) noexcept
      : map_(std::move(o.map_)), own_slot_(o.own_slot_), pid_(o.pid_),
        lock_timeout_ns_(o.lock_timeout_ns_), locker_id_(o.locker_id_.exchange(0)),
        claim_mutex_(std::move(o.claim_mutex_)) {}
  table_core& operator=(table_core&& o) noexcept {
    map_ = std::move(o.map_);
    own_slot_ = o.own_slot_;
    pid_ = o.pid_;
    lock_timeout_ns_ = o.lock_timeout_ns_;
    locker_id_.store(o.locker_id_.exchange(0));
    claim_mutex_ = std::move(o.claim_mutex_);
    return *this;
  }

  const table_view& view() const noexcept { return map_.view(); }
  table_header& header() const noexcept { return *map_.view().header; }
  slot_record& slot(std::uint32_t i) const noexcept { return map_.view().slots[i]; }
  std::uint32_t slot_count() const noexcept { return map_.view().slot_count; }
  const std::string& name() const noexcept { return map_.name(); }
  int fd() const noexcept { return map_.fd(); }
  mapped_table& mapping() noexcept { return map_; }

  /// The slot this descriptor holds the liveness lock of (never probed: a probe through the
  /// owning descriptor cannot see its own lock and would call it dead).
  void set_own_slot(std::int64_t s) noexcept { own_slot_ = s; }
  std::int64_t own_slot() const noexcept { return own_slot_; }

  /// How long this handle's lockers wait for the table lock; unset: lock_timeout_ns.
  void set_lock_timeout(std::optional<std::uint64_t> ns) noexcept { lock_timeout_ns_ = ns; }
  std::uint64_t lock_timeout() const noexcept { return lock_timeout_ns_.value_or(lock_timeout_ns); }

  /// RAII holder of the table lock, and the one way to wake after unlocking. If the previous
  /// holder died inside its critical section, the state it protected is repaired before the lock
  /// is handed to the caller. What the critical section calls for (released_memory(),
  /// wake_after(), wake_memory_waiters()) is sent right after the unlock, whichever way the scope
  /// is left: the memory-wake word is bumped under the lock, so no memory waiter can miss it, and
  /// the futex wakes are system calls made without the lock held. A missed wake would cost its
  /// waiter a silent stall until its next timed re-check, so no locked operation wakes any other
  /// way.
  class guard {
  public:
    explicit guard(table_core& t) : t_(&t), me_(t.locker_id()) {
      table_header& h = t.header();
      // Read before locking, so a release by a lock repair below is seen too (a release by
      // another process in between costs one spurious wake).
      startup_seq_ = h.startup_wake.load(std::memory_order_relaxed);
      if (lock_table(&h.lock, me_, t.fd(), t.lock_timeout(), t.name(), &h.lock_holder_pid) ==
          lock_outcome::owner_died)
        t.repair_locked(*this);
      h.lock_holder_pid.store(t.pid_, std::memory_order_relaxed);
      // Updates other sessions could not apply (journal.hpp): before this locker decides
      // anything. One relaxed load when there are none.
      if (h.journal_pending.load(std::memory_order_relaxed) != 0) t.fold_journals_locked(*this);
    }
    guard(const guard&) = delete;
    guard& operator=(const guard&) = delete;
    ~guard() { unlock(); }

    /// Memory was released under this lock: the memory waiters, if any, re-check at the unlock.
    void released_memory() noexcept { released_ = true; }
    /// Every thread waiting on the memory-wake word re-checks at the unlock, counted or not (a
    /// session ended: its own threads must see it).
    void wake_memory_waiters() noexcept { wake_memory_ = true; }
    /// Wakes the waiting threads of slot `slot` at the unlock (nobody: nothing). Every slot given
    /// is woken, up to max_wakes; past that, the earliest are dropped: each is a device grant,
    /// and only the latest grant's holder can still hold the device.
    void wake_after(std::int64_t slot) noexcept {
      if (slot == nobody) return;
      for (std::size_t k = 0; k < n_; ++k)
        if (wake_[k] == slot) return;
      if (n_ == max_wakes) {
        for (std::size_t k = 1; k < max_wakes; ++k) wake_[k - 1] = wake_[k];
        --n_;
      }
      wake_[n_++] = slot;
    }

    void unlock() noexcept {
      if (!t_) return;
      table_core& t = *t_;
      t_ = nullptr;
      table_header& h = t.header();
      const bool memory = wake_memory_ || (released_ && h.memory_waiters > 0);
      if (memory) h.memory_wake.fetch_add(1, std::memory_order_release);
      // The start-up lock was released under this lock (an ended slot, detail/startup.hpp).
      const bool startup = h.startup_wake.load(std::memory_order_relaxed) != startup_seq_;
      h.lock_holder_pid.store(0, std::memory_order_relaxed);
      unlock_table(&h.lock, me_);
      if (memory) futex_wake(&h.memory_wake);
      if (startup) futex_wake(&h.startup_wake);
      for (std::size_t k = 0; k < n_; ++k) t.wake_slot(wake_[k]);
    }

  private:
    static constexpr std::size_t max_wakes = 8;
    table_core* t_;
    std::uint32_t me_;
    bool released_ = false;
    bool wake_memory_ = false;
    std::uint32_t startup_seq_ = 0; ///< startup_wake when the lock was taken
    std::size_t n_ = 0;
    std::int64_t wake_[max_wakes] = {};
  };

  /// This mapping's locker id (detail/table_lock.hpp), claimed at the first lock: the exclusive
  /// OFD lock on its byte is held through fd() until the mapping closes, and proves to waiters
  /// that the owner of the table lock is alive. Throws if the table has no free id.
  std::uint32_t locker_id() {
    std::uint32_t id = locker_id_.load(std::memory_order_acquire);
    if (id != 0) return id;
    std::lock_guard<std::mutex> lk(*claim_mutex_);
    id = locker_id_.load(std::memory_order_relaxed);
    if (id != 0) return id;
    id = claim_locker_id(fd(), static_cast<std::uint32_t>(::getpid()) * 2654435761u);
    if (id == 0)
      throw error(errc::no_free_slot, "table '" + name() + "' has " +
                                          std::to_string(max_locker_ids) +
                                          " mappings open at once; close some");
    locker_id_.store(id, std::memory_order_release);
    return id;
  }

  /// Wakes the waiting threads of slot `i` (nobody: no-op), without the lock: guard::unlock()
  /// calls it for the slots its critical section named.
  void wake_slot(std::int64_t i) noexcept {
    if (i >= 0 && i < slot_count()) futex_wake(&slot(static_cast<std::uint32_t>(i)).grant_word);
  }

  /// Ends the session in slot `i`: its device hold passes on, its memory returns. Call under the
  /// lock; returns the slot to wake (a new device holder) or nobody.
  std::int64_t end_session_locked(std::uint32_t i) noexcept {
    return end_slot(view(), i, monotonic_ns());
  }

  /// Frees the slots of sessions whose owners died, returning their memory to the table.
  /// Lock-free probing first (one fcntl per active slot), then a re-check under the lock of just
  /// the candidates: a slot a joiner has claimed in between shows as alive again.
  std::uint32_t reclaim_dead() {
    std::vector<std::pair<std::uint32_t, std::uint32_t>> dead;
    for (std::uint32_t i = 0; i < slot_count(); ++i) {
      if (i == own_slot_ || slot(i).state.load(std::memory_order_acquire) != slot_active) continue;
      if (!slot_owner_alive(fd(), i)) dead.emplace_back(i, slot(i).generation);
    }
    if (dead.empty()) return 0;
    guard g(*this);
    std::uint32_t reclaimed = 0;
    for (auto [i, gen] : dead) {
      slot_record& s = slot(i);
      if (s.state.load(std::memory_order_relaxed) != slot_active || s.generation != gen ||
          slot_owner_alive(fd(), i))
        continue;
      g.wake_after(reclaim_slot(view(), i, monotonic_ns()));
      g.released_memory();
      ++reclaimed;
    }
    return reclaimed;
  }

private:
  /// Applies every session's journal (journal.hpp), under the lock `g`, which sends the wakes
  /// that calls for at its unlock.
  void fold_journals_locked(guard& g) noexcept {
    const fold_result r =
        fold_journals(view(), monotonic_ns(), [&](std::int64_t w) { g.wake_after(w); });
    if (r.released_memory) g.released_memory();
  }

  /// Called with the lock `g` held, after taking it over from a dead owner: frees the slots of
  /// every dead session and rebuilds every total from the slots that remain (slot.hpp).
  void repair_locked(guard& g) noexcept {
    ++header().lock_repairs;
    g.wake_after(repair_slots(
        view(), own_slot_, [&](std::uint32_t i) { return slot_owner_alive(fd(), i); },
        monotonic_ns()));    // the device may have lost its holder
    g.wake_memory_waiters(); // memory may have come back: let waiters re-check
  }

  mapped_table map_;
  std::int64_t own_slot_ = no_slot;
  std::int32_t pid_ = 0;
  std::optional<std::uint64_t> lock_timeout_ns_; ///< unset: lock_timeout_ns
  std::atomic<std::uint32_t> locker_id_{0}; ///< 0 until claimed; its byte's lock goes with fd()
  std::unique_ptr<std::mutex> claim_mutex_ = std::make_unique<std::mutex>();
};

} // namespace detail
} // namespace v0
} // namespace gpushare
