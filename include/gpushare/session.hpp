// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include <gpushare/detail/session_core.hpp>
#include <gpushare/options.hpp>
#include <gpushare/reservation.hpp>
#include <gpushare/table.hpp>

namespace gpushare {
inline namespace v0 {

class scoped_kernel;
class startup_hold;
namespace cuda {
class device_session;
}

/// A process's membership in a table: a slot carrying its name, priority, share and limits, and
/// the owner of its memory reservations. Joins on construction, leaves on destruction; if the
/// process dies instead, the first live peer that notices reclaims everything it held.
///
///     gpushare::session_options o;
///     o.name = "trainer";
///     o.share = 3;
///     gpushare::session s("GPU-8f1e...", o);
///     auto r = s.reserve(2ull << 30, std::chrono::seconds(10)); // 2 GiB, wait up to 10 s
///
/// Movable, not copyable. Usable from several threads. A forked child's copy is inert: the child
/// opens its own session.
class session {
public:
  /// Joins the table for `key` (creating it if needed). Options not set here come from the
  /// environment (GPUSHARE_*), then from the defaults; see session_options.
  [[nodiscard]] explicit session(std::string_view key, const session_options& opts = {})
      : core_(std::make_shared<detail::session_core>(key, resolve_options(opts))) {}

  /// Takes over `o`'s membership; `o` is left not joined. Assigning leaves this session's table
  /// first.
  session(session&&) noexcept = default;
  /// See the move constructor.
  session& operator=(session&& o) noexcept {
    if (this != &o) {
      leave();
      core_ = std::move(o.core_);
    }
    return *this;
  }
  session(const session&) = delete;
  session& operator=(const session&) = delete;
  ~session() { leave(); }

  /// Reserves `bytes`, waiting up to `timeout` for other sessions to release memory.
  /// Throws errc::over_limit (over this session's memory limit) or errc::exceeds_capacity at
  /// once: those never fit. Throws errc::timeout if the memory did not become free in time.
  template <class Rep, class Period>
  [[nodiscard]] reservation reserve(std::uint64_t bytes,
                                    std::chrono::duration<Rep, Period> timeout) {
    core().grow(bytes, detail::to_ns(timeout));
    return reservation(core_, bytes);
  }
  /// Reserves `bytes` with no timeout: **blocks until they fit, forever if they never do** (a peer
  /// holding memory and never releasing it keeps this call waiting). Waiting re-checks liveness
  /// every 100 ms, so memory held by a peer that died is reclaimed and handed out. Prefer
  /// reserve(bytes, timeout) unless waiting indefinitely is what the caller wants.
  [[nodiscard]] reservation reserve(std::uint64_t bytes) {
    core().grow(bytes, detail::wait_forever_ns);
    return reservation(core_, bytes);
  }
  /// Reserves `bytes` if they fit now, else nullopt. Over-limit requests still throw.
  [[nodiscard]] std::optional<reservation> try_reserve(std::uint64_t bytes) {
    if (!core().try_grow(bytes)) return std::nullopt;
    return reservation(core_, bytes);
  }

  /// Reserves `bytes` of reclaimable memory (a cache, KV-cache blocks), waiting up to `timeout`:
  /// as reserve(), but the session gives them back when a reserve of a higher priority class
  /// waits and its reclaim handler is asked (on_reclaim(); docs/design.md section 15). A session
  /// with a handler and a watcher (watch_reclaim()) may also be lent them out of other sessions'
  /// idle guarantees when the table is otherwise full: a loan is called back, whatever the
  /// classes, when a session needs the memory it stands on, and a loan call unanswered by that
  /// session's reclaim deadline is written off (its bytes leave this session's count).
  template <class Rep, class Period>
  [[nodiscard]] reservation reserve_reclaimable(std::uint64_t bytes,
                                                std::chrono::duration<Rep, Period> timeout) {
    core().grow(bytes, detail::to_ns(timeout), detail::memory_kind::reclaimable);
    return reservation(core_, bytes, detail::memory_kind::reclaimable);
  }
  /// Reserves `bytes` of reclaimable memory with no timeout: blocks until they fit, forever if
  /// they never do (as reserve(bytes)).
  [[nodiscard]] reservation reserve_reclaimable(std::uint64_t bytes) {
    core().grow(bytes, detail::wait_forever_ns, detail::memory_kind::reclaimable);
    return reservation(core_, bytes, detail::memory_kind::reclaimable);
  }
  /// Reclaimable bytes if they fit now, or can be lent now, else nullopt (never waits, never
  /// asks anyone).
  [[nodiscard]] std::optional<reservation> try_reserve_reclaimable(std::uint64_t bytes) {
    if (!core().try_grow(bytes, detail::memory_kind::reclaimable)) return std::nullopt;
    return reservation(core_, bytes, detail::memory_kind::reclaimable);
  }

  /// What gives memory back when asked: `handler(bytes)` is called with the bytes a waiting
  /// reserve of a higher priority class needs from this session, releases reclaimable
  /// reservations (or shrinks them), and returns the bytes it gave back. It runs on the thread
  /// that calls yield(), answer_reclaim() or ends a guard, or on the watcher's thread
  /// (watch_reclaim()), never under the table lock; it must not leave or destroy the session,
  /// and what it uses must outlive the session's watcher: leave() (which stops it) first.
  /// Without a handler (or if it throws), a request stands until its deadline, when the waiter
  /// skips this session: nobody is killed. An empty handler removes it.
  void on_reclaim(std::function<std::uint64_t(std::uint64_t)> handler) {
    core().on_reclaim(std::move(handler));
  }
  /// Bytes this session is asked to give back now (0: none). One relaxed load.
  std::uint64_t reclaim_requested() const noexcept {
    return core_ ? core_->reclaim_requested() : 0;
  }
  /// Runs the handler now if a request stands that it has not answered yet; returns the bytes
  /// it gave back (0: no request, no handler, or answered already). yield() and guard exits do
  /// this too.
  std::uint64_t answer_reclaim() { return core().answer_reclaim(); }
  /// Starts a thread that runs the handler as soon as a request comes (it sleeps on a futex
  /// word meanwhile). Idempotent; leave() stops it. With it and a handler, this session's
  /// reclaimable reserves may borrow idle guarantees (reserve_reclaimable()).
  void watch_reclaim() { core().start_reclaim_watcher(); }
  /// Whether this session's reclaimable reserves may borrow idle guarantees (default: yes, once
  /// it has a handler and a watcher). Decline when the handler cannot give memory back within a
  /// guaranteed session's reclaim deadline (e.g. it runs an engine's slow sleep command): past
  /// it, a loan is written off while the memory is still in use. Loans already made stay.
  void accept_loans(bool on) { core().accept_loans(on); }

  /// A cheap moment to give way (an iteration boundary, between requests). If a session that
  /// should run now waits (a higher priority class, or an equal one once this session's quantum
  /// is used), hands the device over and returns when it is this session's turn again. First,
  /// if another session's reserve asks this one to give memory back, runs the reclaim handler
  /// (on_reclaim(); its exception propagates). Nearly free when nobody waits or asks: two
  /// relaxed atomic loads.
  void yield() {
    if (core_) core_->yield();
  }
  /// Whether a session that should run now waits for the device (a higher priority class, or an
  /// equal one once this session's quantum is used): the end of this session's last open guard,
  /// or yield(), would hand the device over now. For work that can stop early (a persistent
  /// kernel that polls a flag, a loop of chunks): check between pieces and end the guard when
  /// it says so (docs/design.md section 12, "Long kernels"). One relaxed load when nobody waits;
  /// otherwise one table lock.
  bool give_way_due() { return core_ && core_->others_waiting() && core_->handover_due(0); }
  /// Asks to keep the device through the gaps after this session's guards for the next `d`
  /// (at most 10 ms after the end of its last guard), against sessions of lower priority
  /// classes: for a server that knows more work is due (requests queued, the next layer's
  /// inputs on their way), so that a lower class's kernels do not start in between and delay
  /// it. Sessions of its own or a higher class are not held back, nor is anyone while this
  /// session runs no guard for 10 ms: an idle session never holds the device. Call it again to
  /// extend; `d` of 0 ends it. One atomic store.
  template <class Rep, class Period> void linger(std::chrono::duration<Rep, Period> d) {
    core().linger(detail::to_ns(d));
  }

  /// Declares memory this session uses outside its reservations (the CUDA layer records its
  /// context here). It counts against the session's limit and the table's capacity; it is a fact,
  /// not a request, so it is recorded even when it overcommits (later reservations then wait).
  void set_external_usage(std::uint64_t bytes) { core().set_external(bytes); }

  /// Changes this session's own settings (other processes use table::configure).
  void configure(const settings_change& change) { core().configure(change); }

  /// This session's current settings and statistics.
  session_info info() { return core().info(); }
  /// The whole table at one instant.
  table_snapshot snapshot() { return core().snapshot(); }

  /// Leaves the table now (the destructor does it otherwise). Reservations still alive become
  /// empty shells: leaving already returned their bytes.
  void leave() noexcept {
    if (core_) core_->leave();
  }

  /// Its slot and join generation in the table.
  session_id id() const { return core_const().id(); }
  /// Its name (session_options::name).
  const std::string& name() const { return core_const().name(); }
  /// The shm object name of the table, e.g. "/gpushare.default.u1000.GPU-8f1e...".
  const std::string& table_name() const { return core_const().table_name(); }
  /// Whether it is still in the table (false after leave() or a move).
  bool joined() const noexcept { return core_ && core_->joined(); }
  /// What its join had to tell that is not an error (<gpushare/notices.hpp>): e.g. that the
  /// table keeps another capacity than the one asked for. The process's notice handler was given
  /// each of them once per process (by default: one line each on stderr).
  const std::vector<notice>& notices() const { return core_const().notices(); }

private:
  friend class scoped_kernel;
  friend class startup_hold;
  friend class cuda::device_session;
  std::shared_ptr<detail::session_core> shared_core() {
    core();
    return core_;
  }
  detail::session_core& core() {
    if (!core_) throw error(errc::session_closed, "this session was moved from");
    return *core_;
  }
  const detail::session_core& core_const() const {
    if (!core_) throw error(errc::session_closed, "this session was moved from");
    return *core_;
  }

  std::shared_ptr<detail::session_core> core_;
};

} // namespace v0
} // namespace gpushare
