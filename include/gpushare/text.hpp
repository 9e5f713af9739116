// SPDX-License-Identifier: Apache-2.0
// The text forms of the library's values, for programs that print or read them the way the
// library and the `gpushare` tool do: amounts of memory ("1.50 GiB", "4GiB", "30%"), percentages
// given in parts per million, durations ("500us", "2min"), the settings of a session as
// GPUSHARE_* variables take them, and the names of tables. Every function here is what the library
// itself uses for its messages and its environment variables, so a program that uses them agrees
// with `gpushare status` and with GPUSHARE_* settings to the byte.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <optional>

#include <gpushare/detail/elapsed.hpp>
#include <gpushare/detail/identity.hpp>
#include <gpushare/detail/join_notices.hpp>
#include <gpushare/detail/object_name.hpp>
#include <gpushare/detail/parse.hpp>
#include <gpushare/detail/parse_pause_hold.hpp>
#include <gpushare/types.hpp>

namespace gpushare {
inline namespace v0 {

/// The largest amount of memory a table counts: a table created without a capacity has this one,
/// and format_capacity() shows it as "unlimited".
inline constexpr std::uint64_t unlimited_memory = detail::max_memory_bytes;

/// "512 B", "1.50 KiB", "4.00 GiB": binary units, two decimals (rounded down) above bytes.
inline std::string format_bytes(std::uint64_t bytes) { return detail::format_bytes(bytes); }

/// As format_bytes(), but "unlimited" for unlimited_memory or more.
inline std::string format_capacity(std::uint64_t bytes) { return detail::format_capacity(bytes); }

/// A share in parts per million as a percentage: 300000 -> "30%", 125000 -> "12.5%".
inline std::string format_percent(std::uint32_t ppm) { return detail::format_ppm_percent(ppm); }

/// Reads an amount of memory as GPUSHARE_MEMORY_LIMIT does: "4GiB", "512MiB", "4gb", "123"
/// (bytes) or "30%" (of the table's capacity). Throws gpushare::error (invalid_argument) with a
/// message that names the accepted forms.
inline memory_amount parse_memory_amount(std::string_view s) {
  return detail::parse_memory_amount(s);
}

/// `s` in double quotes for a message, with '"', '\' and non-printable bytes escaped; at most
/// `max_chars` bytes of it, a longer `s` cut and its length given.
inline std::string quote(std::string_view s, std::size_t max_chars = 60) {
  return detail::quote(s, max_chars);
}

/// A duration in the one form every message uses: the largest unit that holds it whole ("500us",
/// "2min", "1500ms", "24h"; 0 is "0s"). parse_duration() reads it back exactly.
inline std::string format_duration(std::uint64_t ns) { return detail::format_duration(ns); }

/// A measured duration for a human, rounded to three significant digits in the largest unit it
/// reaches ("7.93s", "12.5ms", "250us"); not for settings, which format_duration() writes exactly.
inline std::string format_elapsed(std::uint64_t ns) { return detail::format_elapsed(ns); }

/// Reads a duration the way every gpushare option does, in nanoseconds: a decimal number with a
/// unit ns, us, ms, s, min or h (any case: "500us", "2min", "0.5s"), checked against `option`
/// (its range; "none" where it allows none; a number alone where it has a bare unit). Throws
/// gpushare::error (invalid_argument) whose message names the option's forms and range.
inline std::uint64_t parse_duration(std::string_view s, const duration_option& option) {
  return detail::parse_duration(s, option);
}

/// The settings of a session as GPUSHARE_* variables and `gpushare set` take them. Each throws
/// gpushare::error (invalid_argument) with a message that names the accepted forms.
/// GPUSHARE_PRIORITY: "low", "normal", "high", "critical" or 0 to 7.
inline int parse_priority(std::string_view s) { return detail::parse_priority(s); }
/// GPUSHARE_SHARE: 1 to 1000000.
inline std::uint32_t parse_share(std::string_view s) { return detail::parse_share(s); }
/// GPUSHARE_COMPUTE_LIMIT: "30%", "12.5%" -> parts per million, above 0 and at most 100%.
inline std::uint32_t parse_percent(std::string_view s) { return detail::parse_percent_ppm(s); }
/// GPUSHARE_COMPUTE_GUARANTEE: "10%" -> parts per million; "none" -> 0.
inline std::uint32_t parse_compute_guarantee(std::string_view s) {
  return detail::parse_compute_guarantee_ppm(s);
}
/// GPUSHARE_PAUSE_HOLD: "none" (or "off", "0"), or a ratio up to 100 ("2", "0.5"); millionths.
inline std::uint32_t parse_pause_hold(std::string_view s) {
  return detail::parse_pause_hold_ppm(s);
}
/// GPUSHARE_QUANTUM: "5ms", from 1us to 10s.
inline std::chrono::nanoseconds parse_quantum(std::string_view s) {
  return std::chrono::nanoseconds(static_cast<std::int64_t>(detail::parse_quantum_ns(s)));
}
/// GPUSHARE_MAX_GUARD: "30s", from 1ms to 1h; "none" (or "off", "0") -> 0, no bound.
inline std::chrono::nanoseconds parse_max_guard(std::string_view s) {
  return std::chrono::nanoseconds(static_cast<std::int64_t>(detail::parse_max_guard_ns(s)));
}
/// GPUSHARE_RECLAIM_DEADLINE: "2s", from 1ms to 1h.
inline std::chrono::nanoseconds parse_reclaim_deadline(std::string_view s) {
  return std::chrono::nanoseconds(
      static_cast<std::int64_t>(detail::parse_duration(s, detail::reclaim_deadline_option)));
}
/// GPUSHARE_HANDOVER: "guard" or "yield".
inline handover_point parse_handover(std::string_view s) { return detail::parse_handover(s); }
/// GPUSHARE_CAPACITY: "80GiB", "85899345920" -> bytes; "unlimited" or 0 -> 0 (unlimited).
inline std::uint64_t parse_capacity(std::string_view s) { return detail::parse_capacity(s); }
/// GPUSHARE_DOMAIN: throws unless `s` is a domain the library accepts (1 to 32 characters from
/// A-Z, a-z, 0-9, '.', '_' and '-', not starting with '.').
inline void validate_domain(std::string_view s) { detail::validate_domain(s); }

/// GPUSHARE_NAME: throws unless `s` is a session name the library accepts (what its message
/// says: length and characters).
inline void validate_session_name(std::string_view s) { detail::validate_session_name(s); }
/// GPUSHARE_TABLE_MODE: "user" or "0600" -> table_access::user; "group" or "0660" ->
/// table_access::group (any case); anything else throws naming the accepted forms.
inline table_access parse_table_access(std::string_view s) { return detail::parse_table_access(s); }
/// Whether `a` and `b` are equal ignoring the case of ASCII letters: how every keyword the
/// library reads ("none", "guard", "group") is compared.
inline bool iequals(std::string_view a, std::string_view b) { return detail::iequals(a, b); }

/// The edit distance of `a` and `b`: insertions, deletions, substitutions and swaps of two
/// neighbouring characters count 1 each ("stauts" is 1 from "status"; optimal string
/// alignment). What the library's "did you mean" hints for GPUSHARE_* names, and the tool's for
/// its commands and options, measure.
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  return detail::edit_distance(a, b);
}

/// A Slurm step id as SLURM_STEP_ID gives it: a number, or "batch", "extern", "interactive"
/// (Slurm's special steps, held as their numbers); nullopt for anything else.
inline std::optional<std::uint32_t> parse_slurm_step(std::string_view s) {
  return detail::parse_slurm_step(s);
}
/// A Slurm step id as text: "batch", "extern", "interactive" or its number.
inline std::string slurm_step_text(std::uint32_t step) { return detail::slurm_step_text(step); }
/// A session's platform identity as `gpushare status` shows it: "<namespace>/<pod>/<container>"
/// (the parts known) and "job <id>[_<task>][.<step>]", space-separated; "" when none is known.
inline std::string identity_text(const platform_identity& id) { return detail::identity_text(id); }

/// GPUSHARE_DIR: a table directory as given -> its normalised absolute path, "" for /dev/shm (the
/// default). Throws errc::invalid_argument for a relative path, "." or "..", or the root. Looks
/// at nothing on disk (a session checks the directory when it opens a table there).
inline std::string normalize_table_dir(std::string_view dir) {
  return detail::normalize_table_dir(dir);
}

/// The POSIX shared-memory name ("/gpushare.<domain>.u<uid>.<key>", or ".g<gid>." for
/// table_access::group) of the table for `key` in `domain`, as this process's user or group
/// opens it. Throws gpushare::error (invalid_argument) for a domain or key the library refuses.
inline std::string table_name(std::string_view domain, std::string_view key,
                              table_access access = table_access::user) {
  return detail::table_object_name(domain, key, access);
}

/// The name of the table for `key` in `domain` in the table directory `dir` ("" or "/dev/shm":
/// the shm name above; else "<dir>/gpushare.<domain>.u<uid>.<key>", and for table_access::group
/// ".g<gid>." with the directory's group). Checks the directory (check as a session does:
/// errc::bad_directory, errc::permission_denied) and throws errc::invalid_argument for a domain,
/// key or path the library refuses.
inline std::string table_name(std::string_view dir, std::string_view domain, std::string_view key,
                              table_access access) {
  return detail::table_object_name(detail::check_table_dir(dir), domain, key, access);
}

/// The file that holds the table named `name` (a table_name() result): "/dev/shm" + name for a
/// shm name, the name itself in a table directory.
inline std::string table_file(const std::string& name) { return detail::object_path(name); }

} // namespace v0
} // namespace gpushare
