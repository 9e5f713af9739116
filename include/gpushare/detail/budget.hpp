// SPDX-License-Identifier: Apache-2.0
// Memory budget arithmetic: pure functions of the table state, called under the table lock.
//
// The one invariant (docs/design.md, "Budget invariants"):
//     committed_total = sum over active slots of max(reserved + external - borrowed, guarantee)
//                     <= capacity
// is checked by check_grow() before any reservation grows, and it implies both promises:
//   * the sum of reservations never exceeds the capacity, and
//   * every session can always grow up to its guarantee (it is already counted as committed).
// `borrowed` is what a session holds on loan out of idle guarantees (section 15): while any loan
// is out, a growth must also keep held_total = sum of reserved + external within the capacity,
// and one that cannot calls loans back (reclaim.hpp) instead of breaking that bound.
// Only these functions change the totals; recompute_totals() rebuilds them from the slots after a
// crash. Values read from shared memory are never trusted to be sane: arithmetic saturates and
// subtraction clamps at zero, so a scribbled slot can mis-account but never wrap to 2^64.
#pragma once

#include <algorithm>
#include <cstdint>

#include <gpushare/detail/layout.hpp>
#include <gpushare/types.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

inline constexpr std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) noexcept {
  return saturating_add(a, b); // types.hpp: the public form
}
inline constexpr std::uint64_t sat_sub(std::uint64_t a, std::uint64_t b) noexcept {
  return a > b ? a - b : 0;
}

inline constexpr std::uint32_t sat_sub32(std::uint32_t a, std::uint32_t b) noexcept {
  return a > b ? a - b : 0;
}

/// Bytes of the capacity this slot keeps from the others.
inline constexpr std::uint64_t commitment(std::uint64_t reserved, std::uint64_t external,
                                          std::uint64_t guarantee) noexcept {
  return memory_commitment(reserved, external, guarantee); // types.hpp: the public form
}
/// The same for slot `s` with these figures; what it holds on loan is not counted.
inline std::uint64_t commitment(const slot_record& s, std::uint64_t reserved,
                                std::uint64_t external, std::uint64_t guarantee) noexcept {
  return std::max(sat_sub(sat_add(reserved, external), s.loan.borrowed), guarantee);
}
inline std::uint64_t commitment(const slot_record& s) noexcept {
  return commitment(s, s.memory.reserved, s.memory.external, s.settings.memory_guarantee);
}

/// Bytes slot `s` holds, on loan or not.
inline std::uint64_t held(const slot_record& s) noexcept {
  return sat_add(s.memory.reserved, s.memory.external);
}

enum class budget_verdict { granted, over_limit, exceeds_capacity, not_now, over_group_limit };

/// While loans are out, does a growth of `bytes` keep what sessions hold within the capacity?
inline bool held_fits(const table_header& h, std::uint64_t bytes) noexcept {
  return h.lent_total == 0 || sat_add(h.held_total, bytes) <= h.capacity;
}

/// May slot `s` grow its reservations by `bytes` now?
inline budget_verdict check_grow(const table_header& h, const slot_record& s,
                                 std::uint64_t bytes) noexcept {
  const std::uint64_t used_after = sat_add(held(s), bytes);
  if (bytes > h.capacity) return budget_verdict::exceeds_capacity;
  if (used_after > s.settings.memory_limit) return budget_verdict::over_limit;
  const std::uint64_t before = commitment(s);
  const std::uint64_t after = commitment(s, sat_add(s.memory.reserved, bytes), s.memory.external,
                                         s.settings.memory_guarantee);
  const std::uint64_t total_after = sat_add(sat_sub(h.committed_total, before), after);
  return total_after <= h.capacity && held_fits(h, bytes) ? budget_verdict::granted
                                                          : budget_verdict::not_now;
}

/// A slot's contributions to the totals, taken before a change (retotal() applies the change).
struct slot_share {
  std::uint64_t committed, held, reserved, borrowed;
};
inline slot_share share_of(const slot_record& s) noexcept {
  return {commitment(s), held(s), s.memory.reserved, s.loan.borrowed};
}

/// After slot `s` changed from `was`: its bounds restored (reclaimable <= reserved, borrowed <=
/// reclaimable) and the totals moved by the difference.
inline void retotal(table_header& h, slot_record& s, const slot_share& was) noexcept {
  s.reclaim.reclaimable = std::min(s.reclaim.reclaimable, s.memory.reserved);
  s.loan.borrowed = std::min(s.loan.borrowed, s.reclaim.reclaimable);
  h.committed_total = sat_add(sat_sub(h.committed_total, was.committed), commitment(s));
  h.held_total = sat_add(sat_sub(h.held_total, was.held), held(s));
  h.reserved_total = sat_add(sat_sub(h.reserved_total, was.reserved), s.memory.reserved);
  h.lent_total = sat_add(sat_sub(h.lent_total, was.borrowed), s.loan.borrowed);
  s.memory.peak = std::max(s.memory.peak, held(s));
}

/// Replaces slot `s`'s figures by `reserved`, `external`, `guarantee`, keeping the totals exact.
inline void set_usage(table_header& h, slot_record& s, std::uint64_t reserved,
                      std::uint64_t external, std::uint64_t guarantee) noexcept {
  const slot_share was = share_of(s);
  s.memory.reserved = reserved;
  s.memory.external = external;
  s.settings.memory_guarantee = guarantee;
  retotal(h, s, was);
}

/// Whether bytes a reservation grows or releases are reclaimable (docs/design.md section 15);
/// `loan`: reclaimable bytes granted on loan out of idle guarantees (apply_grow only).
enum class memory_kind { fixed, reclaimable, loan };

/// Of a growth of slot `s` by `bytes` that check_grow() refuses (not_now) but a loan allows, the
/// bytes that must be borrowed: what does not fit in the capacity nobody has committed (nor, while
/// loans are out, in what nobody holds). The rest is the slot's own, as any growth that fits; a
/// missed loan call may write off only what was lent (issue 40, B4: the whole growth was booked
/// as a loan, and a call could write off bytes that were never lent).
inline std::uint64_t loan_part(const table_header& h, const slot_record& s,
                               std::uint64_t bytes) noexcept {
  // Its commitment may rise to `room` (the others' commitments stay), and its commitment is
  // max(held - borrowed + x, guarantee) after growing by x of its own.
  const std::uint64_t room = sat_sub(h.capacity, sat_sub(h.committed_total, commitment(s)));
  std::uint64_t fits = sat_sub(room, sat_sub(held(s), s.loan.borrowed));
  if (s.settings.memory_guarantee > room) fits = 0; // (a corrupt slot: the invariant says <=)
  if (h.lent_total != 0) fits = std::min(fits, sat_sub(h.capacity, h.held_total));
  return sat_sub(bytes, fits);
}

/// `on_loan`: of a growth of kind loan, the bytes borrowed (loan_part()); the rest is its own.
inline void apply_grow(table_header& h, slot_record& s, std::uint64_t bytes,
                       memory_kind kind = memory_kind::fixed, std::uint64_t on_loan = 0) noexcept {
  const slot_share was = share_of(s);
  s.memory.reserved = sat_add(s.memory.reserved, bytes);
  if (kind != memory_kind::fixed) s.reclaim.reclaimable = sat_add(s.reclaim.reclaimable, bytes);
  if (kind == memory_kind::loan) {
    s.loan.borrowed = sat_add(s.loan.borrowed, std::min(on_loan, bytes));
    ++s.loan.loans;
    ++h.loans;
  }
  retotal(h, s, was);
  ++s.stats.reservations_granted;
}

/// Releases `bytes` (clamped to what the slot holds: a double release cannot underflow). Bytes
/// written off at a missed loan call are taken off first: the table released them already.
/// Reclaimable bytes not on loan go before borrowed ones, so a release never raises the slot's
/// commitment.
inline void apply_shrink(table_header& h, slot_record& s, std::uint64_t bytes,
                         memory_kind kind = memory_kind::fixed) noexcept {
  const std::uint64_t absorbed = std::min(s.loan.written_off, bytes);
  s.loan.written_off -= absorbed;
  bytes -= absorbed;
  const slot_share was = share_of(s);
  if (kind != memory_kind::fixed) s.reclaim.reclaimable = sat_sub(s.reclaim.reclaimable, bytes);
  s.memory.reserved = sat_sub(s.memory.reserved, bytes);
  retotal(h, s, was);
}

/// A loan call to slot `s` passed its deadline unanswered: `bytes` of its loan (at most what it
/// borrowed) leave its reservations, so the session the loan was called for gets them. Its
/// commitment is unchanged (borrowed bytes never counted in it).
inline void write_off_loan(table_header& h, slot_record& s, std::uint64_t bytes) noexcept {
  const std::uint64_t x = std::min(bytes, s.loan.borrowed);
  if (x == 0) return;
  const slot_share was = share_of(s);
  s.memory.reserved = sat_sub(s.memory.reserved, x);
  s.reclaim.reclaimable = sat_sub(s.reclaim.reclaimable, x);
  s.loan.borrowed -= x;
  s.loan.written_off = sat_add(s.loan.written_off, x);
  retotal(h, s, was);
  ++s.loan.write_offs;
  ++h.loan_write_offs;
  h.loan_written_off = sat_add(h.loan_written_off, x);
}

/// `bytes` already reserved by slot `s` become reclaimable (`kind` reclaimable) or stop being
/// (`kind` fixed). Bytes on loan that stop being reclaimable become its own: they then count in
/// its commitment, so that is refused (false, nothing changed) when the table has no room.
inline bool mark_memory(table_header& h, slot_record& s, std::uint64_t bytes,
                        memory_kind kind) noexcept {
  const slot_share was = share_of(s);
  if (kind != memory_kind::fixed) {
    s.reclaim.reclaimable = sat_add(s.reclaim.reclaimable, bytes);
    retotal(h, s, was);
    return true;
  }
  const std::uint64_t reclaimable = sat_sub(s.reclaim.reclaimable, bytes);
  if (reclaimable < s.loan.borrowed) {
    const std::uint64_t after =
        commitment(sat_sub(held(s), reclaimable), 0, s.settings.memory_guarantee);
    if (sat_add(sat_sub(h.committed_total, was.committed), after) > h.capacity) return false;
  }
  s.reclaim.reclaimable = reclaimable;
  retotal(h, s, was);
  return true;
}

/// Can a new guarantee of `guarantee` bytes be promised to slot `s` (whose current figures are
/// already counted in the totals)? A change that does not increase the slot's commitment is always
/// accepted, even when the table is overcommitted (external usage is reported, not reserved, so it
/// can push committed_total past the capacity): joining with guarantee 0, or lowering a
/// guarantee, must never be refused because of what others use.
inline bool guarantee_fits(const table_header& h, const slot_record& s,
                           std::uint64_t guarantee) noexcept {
  const std::uint64_t before = commitment(s);
  const std::uint64_t after = commitment(s, s.memory.reserved, s.memory.external, guarantee);
  if (after <= before) return true;
  return sat_add(sat_sub(h.committed_total, before), after) <= h.capacity;
}

/// Can a joining session be promised a guarantee of `guarantee` bytes? Its slot counts nowhere yet
/// (it is free); joining with no guarantee is never refused because of what others use.
inline bool join_fits(const table_header& h, std::uint64_t guarantee) noexcept {
  return guarantee == 0 || sat_add(h.committed_total, guarantee) <= h.capacity;
}

/// A thread of slot `s` starts waiting for memory. The memory-waiter counts (the slot's and the
/// header's total) are written only here, in remove_memory_waiters(), clear_slot() and
/// recompute_totals().
inline void add_memory_waiter(table_header& h, slot_record& s) noexcept {
  ++s.memory.waiting;
  ++h.memory_waiters;
}

/// `n` threads of slot `s` stop waiting for memory (at most as many as it counts: a count undone
/// twice cannot underflow). Returns how many were taken off.
inline std::uint32_t remove_memory_waiters(table_header& h, slot_record& s,
                                           std::uint32_t n) noexcept {
  const std::uint32_t k = std::min(n, s.memory.waiting);
  s.memory.waiting -= k;
  h.memory_waiters = sat_sub32(h.memory_waiters, k);
  if (s.memory.waiting == 0) { // no reserve of it waits: for loans, nor in the queue
    s.loan.waiting_bytes = 0;
    s.queue = {};
  }
  return k;
}

/// A thread of slot `s` that waited `waited_ns` for memory got it or gave up: it stops counting as
/// a waiter, and the wait counts in the slot's statistics.
inline void memory_wait_ended(table_header& h, slot_record& s, std::uint64_t waited_ns) noexcept {
  remove_memory_waiters(h, s, 1);
  ++s.stats.reserve_waits;
  s.stats.reserve_wait_ns = sat_add(s.stats.reserve_wait_ns, waited_ns);
  s.stats.reserve_wait_max_ns = std::max(s.stats.reserve_wait_max_ns, waited_ns);
}

/// Removes an active slot's contributions from the totals and marks it free.
inline void clear_slot(table_header& h, slot_record& s) noexcept {
  if (s.state.load(std::memory_order_relaxed) == slot_active) {
    set_usage(h, s, 0, 0, 0);
    h.live_sessions = h.live_sessions > 0 ? h.live_sessions - 1 : 0;
    remove_memory_waiters(h, s, UINT32_MAX);
  }
  s.memory.waiting = 0; // a free slot's count is in no total
  s.state.store(slot_free, std::memory_order_release);
}

/// Sets the table's capacity to `capacity` bytes (the caller checked that it holds what is
/// committed). Sessions whose limit is the capacity (the default, for a session that set none)
/// follow it.
inline void set_capacity(const table_view& t, std::uint64_t capacity) noexcept {
  table_header& h = *t.header;
  for (std::uint32_t i = 0; i < t.slot_count; ++i) {
    slot_record& s = t.slots[i];
    if (s.state.load(std::memory_order_relaxed) == slot_active &&
        s.settings.memory_limit == h.capacity)
      s.settings.memory_limit = capacity;
  }
  h.capacity = capacity;
}

/// Rebuilds every derived total from the slots (after the lock's owner died mid-update).
inline void recompute_totals(const table_view& t) noexcept {
  table_header& h = *t.header;
  std::uint64_t reserved = 0, committed = 0, held_bytes = 0, lent = 0;
  std::uint32_t live = 0, waiters = 0;
  for (std::uint32_t i = 0; i < t.slot_count; ++i) {
    slot_record& s = t.slots[i];
    if (s.state.load(std::memory_order_relaxed) != slot_active) continue;
    s.reclaim.reclaimable = std::min(s.reclaim.reclaimable, s.memory.reserved);
    s.loan.borrowed = std::min(s.loan.borrowed, s.reclaim.reclaimable);
    reserved = sat_add(reserved, s.memory.reserved);
    committed = sat_add(committed, commitment(s));
    held_bytes = sat_add(held_bytes, held(s));
    lent = sat_add(lent, s.loan.borrowed);
    ++live;
    waiters += std::min(s.memory.waiting, 1024u); // bounded: a scribbled count cannot overflow
  }
  h.reserved_total = reserved;
  h.committed_total = committed;
  h.held_total = held_bytes;
  h.lent_total = lent;
  h.live_sessions = live;
  h.memory_waiters = waiters;
}

} // namespace detail
} // namespace v0
} // namespace gpushare
