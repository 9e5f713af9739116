// SPDX-License-Identifier: Apache-2.0
// Who a session belongs to on its platform (session_info::identity, docs/cluster-env.md), as the
// tool shows it: the IDENTITY column of `gpushare status`, the "identity" object of its JSON and
// the identity labels of `gpushare metrics`' session families.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gpushare/table_types.hpp>
#include <gpushare/text.hpp>

#include "cli_format.hpp"
#include "cli_json.hpp"

namespace gpushare::cli {

/// Whether a session of `sessions` has an identity (the IDENTITY column is shown only then).
inline bool any_identity(const std::vector<session_info>& sessions) {
  for (const session_info& i : sessions)
    if (!i.identity.empty()) return true;
  return false;
}

/// The IDENTITY cell: "default/infer-7d9f/server job 1234.0", "-" when none is known.
inline std::string identity_cell(const session_info& i) {
  const std::string t = identity_text(i.identity);
  return t.empty() ? "-" : safe_text(t);
}

/// "identity": {"pod", "namespace", "container" (strings, "" when not known), "slurm_job_id",
/// "slurm_step_id", "slurm_array_job_id", "slurm_array_task_id" (numbers or null), "slurm_step"
/// (the step as Slurm names it: "0", "batch", "extern", "interactive"; null)}.
inline void identity_json(json_writer& w, const platform_identity& id) {
  w.key("identity");
  w.begin_object();
  w.field("pod", id.pod);
  w.field("namespace", id.pod_namespace);
  w.field("container", id.container);
  const auto number = [&](const char* k, const std::optional<std::uint32_t>& v) {
    w.key(k);
    if (v)
      w.number(*v);
    else
      w.null();
  };
  number("slurm_job_id", id.slurm_job_id);
  number("slurm_step_id", id.slurm_step_id);
  w.key("slurm_step");
  if (id.slurm_step_id)
    w.string(slurm_step_text(*id.slurm_step_id));
  else
    w.null();
  number("slurm_array_job_id", id.slurm_array_job_id);
  number("slurm_array_task_id", id.slurm_array_task_id);
  w.end_object();
}

/// The identity labels every session series carries, the same names on every one ("" when not
/// known, which Prometheus reads as absent): pod, namespace, container, slurm_job_id (an array
/// task's as "<array job>_<task>", as squeue shows it) and slurm_step_id ("0", "batch", ...).
inline std::vector<std::pair<std::string, std::string>>
identity_labels(const platform_identity& id) {
  std::string job;
  if (id.slurm_array_job_id && id.slurm_array_task_id)
    job = std::to_string(*id.slurm_array_job_id) + "_" + std::to_string(*id.slurm_array_task_id);
  else if (id.slurm_job_id)
    job = std::to_string(*id.slurm_job_id);
  return {{"pod", id.pod},
          {"namespace", id.pod_namespace},
          {"container", id.container},
          {"slurm_job_id", job},
          {"slurm_step_id", id.slurm_step_id ? slurm_step_text(*id.slurm_step_id) : ""}};
}

} // namespace gpushare::cli
