// SPDX-License-Identifier: Apache-2.0
// Removing unused tables without racing joiners.
//
// Removal protocol (see docs/cli.md, "The clean protocol"): remove_unused_table() opens the table,
// takes its lock, checks under the lock that no slot lock (and no init lock) is held, and unlinks
// the name while still holding the lock. A joiner checks under the same lock, before it activates
// its slot, that the name still refers to the file it mapped (session_core::activate()); if the
// table was unlinked in between, it drops its claim and joins the table now under the name. A
// joiner that claimed its slot before the cleaner's check makes the table look live, so it is not
// removed. Either way no session ends up in an unlinked table. A joiner that creates the table
// claims its slot before the table is ready, so a cleaner can never remove its creation and a
// cleaner running in a loop cannot starve it.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <gpushare/detail/liveness.hpp>
#include <gpushare/detail/shm.hpp>
#include <gpushare/detail/table_core.hpp>
#include <gpushare/error.hpp>

namespace gpushare {
inline namespace v0 {

/// Where POSIX shared-memory objects appear as files on Linux.
inline constexpr std::string_view shm_directory = detail::object_directory;

/// What remove_unused_table() did.
enum class removal_status {
  removed,      ///< no live session: the name was unlinked
  would_remove, ///< dry run: it would have been removed (a table, or an abandoned creation)
  in_use,       ///< a session is live in it (or it is being created or joined): kept
  gone,         ///< the name no longer exists (removed meanwhile, or an abandoned creation that
                ///< this call removed)
  other_domain, ///< its header names another domain than removal_options::domain: kept
};

/// How remove_unused_table() removes a table (table::remove() sets domain and open_timeout).
struct removal_options {
  bool dry_run = false; ///< check only; remove nothing
  /// Remove the table only if its header names this domain (a name alone can be ambiguous: see
  /// parse_table_file_name()).
  std::optional<std::string> domain;
  /// How long to wait for a table that is still being initialised (then errc::table_busy).
  std::chrono::milliseconds open_timeout{1000};
  /// How long to wait for the table's lock (then errc::table_busy); unset: 10 s, as
  /// table_open_options::lock_timeout.
  std::optional<std::chrono::milliseconds> lock_timeout;
  /// Root's `gpushare clean --force` on a table of another owner: open it with
  /// detail::open_intent::clean_any_owner (the object must be what its name says: owned by the uid
  /// in its name, or of the gid in its name, with no more permissions than its mode allows, one
  /// link) and remove it only if it is a ready, valid table that no session uses, checked under
  /// its own lock. An abandoned creation or anything else that is not such a table is kept (and
  /// reported as the error open_existing() gives). Without it, the table must be the caller's
  /// (open_intent::participant), and the caller's own abandoned creations are removed.
  bool any_owner = false;
};

/// What remove_unused_table() or table::remove() did.
struct removal_result {
  removal_status status = removal_status::gone; ///< what became of the table
  std::uint32_t live_sessions = 0;              ///< for in_use: slots whose liveness lock is held
  std::uint32_t dead_sessions = 0; ///< for removed / would_remove: sessions whose process died
};

namespace detail {

/// Is any of the lock bytes 0 .. slot_count held by another open file description? Byte 0 is the
/// init lock, byte 1 + i the liveness lock of slot i. One F_OFD_GETLK covers them all. An
/// unknown answer (fcntl failed) counts as held.
inline bool any_lock_byte_held(int fd, std::uint32_t slot_count) noexcept {
  flock fl = byte_range(F_WRLCK, init_lock_byte);
  fl.l_len = static_cast<off_t>(slot_count) + 1;
  if (::fcntl(fd, F_OFD_GETLK, &fl) != 0) return true;
  return fl.l_type != F_UNLCK;
}

inline std::uint32_t count_live_slots(int fd, std::uint32_t slot_count) noexcept {
  std::uint32_t live = 0;
  for (std::uint32_t i = 0; i < slot_count; ++i)
    if (probe_byte(fd, slot_lock_byte(i)) != holder::none) ++live;
  return live;
}

} // namespace detail

/// Removes the table `object_name` ("/gpushare....") if no session is live in it; a table with a
/// live session is never removed. With `o.dry_run`, checks the same way and removes nothing.
///
/// The check and the unlink happen under the table's lock, and joiners re-check the name under
/// that lock (see the top of this file), so a process that opened the table just before it was
/// removed joins the table that then exists under the name, never the removed one.
///
/// Throws what table::open_existing() throws for a table it cannot open: errc::permission_denied
/// (another user's or group's), errc::table_incompatible, errc::table_corrupt, errc::table_busy
/// (still being initialised after `o.open_timeout`, or its lock held by a stopped process).
inline removal_result remove_unused_table(const std::string& given_name,
                                          const removal_options& o = {}) {
  removal_result r;
  const std::string object_name = detail::canonical_object_name(given_name);
  const std::string path = detail::object_path(object_name);
  if (::access(path.c_str(), F_OK) != 0 && errno == ENOENT) return r; // gone
  std::optional<detail::table_core> core;
  try {
    // A creation its creator abandoned (docs/design.md, section 4) is removed, except in a dry
    // run; open_existing() refuses, and never removes, anything that is not provably one.
    core.emplace(detail::mapped_table::open_existing(
        object_name, detail::to_ns(o.open_timeout),
        o.dry_run || o.any_owner ? detail::abandoned_creation::keep
                                 : detail::abandoned_creation::remove,
        o.any_owner ? detail::open_intent::clean_any_owner : detail::open_intent::participant));
  } catch (const error& e) {
    // Another owner's abandoned creation (or other object that is no ready table) is kept.
    if (o.any_owner && e.code() == errc::no_such_table && ::access(path.c_str(), F_OK) == 0) throw;
    // no_such_table: the name is missing, or it was an abandoned creation, which is now removed
    // (or, in a dry run, kept: then it would be removed).
    if (e.code() != errc::no_such_table) throw;
    if (o.dry_run && ::access(path.c_str(), F_OK) == 0) r.status = removal_status::would_remove;
    return r;
  }
  if (o.lock_timeout) core->set_lock_timeout(detail::to_ns(*o.lock_timeout));
  if (o.domain &&
      detail::read_bounded(core->header().domain, detail::domain_capacity) != *o.domain) {
    r.status = removal_status::other_domain;
    return r;
  }
  {
    detail::table_core::guard g(*core);
    if (detail::any_lock_byte_held(core->fd(), core->slot_count())) {
      r.status = removal_status::in_use;
    } else if (!detail::names_same_file(core->fd(), object_name)) {
      return r; // replaced or removed by someone else meanwhile: not ours to remove
    } else {
      for (std::uint32_t i = 0; i < core->slot_count(); ++i)
        if (core->slot(i).state.load(std::memory_order_relaxed) == detail::slot_active)
          ++r.dead_sessions;
      if (o.dry_run) {
        r.status = removal_status::would_remove;
      } else {
        if (detail::unlink_object(object_name) != 0) {
          const int err = errno;
          if (err == ENOENT) return removal_result{};
          throw detail::system_failure(err == EACCES || err == EPERM ? errc::permission_denied
                                                                     : errc::system_error,
                                       "cannot remove table '" + object_name + "'", err);
        }
        r.status = removal_status::removed;
      }
    }
  }
  if (r.status == removal_status::in_use)
    r.live_sessions = detail::count_live_slots(core->fd(), core->slot_count());
  return r;
}

/// Unlinks the name `object_name` whatever the table holds, without opening it (it may be
/// corrupt, of another layout, or in use). Processes still using the table keep using it, but it
/// is then orphaned: processes that open the name later get a new table and are no longer
/// arbitrated with them. Returns false if the name did not exist. Throws errc::permission_denied
/// when this user may not remove it (/dev/shm lets only a file's owner remove it), errc::
/// invalid_argument for what is no table's name, and errc::system_error for other failures.
inline bool remove_table_forcibly(const std::string& given_name) {
  const std::string object_name = detail::canonical_object_name(given_name);
  if (detail::unlink_object(object_name) == 0) return true;
  const int err = errno;
  if (err == ENOENT) return false;
  throw detail::system_failure(err == EACCES || err == EPERM ? errc::permission_denied
                                                             : errc::system_error,
                               "cannot remove table '" + object_name + "'", err);
}

} // namespace v0
} // namespace gpushare
