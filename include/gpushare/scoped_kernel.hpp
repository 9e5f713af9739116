// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <chrono>
#include <cstdint>
#include <memory>

#include <gpushare/detail/posix.hpp>
#include <gpushare/detail/session_core.hpp>
#include <gpushare/session.hpp>

namespace gpushare {
inline namespace v0 {

/// Guards a region that puts work on the device. Constructing it blocks until this session may
/// use the device (by the table's priorities, shares, quanta and this session's compute limit);
/// destroying it ends the region and accounts the device time it used.
///
///     for (auto& batch : batches) {
///       {
///         gpushare::scoped_kernel guard(s);
///         run_kernels(batch);
///       }
///       s.yield(); // an iteration boundary: a good moment to let others run
///     }
///
/// The time accounted is the region's wall time unless the caller supplies a measured device
/// time with set_device_time() (the CUDA layer does, from CUDA events). Guards of one session may
/// be used from several threads; they hold the device together and each accounts its own time.
/// Not copyable or movable: a guard belongs to the scope that waited for it.
class [[nodiscard]] scoped_kernel {
public:
  /// Waits for the device for `s` (see the class comment), then holds it until destroyed.
  [[nodiscard]] explicit scoped_kernel(session& s)
      : core_(s.shared_core()), requested_ns_(detail::monotonic_ns()),
        entry_(core_->begin_guard(requested_ns_)), revocations_(core_->revocations()) {}
  /// Like scoped_kernel(s), but waits at most `timeout` for the device; then throws errc::timeout,
  /// naming the session that holds the device (typically one stopped or hung inside its own
  /// guard: it is alive, so liveness never frees the device from it). Nothing is held after the
  /// throw: the waiter is no longer counted.
  template <class Rep, class Period>
  [[nodiscard]] scoped_kernel(session& s, std::chrono::duration<Rep, Period> timeout)
      : core_(s.shared_core()), requested_ns_(detail::monotonic_ns()),
        entry_(core_->begin_guard(requested_ns_, detail::to_ns(timeout))),
        revocations_(core_->revocations()) {}
  scoped_kernel(const scoped_kernel&) = delete;
  scoped_kernel& operator=(const scoped_kernel&) = delete;
  ~scoped_kernel() { finish(); }

  /// Replaces the wall time of this region by a measured device time.
  void set_device_time(std::chrono::nanoseconds device_time) noexcept {
    device_ns_ = device_time.count() < 0 ? 0 : static_cast<std::uint64_t>(device_time.count());
    has_device_time_ = true;
  }

  /// Whether this session's hold on the device was revoked while this guard ran: it went past
  /// the session's guard bound (session_options::max_guard, or the table's default) with no guard
  /// entry or exit, and other sessions were let in while it still ran (docs/design.md, "A
  /// stopped or hung holder"). Checked until finish(); its time is accounted all the same.
  bool revoked() const noexcept {
    if (core_) revoked_ = revoked_ || core_->revocations() != revocations_;
    return revoked_;
  }

  /// Ends the region now (the destructor does it otherwise). Idempotent.
  void finish() noexcept {
    if (!core_) return;
    (void)revoked(); // remember it: after finish() the session may go on without this guard
    const std::uint64_t now = detail::monotonic_ns();
    const std::uint64_t used = has_device_time_ ? device_ns_ : now - entry_.start_ns;
    core_->end_guard(entry_, used, now);
    core_->answer_reclaim_quietly(); // a guard boundary: a request to give memory back is answered
    core_.reset();
  }

  /// How long the constructor waited for the device (including compute-limit pacing).
  std::chrono::nanoseconds waited() const noexcept {
    return std::chrono::nanoseconds(entry_.start_ns - requested_ns_);
  }

private:
  std::shared_ptr<detail::session_core> core_; ///< kept alive even if the session is moved
  std::uint64_t requested_ns_;
  detail::session_core::guard_entry entry_; ///< when it got the device; on the lease or locked
  // A flag and a value, not std::optional<std::uint64_t>: GCC 12 at -O2 and above reports the
  // optional's value as maybe-uninitialized in finish() (-Wmaybe-uninitialized), a false
  // positive that -Werror makes fatal for a consumer.
  std::uint64_t device_ns_ = 0;  ///< the measured device time, if has_device_time_
  bool has_device_time_ = false; ///< set_device_time() was called
  std::uint64_t revocations_;    ///< the session's revocation count when this guard began
  mutable bool revoked_ = false; ///< a revocation was seen (kept once finish() ran)
};

} // namespace v0
} // namespace gpushare
