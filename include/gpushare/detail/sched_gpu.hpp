// SPDX-License-Identifier: Apache-2.0
// Work of a guard still running on the GPU after the guard ended, and the priority classes that
// asked for the device lately (docs/design.md section 12, "Guards on streams", rules 2 and 3):
//   - a guard's end leaves its launches queued on the GPU; a session whose work is still in
//     flight marks its slot (gpu_mark, with a deadline gpu_until_ns), and a host function on its
//     stream clears the mark once the work finished. No session of a lower class is granted the
//     device while such a mark lasts (the high class's kernels would share the GPU with the lower
//     class's, in the driver's time slices); the mark's deadline bounds that wait whatever
//     happens to its owner (stopped, killed, its host function never run);
//   - each session notes, without the lock, when its class last asked for the device; a lower
//     class keeps less work in flight while a higher class was active lately (the CUDA layer's
//     in-flight bound), so that a request of the higher class finds little queued before it.
// Pure rules on the mapped table: no lock is taken here, no system call made.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include <gpushare/detail/layout.hpp>
#include <gpushare/detail/sched_common.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// A class counts as active for this long after one of its sessions last asked for the device.
inline constexpr std::uint64_t class_active_window_ns = 100'000'000; // 100 ms
/// A class's time is refreshed at most this often (one shared cache line written per class and
/// millisecond, not per guard).
inline constexpr std::uint64_t class_active_refresh_ns = 1'000'000; // 1 ms

/// The longest a mark may hold a lower class back: its writer never sets a deadline further
/// ahead, and a reader ignores one that is (a corrupt word, or a writer's clock far ahead).
inline constexpr std::uint64_t max_gpu_mark_ns = 1'000'000'000; // 1 s

/// A session of class `c` asks for the device at `now`.
inline void note_class_active(table_header& h, int c, std::uint64_t now) noexcept {
  if (c < 0 || c > 7) return;
  std::atomic<std::uint64_t>& a = h.class_active_ns[c];
  const std::uint64_t seen = a.load(std::memory_order_relaxed);
  if (now >= seen && now - seen < class_active_refresh_ns) return;
  a.store(now, std::memory_order_relaxed);
}

/// Whether a class in [lo, hi] asked for the device within the window before `now`. (A time
/// after `now`, as a corrupt word could hold, counts as active: the bound then only costs the
/// lower class some queued work.)
inline bool classes_active(const table_header& h, int lo, int hi, std::uint64_t now) noexcept {
  for (int c = std::max(lo, 0); c <= std::min(hi, 7); ++c) {
    const std::uint64_t seen = h.class_active_ns[c].load(std::memory_order_relaxed);
    if (seen != 0 && sat_add(seen, class_active_window_ns) > now) return true;
  }
  return false;
}

/// The word of mark number `n` (not 0) of a session of generation `generation`: a mark left by
/// an earlier session of the slot never matches a later one's.
inline std::uint64_t gpu_mark_word(std::uint32_t generation, std::uint32_t n) noexcept {
  return (std::uint64_t{generation} << 32) | std::max<std::uint32_t>(n, 1);
}

/// The owner of slot `s` leaves work in flight, expected to finish by `until_ns` at the latest:
/// marks it with `mark` (the deadline first, so that a reader that sees the mark sees a deadline
/// at least as late as the mark's).
inline void mark_gpu_work(slot_record& s, std::uint64_t mark, std::uint64_t until_ns) noexcept {
  s.gpu_until_ns.store(until_ns, std::memory_order_release);
  s.gpu_mark.store(mark, std::memory_order_release);
}

/// The work marked `mark` finished: clears the mark if it is still the slot's (a later mark of
/// the session stays). Returns the slot + 1 of the session waiting for it (0: none), taken off.
inline std::uint32_t clear_gpu_mark(slot_record& s, std::uint64_t mark) noexcept {
  std::uint64_t expected = mark;
  if (!s.gpu_mark.compare_exchange_strong(expected, 0, std::memory_order_acq_rel)) return 0;
  return s.gpu_watcher.exchange(0, std::memory_order_acq_rel);
}

/// How long slot `s`'s mark still holds a lower class back at `now` (0: no mark, or past its
/// deadline).
inline std::uint64_t gpu_mark_left(const slot_record& s, std::uint64_t now) noexcept {
  if (s.gpu_mark.load(std::memory_order_acquire) == 0) return 0;
  const std::uint64_t left = sat_sub(s.gpu_until_ns.load(std::memory_order_acquire), now);
  return left > max_gpu_mark_ns ? 0 : left;
}

/// Under the table lock: how long session `i` must still wait before it may be granted the
/// device because work of a session of a higher class than `claim` (its claim) is still on the
/// GPU; 0: it may be granted now. Every slot whose mark holds it back gets `i` as its watcher,
/// which that slot's host function wakes when the work finished. `self`: a slot whose own mark
/// is not looked at (the holder releasing the device drained its own work already).
inline std::uint64_t gpu_work_above(const table_view& t, std::uint32_t i, int claim,
                                    std::uint64_t now, std::int64_t self = nobody) noexcept {
  if (claim >= 7) return 0; // nobody is above the top class (nor an owed guarantee)
  std::uint64_t left = 0;
  for (std::uint32_t j = 0; j < t.slot_count; ++j) {
    if (j == i || static_cast<std::int64_t>(j) == self) continue;
    slot_record& s = t.slots[j];
    if (!is_active(s) || s.settings.priority <= claim) continue;
    const std::uint64_t l = gpu_mark_left(s, now);
    if (l == 0) continue;
    s.gpu_watcher.store(i + 1, std::memory_order_release);
    left = std::max(left, l);
  }
  return left;
}

/// The longest a session may keep the device through one gap by lingering (session::linger),
/// counted from the end of its last guard: an idle high class never holds the device longer.
inline constexpr std::uint64_t max_linger_ns = 10'000'000; // 10 ms

/// Holder `hs`, between guards since the header's holder_idle_since_ns, asked to linger: how
/// much longer it keeps the device from lower classes at `now` (0: not lingering).
inline std::uint64_t linger_left(const table_header& h, const slot_record& hs,
                                 std::uint64_t now) noexcept {
  if (now == no_time) return 0;
  const std::uint64_t until = std::min(hs.linger_until_ns.load(std::memory_order_relaxed),
                                       sat_add(h.holder_idle_since_ns, max_linger_ns));
  return sat_sub(until, now);
}

/// gpu_work_above() for slot `w` (nobody: 0) at its claim.
inline std::uint64_t gpu_work_left(const table_view& t, std::int64_t w, std::uint64_t now,
                                   std::int64_t self = nobody) noexcept {
  if (w == nobody) return 0;
  const auto i = static_cast<std::uint32_t>(w);
  return gpu_work_above(t, i, claim_priority(t.slots[i], now), now, self);
}

/// try_take's look at a free device for `b`, the session it would grant: how long `b` must still
/// wait for a higher class's marked work, or for `last` (the session that last freed the device)
/// while it lingers and is of a higher class than `b` (0: grant now).
inline std::uint64_t free_device_wait(const table_view& t, std::int64_t b, std::int64_t last,
                                      std::uint64_t now) noexcept {
  std::uint64_t left = gpu_work_left(t, b, now);
  if (b != nobody && last != nobody && last != b &&
      t.slots[last].settings.priority > claim_priority(t.slots[b], now))
    left = std::max(left, linger_left(*t.header, t.slots[last], now));
  return left;
}

} // namespace detail
} // namespace v0
} // namespace gpushare
