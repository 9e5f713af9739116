// SPDX-License-Identifier: Apache-2.0
// Session (gpushare::session), Reservation (gpushare::reservation) and KernelGuard
// (gpushare::scoped_kernel), each a context manager. The waits (reserve, grow, a guard's entry,
// yield_) release the GIL and end with KeyboardInterrupt on Ctrl-C (interruptible()).
#include "bindings.hpp"

#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>

namespace gpushare_python {
namespace {

using gpushare::reservation;
using gpushare::session;

/// A guard not yet entered: `with s.kernel():` waits for the device on entry and ends the region
/// on exit. Holds the Session object, so the session outlives it.
struct kernel_guard {
  py::object owner; ///< the Session
  std::uint64_t timeout_ns = wait_forever;
  std::unique_ptr<gpushare::scoped_kernel> guard; /// while entered

  void enter() {
    if (guard) throw py::value_error("this kernel guard is already entered");
    session& s = owner.cast<session&>();
    interruptible([&] {
      if (timeout_ns == wait_forever)
        guard = std::make_unique<gpushare::scoped_kernel>(s);
      else
        guard = std::make_unique<gpushare::scoped_kernel>(
            s, std::chrono::nanoseconds(static_cast<std::int64_t>(timeout_ns)));
    });
  }
  /// Ends the region (idempotent), without the GIL: the exit takes the table's lock.
  void finish() {
    py::gil_scoped_release release;
    guard.reset();
  }
  gpushare::scoped_kernel& entered() {
    if (!guard) throw py::value_error("this kernel guard is not entered: use `with s.kernel():`");
    return *guard;
  }
};

reservation reserve(session& s, py::handle bytes, py::handle timeout, bool reclaimable) {
  const std::uint64_t b = bytes_from(bytes, "bytes");
  const std::uint64_t t = timeout_ns_from(timeout);
  if (reclaimable)
    return interruptible([&] {
      return t == wait_forever ? s.reserve_reclaimable(b)
                               : s.reserve_reclaimable(b, timeout_duration(t));
    });
  return interruptible(
      [&] { return t == wait_forever ? s.reserve(b) : s.reserve(b, timeout_duration(t)); });
}

std::optional<reservation> try_reserve(session& s, py::handle bytes, bool reclaimable) {
  const std::uint64_t b = bytes_from(bytes, "bytes");
  return reclaimable ? s.try_reserve_reclaimable(b) : s.try_reserve(b);
}

void grow(reservation& r, py::handle bytes, py::handle timeout) {
  const std::uint64_t b = bytes_from(bytes, "bytes");
  const std::uint64_t t = timeout_ns_from(timeout);
  interruptible([&] {
    if (t == wait_forever)
      r.grow(b);
    else
      r.grow(b, timeout_duration(t));
  });
}

std::string session_repr(const session& s) {
  if (!s.joined()) return "Session(left)";
  return std::string("Session(name=")
      .append(py::repr(py::str(s.name())).cast<std::string>())
      .append(", table=")
      .append(py::repr(py::str(s.table_name())).cast<std::string>())
      .append(")");
}

void bind_reservation(py::module_& m) {
  py::class_<reservation> r(m, "Reservation",
                            "Bytes of device memory promised to a session: no other session can "
                            "reserve them while it holds them. A context manager: released on "
                            "exit (and when garbage-collected).");
  r.def_property_readonly("bytes", &reservation::size, "Bytes held (0 once released).");
  r.def("__bool__", [](const reservation& x) { return static_cast<bool>(x); });
  r.def("grow", &grow, py::arg("bytes"), py::arg("timeout") = py::none(),
        "Grows by `bytes`, waiting up to `timeout` (None: without end) for memory.");
  r.def(
      "try_grow", [](reservation& x, py::handle b) { return x.try_grow(bytes_from(b, "bytes")); },
      py::arg("bytes"), "Grows by `bytes` if that fits now; returns whether it did.");
  r.def(
      "shrink", [](reservation& x, py::handle b) { x.shrink(bytes_from(b, "bytes")); },
      py::arg("bytes"), "Gives back `bytes` (at most what it holds).");
  r.def("release", &reservation::release, "Gives back everything now.");
  r.def_property_readonly("reclaimable", &reservation::reclaimable,
                          "Whether its bytes are given back when a higher priority class's "
                          "reserve waits (Session.reserve(..., reclaimable=True)).");
  r.def("set_reclaimable", &reservation::set_reclaimable, py::arg("on") = true,
        "Makes its bytes reclaimable (or, on=False, fixed again).");
  r.def("__enter__", [](py::object self) { return self; });
  r.def("__exit__", [](reservation& x, py::args) { x.release(); });
  r.def("__repr__", [](const reservation& x) {
    return std::string("Reservation(bytes=")
        .append(std::to_string(x.size()))
        .append(x.reclaimable() ? ", reclaimable=True)" : ")");
  });
}

void bind_kernel_guard(py::module_& m) {
  py::class_<kernel_guard> g(m, "KernelGuard",
                             "A region that uses the device: entering waits for this session's "
                             "turn (by priorities, shares, quanta and its compute limit), exiting "
                             "ends the region and accounts its time. From Session.kernel().");
  g.def("__enter__", [](py::object self) {
    self.cast<kernel_guard&>().enter();
    return self;
  });
  g.def("__exit__", [](kernel_guard& k, py::args) { k.finish(); });
  g.def(
      "finish", [](kernel_guard& k) { k.finish(); }, "Ends the region now (idempotent).");
  g.def_property_readonly(
      "active", [](const kernel_guard& k) { return k.guard != nullptr; },
      "Whether the region is entered and not yet finished.");
  g.def_property_readonly(
      "waited",
      [](kernel_guard& k) {
        return timedelta_of_ns(static_cast<std::uint64_t>(k.entered().waited().count()));
      },
      "How long entering waited for the device, a timedelta.");
  g.def_property_readonly(
      "revoked", [](kernel_guard& k) { return k.entered().revoked(); },
      "Whether this session's hold was revoked while the region ran.");
  g.def(
      "set_device_time",
      [](kernel_guard& k, py::handle t) {
        const std::uint64_t ns = timeout_ns_from(t);
        k.entered().set_device_time(std::chrono::nanoseconds(static_cast<std::int64_t>(ns)));
      },
      py::arg("device_time"),
      "Accounts this measured device time (seconds or a timedelta) "
      "instead of the region's wall time.");
}

using session_class = py::class_<session, gil_free_holder<session>>;

/// Who the session is, and leaving: without the GIL, since leaving joins the reclaim watcher,
/// whose callback may be waiting for it.
void bind_membership(session_class& s) {
  s.def(
      "leave",
      [](session& x) {
        py::gil_scoped_release release;
        x.leave();
      },
      "Leaves the table now; its reservations become empty, its reclaim watcher stops.");
  s.def_property_readonly("joined", &session::joined);
  s.def_property_readonly("id", &session::id);
  s.def_property_readonly("name", &session::name);
  s.def_property_readonly("table_name", &session::table_name,
                          "The shm object name of the table, \"/gpushare.<domain>.u<uid>.<key>\".");
  s.def("__enter__", [](py::object self) { return self; });
  s.def("__exit__", [](session& x, py::args) {
    py::gil_scoped_release release;
    x.leave();
  });
  s.def("__repr__", &session_repr);
}

void bind_session_class(py::module_& m) {
  session_class s(
      m, "Session",
      "A process's membership in the table of a device key. Joins on construction; leaves on "
      "leave(), on exit of a `with` block, or when garbage-collected. Settings not given come "
      "from GPUSHARE_* variables, then the defaults.");
  s.def(py::init([](const std::string& key, const py::kwargs& kw) {
          return session(key, session_options_from(kw));
        }),
        py::arg("key"));
  s.def("reserve", &reserve, py::arg("bytes"), py::arg("timeout") = py::none(),
        py::arg("reclaimable") = false,
        "Reserves `bytes` (an int or \"1GiB\"), waiting up to `timeout` (None: without end, "
        "seconds, a timedelta or \"10s\") for other sessions to release memory. Raises OverLimit "
        "or ExceedsCapacity at once if it can never fit, Timeout past the timeout. "
        "reclaimable=True: memory this session gives back when a higher priority class's reserve "
        "waits and its on_reclaim() callback is asked.");
  s.def("try_reserve", &try_reserve, py::arg("bytes"), py::arg("reclaimable") = false,
        "Reserves `bytes` if they fit now, else returns None (never waits, never asks anyone).");
  s.def(
      "kernel",
      [](py::object self, py::handle timeout) {
        self.cast<session&>(); // a Session, or TypeError now rather than at entry
        return kernel_guard{self, timeout_ns_from(timeout), nullptr};
      },
      py::arg("timeout") = py::none(),
      "A guard for a region that uses the device: `with s.kernel(timeout=None):`.");
  s.def(
      "yield_", [](session& x) { interruptible([&] { x.yield(); }); },
      "A cheap moment to give way: hands the device to a session that should run now, and "
      "returns when it is this session's turn again.");
  s.def(
      "linger",
      [](session& x, py::handle d) {
        x.linger(std::chrono::nanoseconds(
            static_cast<std::int64_t>(duration_ns_from(d, linger_option))));
      },
      py::arg("duration"),
      "Keeps the device through the gaps after this session's guards against lower priority "
      "classes for `duration` (at most 10 ms after its last guard): more work is due. 0 ends it.");
  s.def("give_way_due", &session::give_way_due,
        "Whether a session that should run now waits: end the guard (or stop the loop of "
        "chunks) at the next point that can.");
  s.def("info", &session::info, "This session's settings and statistics (SessionInfo).");
  s.def("snapshot", &session::snapshot, "The whole table at one instant (TableSnapshot).");
  s.def(
      "configure", [](session& x, const py::kwargs& kw) { x.configure(settings_change_from(kw)); },
      "Changes this session's settings: priority, share, compute_limit, compute_guarantee, "
      "memory_limit, memory_guarantee, quantum, handover, max_guard.");
  s.def(
      "set_external_usage",
      [](session& x, py::handle b) { x.set_external_usage(bytes_from(b, "bytes")); },
      py::arg("bytes"), "Declares memory this session uses outside its reservations.");
  s.def("notices", &session::notices, "What its join had to tell that is not an error.");
  bind_membership(s);
}

} // namespace

void bind_session(py::module_& m) {
  bind_reservation(m);
  bind_kernel_guard(m);
  bind_session_class(m);
}

} // namespace gpushare_python
