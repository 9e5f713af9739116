// SPDX-License-Identifier: Apache-2.0
// Is this process's CUDA runtime the simulated one (tools/cudasim, docs/cudasim.md)? Then the
// demos' and the GPU benchmark's GPU mode runs unchanged, but nothing it times ran on a GPU, and
// they must say so. Host code built with CUDA only (it needs the toolkit's headers).
#pragma once

#include <dlfcn.h>

#include <string>

#include <cudasim/cudasim.h>

namespace demo {

/// "cudasim <version>" on the simulated CUDA runtime, "" on the real one.
inline std::string simulated_runtime() {
  if (!cudasim::active()) return "";
  const auto version = reinterpret_cast<const char* (*)()>(::dlsym(RTLD_DEFAULT, "cudasimVersion"));
  const char* v = version ? version() : nullptr;
  return v && *v ? v : "cudasim";
}

} // namespace demo
