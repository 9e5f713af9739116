// SPDX-License-Identifier: Apache-2.0
//
// Parsing and validation of option values: memory amounts, percentages, priorities, shares, table
// modes and names. Pure functions; each throws gpushare::error(errc::invalid_argument, message)
// where the message quotes the bad value, says what is wrong and lists the accepted forms. No
// locale dependence: digits are parsed by hand or with std::from_chars.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <gpushare/error.hpp>
#include <gpushare/types.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

inline constexpr std::size_t max_domain_length = 32;
inline constexpr std::size_t max_key_length = 96;
inline constexpr std::size_t max_session_name_length = 63;
/// The largest memory amount in bytes (also the "unlimited" capacity).
inline constexpr std::uint64_t max_memory_bytes = std::uint64_t{1} << 63;

static_assert(min_priority == 0 && max_priority == 7 && min_share == 1 && max_share == 1'000'000,
              "update the accepted-forms texts below");

// The accepted forms, as the end of a sentence "expected ...".
inline constexpr std::string_view memory_amount_forms =
    "a whole number of bytes (\"1048576\"), a number with a unit (\"1.5GiB\", \"512 MiB\"; units "
    "B, "
    "K/KB, M/MB, G/GB, T/TB (powers of 1000) and KiB, MiB, GiB, TiB (powers of 1024), "
    "case-insensitive, at most 6 decimals, at most 2^63 bytes) or a percentage of the capacity "
    "from 0% to 100% (\"20%\", \"12.5%\")";
inline constexpr std::string_view percent_forms =
    "a percentage greater than 0% and at most 100%, written with '%' (\"30%\", \"12.5%\", "
    "\"100%\")";
inline constexpr std::string_view priority_forms =
    "low, normal, high or critical (case-insensitive), or an integer from 0 (lowest) to 7";
inline constexpr std::string_view share_forms = "an integer from 1 to 1000000";
inline constexpr std::string_view handover_forms = "\"guard\" or \"yield\"";
inline constexpr std::string_view guarantee_forms =
    "\"none\" (no guarantee), or a percentage greater than 0% and at most 100%, written with '%' "
    "(\"10%\", \"2.5%\")";
/// The bounds of max_guard (session_options::max_guard, GPUSHARE_MAX_GUARD).
inline constexpr std::uint64_t min_max_guard_ns = 1'000'000;         // 1 ms
inline constexpr std::uint64_t max_max_guard_ns = 3'600'000'000'000; // 1 h
inline constexpr std::uint64_t min_quantum_ns = 1'000;
inline constexpr std::uint64_t max_quantum_ns = 10'000'000'000;
inline constexpr std::uint64_t default_quantum_ns = 5'000'000;
/// The duration options of a session (session_options, GPUSHARE_*, `gpushare set`).
inline constexpr duration_option quantum_option{
    "quantum", min_quantum_ns, max_quantum_ns, false, 0, {}, 0, "\"500us\", \"5ms\", \"0.5s\""};
inline constexpr duration_option max_guard_option{"guard bound",
                                                  min_max_guard_ns,
                                                  max_max_guard_ns,
                                                  true,
                                                  0,
                                                  "no bound",
                                                  0,
                                                  "\"30s\", \"500ms\", \"2min\""};
/// The deadline of a request to give memory back (session_options::reclaim_deadline).
inline constexpr duration_option reclaim_deadline_option{
    "reclaim deadline", 1'000'000, 3'600'000'000'000, false, 0, {}, 0, "\"2s\", \"500ms\""};
inline constexpr std::string_view table_access_forms =
    "\"user\" or \"0600\" (only this user), \"group\" or \"0660\" (this user's group too)";
inline constexpr std::string_view table_dir_forms =
    "an absolute path of an existing directory, e.g. /run/gpushare (\"/dev/shm\": the default)";
inline constexpr std::string_view domain_forms =
    "1 to 32 characters from A-Z, a-z, 0-9, '.', '_' and '-', not starting with '.'";
inline constexpr std::string_view key_forms =
    "1 to 96 characters from A-Z, a-z, 0-9, '.', '_' and '-', not starting with '.'";
inline constexpr std::string_view group_forms =
    "1 to 47 characters from A-Z, a-z, 0-9, '.', '_' and '-', not starting with '.'";
inline constexpr std::size_t max_group_length = 47;
inline constexpr std::string_view session_name_forms =
    "1 to 63 printable ASCII characters (space to '~')";

/// `s` in double quotes, at most `max_chars` bytes of it, with '"', '\' and non-printable bytes
/// escaped; a longer `s` is cut and its length given.
inline std::string quote(std::string_view s, std::size_t max_chars = 60) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = "\"";
  const std::size_t n = std::min(s.size(), max_chars);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  out += '"';
  if (s.size() > max_chars) out += "... (" + std::to_string(s.size()) + " bytes in all)";
  return out;
}

/// What is being parsed, for messages: "invalid <what> "<value>": <reason>; expected <forms>".
struct value_kind {
  std::string_view what;
  std::string_view forms;
};

[[noreturn]] inline void reject(const value_kind& kind, std::string_view value,
                                std::string_view reason, std::size_t quote_chars = 60) {
  throw error(errc::invalid_argument, "invalid " + std::string(kind.what) + " " +
                                          quote(value, quote_chars) + ": " + std::string(reason) +
                                          "; expected " + std::string(kind.forms));
}

inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

inline char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

inline bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return ascii_lower(x) == ascii_lower(y);
         });
}

/// The range of a numeric setting of a session. Each is checked by check_setting() wherever a
/// value arrives (its parser, resolve_options() for values set in code, apply_settings() for
/// changes through table::configure and session::configure, so `gpushare set` too) and described
/// by range_text(): the rule and its words are in one place. Durations have theirs in their
/// duration_option (check_duration()).
struct setting_range {
  std::string_view name;
  std::uint64_t min;
  std::uint64_t max;
  bool percent; ///< the value is in parts per million, shown as a percentage
};
inline constexpr setting_range priority_range{"priority", min_priority, max_priority, false};
inline constexpr setting_range share_range{"share", min_share, max_share, false};
inline constexpr setting_range compute_limit_range{"compute limit", 1, 1'000'000, true};
inline constexpr setting_range compute_guarantee_range{"compute guarantee", 0, 1'000'000, true};
/// A memory limit or guarantee given as a fraction of the capacity.
inline constexpr setting_range memory_fraction_range{"memory fraction", 0, 1'000'000, true};

/// 300000 -> "30%", 125000 -> "12.5%", 1 -> "0.0001%".
inline std::string format_ppm_percent(std::uint32_t ppm) {
  std::string out = std::to_string(ppm / 10'000);
  std::uint32_t frac = ppm % 10'000;
  if (frac != 0) {
    std::string digits(4, '0');
    for (int i = 3; i >= 0; --i, frac /= 10)
      digits[static_cast<std::size_t>(i)] = static_cast<char>('0' + frac % 10);
    digits.erase(digits.find_last_not_of('0') + 1);
    out += "." + digits;
  }
  return out + "%";
}

/// `v` as `r` shows it: "7", "12.5%".
inline std::string setting_text(const setting_range& r, std::int64_t v) {
  if (r.percent && v >= 0 && v <= 4'000'000'000)
    return format_ppm_percent(static_cast<std::uint32_t>(v));
  return std::to_string(v) + (r.percent ? " ppm" : "");
}

/// "from 0 to 7", "from 0.0001% to 100%".
inline std::string range_text(const setting_range& r) {
  return "from " + setting_text(r, static_cast<std::int64_t>(r.min)) + " to " +
         setting_text(r, static_cast<std::int64_t>(r.max));
}

inline bool in_range(const setting_range& r, std::int64_t v) {
  return v >= 0 && static_cast<std::uint64_t>(v) >= r.min && static_cast<std::uint64_t>(v) <= r.max;
}

/// The one message of a value out of its range: "<subject> is <value>; it must be <range>".
[[noreturn]] inline void throw_out_of_range(std::string_view subject, const std::string& value,
                                            const std::string& range) {
  throw error(errc::invalid_argument,
              std::string(subject) + " is " + value + "; it must be " + range);
}

/// Throws invalid_argument unless `v` is in `r`; `subject` names where the value came from
/// ("session_options::share", "share").
inline void check_setting(const setting_range& r, std::int64_t v, std::string_view subject) {
  if (!in_range(r, v)) throw_out_of_range(subject, setting_text(r, v), range_text(r));
}

/// A non-negative decimal number "D+" or "D+.D{1,6}", exactly: whole part and millionths.
struct decimal {
  std::uint64_t whole = 0;
  std::uint32_t micros = 0; ///< the fraction in millionths (rounded down: at most 6 digits)
  bool has_point = false;
  std::size_t length = 0; ///< characters consumed
};

/// Parses the decimal at the start of `s` (the rest is the caller's); rejects signs, a missing
/// digit before or after the point, more than 6 decimals and overflow. `value` is the whole value,
/// for messages.
inline decimal parse_decimal(const value_kind& kind, std::string_view value, std::string_view s) {
  if (s.empty()) reject(kind, value, "the value is empty");
  if (s[0] == '-' || s[0] == '+') reject(kind, value, "a sign is not allowed");
  if (s[0] == '.') reject(kind, value, "write a digit before the decimal point (\"0.5\")");
  if (!is_digit(s[0])) reject(kind, value, "it must start with a digit");
  decimal d;
  std::size_t i = 0;
  while (i < s.size() && is_digit(s[i])) ++i;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + i, d.whole);
  if (ec != std::errc{} || end != s.data() + i) reject(kind, value, "the number is too large");
  if (i < s.size() && s[i] == '.') {
    d.has_point = true;
    const std::size_t first = ++i;
    while (i < s.size() && is_digit(s[i])) ++i;
    const std::size_t digits = i - first;
    if (digits == 0) reject(kind, value, "a digit must follow the decimal point");
    if (digits > 6) reject(kind, value, "at most 6 decimals are allowed");
    for (std::size_t k = 0; k < 6; ++k)
      d.micros = d.micros * 10 + (k < digits ? static_cast<std::uint32_t>(s[first + k] - '0') : 0);
  }
  d.length = i;
  return d;
}

/// Bytes per unit for a (case-insensitive) unit name; nullopt for an unknown unit.
inline std::optional<std::uint64_t> unit_multiplier(std::string_view unit) {
  struct entry {
    std::string_view name;
    std::uint64_t multiplier;
  };
  static constexpr entry units[] = {
      {"b", 1},
      {"k", 1'000},
      {"kb", 1'000},
      {"kib", std::uint64_t{1} << 10},
      {"m", 1'000'000},
      {"mb", 1'000'000},
      {"mib", std::uint64_t{1} << 20},
      {"g", 1'000'000'000},
      {"gb", 1'000'000'000},
      {"gib", std::uint64_t{1} << 30},
      {"t", 1'000'000'000'000},
      {"tb", 1'000'000'000'000},
      {"tib", std::uint64_t{1} << 40},
  };
  for (const auto& u : units)
    if (iequals(unit, u.name)) return u.multiplier;
  return std::nullopt;
}

/// Parts per million for a percentage `d` (without its '%'), which must be at most 100%.
inline std::uint32_t percent_to_ppm(const value_kind& kind, std::string_view s, const decimal& d,
                                    std::string_view range_reason) {
  if (d.whole > 100 || (d.whole == 100 && d.micros > 0)) reject(kind, s, range_reason);
  return static_cast<std::uint32_t>(d.whole * 10'000 + d.micros / 100);
}

/// "1048576", "1.5GiB", "512 MiB", "4G", "20%", "12.5%": bytes or a fraction of the capacity.
/// Fractions of units are computed exactly and rounded down to whole bytes. ".5GiB" is rejected
/// (write "0.5GiB"); so are fractional bytes ("1.5", "1.5B") and more than 2^63 bytes.
inline memory_amount parse_memory_amount_as(const value_kind& kind, std::string_view s) {
  const decimal d = parse_decimal(kind, s, s);
  std::string_view rest = s.substr(d.length);
  if (!rest.empty() && rest[0] == '%') {
    if (rest.size() > 1) reject(kind, s, "nothing may follow the '%'");
    return memory_amount::of_ppm(
        percent_to_ppm(kind, s, d, "a percentage must be from 0% to 100%"));
  }
  std::uint64_t multiplier = 1;
  if (!rest.empty()) {
    if (rest[0] == ' ') rest.remove_prefix(1);
    if (rest.empty() || rest[0] == ' ')
      reject(kind, s,
             "one space at most may separate the number from its unit, and a unit must "
             "follow it");
    const auto m = unit_multiplier(rest);
    if (!m) reject(kind, s, quote(rest, 20) + " is not a unit");
    multiplier = *m;
  }
  if (multiplier == 1 && d.has_point)
    reject(kind, s, "a number of bytes must be whole (or give a unit: \"1.5KiB\")");
  if (d.whole > max_memory_bytes / multiplier) reject(kind, s, "more than 2^63 bytes");
  // whole * multiplier <= 2^63 and micros * multiplier < 10^6 * 2^40 < 2^60: no overflow.
  const std::uint64_t bytes = d.whole * multiplier + d.micros * multiplier / 1'000'000;
  if (bytes > max_memory_bytes) reject(kind, s, "more than 2^63 bytes");
  return memory_amount::of_bytes(bytes);
}

inline constexpr std::string_view capacity_forms =
    "a number of bytes, with or without a unit (\"80GiB\", \"85899345920\"; no percentage: a "
    "capacity is not a fraction of anything), or \"unlimited\" (or 0)";

/// GPUSHARE_CAPACITY: "80GiB", "85899345920" -> bytes; "unlimited" (any case) or 0 -> 0, which
/// means unlimited (2^63 bytes), as session_options::capacity = 0 does.
inline std::uint64_t parse_capacity(std::string_view s) {
  static constexpr value_kind kind{"capacity", capacity_forms};
  if (iequals(s, "unlimited")) return 0;
  const memory_amount m = parse_memory_amount_as(kind, s);
  if (m.kind != memory_amount::unit::bytes)
    reject(kind, s, "a percentage is not accepted: give the capacity in bytes");
  return m.value;
}

/// A memory amount (above), its errors naming the memory amount forms.
inline memory_amount parse_memory_amount(std::string_view s) {
  static constexpr value_kind kind{"memory amount", memory_amount_forms};
  return parse_memory_amount_as(kind, s);
}

/// "30%", "12.5%", "100%" -> parts per million, in (0, 1000000]. The '%' is required.
inline std::uint32_t parse_percent_ppm(std::string_view s) {
  static constexpr value_kind kind{"percentage", percent_forms};
  if (s.empty()) reject(kind, s, "the value is empty");
  if (s.back() != '%') {
    const bool numeric = s.size() <= 20 && std::all_of(s.begin(), s.end(), [](char c) {
                           return is_digit(c) || c == '.';
                         });
    if (numeric)
      reject(kind, s,
             "a '%' is required: write \"" + std::string(s) + "%\" for " + std::string(s) +
                 " percent");
    reject(kind, s, "a '%' is required at the end");
  }
  const std::string_view number = s.substr(0, s.size() - 1);
  if (number.empty()) reject(kind, s, "a number must come before the '%'");
  const decimal d = parse_decimal(kind, s, number);
  if (d.length != number.size()) {
    if (number[d.length] == '%') reject(kind, s, "only one '%' is allowed");
    reject(kind, s, "unexpected characters after the number");
  }
  const std::uint32_t ppm = percent_to_ppm(kind, s, d, "it must be at most 100%");
  if (ppm == 0) reject(kind, s, "it must be greater than 0% (the smallest is 0.0001%)");
  return ppm;
}

/// Strict unsigned integer: digits only, no sign, no junk; nullopt if it does not fit.
inline std::optional<std::uint64_t> parse_digits(const value_kind& kind, std::string_view s) {
  if (s.empty()) reject(kind, s, "the value is empty");
  if (s[0] == '-' || s[0] == '+') reject(kind, s, "a sign is not allowed");
  if (!std::all_of(s.begin(), s.end(), is_digit)) reject(kind, s, "it is not a whole number");
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return v;
}

/// "low", "normal", "high", "critical" (any case) or an integer in [min_priority, max_priority].
inline int parse_priority(std::string_view s) {
  static constexpr value_kind kind{"priority", priority_forms};
  static constexpr std::pair<std::string_view, int> names[] = {
      {"low", priority::low},
      {"normal", priority::normal},
      {"high", priority::high},
      {"critical", priority::critical},
  };
  for (const auto& [name, value] : names)
    if (iequals(s, name)) return value;
  if (!s.empty() && !is_digit(s[0]) && s[0] != '-' && s[0] != '+')
    reject(kind, s, "not a priority name");
  const auto v = parse_digits(kind, s);
  // The range is in the forms the message ends with.
  if (!v || *v > priority_range.max || !in_range(priority_range, static_cast<std::int64_t>(*v)))
    reject(kind, s, "out of range");
  return static_cast<int>(*v);
}

/// An integer in [min_share, max_share].
inline std::uint32_t parse_share(std::string_view s) {
  static constexpr value_kind kind{"share", share_forms};
  const auto v = parse_digits(kind, s);
  if (!v || *v > share_range.max || !in_range(share_range, static_cast<std::int64_t>(*v)))
    reject(kind, s, "out of range"); // the range is in the forms the message ends with
  return static_cast<std::uint32_t>(*v);
}

/// The units of a duration, largest first, in nanoseconds.
struct duration_unit {
  std::string_view name;
  std::uint64_t ns;
};
inline constexpr duration_unit duration_units[] = {
    {"h", 3'600'000'000'000}, {"min", 60'000'000'000}, {"s", 1'000'000'000},
    {"ms", 1'000'000},        {"us", 1'000},           {"ns", 1}};

/// The one text form of a duration in messages: the largest unit that holds it whole ("500us",
/// "2min", "1500ms", "24h"; 0 is "0s"). parse_duration() reads it back exactly.
inline std::string format_duration(std::uint64_t ns) {
  if (ns == 0) return "0s";
  for (const auto& u : duration_units)
    if (ns % u.ns == 0) return std::to_string(ns / u.ns) + std::string(u.name);
  return std::to_string(ns) + "ns"; // not reached: every ns is a whole number of ns
}

/// What `o` accepts, as the end of a sentence "expected ...": "\"none\" (no bound), or a duration
/// from 1ms to 1h with a unit ns, us, ms, s, min or h (e.g. \"30s\", \"500ms\")".
inline std::string duration_forms(const duration_option& o) {
  std::string out = o.allows_none ? "\"none\" (" + std::string(o.none_means) + "), or " : "";
  out += "a duration from " + format_duration(o.min_ns) + " to " + format_duration(o.max_ns) +
         " with a unit ns, us, ms, s, min or h";
  if (o.bare_unit_ns != 0)
    out += ", or a number alone, in " + (o.bare_unit_ns == 1'000'000'000
                                             ? std::string("seconds")
                                             : "units of " + format_duration(o.bare_unit_ns));
  if (!o.examples.empty()) out += " (e.g. " + std::string(o.examples) + ")";
  return out;
}

/// Reads a duration of option `o` in nanoseconds: a decimal number (at most 6 decimals) with a
/// unit (any case), or alone where `o` has a bare unit, from o.min_ns to o.max_ns; "none", "off"
/// or "infinite" (any case) where `o` allows none. Fractions below 1 ns round down.
inline std::uint64_t parse_duration(std::string_view s, const duration_option& o) {
  const std::string forms = duration_forms(o);
  const value_kind kind{o.name, forms};
  if (o.allows_none && (iequals(s, "none") || iequals(s, "off") || iequals(s, "infinite")))
    return o.none_ns;
  const decimal d = parse_decimal(kind, s, s);
  const std::string_view unit = s.substr(d.length);
  std::uint64_t per = unit.empty() ? o.bare_unit_ns : 0;
  for (const auto& u : duration_units)
    if (!unit.empty() && iequals(unit, u.name)) per = u.ns;
  if (per == 0)
    reject(kind, s, unit.empty() ? "a unit is required" : "unknown unit " + quote(unit, 20));
  const std::string too_long = "longer than " + format_duration(o.max_ns);
  if (d.whole > o.max_ns / per) reject(kind, s, too_long);
  // whole * per <= max_ns and micros * per < 10^6 * 3.6e12: no overflow.
  const std::uint64_t ns = d.whole * per + static_cast<std::uint64_t>(d.micros) * per / 1'000'000;
  if (ns > o.max_ns) reject(kind, s, too_long);
  if (ns < o.min_ns) reject(kind, s, "shorter than " + format_duration(o.min_ns));
  return ns;
}

/// Throws invalid_argument unless `ns` is in the range of `o` (the message of check_setting():
/// "<subject> is 10ns; it must be from 1us to 10s").
inline void check_duration(const duration_option& o, std::uint64_t ns, std::string_view subject) {
  if (ns < o.min_ns || ns > o.max_ns)
    throw_out_of_range(subject, format_duration(ns),
                       "from " + format_duration(o.min_ns) + " to " + format_duration(o.max_ns));
}

/// A quantum: "500us", "5ms", "0.5s", from 1us to 10s (a unit is required).
inline std::uint64_t parse_quantum_ns(std::string_view s) {
  return parse_duration(s, quantum_option);
}

/// A guard bound: "none" (or "off", "0"): 0, no bound; else a duration from 1ms to 1h.
inline std::uint64_t parse_max_guard_ns(std::string_view s) {
  if (s == "0") return 0;
  return parse_duration(s, max_guard_option);
}

/// "none" (or "0%"): 0, no guarantee; else a percentage in (0%, 100%], in ppm.
inline std::uint32_t parse_compute_guarantee_ppm(std::string_view s) {
  if (iequals(s, "none") || s == "0%" || s == "0") return 0;
  try {
    return parse_percent_ppm(s);
  } catch (const error& e) {
    throw error(errc::invalid_argument, std::string(e.what()) + "; or \"none\"");
  }
}

/// "guard" or "yield" (case-insensitive).
inline handover_point parse_handover(std::string_view s) {
  static constexpr value_kind kind{"handover point", handover_forms};
  if (iequals(s, "guard")) return handover_point::at_guard;
  if (iequals(s, "yield")) return handover_point::at_yield;
  reject(kind, s, "unknown handover point");
}

/// "user" or "0600" -> table_access::user; "group" or "0660" -> table_access::group.
inline table_access parse_table_access(std::string_view s) {
  static constexpr value_kind kind{"table mode", table_access_forms};
  if (iequals(s, "user") || s == "0600") return table_access::user;
  if (iequals(s, "group") || s == "0660") return table_access::group;
  reject(kind, s, s.empty() ? "the value is empty" : "not a table mode");
}

/// A character a domain or a key may hold: [A-Za-z0-9._-].
inline bool identifier_char_ok(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '.' || c == '_' ||
         c == '-';
}

/// The one rule of domains and keys (the parts of a table's name): 1..max_length of
/// [A-Za-z0-9._-], not starting with '.'. validate_identifier() throws with the reason; the
/// readers of object names (object_name.hpp, discovery.hpp) use the predicate.
inline bool identifier_ok(std::string_view s, std::size_t max_length) noexcept {
  if (s.empty() || s.size() > max_length || s[0] == '.') return false;
  return std::all_of(s.begin(), s.end(), identifier_char_ok);
}

/// identifier_ok(), throwing with the reason when it is false.
inline void validate_identifier(const value_kind& kind, std::string_view s,
                                std::size_t max_length) {
  if (identifier_ok(s, max_length)) return;
  if (s.empty()) reject(kind, s, "it is empty");
  if (s.size() > max_length)
    reject(kind, s,
           "it is " + std::to_string(s.size()) + " characters long; the limit is " +
               std::to_string(max_length));
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (!identifier_char_ok(s[i]))
      reject(kind, s,
             "the character " + quote(std::string_view(&s[i], 1)) + " at position " +
                 std::to_string(i) + " (counting from 0) is not allowed");
  }
  if (s[0] == '.') reject(kind, s, "it must not start with '.'");
}

/// A domain (part of the table's name): see domain_forms.
inline void validate_domain(std::string_view s) {
  validate_identifier({"domain", domain_forms}, s, max_domain_length);
}

/// A session group's name: see group_forms.
inline void validate_group(std::string_view s) {
  validate_identifier({"group", group_forms}, s, max_group_length);
}

/// A key (part of a shared object's name): see key_forms.
inline void validate_key(std::string_view s) {
  validate_identifier({"key", key_forms}, s, max_key_length);
}

/// A session's display name: 1..63 bytes of printable ASCII (it never enters a file name, so '/'
/// is fine). Messages quote at most 40 characters of it.
inline void validate_session_name(std::string_view s) {
  static constexpr value_kind kind{"session name", session_name_forms};
  if (s.empty()) reject(kind, s, "it is empty", 40);
  if (s.size() > max_session_name_length)
    reject(kind, s,
           "it is " + std::to_string(s.size()) + " bytes long; the limit is " +
               std::to_string(max_session_name_length),
           40);
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c > 0x7e)
      reject(kind, s,
             "the byte " + quote(std::string_view(&s[i], 1)) + " at position " + std::to_string(i) +
                 " (counting from 0) is not printable ASCII",
             40);
  }
}

/// "512 B", "1.50 KiB", "4.00 GiB": binary units, two decimals (rounded down) above bytes.
inline std::string format_bytes(std::uint64_t bytes) {
  static constexpr std::string_view units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  unsigned k = 0;
  while (k + 1 < std::size(units) && (bytes >> (10 * (k + 1))) != 0) ++k;
  if (k == 0) return std::to_string(bytes) + " B";
  const unsigned shift = 10 * k;
  const std::uint64_t whole = bytes >> shift;
  const std::uint64_t rest = bytes & ((std::uint64_t{1} << shift) - 1);
  // Keep at most 50 bits of the remainder so that rest * 100 cannot overflow.
  const unsigned bits = std::min(shift, 50u);
  const std::uint64_t hundredths = ((rest >> (shift - bits)) * 100) >> bits;
  return std::to_string(whole) + "." + static_cast<char>('0' + hundredths / 10) +
         static_cast<char>('0' + hundredths % 10) + " " + std::string(units[k]);
}

/// "80.00 GiB", or "unlimited" for a capacity of 2^63 bytes or more (a table created without
/// one): the one word the library and the tool use for it.
inline std::string format_capacity(std::uint64_t bytes) {
  return bytes >= max_memory_bytes ? std::string("unlimited") : format_bytes(bytes);
}

/// How an amount given as `given` ("GPUSHARE_MEMORY_LIMIT=4gb") was read, for a message that
/// shows it resolved ("3.72 GiB"): " (GPUSHARE_MEMORY_LIMIT=4gb, read as 4000000000 bytes; ...)",
/// with a word on units when the value used a power of 1000. "" when `given` is empty.
inline std::string amount_read_as(std::string_view given, std::uint64_t bytes) {
  if (given.empty()) return {};
  std::string out = " (" + std::string(given) + ", read as " + std::to_string(bytes) + " bytes";
  const std::string_view value = given.substr(given.find('=') + 1);
  const bool letters = value.find_first_of("kKmMgGtT") != std::string_view::npos;
  if (letters && value.find_first_of("iI") == std::string_view::npos)
    out += "; K, M, G and T (with or without B) are powers of 1000, KiB, MiB, GiB and TiB powers "
           "of 1024";
  return out + ")";
}

/// The one message of a memory guarantee above its memory limit, whichever check finds it
/// (resolve_options() when both are in the same unit, the join when they resolve against the
/// capacity, a settings change): "<who>the memory guarantee <guarantee> is greater than the memory
/// limit <limit>; lower the guarantee or raise the limit". `who` is "" or "session 'x': "; the
/// amounts are as shown ("2.79 GiB (GPUSHARE_MEMORY_GUARANTEE=3gb, read as ...)").
inline std::string guarantee_over_limit_text(std::string_view who, const std::string& guarantee,
                                             const std::string& limit) {
  return std::string(who) + "the memory guarantee " + guarantee +
         " is greater than the memory limit " + limit + "; lower the guarantee or raise the limit";
}

} // namespace detail
} // namespace v0
} // namespace gpushare
