// SPDX-License-Identifier: Apache-2.0
// The library's value types as read-only Python records: SessionId, SessionInfo, TableSnapshot,
// Eviction, Notice. Each field keeps its C++ name (docs: include/gpushare/table_types.hpp);
// durations stay in nanoseconds (`*_ns`), amounts in bytes, shares of 100% in parts per million
// (`*_ppm`). Every record has `_fields`, `as_dict()` and a repr that lists its fields.
#include "bindings.hpp"

#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include <gpushare/text.hpp>

namespace gpushare_python {
namespace {

using gpushare::session_info;
using gpushare::table_snapshot;

/// Adds `_fields`, `as_dict()` and `__repr__` to a record class whose fields are `fields`.
template <class Cls> void record_methods(Cls& cls, const std::vector<const char*>& fields) {
  py::tuple names(fields.size());
  for (std::size_t i = 0; i < fields.size(); ++i) names[i] = py::str(fields[i]);
  cls.attr("_fields") = names;
  cls.def(
      "as_dict",
      [](py::object self) {
        py::dict d;
        for (py::handle f : self.attr("_fields")) d[f] = self.attr(f);
        return d;
      },
      "The fields as a dict (nested records stay records).");
  cls.def("__repr__", [](py::object self) {
    std::string s = py::type::of(self).attr("__name__").cast<std::string>() + "(";
    bool first = true;
    for (py::handle f : self.attr("_fields")) {
      s.append(first ? "" : ", ").append(f.cast<std::string>()).append("=");
      s.append(py::repr(self.attr(f)).cast<std::string>());
      first = false;
    }
    return s + ")";
  });
}

/// A record class being defined: each field is bound read-only and listed in `_fields`, in
/// the order given; done() adds the record methods.
template <class T> struct record {
  py::class_<T> cls;
  std::vector<const char*> names;

  record(py::module_& m, const char* name, const char* doc) : cls(m, name, doc) {}
  template <class C, class D> record& field(const char* n, const D C::*member) {
    cls.def_readonly(n, member);
    names.push_back(n);
    return *this;
  }
  template <class F> record& computed(const char* n, F f, const char* doc) {
    cls.def_property_readonly(n, f, doc);
    names.push_back(n);
    return *this;
  }
  void done() { record_methods(cls, names); }
};

const char* handover_name(gpushare::handover_point h) {
  return h == gpushare::handover_point::at_yield ? "yield" : "guard";
}

#define F(type, name) field(#name, &type::name)

void bind_session_id(py::module_& m) {
  record<gpushare::session_id> r(m, "SessionId",
                                 "A session of a table: its slot and the join generation of "
                                 "that slot.");
  r.cls.def(py::init([](std::uint32_t slot, std::uint32_t generation) {
              return gpushare::session_id{slot, generation};
            }),
            py::arg("slot"), py::arg("generation"));
  r.F(gpushare::session_id, slot).F(gpushare::session_id, generation).done();
  r.cls.def("__eq__",
            [](const gpushare::session_id& a, const gpushare::session_id& b) { return a == b; });
  r.cls.def("__hash__", [](const gpushare::session_id& a) {
    return py::hash(py::make_tuple(a.slot, a.generation));
  });
}

void bind_platform_identity(py::module_& m) {
  using gpushare::platform_identity;
  record<platform_identity> r(m, "PlatformIdentity",
                              "Who a session belongs to on its platform: Kubernetes pod, "
                              "namespace and container (\"\" when not known), Slurm job, step "
                              "and array task (None when not known). docs/cluster-env.md.");
  r.F(platform_identity, pod).F(platform_identity, pod_namespace).F(platform_identity, container);
  r.F(platform_identity, slurm_job_id).F(platform_identity, slurm_step_id);
  r.computed(
      "slurm_step",
      [](const platform_identity& i) -> std::optional<std::string> {
        if (!i.slurm_step_id) return std::nullopt;
        return gpushare::slurm_step_text(*i.slurm_step_id);
      },
      "The step as Slurm names it: \"0\", \"batch\", \"extern\", \"interactive\"; None.");
  r.F(platform_identity, slurm_array_job_id).F(platform_identity, slurm_array_task_id);
  r.done();
  r.cls.def("__bool__", [](const platform_identity& i) { return !i.empty(); });
}

/// Who a session is and its settings.
void session_settings(record<session_info>& r) {
  r.F(session_info, id).F(session_info, name).F(session_info, pid).F(session_info, identity);
  r.computed(
      "state", [](const session_info& i) { return i.state(); },
      "\"running\" (in a guard), \"waiting\" or \"idle\".");
  r.F(session_info, priority).F(session_info, share).F(session_info, compute_limit_ppm);
  r.F(session_info, compute_guarantee_ppm).F(session_info, pause_hold_ppm);
  r.F(session_info, memory_limit);
  r.F(session_info, memory_guarantee).F(session_info, quantum_ns);
  r.computed(
      "handover", [](const session_info& i) { return handover_name(i.handover); },
      "\"guard\" or \"yield\": where it lets an equal-priority waiter in.");
  r.F(session_info, max_guard_ns).F(session_info, settings_seq);
  r.F(session_info, group).F(session_info, group_memory_limit).F(session_info, group_share);
  r.F(session_info, start_time_ticks).F(session_info, joined_unix_ns);
}

/// What a session holds and waits for now, and its counters since it joined.
void session_state(record<session_info>& r) {
  r.F(session_info, reserved).F(session_info, external).F(session_info, peak);
  r.F(session_info, waiting_for_memory).F(session_info, waiting_for_device);
  r.F(session_info, holds_device).F(session_info, active_guards).F(session_info, in_guard_ns);
  r.F(session_info, vtime).F(session_info, reservations_granted).F(session_info, reserve_waits);
  r.F(session_info, reserve_wait_ns).F(session_info, reserve_wait_max_ns);
  r.F(session_info, device_ns).F(session_info, guards).F(session_info, guards_on_lease);
  r.F(session_info, device_waits).F(session_info, device_wait_ns);
  r.F(session_info, device_wait_max_ns).F(session_info, handovers);
  r.F(session_info, cap_throttle_ns).F(session_info, revocations);
  r.F(session_info, holds_startup).F(session_info, waiting_for_startup);
  r.F(session_info, reclaim);
}

void bind_reclaim_figures(py::module_& m) {
  using rf = session_info::reclaim_figures;
  record<rf> r(
      m, "ReclaimFigures",
      "A session's side of cooperative reclaim: its reclaimable bytes, what it is asked "
      "to give back now (and in how long that is due: 0 when overdue or none), the slot "
      "whose reserve asked (None), what its own waiting reserves lack, whether it is "
      "skipped for now, and its requests, answers, skips and bytes given since it joined; of "
      "its reclaimable bytes those on loan out of other sessions' idle guarantees (borrowed), "
      "its growths granted on loan and loan calls it missed (written off) since it joined, and "
      "whether what it is asked for now calls a loan back (loan_call).");
  r.F(rf, reclaimable).F(rf, asked).F(rf, deadline_in_ns).F(rf, asked_by_slot).F(rf, wanted);
  r.F(rf, skipped_now).F(rf, requests).F(rf, answered).F(rf, skipped).F(rf, given);
  r.F(rf, borrowed).F(rf, loans).F(rf, write_offs).F(rf, loan_call);
  r.done();
}

void bind_reclaim_counters(py::module_& m) {
  using rc = table_snapshot::reclaim_counters;
  record<rc> r(m, "ReclaimCounters",
               "A table's cooperative reclaim over its life: requests sent, answered, skipped at "
               "their deadline, withdrawn; bytes given back; reserves granted after requests were "
               "out for them, with their time from the first request to the grant.");
  r.F(rc, requests).F(rc, answered).F(rc, skipped).F(rc, withdrawn).F(rc, given);
  r.F(rc, grants).F(rc, grant_ns).F(rc, grant_max_ns);
  r.done();
}

void bind_loan_figures(py::module_& m) {
  using lf = table_snapshot::loan_figures;
  record<lf> r(m, "LoanFigures",
               "A table's idle guarantees lent as reclaimable memory: bytes guaranteed to "
               "sessions but not held by them, bytes on loan now, bytes every session holds; over "
               "the table's life, growths granted on loan, loan calls, and calls missed (written "
               "off) with their bytes.");
  r.F(lf, idle_guarantees).F(lf, lent).F(lf, held).F(lf, loans).F(lf, calls).F(lf, write_offs);
  r.F(lf, written_off);
  r.done();
}

void bind_session_info(py::module_& m) {
  record<session_info> r(m, "SessionInfo",
                         "One session as a snapshot shows it: who it is, its settings, what it "
                         "holds, and its counters since it joined.");
  session_settings(r);
  session_state(r);
  r.done();
}

void bind_eviction(py::module_& m) {
  using eviction = table_snapshot::eviction;
  record<eviction> r(m, "Eviction", "The last eviction of a table: which session, by whom.");
  r.F(eviction, id).F(eviction, name).F(eviction, pid).F(eviction, by_uid).F(eviction, unix_ns);
  r.done();
}

void bind_startup_holder(py::module_& m) {
  using holder = table_snapshot::startup_holder;
  record<holder> r(m, "StartupHolder",
                   "Who holds a table's start-up lock: the session, since when, for how long.");
  r.F(holder, id).F(holder, name).F(holder, pid).F(holder, since_unix_ns).F(holder, held_ns);
  r.done();
}

void bind_snapshot(py::module_& m) {
  using ts = table_snapshot;
  record<ts> r(m, "TableSnapshot", "A table at one instant.");
  r.F(ts, object_name).F(ts, key).F(ts, domain).F(ts, access_mode).F(ts, creator_pid);
  r.F(ts, created_unix_ns).F(ts, slot_count).F(ts, capacity).F(ts, reserved_total);
  r.F(ts, committed_total).F(ts, available).F(ts, lock_repairs).F(ts, sessions_reclaimed);
  r.F(ts, handovers)
      .F(ts, queue_holds)
      .F(ts, holder)
      .F(ts, default_max_guard_ns)
      .F(ts, revocations);
  r.F(ts, evictions).F(ts, last_eviction).F(ts, startup).F(ts, startup_waiters);
  r.F(ts, startup_takes).F(ts, reclaim).F(ts, loans).F(ts, sessions).F(ts, dead_sessions);
  r.F(ts, device_name).F(ts, device_total).F(ts, device_free).F(ts, device_observed_unix_ns);
  r.F(ts, device_observer_pid).F(ts, device_untracked).F(ts, device_releasing);
  r.done();
}

void bind_notice(py::module_& m) {
  record<gpushare::notice> r(m, "Notice", "What the library has to tell that is not an error.");
  r.computed(
      "severity",
      [](const gpushare::notice& x) {
        return x.severity == gpushare::notice::kind::warning ? "warning" : "note";
      },
      "\"note\" or \"warning\".");
  r.F(gpushare::notice, text).done();
  r.cls.def("__str__", [](const gpushare::notice& x) { return x.text; });
}

#undef F

} // namespace

void bind_values(py::module_& m) {
  bind_session_id(m);
  bind_platform_identity(m);
  bind_reclaim_figures(m);
  bind_reclaim_counters(m);
  bind_loan_figures(m);
  bind_session_info(m);
  bind_eviction(m);
  bind_startup_holder(m);
  bind_snapshot(m);
  bind_notice(m);
}

} // namespace gpushare_python
