// SPDX-License-Identifier: Apache-2.0
// The gpushare Python module's topics and the conversions they share. Each topic is one file,
// python/src/<topic>.cpp, defining bind_<topic>(); module.cpp calls them in order (errors first:
// the others' docstrings name the exceptions, and the values before the classes that return
// them). A new topic: a file, its declaration here, its call in module.cpp, its name in
// python/CMakeLists.txt.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <gpushare/gpushare.hpp>
#include <gpushare/interrupt.hpp>

namespace gpushare_python {

namespace py = pybind11;

// ---- the topics of _gpushare ------------------------------------------------------------------
void bind_errors(py::module_& m);  ///< errors.cpp: Error and one subclass per errc; translator
void bind_values(py::module_& m);  ///< values.cpp: SessionInfo, TableSnapshot, SessionId, ...
void bind_session(py::module_& m); ///< session.cpp: Session, Reservation, KernelGuard
void bind_table(py::module_& m);   ///< table.cpp: Table, RemovalResult, text helpers
void bind_startup(py::module_& m); ///< startup.cpp: StartupHold, Session.startup, engine plans
void bind_reclaim(py::module_& m); ///< reclaim.cpp: Session.on_reclaim, answer_reclaim, watcher

// ---- the topic of _gpushare_cuda ----------------------------------------------------------------
void bind_cuda(py::module_& m); ///< cuda.cpp: DeviceSession, DeviceKernelGuard, DeviceInfo

// ---- conversions (settings.cpp) ---------------------------------------------------------------

/// Builds session options from keyword settings (name, priority, share, memory_limit, ...; see
/// docs/python.md). Each value is a string as the GPUSHARE_* variable takes it, or a Python
/// number, timedelta or enum-like string. Unknown keywords raise TypeError naming the known ones.
/// Keywords in `skip` are left for the caller (the CUDA layer's own settings).
gpushare::session_options session_options_from(const py::kwargs& kw,
                                               std::initializer_list<const char*> skip = {});
/// Builds a settings change from keyword settings (those a live session may change).
gpushare::settings_change settings_change_from(const py::kwargs& kw);
/// Table defaults from keyword settings (max_guard, capacity).
gpushare::table_defaults table_defaults_from(const py::kwargs& kw);

/// Bytes from an int (>= 0) or a memory string ("1GiB", "512MiB", "123"; not a percentage).
std::uint64_t bytes_from(py::handle value, const char* what);
/// A memory amount from an int (bytes) or a string ("4GiB", "30%").
gpushare::memory_amount memory_amount_from(py::handle value, const char* what);
/// A duration from a timedelta, a number of seconds (int or float) or a string ("500us", "2s"),
/// checked against `option` (its range; "none" where it allows none, read as option.none_ns).
std::uint64_t duration_ns_from(py::handle value, const gpushare::duration_option& option);
/// session::linger's argument: seconds, a timedelta, or a string ("2ms"); 0 ends it.
inline constexpr gpushare::duration_option linger_option{
    "linger", 0,  10'000'000'000, false,
    0,        {}, 1'000'000,      "0.002 (seconds), \"2ms\" or a timedelta"};
/// A wait's timeout: None (wait forever), a timedelta, seconds, or a string ("10s", "none").
std::uint64_t timeout_ns_from(py::handle value);

/// The timeout that means "wait without end" here (timeout_duration() makes it
/// nanoseconds::max(), which the library takes so).
inline constexpr std::uint64_t wait_forever = UINT64_MAX;

/// Runs `f` (a blocking wait of the library) with the GIL released and the thread's waits
/// interruptible by Python signals: Ctrl-C raises KeyboardInterrupt (any exception a signal
/// handler raises) out of the wait, which leaves it uncounted and holding nothing.
template <class F> decltype(auto) interruptible(F&& f) {
  py::gil_scoped_release release;
  gpushare::wait_interrupt on_signal([] {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  });
  return std::forward<F>(f)();
}

/// A wait's timeout as the library takes it: wait_forever (and anything past 292 years) as
/// nanoseconds::max().
inline std::chrono::nanoseconds timeout_duration(std::uint64_t ns) {
  return ns >= static_cast<std::uint64_t>(INT64_MAX)
             ? std::chrono::nanoseconds::max()
             : std::chrono::nanoseconds(static_cast<std::int64_t>(ns));
}

/// Deletes a session (or a DeviceSession) with the GIL released: leaving joins its reclaim
/// watcher, whose callback may be waiting for the GIL. The holder of their Python classes.
template <class T> struct gil_free_delete {
  void operator()(T* p) const noexcept {
    if (PyGILState_Check() == 0) {
      delete p;
      return;
    }
    py::gil_scoped_release release;
    delete p;
  }
};
template <class T> using gil_free_holder = std::unique_ptr<T, gil_free_delete<T>>;

/// "timedelta(seconds=...)" of `ns` nanoseconds, as a datetime.timedelta.
py::object timedelta_of_ns(std::uint64_t ns);

} // namespace gpushare_python
