// SPDX-License-Identifier: Apache-2.0
// The start-up lock (gpushare::startup_hold, Session.startup) and the budget -> engine flags
// translator (gpushare::engines, the functions gpushare.engines wraps). See docs/python.md,
// "Engines that start together".
#include "bindings.hpp"

#include <pybind11/stl.h>

#include <optional>
#include <string>

#include <gpushare/engines.hpp>
#include <gpushare/startup.hpp>

namespace gpushare_python {
namespace {

using gpushare::startup_hold;

/// Bytes from an optional int or memory string; None stays unknown.
std::optional<std::uint64_t> maybe_bytes(py::handle v, const char* what) {
  if (v.is_none()) return std::nullopt;
  return bytes_from(v, what);
}

std::optional<std::uint32_t> maybe_count(py::handle v, const char* what) {
  if (v.is_none()) return std::nullopt;
  if (!py::isinstance<py::int_>(v) || v.cast<long long>() <= 0 ||
      v.cast<long long>() > 0xffffffffLL)
    throw gpushare::error(gpushare::errc::invalid_argument,
                          std::string(what)
                              .append(" must be a positive integer, not ")
                              .append(py::repr(v).cast<std::string>()));
  return v.cast<std::uint32_t>();
}

py::dict vllm_plan(py::kwargs kw) {
  gpushare::engines::vllm_inputs in;
  const auto get = [&](const char* k) -> py::object {
    return kw.contains(k) ? py::object(kw[k]) : py::object(py::none());
  };
  in.budget = maybe_bytes(get("budget"), "budget");
  in.weights = maybe_bytes(get("weights"), "weights");
  in.activation_peak = maybe_bytes(get("activation_peak"), "activation_peak");
  in.cuda_graphs = maybe_bytes(get("cuda_graphs"), "cuda_graphs");
  in.margin = maybe_bytes(get("margin"), "margin");
  in.device_total = maybe_bytes(get("device_total"), "device_total");
  in.enforce_eager = kw.contains("enforce_eager") && py::bool_(kw["enforce_eager"]);
  const gpushare::engines::vllm_plan p = gpushare::engines::plan_vllm(in);
  py::dict d;
  d["kv_cache_memory_bytes"] = p.kv_cache_memory_bytes;
  d["gpu_memory_utilization"] = p.gpu_memory_utilization;
  d["flags"] = gpushare::engines::flags(p);
  return d;
}

py::dict sglang_plan(py::kwargs kw) {
  gpushare::engines::sglang_inputs in;
  const auto get = [&](const char* k) -> py::object {
    return kw.contains(k) ? py::object(kw[k]) : py::object(py::none());
  };
  in.budget = maybe_bytes(get("budget"), "budget");
  in.weights = maybe_bytes(get("weights"), "weights");
  in.free_at_start = maybe_bytes(get("free_at_start"), "free_at_start");
  in.activation_peak = maybe_bytes(get("activation_peak"), "activation_peak");
  in.cuda_graphs = maybe_bytes(get("cuda_graphs"), "cuda_graphs");
  in.margin = maybe_bytes(get("margin"), "margin");
  in.kv_bytes_per_token = maybe_bytes(get("kv_bytes_per_token"), "kv_bytes_per_token");
  in.layers = maybe_count(get("layers"), "layers");
  in.kv_heads = maybe_count(get("kv_heads"), "kv_heads");
  in.head_dim = maybe_count(get("head_dim"), "head_dim");
  in.dtype_bytes = maybe_count(get("dtype_bytes"), "dtype_bytes");
  in.disable_cuda_graph = kw.contains("disable_cuda_graph") && py::bool_(kw["disable_cuda_graph"]);
  const gpushare::engines::sglang_plan p = gpushare::engines::plan_sglang(in);
  py::dict d;
  d["mem_fraction_static"] = p.mem_fraction_static;
  d["kv_budget"] = p.kv_budget;
  d["max_total_tokens"] =
      p.max_total_tokens == 0 ? py::object(py::none()) : py::object(py::int_(p.max_total_tokens));
  d["flags"] = gpushare::engines::flags(p);
  return d;
}

void bind_hold(py::module_& m) {
  py::class_<startup_hold>(m, "StartupHold",
                           "The table's start-up lock, held by a session until ready() (or the "
                           "end of the `with` block, or the session's end).")
      .def_property_readonly("held", &startup_hold::held, "Whether this still holds the lock.")
      .def(
          "ready", [](startup_hold& h) { h.ready(); },
          "The engine is ready: release the lock so that the next one may start (idempotent).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](startup_hold& h, py::args) {
        h.ready();
        return false;
      });
  auto cls = py::reinterpret_borrow<py::class_<gpushare::session>>(m.attr("Session"));
  cls.def(
      "startup",
      [](gpushare::session& s, py::handle timeout) {
        const std::uint64_t ns = timeout_ns_from(timeout);
        return interruptible([&] { return startup_hold::take(s, ns); });
      },
      py::arg("timeout") = py::none(),
      "Takes the table's start-up lock, waiting up to `timeout` (None: no end) while another "
      "session holds it; raises Timeout naming the holder. Release it with ready() once the "
      "engine is ready, or use it as a context manager.");
}

} // namespace

void bind_startup(py::module_& m) {
  bind_hold(m);
  m.def("_plan_vllm", &vllm_plan, "See gpushare.engines.plan_vllm.");
  m.def("_plan_sglang", &sglang_plan, "See gpushare.engines.plan_sglang.");
}

} // namespace gpushare_python
