// SPDX-License-Identifier: Apache-2.0
// A user's CUDA program, linked against the toolkit's runtime, run on an installed cudasim: it
// must see the simulated device, and <cudasim/cudasim.h> must say it runs on the simulator.
#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <cudasim/cudasim.h>

int main() {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count < 1) {
    std::printf("no simulated device: %s\n", cudaGetErrorString(rc));
    return 1;
  }
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return 1;
  std::printf("device 0: %s; cudasim active: %s\n", p.name, cudasim::active() ? "yes" : "no");
  void* x = nullptr;
  const bool ok = cudasim::active() && std::string(p.name).find("cudasim") != std::string::npos &&
                  cudaMalloc(&x, 1 << 20) == cudaSuccess && cudaFree(x) == cudaSuccess;
  if (const char* state = std::getenv("CUDASIM_STATE")) // leave no state behind
    ::shm_unlink(("/" + std::string(state)).c_str());
  return ok ? 0 : 1;
}
