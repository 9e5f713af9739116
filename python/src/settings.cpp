// SPDX-License-Identifier: Apache-2.0
// Keyword settings to the library's option structs, and the Python forms of bytes and durations.
// Strings are read by the library's own parsers (<gpushare/text.hpp>), so "4GiB", "30%", "high"
// and "500us" mean here what they mean in GPUSHARE_* variables, with the same messages.
#include "bindings.hpp"

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include <gpushare/text.hpp>

namespace gpushare_python {
namespace {

using gpushare::errc;

[[noreturn]] void bad(const std::string& message) {
  throw gpushare::error(errc::invalid_argument, message);
}

bool is_str(py::handle v) { return py::isinstance<py::str>(v); }
bool is_int(py::handle v) { return py::isinstance<py::int_>(v) && !py::isinstance<py::bool_>(v); }
bool is_number(py::handle v) { return is_int(v) || py::isinstance<py::float_>(v); }

std::string repr_of(py::handle v) { return py::repr(v).cast<std::string>(); }

[[noreturn]] void wrong_type(const char* what, py::handle v, const char* expected) {
  throw py::type_error(
      std::string(what).append(" must be ").append(expected).append(", not ").append(repr_of(v)));
}

/// A Python int as an integer in [lo, hi], or InvalidArgument naming the setting.
long long int_in(py::handle v, const char* what, long long lo, long long hi) {
  long long x = 0;
  try {
    x = v.cast<long long>();
  } catch (const py::cast_error&) {
    bad(std::string(what).append(" ").append(repr_of(v)).append(" is out of range"));
  }
  if (x < lo || x > hi)
    bad(std::string(what)
            .append(" ")
            .append(repr_of(v))
            .append(" is out of range (")
            .append(std::to_string(lo))
            .append(" to ")
            .append(std::to_string(hi))
            .append(")"));
  return x;
}

/// Seconds (int or float) or a timedelta as nanoseconds; negative and NaN refused.
std::uint64_t seconds_to_ns(py::handle v, const char* what) {
  double s = 0;
  if (is_number(v)) {
    s = v.cast<double>();
  } else {
    s = v.attr("total_seconds")().cast<double>();
  }
  if (std::isnan(s) || s < 0)
    bad(std::string(what)
            .append(" ")
            .append(repr_of(v))
            .append(" is negative: give a duration of "
                    "0 or more"));
  const double ns = s * 1e9;
  return ns >= 1.8e19 ? wait_forever : static_cast<std::uint64_t>(std::llround(ns));
}

bool is_timedelta(py::handle v) {
  static const py::object timedelta = py::module_::import("datetime").attr("timedelta");
  return py::isinstance(v, timedelta);
}

/// A duration setting: a string for `parse`, or seconds / a timedelta.
std::chrono::nanoseconds duration_setting(py::handle v, const char* what,
                                          std::chrono::nanoseconds (*parse)(std::string_view)) {
  if (is_str(v)) return parse(v.cast<std::string>());
  if (!is_number(v) && !is_timedelta(v)) wrong_type(what, v, "a string, seconds or a timedelta");
  const std::uint64_t ns = seconds_to_ns(v, what);
  return std::chrono::nanoseconds(static_cast<std::int64_t>(ns > INT64_MAX ? INT64_MAX : ns));
}

/// A share of 100% in parts per million: "30%" (for `parse`) or a fraction, 0.3.
std::uint32_t ppm_setting(py::handle v, const char* what,
                          std::uint32_t (*parse)(std::string_view)) {
  if (is_str(v)) return parse(v.cast<std::string>());
  if (!is_number(v)) wrong_type(what, v, "a percentage string (\"30%\") or a fraction (0.3)");
  const double f = v.cast<double>();
  if (std::isnan(f) || f < 0 || f > 1)
    bad(std::string(what)
            .append(" ")
            .append(repr_of(v))
            .append(" is not a fraction from 0 to 1: give 0.3 or \"30%\" for 30%"));
  return static_cast<std::uint32_t>(std::llround(f * 1e6));
}

/// A pause hold: a ratio to the session's device time (2, 0.5) or a string ("2", "none").
std::uint32_t pause_hold_setting(py::handle v) {
  if (is_str(v)) return gpushare::parse_pause_hold(v.cast<std::string>());
  if (!is_number(v)) wrong_type("pause_hold", v, "a ratio (2, 0.5) or a string (\"2\", \"none\")");
  const double f = v.cast<double>();
  if (std::isnan(f) || f < 0 || f > 100)
    bad(std::string("pause_hold ")
            .append(repr_of(v))
            .append(" is not a ratio from 0 to 100: give 2 for twice its device time, 0 for none"));
  return static_cast<std::uint32_t>(std::llround(f * 1e6));
}

/// A reclaim deadline's string ("2s", "500ms"), read as GPUSHARE_RECLAIM_DEADLINE is.
std::chrono::nanoseconds reclaim_deadline_of(std::string_view s) {
  return gpushare::parse_reclaim_deadline(s);
}

int priority_setting(py::handle v) {
  if (is_str(v)) return gpushare::parse_priority(v.cast<std::string>());
  if (!is_int(v)) wrong_type("priority", v, "an int or a name (\"low\" ... \"critical\")");
  return static_cast<int>(int_in(v, "priority", gpushare::min_priority, gpushare::max_priority));
}

std::uint32_t share_setting(py::handle v) {
  if (is_str(v)) return gpushare::parse_share(v.cast<std::string>());
  if (!is_int(v)) wrong_type("share", v, "an int");
  return static_cast<std::uint32_t>(int_in(v, "share", gpushare::min_share, gpushare::max_share));
}

gpushare::handover_point handover_setting(py::handle v) {
  if (!is_str(v)) wrong_type("handover", v, "\"guard\" or \"yield\"");
  return gpushare::parse_handover(v.cast<std::string>());
}

std::string str_setting(py::handle v, const char* what) {
  if (!is_str(v)) wrong_type(what, v, "a string");
  return v.cast<std::string>();
}

/// A Slurm id: an int from 0 to 2^32 - 1 or, for a step, also "batch", "extern" or
/// "interactive" (docs/cluster-env.md).
std::uint32_t slurm_id_setting(py::handle v, const char* what, bool step) {
  if (step && is_str(v)) {
    const std::string s = v.cast<std::string>();
    if (const auto id = gpushare::parse_slurm_step(s)) return *id;
    bad(std::string(what) + " \"" + s + "\" is none: give an int, \"batch\", \"extern\" or " +
        "\"interactive\"");
  }
  if (!is_int(v)) wrong_type(what, v, step ? "an int or a special step's name" : "an int");
  return static_cast<std::uint32_t>(int_in(v, what, 0, UINT32_MAX));
}

/// Runs the handler of each keyword; unknown ones raise TypeError naming the known ones.
using handlers = std::map<std::string, std::function<void(py::handle)>, std::less<>>;

/// The handlers of who the session belongs to (docs/cluster-env.md): Kubernetes names as
/// strings ("" for none), Slurm ids as ints.
void add_identity_handlers(handlers& h, gpushare::session_options& o) {
  h["pod"] = [&](py::handle v) { o.pod = str_setting(v, "pod"); };
  h["pod_namespace"] = [&](py::handle v) { o.pod_namespace = str_setting(v, "pod_namespace"); };
  h["container"] = [&](py::handle v) { o.container = str_setting(v, "container"); };
  h["slurm_job_id"] = [&](py::handle v) {
    o.slurm_job_id = slurm_id_setting(v, "slurm_job_id", false);
  };
  h["slurm_step_id"] = [&](py::handle v) {
    o.slurm_step_id = slurm_id_setting(v, "slurm_step_id", true);
  };
  h["slurm_array_job_id"] = [&](py::handle v) {
    o.slurm_array_job_id = slurm_id_setting(v, "slurm_array_job_id", false);
  };
  h["slurm_array_task_id"] = [&](py::handle v) {
    o.slurm_array_task_id = slurm_id_setting(v, "slurm_array_task_id", false);
  };
}
void apply(const py::kwargs& kw, const handlers& h, std::initializer_list<const char*> skip,
           const char* what) {
  for (const auto& [key, value] : kw) {
    const std::string k = key.cast<std::string>();
    bool skipped = false;
    for (const char* s : skip) skipped = skipped || k == s;
    if (skipped || value.is_none()) continue;
    const auto it = h.find(k);
    if (it == h.end()) {
      std::string known;
      for (const auto& [name, fn] : h) known.append(known.empty() ? "" : ", ").append(name);
      for (const char* s : skip) known.append(", ").append(s);
      throw py::type_error(std::string(what)
                               .append(" got an unknown setting '")
                               .append(k)
                               .append("'; the settings are: ")
                               .append(known));
    }
    it->second(value);
  }
}

} // namespace

std::uint64_t bytes_from(py::handle v, const char* what) {
  if (is_int(v)) return static_cast<std::uint64_t>(int_in(v, what, 0, INT64_MAX));
  if (!is_str(v)) wrong_type(what, v, "an int (bytes) or a string such as \"4GiB\"");
  const gpushare::memory_amount a = gpushare::parse_memory_amount(v.cast<std::string>());
  if (a.kind != gpushare::memory_amount::unit::bytes)
    bad(std::string(what)
            .append(" ")
            .append(repr_of(v))
            .append(" is a percentage; give bytes here (an int, or \"512MiB\", \"4GiB\")"));
  return a.value;
}

gpushare::memory_amount memory_amount_from(py::handle v, const char* what) {
  if (is_int(v)) return gpushare::memory_amount::of_bytes(bytes_from(v, what));
  if (!is_str(v)) wrong_type(what, v, "an int (bytes) or a string such as \"4GiB\" or \"30%\"");
  return gpushare::parse_memory_amount(v.cast<std::string>());
}

std::uint64_t duration_ns_from(py::handle v, const gpushare::duration_option& option) {
  if (is_str(v)) return gpushare::parse_duration(v.cast<std::string>(), option);
  if (!is_number(v) && !is_timedelta(v))
    wrong_type(std::string(option.name).c_str(), v, "a string (\"500ms\"), seconds or a timedelta");
  return seconds_to_ns(v, std::string(option.name).c_str());
}

std::uint64_t timeout_ns_from(py::handle v) {
  static constexpr gpushare::duration_option timeout{
      "timeout",      0,
      UINT64_MAX - 1, true,
      wait_forever,   "wait without end",
      1'000'000'000,  "None, 10 (seconds), \"500ms\", \"2min\", \"none\" or a timedelta"};
  if (v.is_none()) return wait_forever;
  return duration_ns_from(v, timeout);
}

py::object timedelta_of_ns(std::uint64_t ns) {
  static const py::object timedelta = py::module_::import("datetime").attr("timedelta");
  return timedelta(py::arg("microseconds") = static_cast<double>(ns) / 1000.0);
}

gpushare::session_options session_options_from(const py::kwargs& kw,
                                               std::initializer_list<const char*> skip) {
  gpushare::session_options o;
  handlers h{
      {"name", [&](py::handle v) { o.name = str_setting(v, "name"); }},
      {"priority", [&](py::handle v) { o.priority = priority_setting(v); }},
      {"share", [&](py::handle v) { o.share = share_setting(v); }},
      {"compute_limit",
       [&](py::handle v) {
         o.compute_limit_ppm = ppm_setting(v, "compute_limit", gpushare::parse_percent);
       }},
      {"compute_guarantee",
       [&](py::handle v) {
         o.compute_guarantee_ppm =
             ppm_setting(v, "compute_guarantee", gpushare::parse_compute_guarantee);
       }},
      {"pause_hold", [&](py::handle v) { o.pause_hold_ppm = pause_hold_setting(v); }},
      {"memory_limit",
       [&](py::handle v) { o.memory_limit = memory_amount_from(v, "memory_limit"); }},
      {"memory_guarantee",
       [&](py::handle v) { o.memory_guarantee = memory_amount_from(v, "memory_guarantee"); }},
      {"domain", [&](py::handle v) { o.domain = str_setting(v, "domain"); }},
      {"group", [&](py::handle v) { o.group = str_setting(v, "group"); }},
      {"group_memory_limit",
       [&](py::handle v) { o.group_memory_limit = memory_amount_from(v, "group_memory_limit"); }},
      {"group_share", [&](py::handle v) { o.group_share = share_setting(v); }},
      {"directory",
       [&](py::handle v) { // a str or an os.PathLike (pathlib.Path)
         o.directory = str_setting(py::module_::import("os").attr("fspath")(v), "directory");
       }},
      {"table_mode",
       [&](py::handle v) {
         o.access = gpushare::parse_table_access(str_setting(v, "table_mode"));
       }},
      {"capacity",
       [&](py::handle v) {
         o.capacity = is_str(v) ? gpushare::parse_capacity(v.cast<std::string>())
                                : bytes_from(v, "capacity");
       }},
      {"quantum",
       [&](py::handle v) { o.quantum = duration_setting(v, "quantum", gpushare::parse_quantum); }},
      {"max_guard",
       [&](py::handle v) {
         o.max_guard = duration_setting(v, "max_guard", gpushare::parse_max_guard);
       }},
      {"handover", [&](py::handle v) { o.handover = handover_setting(v); }},
      {"reclaim_deadline",
       [&](py::handle v) {
         o.reclaim_deadline = duration_setting(v, "reclaim_deadline", reclaim_deadline_of);
       }},
      {"open_timeout",
       [&](py::handle v) {
         const std::uint64_t ns = timeout_ns_from(v);
         o.open_timeout =
             std::chrono::milliseconds(ns == wait_forever ? INT32_MAX : ns / 1'000'000);
       }},
  };
  add_identity_handlers(h, o);
  apply(kw, h, skip, "Session()");
  return o;
}

gpushare::settings_change settings_change_from(const py::kwargs& kw) {
  gpushare::settings_change c;
  const handlers h{
      {"priority", [&](py::handle v) { c.priority = priority_setting(v); }},
      {"share", [&](py::handle v) { c.share = share_setting(v); }},
      {"compute_limit",
       [&](py::handle v) {
         c.compute_limit_ppm = ppm_setting(v, "compute_limit", gpushare::parse_percent);
       }},
      {"compute_guarantee",
       [&](py::handle v) {
         c.compute_guarantee_ppm =
             ppm_setting(v, "compute_guarantee", gpushare::parse_compute_guarantee);
       }},
      {"pause_hold", [&](py::handle v) { c.pause_hold_ppm = pause_hold_setting(v); }},
      {"memory_limit",
       [&](py::handle v) { c.memory_limit = memory_amount_from(v, "memory_limit"); }},
      {"memory_guarantee",
       [&](py::handle v) { c.memory_guarantee = memory_amount_from(v, "memory_guarantee"); }},
      {"quantum",
       [&](py::handle v) { c.quantum = duration_setting(v, "quantum", gpushare::parse_quantum); }},
      {"max_guard",
       [&](py::handle v) {
         c.max_guard = duration_setting(v, "max_guard", gpushare::parse_max_guard);
       }},
      {"handover", [&](py::handle v) { c.handover = handover_setting(v); }},
  };
  apply(kw, h, {}, "configure()");
  return c;
}

gpushare::table_defaults table_defaults_from(const py::kwargs& kw) {
  gpushare::table_defaults d;
  const handlers h{
      {"max_guard",
       [&](py::handle v) {
         d.max_guard = duration_setting(v, "max_guard", gpushare::parse_max_guard);
       }},
      {"capacity",
       [&](py::handle v) {
         d.capacity = is_str(v) ? gpushare::parse_capacity(v.cast<std::string>())
                                : bytes_from(v, "capacity");
       }},
  };
  apply(kw, h, {}, "configure_defaults()");
  return d;
}

} // namespace gpushare_python
