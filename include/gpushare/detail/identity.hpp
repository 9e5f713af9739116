// SPDX-License-Identifier: Apache-2.0
// Who a session belongs to on its platform (platform_identity, types.hpp): the Kubernetes pod,
// namespace and container, the Slurm job, step and array task, from session_options or, for what
// the code leaves unset, from the environment (docs/cluster-env.md lists the variables and their
// order). An identity is for display only, so a variable whose value is not valid is ignored
// with a notice instead of failing the join; a value set in code that is not valid is the
// program's mistake and throws errc::invalid_argument.
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

inline constexpr std::size_t max_pod_name_length = 253; // a DNS-1123 subdomain
inline constexpr std::size_t max_k8s_label_length = 63; // a DNS-1123 label

/// Why `s` is not a Kubernetes name of at most `max` characters (a DNS-1123 label, or with
/// `dots` a subdomain: lower-case letters, digits, '-' and '.', starting and ending with a letter
/// or digit); "" when it is one.
inline std::string k8s_name_problem(std::string_view s, std::size_t max, bool dots) {
  if (s.empty()) return "it is empty";
  if (s.size() > max)
    return "it has " + std::to_string(s.size()) + " characters; the most is " + std::to_string(max);
  const auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  for (char c : s)
    if (!alnum(c) && c != '-' && !(dots && c == '.'))
      return std::string("it may hold only lower-case letters, digits") +
             (dots ? ", '-' and '.'" : " and '-'");
  if (!alnum(s.front()) || !alnum(s.back()))
    return "it must start and end with a lower-case letter or a digit";
  return {};
}

/// A Slurm id: a decimal number below 2^32 (no sign, no spaces); nullopt if `s` is none.
inline std::optional<std::uint32_t> parse_slurm_id(std::string_view s) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (v > UINT32_MAX) return std::nullopt;
  return static_cast<std::uint32_t>(v);
}

/// A Slurm step id: a number, or the name of a special step ("batch", "extern", "interactive").
inline std::optional<std::uint32_t> parse_slurm_step(std::string_view s) {
  if (s == "batch") return slurm_batch_step;
  if (s == "extern") return slurm_extern_step;
  if (s == "interactive") return slurm_interactive_step;
  return parse_slurm_id(s);
}

/// "batch", "extern", "interactive" or the step's number.
inline std::string slurm_step_text(std::uint32_t step) {
  if (step == slurm_batch_step) return "batch";
  if (step == slurm_extern_step) return "extern";
  if (step == slurm_interactive_step) return "interactive";
  return std::to_string(step);
}

/// The first of `vars` that is set in `env`: its name and value.
inline std::optional<std::pair<std::string, std::string>>
first_set(const env_lookup& env, std::initializer_list<const char*> vars) {
  for (const char* v : vars)
    if (auto value = env(v)) return std::pair{std::string(v), *value};
  return std::nullopt;
}

/// The notice for variable `var`=`value` that is ignored because of `why`.
inline notice ignored_identity_notice(const std::string& var, const std::string& value,
                                      const std::string& why) {
  return {notice::kind::warning,
          "environment variable " + var + "=" + quote(value, 60) + " is ignored: " + why +
              " (docs/cluster-env.md); the session's identity is shown without it"};
}

/// One Kubernetes name: the value set in code (checked), else the first of `vars` set in `env`
/// (ignored with a notice when it is not valid).
inline std::string pick_k8s_name(const std::optional<std::string>& in_code, const char* field,
                                 const env_lookup& env, std::initializer_list<const char*> vars,
                                 std::size_t max, bool dots, const char* what,
                                 std::vector<notice>& notices) {
  if (in_code) {
    if (in_code->empty()) return {};
    if (std::string why = k8s_name_problem(*in_code, max, dots); !why.empty())
      throw error(errc::invalid_argument, std::string("session_options::") + field + " " +
                                              quote(*in_code, 60) + " is not valid: " + why);
    return *in_code;
  }
  const auto got = first_set(env, vars);
  if (!got) return {};
  if (std::string why = k8s_name_problem(got->second, max, dots); !why.empty()) {
    notices.push_back(ignored_identity_notice(
        got->first, got->second, std::string("it is no Kubernetes ") + what + ": " + why));
    return {};
  }
  return got->second;
}

/// One Slurm id: the value set in code, else the first of `vars` set in `env` read by `parse`
/// (ignored with a notice when it is none).
template <class Parse>
std::optional<std::uint32_t> pick_slurm_id(const std::optional<std::uint32_t>& in_code,
                                           const env_lookup& env,
                                           std::initializer_list<const char*> vars, Parse parse,
                                           const char* forms, std::vector<notice>& notices) {
  if (in_code) return in_code;
  const auto got = first_set(env, vars);
  if (!got) return std::nullopt;
  if (auto id = parse(got->second)) return id;
  notices.push_back(
      ignored_identity_notice(got->first, got->second, std::string("it is not ") + forms));
  return std::nullopt;
}

/// The session's platform identity: `opts`' fields, else the environment. Variables that are set
/// but not valid add a notice to `notices` and are ignored.
inline platform_identity resolve_identity(const session_options& opts, const env_lookup& env,
                                          std::vector<notice>& notices) {
  platform_identity id;
  id.pod = pick_k8s_name(opts.pod, "pod", env, {"GPUSHARE_POD_NAME", "POD_NAME"},
                         max_pod_name_length, true, "pod name", notices);
  id.pod_namespace = pick_k8s_name(opts.pod_namespace, "pod_namespace", env,
                                   {"GPUSHARE_POD_NAMESPACE", "POD_NAMESPACE"},
                                   max_k8s_label_length, false, "namespace", notices);
  id.container = pick_k8s_name(opts.container, "container", env, {"GPUSHARE_CONTAINER_NAME"},
                               max_k8s_label_length, false, "container name", notices);
  constexpr const char* number = "a decimal number below 2^32";
  id.slurm_job_id = pick_slurm_id(opts.slurm_job_id, env, {"SLURM_JOB_ID", "SLURM_JOBID"},
                                  parse_slurm_id, number, notices);
  id.slurm_step_id =
      pick_slurm_id(opts.slurm_step_id, env, {"SLURM_STEP_ID", "SLURM_STEPID"}, parse_slurm_step,
                    "a step number below 2^32, \"batch\", \"extern\" or \"interactive\"", notices);
  id.slurm_array_job_id = pick_slurm_id(opts.slurm_array_job_id, env, {"SLURM_ARRAY_JOB_ID"},
                                        parse_slurm_id, number, notices);
  id.slurm_array_task_id = pick_slurm_id(opts.slurm_array_task_id, env, {"SLURM_ARRAY_TASK_ID"},
                                         parse_slurm_id, number, notices);
  return id;
}

/// How status shows an identity: "<namespace>/<pod>/<container>" (the parts known) and
/// "job <id>[_<task>][.<step>]", space-separated; "" when none is known. An array task shows as
/// Slurm's squeue shows it, "<array job>_<task>".
inline std::string identity_text(const platform_identity& id) {
  std::string k8s = id.pod;
  if (!id.pod_namespace.empty()) k8s = id.pod_namespace + (k8s.empty() ? "" : "/" + k8s);
  if (!id.container.empty()) k8s += (k8s.empty() ? "" : "/") + id.container;
  std::string job;
  if (id.slurm_array_job_id && id.slurm_array_task_id)
    job = std::to_string(*id.slurm_array_job_id) + "_" + std::to_string(*id.slurm_array_task_id);
  else if (id.slurm_job_id)
    job = std::to_string(*id.slurm_job_id);
  if (id.slurm_step_id) job += (job.empty() ? "?." : ".") + slurm_step_text(*id.slurm_step_id);
  if (!job.empty()) job = "job " + job;
  return k8s + (!k8s.empty() && !job.empty() ? " " : "") + job;
}

} // namespace detail
} // namespace v0
} // namespace gpushare
