// SPDX-License-Identifier: Apache-2.0
// How resolve_options() (options.hpp) fills in each option: a value set in code, else its
// GPUSHARE_* variable, else the default, each checked by the one rule of its range
// (detail/parse.hpp) with one message.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include <gpushare/detail/cluster_env.hpp>
#include <gpushare/detail/identity.hpp>
#include <gpushare/detail/parse.hpp>
#include <gpushare/detail/parse_pause_hold.hpp>
#include <gpushare/detail/table_dir.hpp>
#include <gpushare/error.hpp>
#include <gpushare/types.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// The program's name from /proc/self/comm, trimmed, non-printable bytes replaced by '?';
/// "gpushare" when it cannot be read.
inline std::string default_session_name() {
  std::ifstream comm("/proc/self/comm");
  std::string name;
  std::getline(comm, name);
  const auto first = name.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "gpushare";
  name = name.substr(first, name.find_last_not_of(" \t\r\n") - first + 1);
  for (char& c : name)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  return name.substr(0, max_session_name_length);
}

/// Parses the value of environment variable `var` with `parse`; a parser's invalid_argument
/// becomes invalid_environment naming the variable and quoting the value.
template <class Parse>
auto parse_env_value(const char* var, std::string_view forms, const std::string& value,
                     Parse parse) {
  if (value.empty())
    throw error(errc::invalid_environment,
                std::string("environment variable ") + var +
                    " is set but empty; unset it or give a value: " + std::string(forms));
  try {
    return parse(std::string_view(value));
  } catch (const error& e) {
    if (e.code() != errc::invalid_argument) throw;
    throw error(errc::invalid_environment, std::string("environment variable ") + var + "=" +
                                               quote(value, 60) +
                                               " is invalid (fix or unset it): " + e.what());
  }
}

/// One option: the value set in code (checked by `check`), else the environment variable `var`
/// (parsed by `parse`), else nullopt for the caller's default.
template <class T, class Parse, class Check>
std::optional<T> pick_option(const std::optional<T>& in_code, const env_lookup& env,
                             const char* var, std::string_view forms, Parse parse, Check check) {
  if (in_code) {
    check(*in_code);
    return in_code;
  }
  if (auto value = env(var)) return T(parse_env_value(var, forms, *value, parse));
  return std::nullopt;
}

/// Throws invalid_argument for a memory amount set in code that is a fraction over 100%.
inline void check_in_code_memory(const char* field, const memory_amount& m) {
  if (m.kind == memory_amount::unit::fraction)
    check_setting(memory_fraction_range,
                  static_cast<std::int64_t>(std::min<std::uint64_t>(m.value, INT64_MAX)),
                  std::string("session_options::") + field);
}

/// A guarantee above the limit, when both are in the same unit, can never be honoured. (Mixed
/// units are compared against the capacity when the session joins.)
inline void check_guarantee_within_limit(const resolved_options& r, bool limit_from_env,
                                         bool guarantee_from_env) {
  const auto& limit = r.memory_limit;
  const auto& guarantee = r.memory_guarantee;
  if (!limit || limit->kind != guarantee.kind || guarantee.value <= limit->value) return;
  // As given and as read: "3.72 GiB (GPUSHARE_MEMORY_LIMIT=4gb, read as 4000000000 bytes; ...)".
  const auto show = [](const memory_amount& m, bool from_env, const std::string& given,
                       const char* field) {
    if (m.kind == memory_amount::unit::fraction)
      return format_ppm_percent(
                 static_cast<std::uint32_t>(std::min<std::uint64_t>(m.value, 1'000'000))) +
             (from_env ? " (" + given + ")" : std::string(" (session_options::") + field + ")");
    return format_bytes(m.value) + (from_env ? amount_read_as(given, m.value)
                                             : std::string(" (session_options::") + field + ")");
  };
  throw error(
      limit_from_env || guarantee_from_env ? errc::invalid_environment : errc::invalid_argument,
      guarantee_over_limit_text(
          "", show(guarantee, guarantee_from_env, r.memory_guarantee_given, "memory_guarantee"),
          show(*limit, limit_from_env, r.memory_limit_given, "memory_limit")));
}

/// The device ordinal whose per-device cluster limits apply (session_options::device_ordinal,
/// default 0).
inline int cluster_device_ordinal(const session_options& opts) {
  const int n = opts.device_ordinal.value_or(0);
  if (n < 0)
    throw error(errc::invalid_argument, "session_options::device_ordinal is " + std::to_string(n) +
                                            "; give a CUDA device ordinal (0 or more) or leave it "
                                            "unset");
  return n;
}

/// Neither the code nor GPUSHARE_MEMORY_LIMIT set a memory limit: a cluster scheduler's, if any
/// (detail/cluster_env.hpp).
inline void resolve_cluster_memory(const session_options& opts, const env_lookup& env,
                                   resolved_options& r) {
  const auto got = cluster_memory_limit(env, cluster_device_ordinal(opts));
  if (!got) return;
  r.memory_limit = memory_amount::of_bytes(got->value);
  r.memory_limit_given = got->given;
  r.memory_limit_from_cluster = got->given;
  r.notices.push_back(cluster_limit_notice("memory limit", format_bytes(got->value), got->given,
                                           "GPUSHARE_MEMORY_LIMIT"));
}

/// Resolves the memory limit and guarantee and checks them against each other.
inline void resolve_memory(const session_options& opts, const env_lookup& env,
                           resolved_options& r) {
  const auto limit = pick_option(
      opts.memory_limit, env, "GPUSHARE_MEMORY_LIMIT", memory_amount_forms, parse_memory_amount,
      [](const memory_amount& m) { check_in_code_memory("memory_limit", m); });
  const auto guarantee =
      pick_option(opts.memory_guarantee, env, "GPUSHARE_MEMORY_GUARANTEE", memory_amount_forms,
                  parse_memory_amount,
                  [](const memory_amount& m) { check_in_code_memory("memory_guarantee", m); });
  r.memory_limit = limit;
  if (!limit) resolve_cluster_memory(opts, env, r);
  if (guarantee) r.memory_guarantee = *guarantee;
  for (auto [var, in_code, given] :
       {std::tuple{"GPUSHARE_MEMORY_LIMIT", opts.memory_limit.has_value(), &r.memory_limit_given},
        std::tuple{"GPUSHARE_MEMORY_GUARANTEE", opts.memory_guarantee.has_value(),
                   &r.memory_guarantee_given}})
    if (!in_code)
      if (const auto value = env(var)) *given = std::string(var) + "=" + *value;
  check_guarantee_within_limit(r, r.memory_limit && !opts.memory_limit,
                               guarantee && !opts.memory_guarantee);
}

/// Resolves the capacity (session_options::capacity, else GPUSHARE_CAPACITY) and the open
/// timeout (code only).
inline void resolve_capacity(const session_options& opts, const env_lookup& env,
                             resolved_options& r) {
  const std::uint64_t capacity =
      pick_option(opts.capacity, env, "GPUSHARE_CAPACITY", capacity_forms, parse_capacity,
                  [](std::uint64_t c) {
                    if (c > max_memory_bytes)
                      throw error(errc::invalid_argument,
                                  "session_options::capacity is " + std::to_string(c) +
                                      " bytes; the most is 2^63 bytes (give 0 for unlimited)");
                  })
          .value_or(0);
  r.capacity = capacity == 0 ? max_memory_bytes : capacity;
  if (opts.open_timeout.count() < 0)
    throw error(errc::invalid_argument, "session_options::open_timeout is negative (" +
                                            std::to_string(opts.open_timeout.count()) + " ms)");
  r.open_timeout = opts.open_timeout;
}

/// Resolves the name and the domain (strings, validated, with their defaults).
inline void resolve_names(const session_options& opts, const env_lookup& env, resolved_options& r) {
  const auto name = pick_option(
      opts.name, env, "GPUSHARE_NAME", session_name_forms,
      [](std::string_view s) {
        validate_session_name(s);
        return std::string(s);
      },
      [](const std::string& s) { validate_session_name(s); });
  r.name = name ? *name : default_session_name();
  const auto domain = pick_option(
      opts.domain, env, "GPUSHARE_DOMAIN", domain_forms,
      [](std::string_view s) {
        validate_domain(s);
        return std::string(s);
      },
      [](const std::string& s) { validate_domain(s); });
  r.domain = domain ? *domain : "default";
}

/// A duration option of session_options, `field`: the value set in code (a negative one counts as
/// 0), checked against `o` unless it is 0 and `zero_allowed`, else the environment variable `var`
/// read with `parse`, else nullopt for the caller's default.
template <class Parse>
std::optional<std::uint64_t> pick_duration(const std::optional<std::chrono::nanoseconds>& in_code,
                                           const env_lookup& env, const char* var,
                                           const char* field, const duration_option& o,
                                           bool zero_allowed, Parse parse) {
  const auto ns = in_code ? std::optional<std::uint64_t>(static_cast<std::uint64_t>(
                                std::max<std::int64_t>(in_code->count(), 0)))
                          : std::nullopt;
  return pick_option(ns, env, var, duration_forms(o), parse, [&](std::uint64_t v) {
    if (v == 0 && zero_allowed) return;
    check_duration(o, v, std::string("session_options::") + field);
  });
}

/// Resolves the guard bound, the reclaim deadline and the compute guarantee.
inline void resolve_remedies(const session_options& opts, const env_lookup& env,
                             resolved_options& r) {
  // 0: the table's default.
  r.max_guard_ns = pick_duration(opts.max_guard, env, "GPUSHARE_MAX_GUARD", "max_guard",
                                 max_guard_option, true, parse_max_guard_ns)
                       .value_or(0);
  r.reclaim_deadline_ns = pick_duration(opts.reclaim_deadline, env, "GPUSHARE_RECLAIM_DEADLINE",
                                        "reclaim_deadline", reclaim_deadline_option, false,
                                        [](std::string_view v) {
                                          return detail::parse_duration(v, reclaim_deadline_option);
                                        })
                              .value_or(r.reclaim_deadline_ns);
  r.compute_guarantee_ppm =
      pick_option(opts.compute_guarantee_ppm, env, "GPUSHARE_COMPUTE_GUARANTEE", guarantee_forms,
                  parse_compute_guarantee_ppm,
                  [](std::uint32_t p) {
                    check_setting(compute_guarantee_range, p,
                                  "session_options::compute_guarantee_ppm");
                  })
          .value_or(0);
  r.pause_hold_ppm =
      pick_option(opts.pause_hold_ppm, env, "GPUSHARE_PAUSE_HOLD", pause_hold_forms,
                  parse_pause_hold_ppm,
                  [](std::uint32_t p) {
                    check_setting(pause_hold_range, p, "session_options::pause_hold_ppm");
                  })
          .value_or(default_pause_hold_ppm);
}

/// Resolves priority, share and compute limit.
inline void resolve_scheduling(const session_options& opts, const env_lookup& env,
                               resolved_options& r) {
  r.priority =
      pick_option(opts.priority, env, "GPUSHARE_PRIORITY", priority_forms, parse_priority,
                  [](int p) { check_setting(priority_range, p, "session_options::priority"); })
          .value_or(priority::normal);
  r.share =
      pick_option(opts.share, env, "GPUSHARE_SHARE", share_forms, parse_share, [](std::uint32_t s) {
        check_setting(share_range, s, "session_options::share");
      }).value_or(default_share);
  const auto limit =
      pick_option(opts.compute_limit_ppm, env, "GPUSHARE_COMPUTE_LIMIT", percent_forms,
                  parse_percent_ppm, [](std::uint32_t p) {
                    check_setting(compute_limit_range, p, "session_options::compute_limit_ppm");
                  });
  r.compute_limit_ppm = limit.value_or(1'000'000);
  if (!limit)
    if (const auto got = cluster_compute_limit(env, cluster_device_ordinal(opts))) {
      r.compute_limit_ppm = got->value;
      r.compute_limit_from_cluster = got->given;
      r.notices.push_back(cluster_limit_notice("compute limit", format_ppm_percent(got->value),
                                               got->given, "GPUSHARE_COMPUTE_LIMIT"));
    }
  const auto quantum_ns = pick_duration(opts.quantum, env, "GPUSHARE_QUANTUM", "quantum",
                                        quantum_option, false, parse_quantum_ns);
  r.quantum_ns = quantum_ns.value_or(default_quantum_ns);
  r.handover = pick_option(opts.handover, env, "GPUSHARE_HANDOVER", handover_forms, parse_handover,
                           [](handover_point) {})
                   .value_or(handover_point::at_guard);
  resolve_remedies(opts, env, r);
}

/// Resolves the session's group and the group's settings as this session gives them.
inline void resolve_group(const session_options& opts, const env_lookup& env, resolved_options& r) {
  r.group = pick_option(
                opts.group, env, "GPUSHARE_GROUP", group_forms,
                [](std::string_view s) {
                  validate_group(s);
                  return std::string(s);
                },
                [](const std::string& s) {
                  if (!s.empty()) validate_group(s); // "" in code: no group
                })
                .value_or(std::string());
  r.group_memory_limit =
      pick_option(opts.group_memory_limit, env, "GPUSHARE_GROUP_MEMORY_LIMIT", memory_amount_forms,
                  parse_memory_amount,
                  [](const memory_amount& m) { check_in_code_memory("group_memory_limit", m); });
  if (!opts.group_memory_limit)
    if (const auto value = env("GPUSHARE_GROUP_MEMORY_LIMIT"))
      r.group_memory_limit_given = "GPUSHARE_GROUP_MEMORY_LIMIT=" + *value;
  r.group_share = pick_option(
      opts.group_share, env, "GPUSHARE_GROUP_SHARE", share_forms, parse_share,
      [](std::uint32_t s) { check_setting(share_range, s, "session_options::group_share"); });
  if (r.group.empty() && (r.group_memory_limit || r.group_share))
    throw error(opts.group_memory_limit || opts.group_share ? errc::invalid_argument
                                                            : errc::invalid_environment,
                "a group memory limit or group share is given but no group: set "
                "GPUSHARE_GROUP (session_options::group) to the group's name too");
}

/// Resolves the table directory and the table's access mode (group by default in a setgid
/// table directory; the directory itself is checked when a session or table opens it).
inline void resolve_access(const session_options& opts, const env_lookup& env,
                           resolved_options& r) {
  r.directory = pick_option(
                    opts.directory, env, "GPUSHARE_DIR", table_dir_forms,
                    [](std::string_view s) { return normalize_table_dir(s); },
                    [](const std::string& s) { (void)normalize_table_dir(s); })
                    .value_or(std::string());
  if (opts.directory) r.directory = normalize_table_dir(*opts.directory);
  struct stat dir {};
  const bool setgid_dir = !r.directory.empty() && ::stat(r.directory.c_str(), &dir) == 0 &&
                          S_ISDIR(dir.st_mode) && (dir.st_mode & S_ISGID) != 0;
  r.access =
      pick_option(opts.access, env, "GPUSHARE_TABLE_MODE", table_access_forms, parse_table_access,
                  [](table_access a) {
                    if (a != table_access::user && a != table_access::group)
                      throw error(errc::invalid_argument,
                                  "session_options::access is neither table_access::user "
                                  "nor table_access::group");
                  })
          .value_or(setgid_dir ? table_access::group : table_access::user);
}

} // namespace detail
} // namespace v0
} // namespace gpushare
