// SPDX-License-Identifier: Apache-2.0
#include "not_modelled.hpp"

#include <cstdio>
#include <mutex>
#include <set>
#include <string>

#include "runtime.hpp"

namespace cudasim {

int not_modelled(const char* name) noexcept {
  const cudaError_t e = enter(name);
  if (e == cudaErrorInitializationError) return fail(e);
  // Never destroyed: a static destructor of the program may still make calls.
  static std::mutex* const mutex = new std::mutex();
  static std::set<std::string>* const said = new std::set<std::string>();
  try {
    std::lock_guard<std::mutex> lock(*mutex);
    if (said->insert(name).second)
      std::fprintf(stderr, "cudasim: %s is not modelled; it returns cudaErrorNotSupported\n", name);
  } catch (...) { // out of memory: the call still fails as it should, unannounced
  }
  return fail(cudaErrorNotSupported);
}

} // namespace cudasim

extern "C" {

// A function that returns something other than cudaError_t cannot be stubbed (its caller reads
// a struct or a pointer): generate_stubs.cmake leaves it out, so each needs a model. The one of
// CUDA 13.0 that the rest of cudasim has no use for is pure: "Returns a channel descriptor with
// format f and number of bits of each component x, y, z, and w" (cuda_runtime_api.h).
cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w, cudaChannelFormatKind f) {
  (void)cudasim::enter("cudaCreateChannelDesc", false);
  return cudaChannelFormatDesc{x, y, z, w, f};
}

} // extern "C"
