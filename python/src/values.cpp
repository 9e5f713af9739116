// SPDX-License-Identifier: Apache-2.0
// The library's value types as read-only Python records: SessionId, SessionInfo, TableSnapshot,
// Eviction, Notice. Each field keeps its C++ name (docs: include/gpushare/table_types.hpp);
// durations stay in nanoseconds (`*_ns`), amounts in bytes, shares of 100% in parts per million
// (`*_ppm`). Every record has `_fields`, `as_dict()` and a repr that lists its fields.
#include "bindings.hpp"

#include <pybind11/stl.h>

#include <string>
#include <vector>

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

const char* handover_name(gpushare::handover_point h) {
  return h == gpushare::handover_point::at_yield ? "yield" : "guard";
}

#define GPUSHARE_FIELD(cls, type, field) cls.def_readonly(#field, &type::field)

void bind_session_id(py::module_& m) {
  py::class_<gpushare::session_id> id(m, "SessionId",
                                      "A session of a table: its slot and the "
                                      "join generation of that slot.");
  id.def(py::init([](std::uint32_t slot, std::uint32_t generation) {
           return gpushare::session_id{slot, generation};
         }),
         py::arg("slot"), py::arg("generation"));
  GPUSHARE_FIELD(id, gpushare::session_id, slot);
  GPUSHARE_FIELD(id, gpushare::session_id, generation);
  id.def("__eq__",
         [](const gpushare::session_id& a, const gpushare::session_id& b) { return a == b; });
  id.def("__hash__", [](const gpushare::session_id& a) {
    return py::hash(py::make_tuple(a.slot, a.generation));
  });
  record_methods(id, {"slot", "generation"});
}

void bind_session_info(py::module_& m) {
  py::class_<session_info> c(m, "SessionInfo",
                             "One session as a snapshot shows it: who it is, its settings, what "
                             "it holds, and its counters since it joined.");
#define F(field) GPUSHARE_FIELD(c, session_info, field)
  F(reservations_granted);
  F(reserve_waits);
  F(reserve_wait_ns);
  F(reserve_wait_max_ns);
  F(device_ns);
  F(guards);
  F(guards_on_lease);
  F(device_waits);
  F(device_wait_ns);
  F(device_wait_max_ns);
  F(handovers);
  F(cap_throttle_ns);
  F(revocations);
  F(id);
  F(name);
  F(pid);
  F(start_time_ticks);
  F(joined_unix_ns);
  F(priority);
  F(share);
  F(compute_limit_ppm);
  F(memory_limit);
  F(memory_guarantee);
  F(reserved);
  F(external);
  F(peak);
  F(waiting_for_memory);
  F(settings_seq);
  F(quantum_ns);
  F(holds_device);
  F(active_guards);
  F(waiting_for_device);
  F(vtime);
  F(max_guard_ns);
  F(compute_guarantee_ppm);
  F(in_guard_ns);
#undef F
  c.def_property_readonly(
      "handover", [](const session_info& i) { return handover_name(i.handover); },
      "\"guard\" or \"yield\": where it lets an equal-priority waiter in.");
  c.def_property_readonly(
      "state", [](const session_info& i) { return i.state(); },
      "\"running\" (in a guard), \"waiting\" or \"idle\".");
  record_methods(c, {"id",
                     "name",
                     "pid",
                     "state",
                     "priority",
                     "share",
                     "compute_limit_ppm",
                     "compute_guarantee_ppm",
                     "memory_limit",
                     "memory_guarantee",
                     "reserved",
                     "external",
                     "peak",
                     "waiting_for_memory",
                     "waiting_for_device",
                     "holds_device",
                     "active_guards",
                     "quantum_ns",
                     "handover",
                     "max_guard_ns",
                     "in_guard_ns",
                     "vtime",
                     "settings_seq",
                     "start_time_ticks",
                     "joined_unix_ns",
                     "reservations_granted",
                     "reserve_waits",
                     "reserve_wait_ns",
                     "reserve_wait_max_ns",
                     "device_ns",
                     "guards",
                     "guards_on_lease",
                     "device_waits",
                     "device_wait_ns",
                     "device_wait_max_ns",
                     "handovers",
                     "cap_throttle_ns",
                     "revocations"});
}

void bind_snapshot(py::module_& m) {
  using eviction = table_snapshot::eviction;
  py::class_<eviction> e(m, "Eviction", "The last eviction of a table: which session, by whom.");
  GPUSHARE_FIELD(e, eviction, id);
  GPUSHARE_FIELD(e, eviction, name);
  GPUSHARE_FIELD(e, eviction, pid);
  GPUSHARE_FIELD(e, eviction, by_uid);
  GPUSHARE_FIELD(e, eviction, unix_ns);
  record_methods(e, {"id", "name", "pid", "by_uid", "unix_ns"});

  py::class_<table_snapshot> c(m, "TableSnapshot", "A table at one instant.");
#define F(field) GPUSHARE_FIELD(c, table_snapshot, field)
  F(object_name);
  F(key);
  F(domain);
  F(access_mode);
  F(creator_pid);
  F(created_unix_ns);
  F(slot_count);
  F(capacity);
  F(reserved_total);
  F(committed_total);
  F(available);
  F(lock_repairs);
  F(sessions_reclaimed);
  F(handovers);
  F(holder);
  F(default_max_guard_ns);
  F(revocations);
  F(evictions);
  F(last_eviction);
  F(sessions);
  F(dead_sessions);
  F(device_name);
  F(device_total);
  F(device_free);
  F(device_observed_unix_ns);
  F(device_observer_pid);
  F(device_untracked);
  F(device_releasing);
#undef F
  record_methods(c, {"object_name",
                     "key",
                     "domain",
                     "access_mode",
                     "creator_pid",
                     "created_unix_ns",
                     "slot_count",
                     "capacity",
                     "reserved_total",
                     "committed_total",
                     "available",
                     "lock_repairs",
                     "sessions_reclaimed",
                     "handovers",
                     "holder",
                     "default_max_guard_ns",
                     "revocations",
                     "evictions",
                     "last_eviction",
                     "sessions",
                     "dead_sessions",
                     "device_name",
                     "device_total",
                     "device_free",
                     "device_observed_unix_ns",
                     "device_observer_pid",
                     "device_untracked",
                     "device_releasing"});
}

void bind_notice(py::module_& m) {
  py::class_<gpushare::notice> n(m, "Notice", "What the library has to tell that is not an error.");
  n.def_property_readonly("severity", [](const gpushare::notice& x) {
    return x.severity == gpushare::notice::kind::warning ? "warning" : "note";
  });
  GPUSHARE_FIELD(n, gpushare::notice, text);
  n.def("__str__", [](const gpushare::notice& x) { return x.text; });
  record_methods(n, {"severity", "text"});
}

#undef GPUSHARE_FIELD

} // namespace

void bind_values(py::module_& m) {
  bind_session_id(m);
  bind_session_info(m);
  bind_snapshot(m);
  bind_notice(m);
}

} // namespace gpushare_python
