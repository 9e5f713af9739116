// SPDX-License-Identifier: Apache-2.0
// Table (gpushare::table): observing and administering a table without a session; RemovalResult;
// the text helpers of <gpushare/text.hpp> and list_tables() of <gpushare/discovery.hpp>.
#include "bindings.hpp"

#include <pybind11/stl.h>

#include <optional>
#include <string>

#include <gpushare/discovery.hpp>
#include <gpushare/text.hpp>

namespace gpushare_python {
namespace {

using gpushare::table;

gpushare::open_mode open_mode_from(const std::string& s) {
  if (s == "open_existing") return gpushare::open_mode::open_existing;
  if (s == "open_or_create") return gpushare::open_mode::open_or_create;
  throw gpushare::error(gpushare::errc::invalid_argument,
                        std::string("invalid open mode ")
                            .append(gpushare::quote(s))
                            .append(": give \"open_existing\" (a missing table is NoSuchTable) "
                                    "or \"open_or_create\""));
}

const char* removal_status_name(gpushare::removal_status s) {
  switch (s) {
  case gpushare::removal_status::removed: return "removed";
  case gpushare::removal_status::would_remove: return "would_remove";
  case gpushare::removal_status::in_use: return "in_use";
  case gpushare::removal_status::gone: return "gone";
  case gpushare::removal_status::other_domain: return "other_domain";
  }
  return "unknown";
}

/// Options for where a table is (domain, table_mode) and how it is created or opened.
gpushare::session_options place_from(const py::kwargs& kw) {
  for (const auto& [key, value] : kw) {
    const std::string k = key.cast<std::string>();
    if (k != "domain" && k != "table_mode" && k != "directory" && k != "capacity" &&
        k != "open_timeout")
      throw py::type_error(
          std::string("Table got an unknown setting '")
              .append(k)
              .append("'; the settings are: domain, table_mode, directory, capacity, "
                      "open_timeout"));
  }
  return session_options_from(kw);
}

void bind_removal_result(py::module_& m) {
  py::class_<gpushare::removal_result> rr(m, "RemovalResult", "What Table.remove() did.");
  rr.def_property_readonly(
      "status", [](const gpushare::removal_result& r) { return removal_status_name(r.status); },
      "\"removed\", \"in_use\" (a live session: kept), \"gone\" (no table), ...");
  rr.def_readonly("live_sessions", &gpushare::removal_result::live_sessions);
  rr.def_readonly("dead_sessions", &gpushare::removal_result::dead_sessions);
  rr.def("__repr__", [](const gpushare::removal_result& r) {
    return std::string("RemovalResult(status='") + removal_status_name(r.status) +
           "', live_sessions=" + std::to_string(r.live_sessions) +
           ", dead_sessions=" + std::to_string(r.dead_sessions) + ")";
  });
}

void bind_table_class(py::module_& m) {
  py::class_<table> t(m, "Table",
                      "A handle on a table for observing and administering it; it "
                      "holds no session.");
  t.def_static(
      "open",
      [](const std::string& key, const std::string& mode, const py::kwargs& kw) {
        return table::open(key, open_mode_from(mode), place_from(kw));
      },
      py::arg("key"), py::arg("mode"),
      "Opens the table of `key`: mode \"open_existing\" (a missing table raises NoSuchTable) or "
      "\"open_or_create\". Settings: domain, table_mode, directory, capacity, open_timeout.");
  t.def_static(
      "open_existing",
      [](const std::string& object_name, py::handle timeout) {
        const std::uint64_t ns = timeout_ns_from(timeout);
        return table::open_existing(object_name, std::chrono::milliseconds(ns / 1'000'000));
      },
      py::arg("object_name"), py::arg("timeout") = 5.0,
      "Opens an existing table by its shm object name (\"/gpushare.<domain>.u<uid>.<key>\").");
  t.def_static(
      "remove",
      [](const std::string& key, const py::kwargs& kw) {
        return table::remove(key, place_from(kw));
      },
      py::arg("key"), "Removes the table of `key` if no live session uses it (RemovalResult).");
  t.def_static(
      "read_unlocked",
      [](const std::string& object_name) { return table::read_unlocked(object_name); },
      py::arg("object_name"), "A snapshot read without locking or writing the table.");
  t.def("snapshot", &table::snapshot, "Every live session, consistent at one instant.");
  t.def("find", &table::find, py::arg("name"), "The SessionIds of live sessions named `name`.");
  t.def(
      "configure",
      [](table& x, const gpushare::session_id& id, const py::kwargs& kw) {
        x.configure(id, settings_change_from(kw));
      },
      py::arg("id"), "Changes a live session's settings (as Session.configure).");
  t.def("evict", &table::evict, py::arg("id"),
        "Ends the live session `id` at once, as if its process had died (SessionInfo of it).");
  t.def(
      "configure_defaults",
      [](table& x, const py::kwargs& kw) { x.configure_defaults(table_defaults_from(kw)); },
      "Changes the table's defaults: max_guard, capacity.");
  t.def("reclaim_dead_sessions", &table::reclaim_dead_sessions);
  t.def_property_readonly("object_name", &table::object_name);
  t.def_property_readonly("created", &table::created, "Whether this handle created the table.");
  t.def("__repr__", [](const table& x) {
    return std::string("Table(")
        .append(py::repr(py::str(x.object_name())).cast<std::string>())
        .append(")");
  });
}

void bind_text(py::module_& m) {
  // As `gpushare status` shows amounts: "unlimited" for an unlimited capacity, limit or
  // available amount (unlimited_memory, 2**63, or more), never "8.00 EiB".
  m.def("format_bytes", &gpushare::format_capacity, py::arg("bytes"),
        "\"512 B\", \"1.50 KiB\", \"4.00 GiB\", and \"unlimited\" for 2**63 or more (a "
        "table's unlimited capacity, a session's absent limit), as gpushare status shows them.");
  m.attr("UNLIMITED") = gpushare::unlimited_memory;
  m.def("format_duration", &gpushare::format_duration, py::arg("ns"), "\"500us\", \"2min\".");
  m.def("format_percent", &gpushare::format_percent, py::arg("ppm"), "300000 -> \"30%\".");
  m.def(
      "parse_bytes", [](py::handle v) { return bytes_from(v, "bytes"); }, py::arg("value"),
      "\"4GiB\" -> 4294967296, as GPUSHARE_MEMORY_LIMIT reads it (no percentages).");
  m.def(
      "table_name",
      [](const std::string& key, const std::string& domain, const std::string& table_mode,
         std::optional<std::string> directory) {
        const auto access = gpushare::parse_table_access(table_mode);
        return directory ? gpushare::table_name(*directory, domain, key, access)
                         : gpushare::table_name(domain, key, access);
      },
      py::arg("key"), py::arg("domain") = "default", py::arg("table_mode") = "user",
      py::arg("directory") = py::none(),
      "The object name of the table of `key` (in /dev/shm, or a path in `directory`).");
  m.def(
      "list_tables",
      [](std::optional<std::string> domain, std::optional<std::string> directory) {
        py::list out;
        for (const gpushare::table_entry& e :
             gpushare::list_tables_in(directory.value_or(""), domain))
          out.append(e.object_name);
        return out;
      },
      py::arg("domain") = py::none(), py::arg("directory") = py::none(),
      "The object names of the tables in /dev/shm, or in `directory` (of `domain`).");
}

} // namespace

void bind_table(py::module_& m) {
  bind_removal_result(m);
  bind_table_class(m);
  bind_text(m);
}

} // namespace gpushare_python
