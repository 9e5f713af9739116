// SPDX-License-Identifier: Apache-2.0
// Cooperative reclaim from Python (docs/python.md, "Giving memory back"): Session.on_reclaim()
// registers a callable the library calls with the bytes asked for, Session.answer_reclaim() runs
// it now, Session.watch_reclaim() starts the library's watcher thread, which runs it as soon as a
// request comes. The callable is wrapped so that it takes the GIL on whatever thread calls it.
//
// The watcher is a C++ thread Python does not know. Two rules keep it out of a dying interpreter:
// at exit (atexit, registered here) no new call of a callback takes the GIL, and the exit waits
// for the calls under way; and leaving a session (leave(), `with` exit, garbage collection)
// releases the GIL while it joins the watcher, whose callback may be waiting for it.
#include "bindings.hpp"

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

namespace gpushare_python {
namespace {

using gpushare::session;

/// The calls of callbacks made from threads Python does not know (the watcher): counted, so that
/// the interpreter's exit waits for them, and refused once it has begun.
struct foreign_calls {
  std::mutex m;
  std::condition_variable done;
  bool closed = false;
  int running = 0;

  bool enter() {
    const std::lock_guard<std::mutex> l(m);
    if (closed) return false;
    ++running;
    return true;
  }
  void leave() {
    const std::lock_guard<std::mutex> l(m);
    if (--running == 0) done.notify_all();
  }
};

/// Never destroyed: a watcher may look at it after static destruction has begun.
foreign_calls& foreign() {
  static auto* calls = new foreign_calls;
  return *calls;
}

/// Whether the calling thread is one Python knows (has a thread state), so an exception can
/// propagate to Python code; the watcher has none between its calls.
bool python_thread() { return PyGILState_GetThisThreadState() != nullptr; }

/// The library's reclaim handler over a Python callable: callback(asked) -> bytes given (an int,
/// a memory string, or None for 0).
class python_handler {
public:
  explicit python_handler(py::object callback)
      : callback_(new py::object(std::move(callback)), drop{}) {}

  std::uint64_t operator()(std::uint64_t asked) const {
    if (python_thread()) {
      py::gil_scoped_acquire gil;
      return call(asked); // its exception propagates: answer_reclaim(), yield_()
    }
    if (!foreign().enter())
      throw std::runtime_error("the Python interpreter is exiting: reclaim callbacks are off");
    struct counted {
      ~counted() { foreign().leave(); }
    } running;
    py::gil_scoped_acquire gil;
    try {
      return call(asked);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable(*callback_); // sys.unraisablehook: on stderr by default
      throw std::runtime_error("the reclaim callback raised (reported as unraisable)");
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
      PyErr_WriteUnraisable(callback_->ptr());
      throw;
    }
  }

private:
  /// The callable's object, dropped with the GIL held, or leaked once the interpreter exits.
  struct drop {
    void operator()(py::object* o) const noexcept {
      if (python_thread() || foreign().enter()) {
        {
          py::gil_scoped_acquire gil;
          delete o;
        }
        if (!python_thread()) foreign().leave();
        return;
      }
      o->release(); // the interpreter is gone or going: its reference stays
      delete o;
    }
  };

  std::uint64_t call(std::uint64_t asked) const {
    const py::object given = (*callback_)(asked);
    if (given.is_none()) return 0;
    return bytes_from(given, "the reclaim callback's result");
  }

  std::shared_ptr<py::object> callback_;
};

/// At the interpreter's exit: no callback takes the GIL from the watcher any more, and the calls
/// under way end first (they need the GIL, which this releases while it waits).
void close_foreign_calls() {
  foreign_calls& f = foreign();
  {
    const std::lock_guard<std::mutex> l(f.m);
    f.closed = true;
  }
  py::gil_scoped_release release;
  std::unique_lock<std::mutex> l(f.m);
  f.done.wait(l, [&] { return f.running == 0; });
}

py::object on_reclaim(session& s, py::object callback) {
  if (callback.is_none()) {
    s.on_reclaim({});
    return callback;
  }
  if (!PyCallable_Check(callback.ptr()))
    throw py::type_error(std::string("on_reclaim() takes a callable (asked: int) -> int or None, "
                                     "not ")
                             .append(py::repr(callback).cast<std::string>()));
  s.on_reclaim(python_handler(callback));
  return callback;
}

} // namespace

void bind_reclaim(py::module_& m) {
  auto cls = py::reinterpret_borrow<py::class_<session>>(m.attr("Session"));
  cls.def("on_reclaim", &on_reclaim, py::arg("callback"),
          "Registers callback(asked: int) -> int: called with the bytes a waiting reserve of a "
          "higher priority class needs from this session, it releases reclaimable reservations "
          "and returns the bytes it gave back (None: 0). It runs at yield_(), answer_reclaim(), "
          "guard exits, or on the watcher thread (watch_reclaim()). None removes it. Returns "
          "the callback (usable as a decorator).");
  cls.def(
      "answer_reclaim",
      [](session& x) {
        py::gil_scoped_release release;
        return x.answer_reclaim();
      },
      "Runs the callback now if a request stands that it has not answered; returns the bytes "
      "it gave back (0: no request, no callback, or answered already). Its exception "
      "propagates.");
  cls.def(
      "watch_reclaim",
      [](session& x) {
        py::gil_scoped_release release;
        x.watch_reclaim();
      },
      "Starts a thread that runs the callback as soon as a request comes. Idempotent; leave() "
      "stops it. An exception of the callback there goes to sys.unraisablehook.");
  cls.def(
      "accept_loans", [](session& x, bool on) { x.accept_loans(on); }, py::arg("on"),
      "Whether this session's reclaimable reserves may borrow idle guarantees (default True, "
      "once it has a callback and the watcher). Decline when the callback cannot give memory "
      "back within a guaranteed session's reclaim deadline.");
  cls.def_property_readonly("reclaim_requested", &session::reclaim_requested,
                            "Bytes this session is asked to give back now (0: none).");
  py::module_::import("atexit").attr("register")(py::cpp_function(&close_foreign_calls));
}

} // namespace gpushare_python
