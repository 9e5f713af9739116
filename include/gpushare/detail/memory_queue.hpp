// SPDX-License-Identifier: Apache-2.0
// The memory waiters' order (issue 40, D11; docs/design.md section 8, "Waiters' order"): pure
// functions of the table state, under the table lock.
//
// Reserves that wait are served in order: a higher priority class first, and within a class the
// one that began waiting first. A reserve that begins to wait takes a ticket (its place); each
// session's slot holds the place and size of its oldest waiting reserve. A growth of any session
// (a waiting reserve's, a new reserve's, try_reserve's) is refused while a reserve ahead of it
// would not fit after it: a waiter of a higher class, or of its class that came first, or a
// reserve within its own guarantee, whatever its class (its room is promised; with loans out, it
// is what a loan call frees for it, docs/design.md section 15, which no other growth may take
// between the borrower's answer and the reserve's next look). So memory that comes back goes to
// the waiters in order, and a large reserve is not starved by a stream of smaller ones that each
// fit in what comes back. What is not refused:
//   - a growth within the session's own guarantee: its room is committed already, and nobody
//     else can have it;
//   - a growth that leaves every waiter ahead still fitting;
//   - a growth ahead of a waiter that has not looked for `queue_stale_ns`: a waiting reserve
//     looks at least every 100 ms (liveness_recheck_ns), so one that has not for 2 s is stopped
//     (SIGSTOP, a debugger) or starved of CPU; it keeps its place, and holds the others back
//     again from its next look. A dead waiter's slot is reclaimed as any dead session's.
// A reserve that stops waiting takes its session's entry with it (queue_leave); the session's
// other waiting reserves enter at their next look, woken by the grant. One that stops waiting
// by an exception while the lock cannot be had (the journal) leaves the entry until the
// session's count of waiting reserves is 0 (remove_memory_waiters clears it).
#pragma once

#include <cstdint>

#include <gpushare/detail/budget.hpp>
#include <gpushare/detail/layout.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// How long a waiting reserve that has not looked still holds the reserves behind it.
inline constexpr std::uint64_t queue_stale_ns = 2'000'000'000; // 2 s

/// A reserve of the table begins to wait: its place, after every place given before.
inline std::uint64_t take_queue_ticket(table_header& h) noexcept {
  h.memory_tickets = sat_add(h.memory_tickets, 1);
  return h.memory_tickets;
}

/// A waiting reserve of slot `s` (place `ticket`, `bytes`) looks at `now`: the slot's entry is its
/// oldest waiting reserve's.
inline void queue_look(slot_record& s, std::uint64_t ticket, std::uint64_t bytes,
                       std::uint64_t now) noexcept {
  if (s.queue.ticket == 0 || ticket <= s.queue.ticket) {
    s.queue.ticket = ticket;
    s.queue.bytes = bytes;
  }
  s.queue.looked_ns = now;
}

/// The waiting reserve at place `ticket` of slot `s` stopped waiting (granted, or gave up): its
/// entry goes; another waiting reserve of the session enters at its next look.
inline void queue_leave(slot_record& s, std::uint64_t ticket) noexcept {
  if (s.queue.ticket == ticket) s.queue = {};
}

/// Whether growing slot `s` by `bytes` keeps its commitment: a growth within its guarantee.
inline bool within_guarantee(const slot_record& s, std::uint64_t bytes) noexcept {
  return commitment(s, sat_add(s.memory.reserved, bytes), s.memory.external,
                    s.settings.memory_guarantee) <= commitment(s);
}

/// Would slot `j`'s waiting reserve fit once slot `i` grew by `bytes`, its commitment by
/// `raise`? (The table's bounds only: capacity and, with loans out, what sessions hold.)
inline bool fits_after(const table_header& h, const slot_record& j, std::uint64_t raise,
                       std::uint64_t bytes) noexcept {
  const std::uint64_t before = commitment(j);
  const std::uint64_t after = commitment(j, sat_add(j.memory.reserved, j.queue.bytes),
                                         j.memory.external, j.settings.memory_guarantee);
  const std::uint64_t total = sat_add(sat_add(sat_sub(h.committed_total, before), after), raise);
  if (total > h.capacity) return false;
  return h.lent_total == 0 || sat_add(sat_add(h.held_total, bytes), j.queue.bytes) <= h.capacity;
}

/// Must slot `i`'s growth by `bytes` wait for a waiting reserve ahead of it? `ticket`: the
/// growth's place if it waits already (0: it does not, and every waiter of its class is ahead).
inline bool queued_behind(const table_view& t, std::uint32_t i, std::uint64_t bytes,
                          std::uint64_t ticket, std::uint64_t now) noexcept {
  const table_header& h = *t.header;
  if (h.memory_waiters == 0) return false;
  const slot_record& me = t.slots[i];
  const std::uint64_t raise = sat_sub(commitment(me, sat_add(me.memory.reserved, bytes),
                                                 me.memory.external, me.settings.memory_guarantee),
                                      commitment(me));
  if (raise == 0) return false; // within its guarantee
  for (std::uint32_t j = 0; j < t.slot_count; ++j) {
    const slot_record& s = t.slots[j];
    if (j == i || s.state.load(std::memory_order_relaxed) != slot_active || s.memory.waiting == 0 ||
        s.queue.ticket == 0 || sat_sub(now, s.queue.looked_ns) > queue_stale_ns)
      continue;
    // A reserve within its own guarantee is ahead of every class: its room is promised (with
    // loans out, what a loan call frees is its, section 15), and only held room can be short.
    const bool ahead =
        within_guarantee(s, s.queue.bytes) || s.settings.priority > me.settings.priority ||
        (s.settings.priority == me.settings.priority && (ticket == 0 || s.queue.ticket < ticket));
    if (ahead && !fits_after(h, s, raise, bytes)) return true;
  }
  return false;
}

} // namespace detail
} // namespace v0
} // namespace gpushare
