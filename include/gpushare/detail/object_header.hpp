// SPDX-License-Identifier: Apache-2.0
// What a table object holds, judged from its bytes: the 40-byte prefix a creator writes first
// (encode_prefix, decode_prefix, creation_prefix), what an object that is not a ready table is
// (inspect_unready: one our creator left unfinished, or foreign), and the checks of a ready
// table's header against this build (validate_table_header). The init protocol that relies on
// them is described in detail/object.hpp.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include <gpushare/detail/layout.hpp>
#include <gpushare/detail/posix.hpp>
#include <gpushare/error.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// The fields of a table_prefix, as plain integers (the prefix's init_state is an atomic).
struct prefix_fields {
  std::uint64_t magic = 0;
  std::uint32_t layout_version = 0;
  std::uint32_t init_state = 0;
  std::uint32_t header_size = 0;
  std::uint32_t slot_size = 0;
  std::uint32_t slot_count = 0;
  std::uint32_t lock_size = 0;
  std::uint64_t total_size = 0;
};

using prefix_bytes = std::array<unsigned char, sizeof(table_prefix)>;

/// Calls op(offset in table_prefix, field) for every field of `f` (const or not): the one list
/// of where each field lies, for encode_prefix() and decode_prefix().
template <class Fields, class Op> void for_each_prefix_field(Fields& f, Op&& op) {
  op(offsetof(table_prefix, magic), f.magic);
  op(offsetof(table_prefix, layout_version), f.layout_version);
  op(offsetof(table_prefix, init_state), f.init_state);
  op(offsetof(table_prefix, header_size), f.header_size);
  op(offsetof(table_prefix, slot_size), f.slot_size);
  op(offsetof(table_prefix, slot_count), f.slot_count);
  op(offsetof(table_prefix, lock_size), f.lock_size);
  op(offsetof(table_prefix, total_size), f.total_size);
}

/// The bytes of a table_prefix holding `f`, laid out as the table_prefix struct lays them out.
inline prefix_bytes encode_prefix(const prefix_fields& f) noexcept {
  prefix_bytes b{};
  for_each_prefix_field(f, [&b](std::size_t offset, const auto& value) {
    std::memcpy(b.data() + offset, &value, sizeof value);
  });
  return b;
}

inline prefix_fields decode_prefix(const prefix_bytes& b) noexcept {
  prefix_fields f;
  for_each_prefix_field(f, [&b](std::size_t offset, auto& value) {
    std::memcpy(&value, b.data() + offset, sizeof value);
  });
  return f;
}

/// The prefix a creator writes first, before it sizes the object: gpushare's magic, this layout,
/// init_state INIT and every size of a table of `slot_count` slots. With it, an unfinished
/// creation proves whose it is (see inspect_unready()).
inline prefix_bytes creation_prefix(std::uint32_t slot_count) noexcept {
  prefix_fields f;
  f.magic = table_magic;
  f.layout_version = table_layout_version;
  f.init_state = init_state_initialising;
  f.header_size = sizeof(table_header);
  f.slot_size = sizeof(slot_record);
  f.slot_count = slot_count;
  f.lock_size = table_lock_size;
  f.total_size = table_size(slot_count);
  return encode_prefix(f);
}

/// What an object that is not a ready table is (judged with the init lock free).
struct unready_object {
  enum class kind {
    ready,       ///< it became ready meanwhile: look again
    empty,       ///< 0 bytes: what shm_open(O_CREAT) leaves before the creator writes
    prefix_only, ///< exactly our creation prefix: the creator died before posix_fallocate
    sized,       ///< our creation prefix at exactly the size it names: died before REDY
    foreign,     ///< anything else: not provably ours, so refused and never deleted
  };
  kind what = kind::foreign;
  errc code = errc::table_corrupt; ///< foreign: table_corrupt, or table_incompatible
  std::uint64_t size = 0;          ///< the object's size in bytes
  std::string why;                 ///< what the object is, for a message

  /// Could only gpushare's creator have left this (once the init lock is free)?
  bool ours() const noexcept {
    return what == kind::empty || what == kind::prefix_only || what == kind::sized;
  }
};

/// Judges an unready object of `u.size` bytes from its first bytes `b` (inspect_unready()).
inline void judge_unready_prefix(unready_object& u, const prefix_bytes& b) {
  const std::string bytes = std::to_string(u.size) + " bytes";
  const prefix_fields f = decode_prefix(b);
  if (f.init_state == init_state_ready) {
    u.what = unready_object::kind::ready;
    return;
  }
  if (f.magic != table_magic) {
    const bool zero = std::all_of(b.begin(), b.end(), [](unsigned char c) { return c == 0; });
    u.why = bytes + (zero ? " whose first " + std::to_string(b.size()) + " bytes are zero"
                          : " that do not start with gpushare's magic");
    return;
  }
  if (f.init_state != init_state_initialising) {
    char state[16];
    std::snprintf(state, sizeof state, "0x%08x", f.init_state);
    u.why = bytes + " with gpushare's magic but an unknown init state " + state;
    return;
  }
  if (f.layout_version != table_layout_version || f.header_size != sizeof(table_header) ||
      f.slot_size != sizeof(slot_record) || f.lock_size != table_lock_size) {
    u.code = errc::table_incompatible;
    u.why = "an unfinished table of layout version " + std::to_string(f.layout_version) +
            " (header " + std::to_string(f.header_size) + ", slot " + std::to_string(f.slot_size) +
            ", lock " + std::to_string(f.lock_size) +
            " bytes); this gpushare (" GPUSHARE_VERSION_STRING ") uses layout " +
            std::to_string(table_layout_version);
    return;
  }
  if (f.slot_count == 0 || f.slot_count > max_slot_count ||
      f.total_size != table_size(f.slot_count)) {
    u.why = bytes + " whose unfinished header claims " + std::to_string(f.slot_count) +
            " slots in " + std::to_string(f.total_size) + " bytes";
    return;
  }
  if (u.size == sizeof(table_prefix)) {
    u.what = unready_object::kind::prefix_only;
    u.why = bytes + ": its creator died before sizing it";
  } else if (u.size == f.total_size) {
    u.what = unready_object::kind::sized;
    u.why = bytes + ": its creator died before it was ready";
  } else {
    u.why = bytes + " whose unfinished header names a table of " + std::to_string(f.total_size) +
            " bytes";
  }
}

/// Judges the object behind `fd` from its size and first 40 bytes (fstat, then pread: a creator
/// that progresses in between only moves it from one of our shapes to the next, or to ready).
/// Ours are exactly the shapes our creator leaves: 0 bytes (before its pwrite), the creation
/// prefix alone (before posix_fallocate, which tmpfs does all at once or not at all), or the
/// creation prefix at exactly the table size it names (before init_state = REDY).
inline unready_object inspect_unready(int fd) {
  unready_object u;
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw system_failure(errc::system_error, "cannot stat a table object", errno);
  u.size = static_cast<std::uint64_t>(st.st_size);
  const std::string bytes = std::to_string(u.size) + " bytes";
  if (u.size == 0) {
    u.what = unready_object::kind::empty;
    u.why = "0 bytes: its creator died before writing anything";
    return u;
  }
  if (u.size < sizeof(table_prefix)) {
    u.why = bytes + ", smaller than a table's " + std::to_string(sizeof(table_prefix)) +
            "-byte header prefix";
    return u;
  }
  prefix_bytes b{};
  const ssize_t n = pread_full(fd, b.data(), b.size(), 0);
  if (n < 0) throw system_failure(errc::system_error, "cannot read a table object", errno);
  if (static_cast<std::size_t>(n) != b.size()) {
    u.why = bytes + ", of which only " + std::to_string(n) + " could be read";
    return u;
  }
  judge_unready_prefix(u, b);
  return u;
}

/// Whether `offset_ns` can be a creator's CLOCK_MONOTONIC offset from the host's: Linux keeps a
/// time namespace's offset within KTIME_SEC_MAX / 2 seconds (kernel/time/namespace.c), and never
/// lets its clock go below 0, so a negative offset is at most the host's uptime (ours, less our
/// own offset).
inline bool possible_monotonic_offset(std::int64_t offset_ns) noexcept {
  constexpr std::int64_t limit_ns = 4'611'686'018'000'000'000; // (INT64_MAX / 1e9 / 2) s
  const auto host_now = static_cast<std::int64_t>(monotonic_ns()) - monotonic_offset_ns();
  return offset_ns <= limit_ns && offset_ns >= -host_now;
}

/// Checks the header of a ready table of `file_size` bytes against this build: magic, layout
/// version, structure sizes, slot count, total size, and the creator's time namespace. Throws
/// errc::table_corrupt or errc::table_incompatible naming `name`; `advice` ("; stop its users
/// ...", or empty) follows the corruption and layout messages. Used on a mapping
/// (mapped_table::validate_ready) and on a private copy (copy_snapshot), so both refuse the same.
inline void validate_table_header(const table_header& h, std::size_t file_size,
                                  const std::string& name, const std::string& advice) {
  const table_prefix& pre = h.prefix;
  auto fail = [&](errc code, const std::string& why) {
    throw error(code, "table '" + name + "' " + why + advice);
  };
  if (pre.magic != table_magic) fail(errc::table_corrupt, "is not a gpushare table (bad magic)");
  if (pre.layout_version != table_layout_version)
    fail(errc::table_incompatible,
         "has layout version " + std::to_string(pre.layout_version) + " but this gpushare (" +
             GPUSHARE_VERSION_STRING ") uses layout " + std::to_string(table_layout_version) +
             " (processes of different gpushare versions cannot share a table; use another "
             "GPUSHARE_DOMAIN or upgrade them together)");
  if (pre.header_size != sizeof(table_header) || pre.slot_size != sizeof(slot_record) ||
      pre.lock_size != table_lock_size)
    fail(errc::table_incompatible, "was created with other structure sizes (header " +
                                       std::to_string(pre.header_size) + ", slot " +
                                       std::to_string(pre.slot_size) + ", lock " +
                                       std::to_string(pre.lock_size) + ")");
  if (pre.slot_count == 0 || pre.slot_count > max_slot_count)
    fail(errc::table_corrupt, "claims " + std::to_string(pre.slot_count) + " slots (allowed: 1.." +
                                  std::to_string(max_slot_count) + ")");
  if (pre.total_size != table_size(pre.slot_count) || file_size != pre.total_size)
    fail(errc::table_corrupt, "has size " + std::to_string(file_size) + " but its header says " +
                                  std::to_string(pre.total_size) + " (expected " +
                                  std::to_string(table_size(pre.slot_count)) +
                                  "): truncated or damaged");
  // Garbage after a sound prefix is a damaged table, not a time namespace (issue 42, A6: it was
  // reported as one): fields that are zero in every table, and an offset no namespace can have.
  if (h.reserved1 != 0 || h.startup_unused != 0 ||
      !possible_monotonic_offset(h.monotonic_offset_ns))
    fail(errc::table_corrupt,
         "has garbage in its header (fields that are always zero are not, or its creator's "
         "clock offset is one no time namespace can have): damaged");
  // Timestamps in the table (when the holder was granted the device, went idle, a waiter started
  // waiting...) are written by one process and compared with another's CLOCK_MONOTONIC: across
  // time namespaces with different offsets a waiter would wait for a grace period to end
  // thousands of seconds away, or forever. Refused, clearly, rather than translated.
  const std::int64_t theirs = h.monotonic_offset_ns;
  if (const std::int64_t mine = monotonic_offset_ns(); theirs != mine) {
    auto seconds = [](std::int64_t ns) {
      char buf[48];
      std::snprintf(buf, sizeof buf, "%+.3f s", static_cast<double>(ns) / 1e9);
      return std::string(buf);
    };
    throw error(errc::table_incompatible,
                "table '" + name + "' was created in a time namespace whose monotonic clock is " +
                    "offset by " + seconds(theirs) + " from the host's, and this process's by " +
                    seconds(mine) +
                    " (`unshare -T`, a restored checkpoint): processes whose monotonic clocks "
                    "differ cannot share a table, since they compare each other's timestamps; run "
                    "them in one time namespace, or give each namespace its own GPUSHARE_DOMAIN");
  }
}

} // namespace detail
} // namespace v0
} // namespace gpushare
