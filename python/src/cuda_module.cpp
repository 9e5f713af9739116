// SPDX-License-Identifier: Apache-2.0
// The extension module gpushare._gpushare_cuda: the CUDA layer, imported by gpushare.cuda only,
// so that `import gpushare` never needs libcudart. Its values (SessionInfo, ...) and exceptions
// are those of gpushare._gpushare, imported first.
#include "bindings.hpp"

PYBIND11_MODULE(_gpushare_cuda, m) {
  m.doc() = "gpushare's CUDA layer: DeviceSession and its stream guard.";
  pybind11::module_::import("gpushare._gpushare");
  gpushare_python::bind_cuda(m);
}
