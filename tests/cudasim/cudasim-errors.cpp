// SPDX-License-Identifier: Apache-2.0
// The simulated runtime's error rules (tools/cudasim/, docs/cudasim.md, "Errors" and "Events"):
// which calls return a sticky error after a device fault and which do not, and the context an
// event belongs to. Each CTest test is a process of its own on a fresh simulated device state,
// configured (fault injection, device count) before its first CUDA call.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "sim_kernels.hpp"
#include "sim_util.hpp"

using simtest::fresh_state;

namespace {

constexpr std::uint64_t ms = 1'000'000; // nanoseconds

/// Puts this process on a fresh state whose `n`th kernel launch faults (CUDASIM_STICKY_AT_LAUNCH).
void fault_at_launch(const fresh_state& st, const char* n) {
  st.use_here();
  ::setenv("CUDASIM_STICKY_AT_LAUNCH", n, 1);
}

using named_call = std::pair<const char*, std::function<cudaError_t()>>;

/// Objects of device 0's context made before the fault, and the fault itself: two timed events
/// around a good kernel, then a faulting kernel with an event recorded behind it. Also room for
/// what the calls after the fault return through their pointers.
struct faulted_context {
  cudaStream_t s = nullptr;
  cudaEvent_t before_a = nullptr, before_b = nullptr, behind = nullptr, unused = nullptr;
  void* dev = nullptr;
  void* host = nullptr;
  cudaMemPool_t pool = nullptr;
  cudaGraphExec_t exec = nullptr;
  // outputs of the calls made after the fault
  cudaEvent_t event_out = nullptr;
  cudaStream_t stream_out = nullptr;
  void* ptr_out = nullptr;
  cudaMemPool_t pool_out = nullptr;
  cudaGraph_t graph_out = nullptr;
  cudaGraphExec_t exec_out = nullptr;
  float ms_out = 0;
  unsigned flags_out = 0;
  int int_out = 0;
  std::uint64_t value_out = 0;
  std::size_t free_out = 0, total_out = 0;
  cudaStreamCaptureStatus capture_out{};

  faulted_context() {
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
    for (cudaEvent_t* e : {&before_a, &before_b, &behind, &unused})
      REQUIRE(cudaEventCreate(e) == cudaSuccess);
    REQUIRE(cudaMalloc(&dev, 4096) == cudaSuccess);
    REQUIRE(cudaMallocHost(&host, 4096) == cudaSuccess);
    REQUIRE(cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess);
    cudaGraph_t g = nullptr;
    REQUIRE(cudaGraphCreate(&g, 0) == cudaSuccess);
    REQUIRE(cudaGraphInstantiate(&exec, g, 0) == cudaSuccess);
    REQUIRE(cudaGraphDestroy(g) == cudaSuccess);
    // Launch 1 runs normally, between two events.
    REQUIRE(cudaEventRecord(before_a, s) == cudaSuccess);
    REQUIRE(simtest::launch(s, 1 * ms) == cudaSuccess);
    REQUIRE(cudaEventRecord(before_b, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    REQUIRE(cudaEventElapsedTime(&ms_out, before_a, before_b) == cudaSuccess);
    // Launch 2 faults when it runs; the launch itself succeeds (the fault is asynchronous).
    REQUIRE(simtest::launch(s, 1 * ms) == cudaSuccess);
    REQUIRE(cudaEventRecord(behind, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaErrorLaunchFailure);
  }
};

/// Calls that do CUDA work on the faulted context of `c`; those that destroy or free come last.
std::vector<named_call> context_work(faulted_context& c) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  return {
      {"cudaEventQuery (recorded behind the fault)", [&c] { return cudaEventQuery(c.behind); }},
      {"cudaEventQuery (completed before the fault)", [&c] { return cudaEventQuery(c.before_b); }},
      {"cudaEventQuery (never recorded)", [&c] { return cudaEventQuery(c.unused); }},
      {"cudaEventElapsedTime (completed before the fault)",
       [&c] { return cudaEventElapsedTime(&c.ms_out, c.before_a, c.before_b); }},
      {"cudaEventSynchronize", [&c] { return cudaEventSynchronize(c.behind); }},
      {"cudaEventRecord", [&c] { return cudaEventRecord(c.unused, c.s); }},
      {"cudaEventCreate", [&c] { return cudaEventCreate(&c.event_out); }},
      {"cudaStreamCreate", [&c] { return cudaStreamCreate(&c.stream_out); }},
      {"cudaStreamGetFlags", [&c] { return cudaStreamGetFlags(c.s, &c.flags_out); }},
      {"cudaStreamGetPriority", [&c] { return cudaStreamGetPriority(c.s, &c.int_out); }},
      {"cudaStreamIsCapturing", [&c] { return cudaStreamIsCapturing(c.s, &c.capture_out); }},
      {"cudaStreamQuery", [&c] { return cudaStreamQuery(c.s); }},
      {"cudaStreamWaitEvent", [&c] { return cudaStreamWaitEvent(c.s, c.before_b, 0); }},
      {"cudaLaunchKernel", [&c] { return simtest::launch(c.s, 1000); }},
      {"cudaGraphLaunch", [&c] { return cudaGraphLaunch(c.exec, c.s); }},
      {"cudaDeviceSynchronize", [] { return cudaDeviceSynchronize(); }},
      {"cudaMalloc", [&c] { return cudaMalloc(&c.ptr_out, 4096); }},
      {"cudaMallocAsync", [&c] { return cudaMallocAsync(&c.ptr_out, 4096, c.s); }},
      {"cudaMallocHost", [&c] { return cudaMallocHost(&c.ptr_out, 64); }},
      {"cudaMemcpy", [&c] { return cudaMemcpy(c.host, c.dev, 64, cudaMemcpyDeviceToHost); }},
      {"cudaMemset", [&c] { return cudaMemset(c.dev, 0, 64); }},
      {"cudaMemGetInfo", [&c] { return cudaMemGetInfo(&c.free_out, &c.total_out); }},
      {"cudaDeviceGetDefaultMemPool", [&c] { return cudaDeviceGetDefaultMemPool(&c.pool_out, 0); }},
      {"cudaDeviceGetMemPool", [&c] { return cudaDeviceGetMemPool(&c.pool_out, 0); }},
      {"cudaMemPoolCreate", [&c, props] { return cudaMemPoolCreate(&c.pool_out, &props); }},
      {"cudaMemPoolTrimTo", [&c] { return cudaMemPoolTrimTo(c.pool, 0); }},
      {"cudaMemPoolGetAttribute",
       [&c] {
         return cudaMemPoolGetAttribute(c.pool, cudaMemPoolAttrReservedMemCurrent, &c.value_out);
       }},
      {"cudaMemPoolSetAttribute",
       [&c] {
         return cudaMemPoolSetAttribute(c.pool, cudaMemPoolAttrReleaseThreshold, &c.value_out);
       }},
      {"cudaDeviceGraphMemTrim", [] { return cudaDeviceGraphMemTrim(0); }},
      {"cudaDeviceGetGraphMemAttribute",
       [&c] {
         return cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &c.value_out);
       }},
      {"cudaDeviceSetGraphMemAttribute",
       [&c] {
         c.value_out = 0;
         return cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &c.value_out);
       }},
      {"cudaGraphInstantiate",
       [&c] {
         if (cudaGraphCreate(&c.graph_out, 0) != cudaSuccess) return cudaErrorUnknown;
         return cudaGraphInstantiate(&c.exec_out, c.graph_out, 0);
       }},
      {"cudaGraphExecDestroy", [&c] { return cudaGraphExecDestroy(c.exec); }},
      {"cudaFree", [&c] { return cudaFree(c.dev); }},
      {"cudaFreeHost", [&c] { return cudaFreeHost(c.host); }},
      {"cudaEventDestroy", [&c] { return cudaEventDestroy(c.before_a); }},
      {"cudaStreamDestroy", [&c] { return cudaStreamDestroy(c.s); }},
  };
}

} // namespace

// driver_types.h:913-914, on cudaErrorLaunchFailure (and the other sticky errors): "This leaves
// the process in an inconsistent state and any further CUDA work will return the same error."
TEST_CASE("after a sticky fault every call that does CUDA work on the context returns it") {
  fresh_state st("sticky-all");
  fault_at_launch(st, "2");
  faulted_context c;
  for (auto& [name, call] : context_work(c)) {
    INFO(std::string(name));
    CHECK(call() == cudaErrorLaunchFailure);
  }
  // cudaGetLastError reports the sticky error once, like a recorded one (observed on an H200,
  // driver 580, CUDA 13.0); CUDA work still returns it, and records it again.
  CHECK(cudaPeekAtLastError() == cudaErrorLaunchFailure);
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  CHECK(cudaPeekAtLastError() == cudaSuccess);
  CHECK(cudaGetLastError() == cudaSuccess);
  cudaEvent_t e = nullptr;
  CHECK(cudaEventCreate(&e) == cudaErrorLaunchFailure);
  CHECK(cudaPeekAtLastError() == cudaErrorLaunchFailure);
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  CHECK(cudaGetLastError() == cudaSuccess);
}

// The calls that do no CUDA work on a context (docs/cudasim.md, "Errors", lists them and why):
// error names, versions, the device count (whose documentation, cuda_runtime_api.h:1266-1267,
// lists cudaSuccess only), the thread's device and capture mode, device properties, driver entry
// points. None of this is confirmed on a GPU yet.
TEST_CASE("after a sticky fault the calls that do no work on a context still succeed") {
  fresh_state st("sticky-exempt");
  fault_at_launch(st, "2");
  faulted_context c;
  int n = 0, device = -1, value = 0, version = 0;
  CHECK(cudaGetDeviceCount(&n) == cudaSuccess);
  CHECK(n == 1);
  CHECK(cudaGetDevice(&device) == cudaSuccess);
  CHECK(device == 0);
  CHECK(cudaSetDevice(0) == cudaSuccess);
  cudaDeviceProp p{};
  CHECK(cudaGetDeviceProperties(&p, 0) == cudaSuccess);
  CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess);
  CHECK(value == p.multiProcessorCount);
  char bus[32] = {};
  CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, 0) == cudaSuccess);
  CHECK(cudaRuntimeGetVersion(&version) == cudaSuccess);
  CHECK(cudaDriverGetVersion(&version) == cudaSuccess);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CHECK(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
  CHECK(mode == cudaStreamCaptureModeGlobal);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  CHECK(cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault,
                                         &found) == cudaSuccess);
  CHECK(fn != nullptr);
  CHECK(std::string(cudaGetErrorName(cudaErrorLaunchFailure)) == "cudaErrorLaunchFailure");
  cudaFuncAttributes fa{};
  CHECK(cudaFuncGetAttributes(&fa, reinterpret_cast<const void*>(&simtest::timed_kernel)) ==
        cudaSuccess);
  // Graphs are host-side descriptions until instantiated: building one involves no context.
  cudaGraph_t g = nullptr;
  CHECK(cudaGraphCreate(&g, 0) == cudaSuccess);
  CHECK(cudaGraphDestroy(g) == cudaSuccess);
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure); // still there
}

// cuda_runtime_api.h:2804, on cudaEventRecord: "\p event and \p stream must be on the same CUDA
// context." (cudaErrorInvalidResourceHandle is among its documented results.)
TEST_CASE("an event of device 0 cannot be recorded in a stream of device 1") {
  fresh_state st("event-ctx");
  st.use_here();
  ::setenv("CUDASIM_DEVICES", "2", 1);
  cudaEvent_t e0 = nullptr;
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  REQUIRE(cudaEventCreate(&e0) == cudaSuccess);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  cudaStream_t s1 = nullptr;
  REQUIRE(cudaStreamCreate(&s1) == cudaSuccess);
  CHECK(cudaEventRecord(e0, s1) == cudaErrorInvalidResourceHandle);
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
  CHECK(cudaEventRecordWithFlags(e0, s1, 0) == cudaErrorInvalidResourceHandle);
  CHECK(cudaEventRecord(e0, nullptr) == cudaErrorInvalidResourceHandle); // device 1's legacy
  (void)cudaGetLastError();
  CHECK(cudaEventQuery(e0) == cudaSuccess); // still never recorded
  cudaEvent_t e1 = nullptr;
  REQUIRE(cudaEventCreate(&e1) == cudaSuccess);
  CHECK(cudaEventRecord(e1, s1) == cudaSuccess); // its own device's stream
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  CHECK(cudaEventRecord(e0, nullptr) == cudaSuccess); // device 0's legacy stream
  CHECK(cudaStreamSynchronize(s1) == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(cudaGetLastError() == cudaSuccess);
}

// cuda_runtime_api.h:2198, on cudaStreamWaitEvent: "\p event may be from a different device than
// \p stream."
TEST_CASE("a stream of device 1 may wait for an event of device 0, and runs after it") {
  fresh_state st("event-wait");
  st.use_here();
  ::setenv("CUDASIM_DEVICES", "2", 1);
  int counter = 0;
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  cudaStream_t s0 = nullptr;
  cudaEvent_t e0 = nullptr;
  REQUIRE(cudaStreamCreate(&s0) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&e0, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(simtest::launch_count(s0, 20 * ms, &counter) == cudaSuccess);
  REQUIRE(cudaEventRecord(e0, s0) == cudaSuccess);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  cudaStream_t s1 = nullptr;
  REQUIRE(cudaStreamCreate(&s1) == cudaSuccess);
  CHECK(cudaStreamWaitEvent(s1, e0, 0) == cudaSuccess);
  // A host function on device 1's stream sees what the stream has waited for.
  struct seen {
    int* counter;
    int value = -1;
  } look{&counter};
  REQUIRE(cudaLaunchHostFunc(
              s1, [](void* v) { static_cast<seen*>(v)->value = *static_cast<seen*>(v)->counter; },
              &look) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s1) == cudaSuccess);
  CHECK(look.value == 1);
}
