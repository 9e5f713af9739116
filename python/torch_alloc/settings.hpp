// SPDX-License-Identifier: Apache-2.0
// The settings of gpushare_torch_configure(): "key=value" pairs read into the options of the
// device sessions the allocator opens, with the grammar of the GPUSHARE_* variables.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include <gpushare/cuda.hpp>

namespace gpushare_torch {

/// What the allocator opens its sessions with.
struct alloc_settings {
  gpushare::session_options session;
  gpushare::cuda::device_options device;
  bool sync_on_free = false; ///< cudaDeviceSynchronize before each free (as vLLM's cumem does)
};

inline constexpr std::string_view known_keys =
    "name, memory_limit, memory_guarantee, priority, domain, capacity, headroom, alloc_timeout, "
    "sync_on_free";

/// "0" (fail at once), "none" (wait without end) or a duration ("500ms", "30s").
inline std::chrono::nanoseconds parse_alloc_timeout(std::string_view v) {
  if (v == "0") return std::chrono::nanoseconds(0);
  const std::uint64_t ns = gpushare::cuda::parse_timeout(v);
  if (ns == gpushare::cuda::no_timeout) return std::chrono::nanoseconds::max();
  return std::chrono::nanoseconds(static_cast<std::int64_t>(ns));
}

inline bool parse_flag(std::string_view key, std::string_view v) {
  using gpushare::iequals;
  if (v == "1" || iequals(v, "true") || iequals(v, "yes") || iequals(v, "on")) return true;
  if (v == "0" || iequals(v, "false") || iequals(v, "no") || iequals(v, "off")) return false;
  throw gpushare::error(gpushare::errc::invalid_argument,
                        std::string("setting ")
                            .append(key)
                            .append("=")
                            .append(v)
                            .append(" is not a flag; give 1 or 0 (true or false)"));
}

/// Applies one "key=value" setting to `s`.
inline void apply_setting(alloc_settings& s, std::string_view key, std::string_view v) {
  namespace d = gpushare; // its public text forms (<gpushare/text.hpp>)
  if (key == "name") {
    d::validate_session_name(v);
    s.session.name = std::string(v);
  } else if (key == "memory_limit") {
    s.session.memory_limit = d::parse_memory_amount(v);
  } else if (key == "memory_guarantee") {
    s.session.memory_guarantee = d::parse_memory_amount(v);
  } else if (key == "priority") {
    s.session.priority = d::parse_priority(v);
  } else if (key == "domain") {
    d::validate_domain(v);
    s.session.domain = std::string(v);
  } else if (key == "capacity") {
    s.session.capacity = d::parse_capacity(v);
  } else if (key == "headroom") {
    s.device.headroom = d::parse_memory_amount(v);
  } else if (key == "alloc_timeout") {
    s.device.allocation_timeout = parse_alloc_timeout(v);
  } else if (key == "sync_on_free") {
    s.sync_on_free = parse_flag(key, v);
  } else {
    throw gpushare::error(gpushare::errc::invalid_argument, std::string("unknown setting ")
                                                                .append(d::quote(key, 40))
                                                                .append("; the settings are ")
                                                                .append(known_keys));
  }
}

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

/// Reads "key=value;key=value" (',' separates too; NULL or "" is no setting). A key not given
/// takes its GPUSHARE_* variable when the session opens, except alloc_timeout: without the key
/// and without GPUSHARE_ALLOC_TIMEOUT, an allocation fails at once rather than waiting (the
/// thread that allocates usually holds Python's GIL, and PyTorch frees its cache and retries
/// after a failure).
inline alloc_settings parse_settings(const char* text) {
  alloc_settings s;
  std::string_view rest = text ? std::string_view(text) : std::string_view();
  while (!rest.empty()) {
    const std::size_t end = rest.find_first_of(";,");
    const std::string_view item = trim(rest.substr(0, end));
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (item.empty()) continue;
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      throw gpushare::error(gpushare::errc::invalid_argument,
                            std::string("setting ")
                                .append(gpushare::quote(item, 40))
                                .append(" has no '='; write key=value (keys: ")
                                .append(known_keys)
                                .append(")"));
    apply_setting(s, trim(item.substr(0, eq)), trim(item.substr(eq + 1)));
  }
  if (!s.device.allocation_timeout && !gpushare::process_environment("GPUSHARE_ALLOC_TIMEOUT"))
    s.device.allocation_timeout = std::chrono::nanoseconds(0);
  return s;
}

} // namespace gpushare_torch
