// SPDX-License-Identifier: Apache-2.0
// Cluster schedulers' limits as fallbacks (docs/cluster-env.md): where a scheduler already passes
// a container's GPU limits in the environment and neither the code nor the matching GPUSHARE_*
// variable sets the setting, the session takes them as its own ceilings.
//   memory limit:  HAMi's CUDA_DEVICE_MEMORY_LIMIT_<n>, else CUDA_DEVICE_MEMORY_LIMIT, and NVIDIA
//                  MPS's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("<n>=<amount>,..."): the smallest of
//                  those that are set (each is a ceiling that holds at once)
//   compute limit: HAMi's CUDA_DEVICE_SM_LIMIT_<n>, else CUDA_DEVICE_SM_LIMIT (a utilisation
//                  ceiling: a share of time)
// Not read: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (a share of SMs, not of time) and KAI's variables
// (a scheduled share KAI does not enforce); docs/cluster-env.md says why. <n> is the session's
// device ordinal (session_options::device_ordinal, default 0). A value gpushare cannot read
// throws errc::invalid_environment naming the variable, as a bad GPUSHARE_* value does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gpushare/detail/parse.hpp>
#include <gpushare/error.hpp>
#include <gpushare/types.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// Whether gpushare reads environment variable `name` as a platform's (not its own GPUSHARE_*
/// ones): the identity variables (detail/identity.hpp) and the cluster limits read here.
inline bool is_platform_variable(std::string_view name) {
  for (std::string_view v :
       {"GPUSHARE_POD_NAME", "POD_NAME", "GPUSHARE_POD_NAMESPACE", "POD_NAMESPACE",
        "GPUSHARE_CONTAINER_NAME", "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEPID",
        "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"})
    if (name == v) return true;
  for (std::string_view prefix : {"CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT"})
    if (name.substr(0, prefix.size()) == prefix &&
        (name.size() == prefix.size() || name[prefix.size()] == '_'))
      return true;
  return false;
}

/// Digits only, at most 19 of them: the number; nullopt otherwise.
inline std::optional<std::uint64_t> parse_plain_decimal(std::string_view s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return v;
}

/// `n` * `unit`, or invalid_argument with `forms` when it exceeds 2^63 bytes.
inline std::uint64_t scaled_bytes(std::uint64_t n, std::uint64_t unit, std::string_view forms) {
  if (n > max_memory_bytes / unit)
    throw error(errc::invalid_argument,
                "it is more than 2^63 bytes; expected " + std::string(forms));
  return n * unit;
}

inline constexpr std::string_view hami_memory_forms =
    "a whole number of bytes, or of KiB, MiB or GiB with the suffix k, m or g (either case): "
    "\"1073741824\", \"1024m\", \"1g\" (HAMi-core's forms)";

/// A HAMi-core memory limit ("1g", "1024m", "1048576k", "1073741824"; suffixes are powers of
/// 1024). 0 is HAMi's "no limit": nullopt. Throws invalid_argument for anything else.
inline std::optional<std::uint64_t> parse_hami_memory(std::string_view s) {
  std::uint64_t unit = 1;
  if (!s.empty()) {
    const char last = s.back();
    const std::uint64_t u = last == 'k' || last == 'K'   ? 1ull << 10
                            : last == 'm' || last == 'M' ? 1ull << 20
                            : last == 'g' || last == 'G' ? 1ull << 30
                                                         : 1;
    if (u != 1) unit = u, s.remove_suffix(1);
  }
  const auto n = parse_plain_decimal(s);
  if (!n) throw error(errc::invalid_argument, "expected " + std::string(hami_memory_forms));
  if (*n == 0) return std::nullopt;
  return scaled_bytes(*n, unit, hami_memory_forms);
}

inline constexpr std::string_view hami_sm_forms =
    "a whole percentage from 0 to 100 without '%' (\"30\"; 0 and 100: no limit)";

/// A HAMi-core SM limit ("30": a utilisation ceiling in percent), in ppm; 0 and 100 mean no
/// limit (nullopt). Throws invalid_argument for anything else.
inline std::optional<std::uint32_t> parse_hami_sm_limit_ppm(std::string_view s) {
  const auto n = parse_plain_decimal(s);
  if (!n || *n > 100) throw error(errc::invalid_argument, "expected " + std::string(hami_sm_forms));
  if (*n == 0 || *n == 100) return std::nullopt;
  return static_cast<std::uint32_t>(*n * 10'000);
}

inline constexpr std::string_view mps_memory_forms =
    "comma-separated <device ordinal>=<amount> pairs, the amount a whole number with a unit K, "
    "M, G or T (optionally followed by B; either case; powers of 1024): \"0=1G,1=512M\"";

/// One MPS amount: "512M", "1G", "2GB", "4096m".
inline std::uint64_t parse_mps_amount(std::string_view s) {
  if (s.size() >= 2 && (s.back() == 'B' || s.back() == 'b')) s.remove_suffix(1);
  if (s.empty()) throw error(errc::invalid_argument, "expected " + std::string(mps_memory_forms));
  const char u = static_cast<char>(s.back() | 0x20);
  const std::uint64_t unit = u == 'k'   ? 1ull << 10
                             : u == 'm' ? 1ull << 20
                             : u == 'g' ? 1ull << 30
                             : u == 't' ? 1ull << 40
                                        : 0;
  s.remove_suffix(1);
  const auto n = parse_plain_decimal(s);
  if (unit == 0 || !n)
    throw error(errc::invalid_argument, "expected " + std::string(mps_memory_forms));
  return scaled_bytes(*n, unit, mps_memory_forms);
}

/// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=1G,1=512M"): the limit of device `ordinal`, nullopt if
/// the list names it not. Throws invalid_argument when any pair is malformed.
inline std::optional<std::uint64_t> parse_mps_pinned_limit(std::string_view s, int ordinal) {
  std::optional<std::uint64_t> found;
  while (true) {
    const std::size_t comma = s.find(',');
    const std::string_view pair = s.substr(0, comma);
    const std::size_t eq = pair.find('=');
    const auto device = parse_plain_decimal(pair.substr(0, eq));
    if (eq == std::string_view::npos || !device)
      throw error(errc::invalid_argument, "\"" + std::string(pair) +
                                              "\" is no <device>=<amount> "
                                              "pair; expected " +
                                              std::string(mps_memory_forms));
    const std::uint64_t bytes = parse_mps_amount(pair.substr(eq + 1));
    if (ordinal >= 0 && *device == static_cast<std::uint64_t>(ordinal)) found = bytes;
    if (comma == std::string_view::npos) return found;
    s.remove_prefix(comma + 1);
  }
}

/// The value of a scheduler's variable `var` read by `parse`, or invalid_environment naming the
/// variable, what gpushare reads it as, and the GPUSHARE_* variable that overrides it. An empty
/// value counts as unset, as HAMi-core and MPS read it.
template <class Parse>
auto parse_cluster_value(const env_lookup& env, const std::string& var, const char* overridden_by,
                         Parse parse) -> std::optional<decltype(parse(std::string_view()))> {
  const auto value = env(var.c_str());
  if (!value || value->empty()) return std::nullopt;
  try {
    return parse(std::string_view(*value));
  } catch (const error& e) {
    if (e.code() != errc::invalid_argument) throw;
    throw error(errc::invalid_environment, "environment variable " + var + "=" + quote(*value, 60) +
                                               " is invalid: " + e.what() +
                                               ". gpushare reads it because " + overridden_by +
                                               " is unset (docs/cluster-env.md); fix it, or set " +
                                               overridden_by + " to override it");
  }
}

/// A cluster limit that was read: its value and how it was given ("VAR=value").
template <class T> struct cluster_value {
  T value;
  std::string given;
};

/// The memory limit the cluster's variables set for the device `ordinal` (the smallest), or
/// nullopt when none does.
inline std::optional<cluster_value<std::uint64_t>> cluster_memory_limit(const env_lookup& env,
                                                                        int ordinal) {
  std::optional<cluster_value<std::uint64_t>> best;
  const auto consider = [&](const std::string& var, std::optional<std::uint64_t> v) {
    if (v && (!best || *v < best->value)) best = {*v, var + "=" + env(var.c_str()).value_or("")};
  };
  const std::string hami_n = "CUDA_DEVICE_MEMORY_LIMIT_" + std::to_string(ordinal);
  const auto per_device =
      parse_cluster_value(env, hami_n, "GPUSHARE_MEMORY_LIMIT",
                          [](std::string_view s) { return parse_hami_memory(s); });
  if (per_device && *per_device)
    consider(hami_n, *per_device);
  else
    consider("CUDA_DEVICE_MEMORY_LIMIT",
             parse_cluster_value(env, "CUDA_DEVICE_MEMORY_LIMIT", "GPUSHARE_MEMORY_LIMIT",
                                 [](std::string_view s) { return parse_hami_memory(s); })
                 .value_or(std::nullopt));
  consider(
      "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
      parse_cluster_value(env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "GPUSHARE_MEMORY_LIMIT",
                          [&](std::string_view s) { return parse_mps_pinned_limit(s, ordinal); })
          .value_or(std::nullopt));
  return best;
}

/// The compute limit (ppm) HAMi's SM limit sets for the device `ordinal`, or nullopt.
inline std::optional<cluster_value<std::uint32_t>> cluster_compute_limit(const env_lookup& env,
                                                                         int ordinal) {
  const auto parse = [](std::string_view s) { return parse_hami_sm_limit_ppm(s); };
  for (const std::string& var :
       {"CUDA_DEVICE_SM_LIMIT_" + std::to_string(ordinal), std::string("CUDA_DEVICE_SM_LIMIT")}) {
    const auto v = parse_cluster_value(env, var, "GPUSHARE_COMPUTE_LIMIT", parse);
    if (!v) continue; // unset: the next (HAMi-core's order)
    if (*v) return cluster_value<std::uint32_t>{**v, var + "=" + env(var.c_str()).value_or("")};
    return std::nullopt; // 0 or 100: no limit
  }
  return std::nullopt;
}

/// The note a session raises when it took a limit from a cluster scheduler's variable.
inline notice cluster_limit_notice(const std::string& what, const std::string& value,
                                   const std::string& given, const char* overridden_by) {
  return {notice::kind::note,
          "this session's " + what + " is " + value + ", from " + given +
              " (a limit a cluster scheduler set for this container or process, applied to this "
              "session as a ceiling: docs/cluster-env.md); set " +
              overridden_by + " to choose another"};
}

} // namespace detail
} // namespace v0
} // namespace gpushare
