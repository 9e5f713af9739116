// SPDX-License-Identifier: Apache-2.0
// The CUDA layer: a device session (the table of the GPU's UUID), memory allocated against its
// budget, and a stream guard around the work the GPU runs. Host code only (a cudaMemsetAsync
// stands for a kernel), so a host compiler builds it; link gpushare::cuda.
#include <cstdio>

#include <gpushare/cuda.hpp>

int main() {
  constexpr std::size_t MiB = 1u << 20;
  try {
    gpushare::session_options o;
    o.name = "cuda-quickstart";
    gpushare::cuda::device_session s(0, o); // GPU 0; its table's capacity is its memory - headroom
    std::printf("%s (%s): table %s\n", s.device().name.c_str(), s.device().uuid.c_str(),
                s.table_name().c_str());

    void* x = s.malloc(64 * MiB); // charged to the budget first, then cudaMalloc
    cudaStream_t stream = nullptr;
    if (cudaStreamCreate(&stream) != cudaSuccess) return 1;
    for (int step = 0; step < 10; ++step) {
      {
        gpushare::cuda::scoped_kernel guard(s, stream); // waits for this session's turn
        if (cudaMemsetAsync(x, step, 64 * MiB, stream) != cudaSuccess) return 1;
      }          // the GPU time of the work enqueued inside is measured with CUDA events
      s.yield(); // an iteration boundary
    }
    s.synchronize();
    const auto me = s.info();
    std::printf("%llu guards, %s reserved, peak %s\n", static_cast<unsigned long long>(me.guards),
                gpushare::format_bytes(me.reserved).c_str(),
                gpushare::format_bytes(me.peak).c_str());

    s.free(x);
    cudaStreamDestroy(stream);
    const std::string table = s.table_name();
    s.leave();
    gpushare::remove_unused_table(table); // the last one out removes the table
  } catch (const gpushare::error& e) {    // errc::no_device without a GPU: CUDA's reason
    std::fprintf(stderr, "cuda_quickstart: %s\n", e.what());
    return 1;
  }
}
