// SPDX-License-Identifier: Apache-2.0
// Joining a table, for session_core (declared in session_core.hpp): open the table (creating it
// if needed), claim a slot by taking its liveness lock, activate the slot under the table lock,
// then print the join's notices once per process. docs/design.md, "Joining and leaving".
#pragma once

#include <unistd.h>

#include <cstdint>
#include <string>
#include <string_view>

#include <gpushare/detail/join_notices.hpp>
#include <gpushare/detail/notices.hpp>
#include <gpushare/detail/session_core.hpp>
#include <gpushare/detail/slot.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// How many times a join starts over because the table it opened was removed meanwhile.
inline constexpr int max_join_attempts = 64;

inline session_core::session_core(std::string_view key, const resolved_options& r) {
  create_params p;
  p.dir = check_table_dir(r.directory);
  p.domain = r.domain;
  p.key = std::string(key);
  p.access = r.access;
  p.capacity = r.capacity;
  p.open_timeout_ns = to_ns(r.open_timeout);
  facts_.name = r.name;
  reclaim_deadline_ns_ = r.reclaim_deadline_ns;
  // No fork() in this process until the slot is claimed, activated and registered: a child
  // forked in between would inherit the slot's liveness lock unknown to the fork registry and
  // keep this session alive after this process died (issue 13, item 11).
  const fork_registry::no_fork_scope no_fork;
  join_table(r, p);
  facts_.created_table = table_.mapping().created();
  facts_.requested_capacity = r.capacity >= max_memory_bytes ? 0 : r.capacity;
  fork_registry::instance().add(this);
  raise_join_notices(key, r.notices);
}

/// Opens the table, claims a slot and activates it. `gpushare clean` may remove the table
/// between our opening it and our joining it; then activate() finds the name no longer refers
/// to our file, and we join the table that the name refers to now (docs/cli.md, "The clean
/// protocol").
inline void session_core::join_table(const resolved_options& r, create_params p) {
  p.creator_slot = static_cast<std::uint32_t>(::getpid()) * 2654435761u % p.slot_count;
  for (int attempt = 1;; ++attempt) {
    table_ = table_core(mapped_table::open_or_create(p));
    crash_point("join.opened");
    if (const std::uint32_t s = table_.mapping().creator_slot(); s != no_creator_slot) {
      slot_ = s; // claimed while creating: no cleaner could remove the table meanwhile
      table_.set_own_slot(s);
    } else {
      claim_slot();
    }
    crash_point("join.claimed");
    bool active = false;
    try {
      active = activate(r);
    } catch (...) {
      unlock_byte(table_.fd(), slot_lock_byte(slot_));
      throw;
    }
    if (active) return;
    unlock_byte(table_.fd(), slot_lock_byte(slot_));
    if (attempt == max_join_attempts) throw removed_while_joining(facts_, table_, attempt);
  }
}

/// Takes the liveness lock of a slot: that lock *is* the claim, so concurrent joiners never need
/// the table lock to pick slots and 256 of them do not queue behind each other. Free slots are
/// tried first, from a per-process starting point; a second pass also takes slots whose owner
/// died without leaving (their lock is free), which activate() then cleans.
inline void session_core::claim_slot() {
  const std::uint32_t n = table_.slot_count();
  const std::uint32_t start = static_cast<std::uint32_t>(::getpid()) * 2654435761u % n;
  for (int pass = 0; pass < 2; ++pass) {
    for (std::uint32_t k = 0; k < n; ++k) {
      const std::uint32_t i = (start + k) % n;
      const bool is_free = table_.slot(i).state.load(std::memory_order_acquire) == slot_free;
      if ((pass == 0) != is_free) continue;
      if (try_lock_byte(table_.fd(), slot_lock_byte(i)) == 0) {
        slot_ = i;
        table_.set_own_slot(i);
        return;
      }
    }
  }
  throw no_free_slot(table_);
}

/// Activates the claimed slot. Returns false, having changed nothing, if the table's name no
/// longer refers to the file we mapped: `gpushare clean` removed it (under this lock) after we
/// opened it, and a session here would be invisible to every process that opens the name later.
inline bool session_core::activate(const resolved_options& r) {
  const std::uint64_t start_ticks = process_start_ticks(); // file I/O: not under the lock
  for (int attempt = 0;; ++attempt) {
    table_core::guard g(table_); // wakes what is asked below after unlocking, however left
    if (!names_same_file(table_.fd(), table_.name())) return false;
    table_header& h = table_.header();
    if (own().state.load(std::memory_order_relaxed) == slot_active) { // its owner died; we hold it
      g.wake_after(reclaim_slot(table_.view(), slot_, monotonic_ns()));
      // Its memory came back: memory waiters must re-check now, not at their next liveness
      // re-check.
      g.released_memory();
    }
    const std::uint64_t guarantee = resolve_memory_settings(r, h);
    if (!join_fits(h, guarantee)) {
      if (attempt == 0) {
        recompute_totals(table_.view()); // never refuse on scribbled totals (see grow_loop())
        g.unlock();
        table_.reclaim_dead();
        continue;
      }
      throw guarantee_unavailable(facts_, table_, guarantee);
    }
    const slot_group group = group_for_join(r, guarantee);
    const slot_identity who{::getpid(), start_ticks, realtime_ns(), facts_.name, &r.identity};
    generation_ = join_slot(table_.view(), slot_, who,
                            join_settings(r, facts_.limit_at_join, guarantee), group);
    priority_.store(own().settings.priority, std::memory_order_relaxed);
    joined_ = true;
    return true;
  }
}

/// Resolves this session's memory limit and guarantee against the table's capacity `h`, records
/// how they were given (facts_), and returns the guarantee. Throws if either is a fraction of a
/// table without a capacity, or if the guarantee exceeds the limit. Call under the lock.
inline std::uint64_t session_core::resolve_memory_settings(const resolved_options& r,
                                                           const table_header& h) {
  const std::string who = "session '" + facts_.name + "'";
  check_fraction_has_capacity(who, "memory limit", r.memory_limit, h.capacity, table_.name());
  check_fraction_has_capacity(who, "memory guarantee", r.memory_guarantee, h.capacity,
                              table_.name());
  const std::uint64_t limit = r.memory_limit ? r.memory_limit->resolve(h.capacity) : h.capacity;
  const std::uint64_t guarantee = r.memory_guarantee.resolve(h.capacity);
  facts_.limit_given = r.memory_limit_given;
  facts_.guarantee_given = r.memory_guarantee_given;
  facts_.limit_at_join = limit;
  if (guarantee > limit) throw guarantee_over_limit(facts_, guarantee, limit);
  return guarantee;
}

/// The group record of a session joining group r.group ({} for none): the limit and share its
/// members have (a joiner that gives others is refused: they are the group's, not one member's),
/// else those it gives, else no limit and share 1. Throws errc::invalid_argument for a mismatch
/// or a guarantee above the group's limit, errc::guarantee_unavailable when the members'
/// commitments leave too little for the guarantee. Call under the lock.
inline slot_group session_core::group_for_join(const resolved_options& r,
                                               std::uint64_t guarantee) const {
  slot_group g{};
  if (r.group.empty()) return g;
  const table_view& t = table_.view();
  const std::uint64_t capacity = t.header->capacity;
  const std::string who = "session '" + facts_.name + "' of group '" + r.group + "'";
  check_fraction_has_capacity(who, "group memory limit", r.group_memory_limit, capacity,
                              table_.name());
  copy_bounded(g.name, group_capacity, r.group);
  const std::uint64_t given_limit =
      r.group_memory_limit ? r.group_memory_limit->resolve(capacity) : unlimited_group_memory;
  g.memory_limit = given_limit;
  g.share = r.group_share.value_or(default_share);
  if (const std::int64_t m = find_group_member(t, r.group, slot_); m >= 0) {
    const slot_record& o = t.slots[static_cast<std::uint32_t>(m)];
    const bool limit_differs = r.group_memory_limit && given_limit != o.group.memory_limit;
    const bool share_differs = r.group_share && *r.group_share != o.group.share;
    if (limit_differs || share_differs)
      throw group_settings_differ(who, r, given_limit, o, limit_differs);
    g.memory_limit = o.group.memory_limit;
    g.share = o.group.share;
  }
  if (guarantee > g.memory_limit)
    throw error(errc::invalid_argument,
                who + ": its memory guarantee of " + format_bytes(guarantee) +
                    " exceeds the group's memory limit of " + format_group_limit(g.memory_limit) +
                    "; lower the guarantee (GPUSHARE_MEMORY_GUARANTEE) or raise the group's "
                    "limit (GPUSHARE_GROUP_MEMORY_LIMIT, given the same to every member)");
  if (!group_join_fits(t, r.group, g.memory_limit, guarantee))
    throw group_guarantee_unavailable(who, guarantee, group_committed(t, r.group), g.memory_limit);
  return g;
}

/// The notices of a join, kept in the session and each delivered once per process to the
/// notice handler (detail/notices.hpp): those of resolving its options (`resolved`), the capacity
/// notice (messages.hpp) once per table and requested capacity, and the join warnings
/// (join_notices.hpp) once each.
inline void session_core::raise_join_notices(std::string_view key,
                                             const std::vector<notice>& resolved) {
  for (const notice& n : resolved) { // resolving's: ignored identity variables, cluster limits
    notices_.push_back(n);
    deliver_notice(notices_.back());
  }
  if (std::string note = capacity_mismatch_text(); !note.empty()) {
    notices_.push_back({notice::kind::note, std::move(note)});
    deliver_notice(notices_.back(),
                   table_.name() + '\n' + std::to_string(facts_.requested_capacity));
  }
  for (std::string& w : join_warnings(table_.name(), key)) {
    notices_.push_back({notice::kind::warning, std::move(w)});
    deliver_notice(notices_.back());
  }
}

} // namespace detail
} // namespace v0
} // namespace gpushare
