// SPDX-License-Identifier: Apache-2.0
// A session's options: session_options (in types.hpp, with the other value types) resolved into
// resolved_options by resolve_options(): code, then the GPUSHARE_* environment, then defaults.
// The rules of each option are in detail/resolve.hpp and detail/parse.hpp.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <gpushare/detail/parse.hpp>
#include <gpushare/detail/resolve.hpp>
#include <gpushare/error.hpp>
#include <gpushare/types.hpp>

namespace gpushare {
inline namespace v0 {

/// Fills in every option: a value set in `opts` wins, else the GPUSHARE_* variable from `env`,
/// else (for the memory and compute limits) a cluster scheduler's variable, else the default
/// (docs/cluster-env.md); and who the session belongs to (pod, Slurm job: an invalid variable
/// there is ignored with a notice in `notices`). Values set in code are checked
/// (errc::invalid_argument); unusable variables (malformed, out of range, or set but empty) throw
/// errc::invalid_environment naming the variable and quoting its value.
inline resolved_options resolve_options(const session_options& opts,
                                        const env_lookup& env = process_environment) {
  resolved_options r;
  detail::resolve_names(opts, env, r);
  detail::resolve_scheduling(opts, env, r);
  detail::resolve_access(opts, env, r);
  detail::resolve_memory(opts, env, r);
  detail::resolve_capacity(opts, env, r);
  detail::resolve_group(opts, env, r);
  r.identity = detail::resolve_identity(opts, env, r.notices);
  return r;
}

/// The domain GPUSHARE_DOMAIN names in `env`, checked as a session checks it (for a program that
/// looks at the tables of the domain its sessions would use); nullopt when it is unset. A value
/// that is empty or no valid domain throws errc::invalid_environment naming the variable.
inline std::optional<std::string>
domain_from_environment(const env_lookup& env = process_environment) {
  return detail::pick_option(
      std::optional<std::string>(), env, "GPUSHARE_DOMAIN", detail::domain_forms,
      [](std::string_view s) {
        detail::validate_domain(s);
        return std::string(s);
      },
      [](const std::string&) {});
}

} // namespace v0
} // namespace gpushare
