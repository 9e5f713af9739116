// SPDX-License-Identifier: Apache-2.0
// The one reset of a slot when a session joins it. A slot is reused by whichever session claims it
// next, so everything the previous session left there (scheduler state, statistics, lease and
// journal counters, spare bytes) must be gone before the new session is activated: a hand-written
// list of fields once forgot two of them, and a new session inherited its predecessor's quantum
// debt and busy-turn mark (issue 23, item 3). Zeroing the whole record cannot forget a field.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

#include <gpushare/detail/layout.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// Resets slot `s` to the all-zero state a freshly created table has (every struct of the layout
/// is valid all-zero: fallocate creates tables that way), keeping only what must stay monotone
/// across the sessions that use the slot: its generation (so a stale (slot, generation) never
/// names the new session), its settings sequence, and its grant word (a futex word: a thread of a
/// reclaimed session that still sleeps on it must see a change, never the same value again).
/// Call under the table lock, on a slot that is not active (state stays slot_free).
inline void reset_slot_for_join(slot_record& s) noexcept {
  const std::uint32_t generation = s.generation;
  const std::uint32_t settings_seq = s.settings_seq;
  const std::uint32_t word = s.grant_word.load(std::memory_order_relaxed);
  // The atomics in the record are lock-free integers (static_asserts in layout.hpp): their
  // object representation is their value, so zero bytes are the value 0, as in a new table.
  std::memset(static_cast<void*>(&s), 0, sizeof s);
  s.generation = generation;
  s.settings_seq = settings_seq;
  s.grant_word.store(word, std::memory_order_relaxed);
}

} // namespace detail
} // namespace v0
} // namespace gpushare
