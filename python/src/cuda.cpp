// SPDX-License-Identifier: Apache-2.0
// DeviceSession (gpushare::cuda::device_session) and its stream guard DeviceKernelGuard
// (gpushare::cuda::scoped_kernel), for the extension gpushare._gpushare_cuda (gpushare.cuda).
// Streams and device pointers are Python ints: a stream is what
// torch.cuda.current_stream().cuda_stream returns (0: the legacy default stream).
#include "bindings.hpp"

#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <gpushare/cuda.hpp>

namespace gpushare_python {
namespace {

namespace cu = gpushare::cuda;
using cu::device_session;

cudaStream_t stream_of(std::uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

std::chrono::nanoseconds ns_setting(std::uint64_t ns) {
  return ns >= INT64_MAX ? std::chrono::nanoseconds::max()
                         : std::chrono::nanoseconds(static_cast<std::int64_t>(ns));
}

/// The CUDA layer's own settings among the keywords.
cu::device_options device_options_from(const py::kwargs& kw) {
  cu::device_options o;
  auto get = [&](const char* k) -> py::object {
    return kw.contains(k) ? py::reinterpret_borrow<py::object>(kw[k]) : py::none();
  };
  if (py::object v = get("headroom"); !v.is_none()) o.headroom = memory_amount_from(v, "headroom");
  if (py::object v = get("context_overhead"); !v.is_none())
    o.context_overhead = bytes_from(v, "context_overhead");
  if (py::object v = get("allocation_timeout"); !v.is_none())
    o.allocation_timeout = ns_setting(duration_ns_from(v, cu::timeout_setting));
  if (py::object v = get("drain_timeout"); !v.is_none())
    o.drain_timeout = ns_setting(duration_ns_from(v, cu::timeout_setting));
  if (py::object v = get("max_in_flight"); !v.is_none())
    o.max_in_flight = ns_setting(duration_ns_from(v, cu::in_flight_setting));
  if (py::object v = get("max_in_flight_lower"); !v.is_none())
    o.max_in_flight_lower = ns_setting(duration_ns_from(v, cu::in_flight_setting));
  if (py::object v = get("drain"); !v.is_none()) {
    if (!py::isinstance<py::str>(v)) throw py::type_error("drain must be \"stream\" or \"device\"");
    o.drain = cu::parse_drain(v.cast<std::string>());
  }
  if (py::object v = get("guard_timing"); !v.is_none()) {
    if (!py::isinstance<py::str>(v))
      throw py::type_error("guard_timing must be \"batched\" or \"each\"");
    o.timing = cu::parse_guard_timing(v.cast<std::string>());
  }
  return o;
}

/// A stream guard not yet entered (as KernelGuard, for one stream).
struct device_kernel_guard {
  py::object owner; ///< the DeviceSession
  std::uintptr_t stream = 0;
  std::uint64_t timeout_ns = wait_forever;
  std::unique_ptr<cu::scoped_kernel> guard; /// while entered

  void enter() {
    if (guard) throw py::value_error("this kernel guard is already entered");
    device_session& s = owner.cast<device_session&>();
    interruptible([&] {
      if (timeout_ns == wait_forever)
        guard = std::make_unique<cu::scoped_kernel>(s, stream_of(stream));
      else
        guard = std::make_unique<cu::scoped_kernel>(
            s, std::chrono::nanoseconds(static_cast<std::int64_t>(timeout_ns)), stream_of(stream));
    });
  }
  /// Ends the region (idempotent), without the GIL: the exit records an event and may drain.
  void finish() {
    py::gil_scoped_release release;
    guard.reset();
  }
};

void bind_device_info(py::module_& m) {
  py::class_<cu::device_info> i(m, "DeviceInfo", "The device behind a DeviceSession.");
  i.def_readonly("ordinal", &cu::device_info::ordinal);
  i.def_readonly("uuid", &cu::device_info::uuid);
  i.def_readonly("name", &cu::device_info::name);
  i.def_readonly("pci_bus_id", &cu::device_info::pci_bus_id);
  i.def_readonly("total_memory", &cu::device_info::total_memory);
  i.def_readonly("compute_major", &cu::device_info::compute_major);
  i.def_readonly("compute_minor", &cu::device_info::compute_minor);
  i.def("__repr__", [](const cu::device_info& d) {
    return std::string("DeviceInfo(ordinal=")
        .append(std::to_string(d.ordinal))
        .append(", uuid='")
        .append(d.uuid)
        .append("', name='")
        .append(d.name)
        .append("', total_memory=")
        .append(std::to_string(d.total_memory))
        .append(")");
  });
}

void bind_device_guard(py::module_& m) {
  py::class_<device_kernel_guard> g(m, "DeviceKernelGuard",
                                    "A region of work on one CUDA stream: entering waits for "
                                    "this session's turn and records a start event; exiting "
                                    "records a stop event, whose device time is accounted.");
  g.def("__enter__", [](py::object self) {
    self.cast<device_kernel_guard&>().enter();
    return self;
  });
  g.def("__exit__", [](device_kernel_guard& k, py::args) { k.finish(); });
  g.def("finish", [](device_kernel_guard& k) { k.finish(); });
  g.def_property_readonly("active",
                          [](const device_kernel_guard& k) { return k.guard != nullptr; });
  g.def_readonly("stream", &device_kernel_guard::stream);
}

py::dict statistics_of(device_session& s) {
  const cu::cuda_stats st = s.statistics();
  py::dict d;
  d["drains"] = st.drains;
  d["drain_timeouts"] = st.drain_timeouts;
  d["device_drains"] = st.device_drains;
  d["device_drains_skipped"] = st.device_drains_skipped;
  d["captured_guards"] = st.captured_guards;
  d["unknown_regions"] = st.unknown_regions;
  d["frees_kept_charged"] = st.frees_kept_charged;
  d["pool_bytes_held"] = st.pool_bytes_held;
  d["graph_bytes_held"] = st.graph_bytes_held;
  d["lower_bound_exits"] = st.lower_bound_exits;
  d["batched_guards"] = st.batched_guards;
  d["batches"] = st.batches;
  d["marked_exits"] = st.marked_exits;
  d["mark_host_functions"] = st.mark_host_functions;
  d["signalled_waits"] = st.signalled_waits;
  return d;
}

using device_session_class = py::class_<device_session, gil_free_holder<device_session>>;

/// What DeviceSession shares with Session: its settings, figures and membership.
void bind_session_surface(device_session_class& s) {
  s.def("info", &device_session::info);
  s.def("snapshot", &device_session::snapshot);
  s.def("configure",
        [](device_session& x, const py::kwargs& kw) { x.configure(settings_change_from(kw)); });
  s.def(
      "set_external_usage",
      [](device_session& x, py::handle b) { x.set_external_usage(bytes_from(b, "bytes")); },
      py::arg("bytes"));
  s.def("notices", &device_session::notices);
  s.def("leave", [](device_session& x) {
    py::gil_scoped_release release; // it joins host's reclaim watcher, which may want the GIL
    x.leave();
  });
  s.def_property_readonly("context_overhead", &device_session::context_overhead);
  s.def_property_readonly("overhead_method", &device_session::overhead_method);
  s.def_property_readonly("joined", &device_session::joined);
  s.def_property_readonly("id", &device_session::id);
  s.def_property_readonly("name", &device_session::name);
  s.def_property_readonly("table_name", &device_session::table_name);
}

void bind_device_session(py::module_& m) {
  device_session_class s(m, "DeviceSession",
                         "A session for one CUDA device: its key is the device's UUID, the "
                         "table's capacity its memory less headroom, and its CUDA context "
                         "counts as external usage. A context manager.");
  s.def(py::init([](int device, const py::kwargs& kw) {
          static const auto own = {"headroom",      "context_overhead", "allocation_timeout",
                                   "drain_timeout", "max_in_flight",    "max_in_flight_lower",
                                   "drain",         "guard_timing"};
          const gpushare::session_options o = session_options_from(kw, own);
          const cu::device_options d = device_options_from(kw);
          py::gil_scoped_release release; // creating the CUDA context takes a while
          return device_session(device, o, d);
        }),
        py::arg("device") = -1);
  s.def_property_readonly("host", &device_session::host,
                          py::return_value_policy::reference_internal,
                          "The underlying Session (reserve, try_reserve, kernel, on_reclaim ...).");
  s.def_property_readonly("device", &device_session::device);
  s.def(
      "reserve",
      [](device_session& x, py::handle bytes, py::handle timeout, bool reclaimable) {
        const std::uint64_t b = bytes_from(bytes, "bytes");
        const std::uint64_t t = timeout_ns_from(timeout);
        return interruptible([&] {
          if (reclaimable) return x.host().reserve_reclaimable(b, timeout_duration(t));
          return t == wait_forever ? x.host().reserve(b) : x.host().reserve(b, timeout_duration(t));
        });
      },
      py::arg("bytes"), py::arg("timeout") = py::none(), py::arg("reclaimable") = false,
      "As Session.reserve.");
  s.def(
      "try_reserve",
      [](device_session& x, py::handle bytes, bool reclaimable) {
        const std::uint64_t b = bytes_from(bytes, "bytes");
        return reclaimable ? x.host().try_reserve_reclaimable(b) : x.host().try_reserve(b);
      },
      py::arg("bytes"), py::arg("reclaimable") = false, "As Session.try_reserve.");
  s.def(
      "kernel",
      [](py::object self, std::uintptr_t stream, py::handle timeout) {
        self.cast<device_session&>();
        return device_kernel_guard{self, stream, timeout_ns_from(timeout), nullptr};
      },
      py::arg("stream") = 0, py::arg("timeout") = py::none(),
      "A guard over the work enqueued on `stream` (an int: a cudaStream_t).");
  s.def(
      "malloc",
      [](device_session& x, py::handle b) {
        const std::uint64_t bytes = bytes_from(b, "bytes");
        return reinterpret_cast<std::uintptr_t>(interruptible([&] { return x.malloc(bytes); }));
      },
      py::arg("bytes"), "Budgeted cudaMalloc: the device pointer as an int.");
  s.def(
      "free", [](device_session& x, std::uintptr_t p) { x.free(reinterpret_cast<void*>(p)); },
      py::arg("ptr"), "Frees what malloc() returned and gives its bytes back.");
  s.def("yield_", [](device_session& x) { interruptible([&] { x.yield(); }); });
  s.def("give_way_due", &device_session::give_way_due,
        "Whether a session that should run now waits (see Session.give_way_due).");
  s.def(
      "linger",
      [](device_session& x, py::handle d) {
        x.linger(std::chrono::nanoseconds(
            static_cast<std::int64_t>(duration_ns_from(d, linger_option))));
      },
      py::arg("duration"));
  s.def("synchronize", [](device_session& x) { interruptible([&] { x.synchronize(); }); });
  s.def("statistics", &statistics_of, "The CUDA side's counters, a dict.");
  s.def_property_readonly(
      "stream_priority", [](device_session& x) { return x.stream_priority(); },
      "The CUDA stream priority matching this session's priority class, for "
      "torch.cuda.Stream(priority=...) when sessions of several classes share this process.");
  bind_session_surface(s);
  s.def("__enter__", [](py::object self) { return self; });
  s.def("__exit__", [](device_session& x, py::args) {
    py::gil_scoped_release release;
    x.leave();
  });
}

} // namespace

void bind_cuda(py::module_& m) {
  bind_device_info(m);
  bind_device_guard(m);
  bind_device_session(m);
}

} // namespace gpushare_python
