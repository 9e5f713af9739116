// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <gpushare/detail/settings.hpp>
#include <gpushare/detail/snapshot.hpp>
#include <gpushare/detail/table_core.hpp>
#include <gpushare/options.hpp>
#include <gpushare/removal.hpp>
#include <gpushare/table_types.hpp>

namespace gpushare {
inline namespace v0 {

/// What table::open() does when the key has no table yet. There is no default: whether a call
/// may create a table is the caller's decision, written where it is made.
enum class open_mode {
  /// Never create: a missing table is errc::no_such_table. What observers want (a monitoring
  /// script, a dashboard): looking must not leave a table behind.
  open_existing,
  /// Create it if needed, with the capacity, access mode and domain of the options (as a
  /// session joining the key does). Only the creator's capacity counts: a table that already
  /// exists keeps its own.
  open_or_create,
};

/// The most sessions a table holds at once (its slots are numbered from 0).
inline constexpr std::uint32_t max_session_slots = detail::max_slot_count;

/// How table::open_existing() opens a table by its name.
struct table_open_options {
  /// How long to wait for a table that another process is still initialising (then
  /// errc::table_busy).
  std::chrono::milliseconds open_timeout{5000};
  /// How long the handle's operations (configure, evict, snapshot, ...) wait for the table's lock
  /// before throwing errc::table_busy: the lock is held for microseconds, so only a stopped or
  /// hung holder gets near. Unset: 10 s. A tool that reports such a table at once gives less.
  std::optional<std::chrono::milliseconds> lock_timeout;
};

/// A handle on a table for observing and administering it (the CLI, tests, monitoring). It holds
/// no session: opening one never appears in a snapshot.
///
///     auto t = gpushare::table::open("GPU-1234", gpushare::open_mode::open_existing);
///     for (const auto& s : t.snapshot().sessions) std::cout << s.name << ' ' << s.memory.reserved;
///
/// Which calls create a table: gpushare::session (and cuda::device_session) always may;
/// table::open only with open_mode::open_or_create; nothing else does.
class table {
public:
  /// Opens the table for `key` in the table directory, domain and access mode of `opts` and the
  /// environment (GPUSHARE_DIR, GPUSHARE_DOMAIN, GPUSHARE_TABLE_MODE). With
  /// open_mode::open_existing a missing table is errc::no_such_table; with
  /// open_mode::open_or_create it is created with `opts.capacity`.
  static table open(std::string_view key, open_mode mode, const session_options& opts = {}) {
    const resolved_options r = resolve_options(opts);
    const detail::table_dir dir = detail::check_table_dir(r.directory);
    if (mode == open_mode::open_existing)
      return table(detail::mapped_table::open_existing(
          detail::table_object_name(dir, r.domain, key, r.access), detail::to_ns(r.open_timeout),
          detail::abandoned_creation::keep));
    detail::create_params p;
    p.dir = dir;
    p.domain = r.domain;
    p.key = std::string(key);
    p.access = r.access;
    p.capacity = r.capacity;
    p.open_timeout_ns = detail::to_ns(r.open_timeout);
    return table(detail::mapped_table::open_or_create(p));
  }

  /// Removes the table for `key` (domain and access mode from `opts` and the environment, as for
  /// open()) if no session uses it: a table with a live session, or one being created or joined,
  /// is never removed; the result then says removal_status::in_use and how many sessions live
  /// in it. Sessions that died are no obstacle (their slots go with the table). Returns
  /// removal_status::gone if there was no table. Uses the clean protocol (docs/cli.md), so a
  /// process joining at the same moment joins a table that exists, never the removed one.
  /// Throws errc::permission_denied (another user's table), errc::table_incompatible,
  /// errc::table_corrupt, errc::table_busy (its lock held by a stopped process).
  static removal_result remove(std::string_view key, const session_options& opts = {}) {
    const resolved_options r = resolve_options(opts);
    removal_options o;
    o.domain = r.domain;
    o.open_timeout = r.open_timeout;
    return remove_unused_table(
        detail::table_object_name(detail::check_table_dir(r.directory), r.domain, key, r.access),
        o);
  }

  /// Opens an existing table by its object name: "/gpushare.<domain>.<owner>.<key>" in /dev/shm,
  /// "<dir>/gpushare.<domain>.<owner>.<key>" in a table directory (table_entry::object_name).
  static table open_existing(const std::string& object_name,
                             std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    return open_existing(object_name, table_open_options{timeout, std::nullopt});
  }

  /// As above, with the waits of `o`.
  static table open_existing(const std::string& object_name, const table_open_options& o) {
    table t(detail::mapped_table::open_existing(object_name, detail::to_ns(o.open_timeout)));
    if (o.lock_timeout) t.core_.set_lock_timeout(detail::to_ns(*o.lock_timeout));
    return t;
  }

  /// Every live session, consistent at one instant. Dead sessions are reclaimed first.
  table_snapshot snapshot() { return detail::take_snapshot(core_); }

  /// Reads the table `object_name` without locking or writing it (it is opened read-only and
  /// copied into private memory first), for observers that must not touch tables they do not
  /// own, e.g. the CLI run by root. Dead sessions are left out, not reclaimed. The snapshot may
  /// be torn (taken while sessions change the table), which is fine for display only.
  static table_snapshot
  read_unlocked(const std::string& object_name,
                std::chrono::milliseconds timeout = std::chrono::milliseconds(1000)) {
    return detail::copy_snapshot(object_name, detail::to_ns(timeout));
  }

  /// The uid, gid and permission bits of the table's file (fstat of the descriptor this handle
  /// mapped), for callers that must check who owns the table they opened.
  struct file_owner {
    std::uint32_t uid = 0;  ///< the owner's uid
    std::uint32_t gid = 0;  ///< the group's gid
    std::uint32_t mode = 0; ///< permission bits, e.g. 0600
  };
  /// See file_owner.
  file_owner owner() const {
    struct stat st {};
    if (::fstat(core_.fd(), &st) != 0)
      throw detail::system_failure(errc::system_error, "cannot stat table '" + core_.name() + "'",
                                   errno);
    file_owner o;
    o.uid = st.st_uid;
    o.gid = st.st_gid;
    o.mode = st.st_mode & 07777u;
    return o;
  }

  /// Live sessions named `name`.
  std::vector<session_id> find(std::string_view name) {
    std::vector<session_id> ids;
    for (const auto& s : snapshot().sessions)
      if (s.name == name) ids.push_back(s.id);
    return ids;
  }

  /// Changes a live session's settings; it sees them at its next operation. Throws
  /// errc::invalid_argument if that session has left (or its slot holds another session now).
  void configure(session_id id, const settings_change& change) {
    detail::table_core::guard g(core_);
    detail::slot_record& s = live_slot(id);
    const std::int64_t wake = detail::apply_settings(
        core_.view(), id.slot, change,
        "session '" + detail::read_bounded(s.name, detail::name_capacity) + "'", core_.name());
    g.wake_after(wake);
    if (change.memory_guarantee) g.released_memory();
  }

  /// Ends the live session `id` at once, as if its process had died: its hold on the device
  /// passes to the next waiter, its reservations return to the table, its waiting threads wake
  /// and throw errc::session_closed, and its next call learns it was evicted. The remedy for a
  /// session stopped or hung inside a guard (SIGSTOP, a debugger, a frozen container), which
  /// liveness cannot free because it is alive. Its process keeps whatever device memory it
  /// allocated: evict a process that will be killed or restarted. Only the owner of the table's
  /// file and root may evict (errc::permission_denied otherwise); errc::invalid_argument if no
  /// such live session. Recorded in the table (table_snapshot::evictions, last_eviction).
  session_info evict(session_id id) {
    const std::uint32_t me = ::geteuid();
    const file_owner o = owner();
    if (me != 0 && me != o.uid)
      throw error(errc::permission_denied,
                  "only the owner of table '" + core_.name() + "' (uid " + std::to_string(o.uid) +
                      ") or root may evict one of its sessions; this process runs as uid " +
                      std::to_string(me));
    detail::table_core::guard g(core_);
    detail::slot_record& s = live_slot(id);
    session_info info = detail::read_session(s, id.slot);
    info.holds_device = detail::current_holder(core_.view()) == static_cast<std::int64_t>(id.slot);
    info.holds_startup = detail::startup_holder(core_.view()) == static_cast<std::int64_t>(id.slot);
    detail::record_eviction(core_.header(), s, id, me);
    g.wake_after(id.slot); // its own waiting threads: they find the session ended
    g.wake_after(core_.end_session_locked(id.slot));
    g.wake_memory_waiters(); // its memory came back, and its own memory waiters must wake too
    return info;
  }

  /// Changes the table's defaults for sessions that set none of their own, and its capacity.
  /// Only the owner of the table's file and root may (errc::permission_denied otherwise).
  void configure_defaults(const table_defaults& d) {
    const std::uint32_t me = ::geteuid();
    if (const file_owner o = owner(); me != 0 && me != o.uid)
      throw error(errc::permission_denied,
                  "only the owner of table '" + core_.name() + "' (uid " + std::to_string(o.uid) +
                      ") or root may change its defaults; this process runs as uid " +
                      std::to_string(me));
    detail::check_max_guard(d.max_guard);
    if (d.capacity && *d.capacity > detail::max_memory_bytes)
      throw error(errc::invalid_argument, "a capacity of " + std::to_string(*d.capacity) +
                                              " bytes is over the most, 2^63 bytes (give 0 for "
                                              "unlimited)");
    if (d.capacity) core_.reclaim_dead(); // dead sessions' commitments must not count
    detail::table_core::guard g(core_);
    detail::table_header& h = core_.header();
    if (d.capacity) {
      const std::uint64_t c = *d.capacity == 0 ? detail::unlimited_capacity : *d.capacity;
      // Committed, or held where loans are out (held bytes include them): never on scribbles.
      const auto needed = [&h] { return std::max(h.committed_total, h.held_total); };
      if (c < needed()) detail::recompute_totals(core_.view());
      if (c < needed())
        throw error(errc::invalid_argument,
                    "the capacity of table '" + core_.name() + "' cannot go down to " +
                        detail::format_capacity(c) + ": its live sessions have committed " +
                        detail::format_bytes(needed()) +
                        " (reservations, external usage, guarantees and loans out of idle "
                        "guarantees); release memory or lower guarantees first, or give a "
                        "capacity of at least that");
      detail::set_capacity(core_.view(), c);
    }
    if (d.max_guard) h.default_max_guard_ns = static_cast<std::uint64_t>(d.max_guard->count());
    if (d.capacity) g.released_memory(); // more room: waiters re-check
  }

  /// Frees the slots of dead sessions now (any operation also does this when it needs to).
  std::uint32_t reclaim_dead_sessions() { return core_.reclaim_dead(); }

  /// Its POSIX shm object name, e.g. "/gpushare.default.u1000.GPU-8f1e...".
  const std::string& object_name() const noexcept { return core_.name(); }
  /// Whether opening this handle created the table.
  bool created() noexcept { return core_.mapping().created(); }

private:
  explicit table(detail::mapped_table m) : core_(std::move(m)) {}

  /// The slot of live session `id` (call under the lock); errc::invalid_argument if none.
  detail::slot_record& live_slot(session_id id) {
    if (id.slot >= core_.slot_count())
      throw error(errc::invalid_argument, "slot " + std::to_string(id.slot) + " does not exist");
    detail::slot_record& s = core_.slot(id.slot);
    if (s.state.load(std::memory_order_relaxed) != detail::slot_active ||
        s.generation != id.generation)
      throw error(errc::invalid_argument, "no live session " + std::to_string(id.slot) + "." +
                                              std::to_string(id.generation) + " in table '" +
                                              core_.name() + "'");
    return s;
  }

  detail::table_core core_;
};

} // namespace v0
} // namespace gpushare
