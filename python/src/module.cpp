// SPDX-License-Identifier: Apache-2.0
// The extension module gpushare._gpushare: the core API (no CUDA). Re-exported by
// python/gpushare/__init__.py; see docs/python.md.
#include "bindings.hpp"

#include <gpushare/version.hpp>

PYBIND11_MODULE(_gpushare, m) {
  namespace gp = gpushare_python;
  m.doc() = "gpushare: processes share one GPU by cooperating through a shared-memory table.";
  m.attr("__version__") = GPUSHARE_VERSION_STRING;
  m.attr("MIN_PRIORITY") = gpushare::min_priority;
  m.attr("MAX_PRIORITY") = gpushare::max_priority;
  gp::bind_errors(m);
  gp::bind_values(m);
  gp::bind_session(m);
  gp::bind_table(m);
  gp::bind_startup(m); // after bind_session: it adds Session.startup
  gp::bind_reclaim(m); // after bind_session: it adds Session.on_reclaim and the watcher
}
