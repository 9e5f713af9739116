// SPDX-License-Identifier: Apache-2.0
// A program linked against the toolkit's libcudart.so.13 that calls runtime functions cudasim
// does not model (cudasim-exports starts it on the simulator). Prints "key=value" lines on
// stdout, then "done"; what cudasim says goes to stderr.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include <cudasim/cudasim.h>

namespace {

void out(const std::string& key, const std::string& value) {
  std::printf("%s=%s\n", key.c_str(), value.c_str());
  std::fflush(stdout);
}

} // namespace

int main() {
  int n = 0;
  out("count", cudaGetErrorName(cudaGetDeviceCount(&n)));
  unsigned long long flags = 0;
  out("exec_flags1", cudaGetErrorName(cudaGraphExecGetFlags(nullptr, &flags)));
  out("exec_flags2", cudaGetErrorName(cudaGraphExecGetFlags(nullptr, &flags)));
  out("last1", cudaGetErrorName(cudaGetLastError()));
  out("last2", cudaGetErrorName(cudaGetLastError()));
  size_t limit = 0;
  out("limit", cudaGetErrorName(cudaDeviceGetLimit(&limit, cudaLimitStackSize)));
  out("peek", cudaGetErrorName(cudaPeekAtLastError()));
  // Nine arguments, three of them on the stack (x86-64 passes six in registers).
  out("copy_to_array", cudaGetErrorName(cudaMemcpy2DToArrayAsync(nullptr, 1, 2, nullptr, 3, 4, 5,
                                                                 cudaMemcpyHostToDevice, nullptr)));
  const cudaChannelFormatDesc d = cudaCreateChannelDesc(8, 16, 0, 0, cudaChannelFormatKindSigned);
  out("channel", std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + "," +
                     std::to_string(d.w) + "," + std::to_string(static_cast<int>(d.f)));
  out("after", cudaGetErrorName(cudaGetDeviceCount(&n))); // the runtime still works
  out("calls", std::to_string(cudasim::api_calls("cudaGraphExecGetFlags")));
  out("done", "1");
  return 0;
}
