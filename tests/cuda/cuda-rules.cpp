// SPDX-License-Identifier: Apache-2.0
// The documented CUDA rules that cudasim models and the CUDA layer relies on (issue 25), written
// so that they run on either runtime: `cuda-rules/<case>` on the real one (label cuda: a GPU
// checks the rule itself) and `cudasim/cuda-rules/<case>` on cudasim (label cudasim).
// tools/gpu-check.sh runs both on the day a GPU is lent and lists each case that passes on one
// and fails on the other: a rule cudasim models differently from the GPU. Each case cites the
// header line (CUDA 13.0.88) of its rule; cudasim's own, finer tests are in tests/cudasim/.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdio>

#include "cuda_test_util.hpp"
#include "kernels.hpp"

namespace {

using cutest::gate;
using cutest::stream;

constexpr std::uint64_t ms = 1'000'000; // ns

/// Runs the calling test case again in a process of its own (a fault poisons the process). The
/// name must hold no comma (doctest's filter splits there, and the child would run nothing).
#define RUN_IN_CHILD(name, ...)                                                                    \
  do {                                                                                             \
    if (!cutest::in_child()) {                                                                     \
      CUTEST_REQUIRE_GPU();                                                                        \
      CHECK(cutest::run_in_child(name, {__VA_ARGS__}) == 0);                                       \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

} // namespace

// driver_types.h:913-914 (cudaErrorLaunchFailure; the same words at each sticky error): "This
// leaves the process in an inconsistent state and any further CUDA work will return the same
// error."
TEST_CASE("rule: after a kernel fault any further CUDA work returns the same error") {
  RUN_IN_CHILD("rule: after a kernel fault any further CUDA work returns the same error",
               {"CUDASIM_STICKY_AT_LAUNCH", "1"}); // cudasim runs no __trap(): it injects one
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  stream st;
  cudaEvent_t before = nullptr;
  REQUIRE(cudaEventCreate(&before) == cudaSuccess);
  REQUIRE(cudaEventRecord(before, st.s) == cudaSuccess);
  // The gate holds the kernel back until its launch has been checked (launch_trap reads
  // cudaGetLastError, which reports the sticky error once the kernel has run).
  gate g;
  REQUIRE(cudaLaunchHostFunc(st.s, gate::wait, &g) == cudaSuccess);
  const cudaError_t launched = gpushare_test::launch_trap(st.s);
  g.release();
  REQUIRE(launched == cudaSuccess);
  const cudaError_t sticky = cudaStreamSynchronize(st.s);
  INFO("the fault: " << cudaGetErrorName(sticky));
  REQUIRE(sticky != cudaSuccess);
  cudaEvent_t e = nullptr;
  cudaStream_t s2 = nullptr;
  void* p = nullptr;
  float t = 0;
  CHECK(cudaEventQuery(before) == sticky); // completed before the fault: still the error
  CHECK(cudaEventElapsedTime(&t, before, before) == sticky);
  CHECK(cudaEventCreate(&e) == sticky);
  CHECK(cudaEventDestroy(before) == sticky);
  CHECK(cudaStreamCreate(&s2) == sticky);
  CHECK(cudaMalloc(&p, 1 << 20) == sticky);
  CHECK(cudaDeviceSynchronize() == sticky);
  // cudaGetLastError reports it once (observed on an H200, driver 580, CUDA 13.0), ...
  CHECK(cudaGetLastError() == sticky);
  CHECK(cudaGetLastError() == cudaSuccess);
  // ... and CUDA work still returns it.
  CHECK(cudaMalloc(&p, 1 << 20) == sticky);
  int count = 0;
  CHECK(cudaGetDeviceCount(&count) == cudaSuccess); // no CUDA work: cuda_runtime_api.h:1266
}

// driver_types.h:1036-1039 (cudaErrorStreamCaptureUnjoined): "The capture sequence contains a
// fork that was not joined to the primary stream."
TEST_CASE("rule: a capture with a fork not joined back ends with cudaErrorStreamCaptureUnjoined") {
  CUTEST_REQUIRE_GPU();
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  stream origin, side;
  cudaEvent_t fork = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(origin.s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  REQUIRE(gpushare_test::launch_spin(origin.s, 1 * ms) == cudaSuccess);
  REQUIRE(cudaEventRecord(fork, origin.s) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(side.s, fork, 0) == cudaSuccess); // the side stream joins
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  REQUIRE(cudaStreamIsCapturing(side.s, &status) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusActive);
  REQUIRE(gpushare_test::launch_spin(side.s, 1 * ms) == cudaSuccess); // captured, not run
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(origin.s, &graph) == cudaErrorStreamCaptureUnjoined);
  CHECK(graph == nullptr);
  (void)cudaGetLastError();
  REQUIRE(cudaStreamIsCapturing(side.s, &status) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusNone); // the capture is over for the side stream too
  cudaEventDestroy(fork);
}

// driver_types.h:1041-1046 (cudaErrorStreamCaptureIsolation): "A dependency would have been
// created which crosses the capture sequence boundary."
TEST_CASE("rule: a capturing stream may not wait on an event recorded outside the capture") {
  CUTEST_REQUIRE_GPU();
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  stream capturing, other;
  cudaEvent_t outside = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&outside, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(gpushare_test::launch_spin(other.s, 1 * ms) == cudaSuccess);
  REQUIRE(cudaEventRecord(outside, other.s) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(capturing.s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CHECK(cudaStreamWaitEvent(capturing.s, outside, 0) == cudaErrorStreamCaptureIsolation);
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(capturing.s, &graph) == cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();
  REQUIRE(cudaStreamSynchronize(other.s) == cudaSuccess);
  cudaEventDestroy(outside);
}

// cuda_runtime_api.h:11075-11103 (cudaDeviceGraphMemTrim: "Free unused memory that was cached on
// the specified device for use with graphs back to the OS") and 11114
// (cudaGraphMemAttrReservedMemCurrent: memory "currently allocated for use by graphs").
TEST_CASE("rule: graph memory stays reserved after its free runs, until cudaDeviceGraphMemTrim") {
  CUTEST_REQUIRE_GPU();
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  stream st;
  constexpr std::size_t bytes = 64u << 20;
  REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(cudaMallocAsync(&p, bytes, st.s) == cudaSuccess);
  REQUIRE(gpushare_test::launch_spin(st.s, 1 * ms) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, st.s) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(st.s, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, st.s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(st.s) == cudaSuccess); // the free node has run
  std::size_t reserved = 0;
  REQUIRE(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved) ==
          cudaSuccess);
  CHECK(reserved >= bytes); // still the graph pool's, though no allocation lives
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  REQUIRE(cudaDeviceGraphMemTrim(0) == cudaSuccess);
  REQUIRE(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved) ==
          cudaSuccess);
  CHECK(reserved == 0);
}

// cuda_runtime_api.h:2804 (cudaEventRecord): "event and stream must be on the same CUDA
// context."
TEST_CASE("rule: an event of device 0 cannot be recorded on a stream of device 1") {
  CUTEST_REQUIRE_GPU();
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  if (count < 2) {
    std::printf("GPUSHARE_SKIP: needs two devices (%d visible)\n", count);
    return;
  }
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  cudaEvent_t e = nullptr;
  REQUIRE(cudaEventCreate(&e) == cudaSuccess);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  stream on_one;
  CHECK(cudaEventRecord(e, on_one.s) != cudaSuccess);
  (void)cudaGetLastError();
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  cudaEventDestroy(e);
}
