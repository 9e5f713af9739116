// SPDX-License-Identifier: Apache-2.0
// A translation unit compiled for the per-thread default stream
// (CUDA_API_PER_THREAD_DEFAULT_STREAM, what nvcc --default-stream per-thread defines), linked into
// the same program as cuda-layer.cpp, which is not: gpushare's inline code must be the same in both
// (it calls the runtime's plain entry points everywhere), and a default guard must cover this
// file's default stream.
#ifndef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error                                                                                             \
    "compile this file with CUDA_API_PER_THREAD_DEFAULT_STREAM defined (tests/cuda/CMakeLists.txt)"
#endif
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <gpushare/cuda.hpp>

#include "cuda_test_util.hpp"
#include "kernels.hpp"

namespace gc = gpushare::cuda;

TEST_CASE("in a per-thread default stream file a default guard covers the per-thread stream") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("ptds");
  gc::device_options o;
  o.context_overhead = 0;
  gc::device_session s(0, d.options(), o);
  d.uses(s.device().uuid);
  CHECK(GPUSHARE_CUDA_DEFAULT_STREAM == cudaStreamPerThread);
  const auto plain = cudasim::api_calls("cudaEventRecord");
  const auto ptsz = cudasim::api_calls("cudaEventRecord_ptsz");
  {
    gc::scoped_kernel guard(s); // this file's default stream: the thread's own
    REQUIRE(gpushare_test::launch_spin(cudaStreamPerThread, 20'000'000) == cudaSuccess);
  }
  s.synchronize();
  CHECK(s.info().device_ns >= 19'000'000);
  if (cudasim::active()) {
    // gpushare's own calls name the plain entry points, here as in every other file.
    CHECK(cudasim::api_calls("cudaEventRecord") - plain == 2);
    CHECK(cudasim::api_calls("cudaEventRecord_ptsz") == ptsz);
  }
}
