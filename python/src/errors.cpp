// SPDX-License-Identifier: Apache-2.0
// gpushare.Error and one subclass per gpushare::errc, each with the stable name of its code as
// `.code` ("timeout", ...), and the one translator that turns a gpushare::error into them: its
// message becomes str(e). Where a Python built-in means the same thing, the class derives from
// it too (Timeout is a TimeoutError, InvalidArgument a ValueError, ...), so generic handlers work.
#include "bindings.hpp"

#include <array>
#include <string>

namespace gpushare_python {
namespace {

using gpushare::errc;

struct error_class {
  errc code;
  const char* name;
  PyObject* builtin; ///< a second base, or nullptr
  const char* doc;
};

std::array<error_class, 18> error_classes() {
  return {{
      {errc::invalid_argument, "InvalidArgument", PyExc_ValueError,
       "A setting, size, name or percentage is out of range or malformed."},
      {errc::invalid_environment, "InvalidEnvironment", PyExc_ValueError,
       "A GPUSHARE_* environment variable holds an unusable value."},
      {errc::table_incompatible, "TableIncompatible", nullptr,
       "The shared object is a table of another layout version or size."},
      {errc::table_corrupt, "TableCorrupt", nullptr,
       "The shared object is not a gpushare table, or its header is damaged."},
      {errc::table_busy, "TableBusy", nullptr,
       "The table's creator is still initialising it, or its lock is held by a stopped process."},
      {errc::no_space, "NoSpace", nullptr,
       "The table directory (/dev/shm) has no room for the table."},
      {errc::permission_denied, "PermissionDenied", PyExc_PermissionError,
       "The table exists but this user may not open it (or may not do this to it)."},
      {errc::no_free_slot, "NoFreeSlot", nullptr,
       "Every session slot of the table is taken by a live session."},
      {errc::guarantee_unavailable, "GuaranteeUnavailable", nullptr,
       "The memory guarantee asked for cannot be promised now."},
      {errc::over_limit, "OverLimit", nullptr,
       "A reservation exceeds the session's own memory limit: it never fits."},
      {errc::exceeds_capacity, "ExceedsCapacity", nullptr,
       "A reservation exceeds the table's whole capacity: it never fits."},
      {errc::timeout, "Timeout", PyExc_TimeoutError,
       "Memory or the device did not become free before the timeout."},
      {errc::session_closed, "SessionClosed", nullptr,
       "The session has left, was evicted, or belongs to the parent process."},
      {errc::system_error, "SystemCallError", PyExc_OSError,
       "An operating-system call failed unexpectedly (the message names it)."},
      {errc::no_device, "NoDevice", nullptr, "No usable GPU (CUDA layer)."},
      {errc::cuda_error, "CudaError", nullptr, "A CUDA call failed (the message names it)."},
      {errc::no_such_table, "NoSuchTable", PyExc_FileNotFoundError,
       "There is no table of that name (opening without creating)."},
      {errc::bad_directory, "BadDirectory", PyExc_NotADirectoryError,
       "The table directory is missing, not a directory, on a network filesystem, or open to "
       "other users' files."},
  }};
}

/// The class of each errc value, indexed by its number (kept alive by the module).
std::array<PyObject*, 19> classes_by_code{};
PyObject* base_class = nullptr;

void raise(const gpushare::error& e) {
  const auto i = static_cast<std::size_t>(e.code());
  PyObject* cls =
      i < classes_by_code.size() && classes_by_code[i] ? classes_by_code[i] : base_class;
  PyErr_SetString(cls, e.what());
}

} // namespace

void bind_errors(py::module_& m) {
  py::object base = py::reinterpret_steal<py::object>(PyErr_NewExceptionWithDoc(
      "gpushare.Error",
      "Every error gpushare raises. `code` is the stable name of its kind (\"timeout\", ...); "
      "str(e) says what was wrong and what to do.",
      PyExc_Exception, nullptr));
  if (!base) throw py::error_already_set();
  base.attr("code") = py::none();
  m.attr("Error") = base;
  base_class = base.ptr();
  py::dict by_code;
  for (const error_class& c : error_classes()) {
    py::tuple bases = c.builtin ? py::tuple(py::make_tuple(base, py::handle(c.builtin)))
                                : py::tuple(py::make_tuple(base));
    const std::string qualified = std::string("gpushare.").append(c.name);
    py::object cls = py::reinterpret_steal<py::object>(
        PyErr_NewExceptionWithDoc(qualified.c_str(), c.doc, bases.ptr(), nullptr));
    if (!cls) throw py::error_already_set();
    cls.attr("code") = gpushare::to_string(c.code);
    m.attr(c.name) = cls;
    by_code[gpushare::to_string(c.code)] = cls;
    classes_by_code[static_cast<std::size_t>(c.code)] =
        cls.release().ptr(); // lives with the module
  }
  m.attr("errors_by_code") = by_code;
  base.inc_ref(); // base_class: lives with the module
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const gpushare::error& e) {
      raise(e);
    }
  });
}

} // namespace gpushare_python
