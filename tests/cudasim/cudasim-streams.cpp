// SPDX-License-Identifier: Apache-2.0
// Streams' lifetime on the simulator (docs/cudasim.md, "Streams"): cudaStreamDestroy returns at
// once, the work already enqueued in the stream still completes, and then the stream's worker
// thread ends, so that a program creating and destroying streams does not collect threads.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>
#include <dirent.h>

#include <chrono>
#include <string>
#include <thread>

#include "sim_kernels.hpp"
#include "sim_util.hpp"

using simtest::fresh_state;

namespace {

/// The threads of this process (/proc/self/task).
int thread_count() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return n;
}

/// Waits up to 20 s for the thread count to come down to `at_most`; returns the last count.
int threads_down_to(int at_most) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int n = thread_count();
  while (n > at_most && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    n = thread_count();
  }
  return n;
}

/// Makes the context and the legacy stream's worker exist, so that later counts compare.
int settled_threads() {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  REQUIRE(simtest::launch(cudaStreamLegacy, 1000) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  return thread_count();
}

} // namespace

TEST_CASE("500 streams created and destroyed, each with work, leave no thread behind") {
  fresh_state st("streams-threads");
  st.use_here();
  const int before = settled_threads();
  int done = 0;
  for (int i = 0; i < 500; ++i) {
    cudaStream_t s = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&s, i % 2 ? cudaStreamNonBlocking : 0) == cudaSuccess);
    REQUIRE(simtest::launch_count(s, 20'000, &done) == cudaSuccess);
    REQUIRE(cudaStreamDestroy(s) == cudaSuccess); // with its kernel still queued or running
  }
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess); // waits for destroyed streams' work too
  CHECK(done == 500);
  const int after = threads_down_to(before);
  INFO("threads before: " << before << ", after: " << after);
  CHECK(after <= before);
  // Streams that never had work have no thread to end.
  for (int i = 0; i < 100; ++i) {
    cudaStream_t s = nullptr;
    REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
    REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  }
  CHECK(thread_count() <= before);
}

TEST_CASE("cudaStreamDestroy returns at once, and the stream's enqueued work still completes") {
  fresh_state st("streams-destroy");
  st.use_here();
  const int before = settled_threads();
  cudaStream_t s = nullptr;
  cudaEvent_t ev = nullptr;
  int done = 0;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  REQUIRE(cudaEventCreate(&ev) == cudaSuccess);
  REQUIRE(simtest::launch_count(s, 1'000'000'000, &done) == cudaSuccess); // 1 s of device time
  REQUIRE(cudaEventRecord(ev, s) == cudaSuccess);
  CHECK(cudaStreamDestroy(s) == cudaSuccess);
  // It did not wait for the kernel: the event after it has not completed.
  CHECK(cudaEventQuery(ev) == cudaErrorNotReady);
  CHECK(done == 0);
  CHECK(cudaStreamQuery(s) == cudaErrorInvalidResourceHandle); // the handle is dead at once
  REQUIRE(cudaEventSynchronize(ev) == cudaSuccess);
  CHECK(done == 1);
  CHECK(threads_down_to(before) <= before);
  CHECK(cudaEventDestroy(ev) == cudaSuccess);
}
