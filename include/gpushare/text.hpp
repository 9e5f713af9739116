// SPDX-License-Identifier: Apache-2.0
// The text forms of the library's values, for programs that print or read them the way the
// library and the `gpushare` tool do: amounts of memory ("1.50 GiB", "4GiB", "30%"), percentages
// given in parts per million, and the names of tables. Every function here is what the library
// itself uses for its messages and its environment variables, so a program that uses them agrees
// with `gpushare status` and with GPUSHARE_* settings to the byte.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include <gpushare/detail/object_name.hpp>
#include <gpushare/detail/parse.hpp>
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

/// The POSIX shared-memory name ("/gpushare.<domain>.u<uid>.<key>", or ".g<gid>." for
/// table_access::group) of the table for `key` in `domain`, as this process's user or group
/// opens it. Throws gpushare::error (invalid_argument) for a domain or key the library refuses.
inline std::string table_name(std::string_view domain, std::string_view key,
                              table_access access = table_access::user) {
  return detail::table_object_name(domain, key, access);
}

/// The file that holds the table named `name` (a table_name() result): "/dev/shm" + name.
inline std::string table_file(const std::string& name) { return detail::object_path(name); }

} // namespace v0
} // namespace gpushare
