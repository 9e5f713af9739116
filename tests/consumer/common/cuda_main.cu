// SPDX-License-Identifier: Apache-2.0
// A .cu consumer, built by tests/consumer/common/cu_consumer.cmake for both consumer projects:
// compiled by nvcc with nothing but target_link_libraries(... gpushare::cuda), no CUDA_STANDARD
// and no -std flag of its own (nvcc 13 defaults to C++17, and gpushare's headers are C++20). No
// GPU must be the documented error (errc::no_device), not a crash.
#include <gpushare/cuda.hpp>

#include <cstdio>

static_assert(__cplusplus >= 202002L, "gpushare::cuda must make nvcc compile C++20");

__global__ void scale(float* x, float factor, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] *= factor;
}

int main() {
  try {
    gpushare::cuda::device_session s(0);
    const int n = 1024;
    auto* x = static_cast<float*>(s.malloc(n * sizeof(float)));
    {
      gpushare::cuda::scoped_kernel guard(s);
      scale<<<(n + 255) / 256, 256>>>(x, 2.0f, n);
    }
    s.synchronize();
    s.free(x);
    std::printf("consumer_cu: ran a guarded kernel on %s\n", s.device().name.c_str());
    return 0;
  } catch (const gpushare::error& e) {
    std::printf("consumer_cu: %s\n", e.what());
    return e.code() == gpushare::errc::no_device ? 0 : 1;
  }
}
