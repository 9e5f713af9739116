// SPDX-License-Identifier: Apache-2.0
// The simulated runtime's rules of stream capture across streams (fork, join, merge, isolation,
// external event nodes) and of the device's graph memory pool (docs/cudasim.md, "Stream capture
// and graphs"). Each test names the toolkit header lines (CUDA 13.0) its rule comes from. They
// run only on the simulator (label cudasim), each test case a process on a fresh device state.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "sim_kernels.hpp"
#include "sim_objects.hpp"
#include "sim_util.hpp"

using simtest::new_event;
using simtest::new_stream;

using namespace std::chrono_literals;
using simtest::fresh_state;

namespace {

constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t ms = 1'000'000; // nanoseconds

/// A host function that blocks its stream until open() (work waiting on something else).
struct gate {
  std::mutex m;
  std::condition_variable cv;
  bool opened = false, entered = false;
  static void CUDART_CB wait(void* self) {
    auto* g = static_cast<gate*>(self);
    std::unique_lock lock(g->m);
    g->entered = true;
    g->cv.notify_all();
    g->cv.wait(lock, [g] { return g->opened; });
  }
  /// Until the stream has reached the gate.
  void wait_entered() {
    std::unique_lock lock(m);
    cv.wait(lock, [this] { return entered; });
  }
  void open() {
    {
      std::lock_guard lock(m);
      opened = true;
    }
    cv.notify_all();
  }
};

cudaStreamCaptureStatus capture_status(cudaStream_t s) {
  cudaStreamCaptureStatus status{};
  REQUIRE(cudaStreamIsCapturing(s, &status) == cudaSuccess);
  return status;
}

std::size_t node_count(cudaGraph_t g) {
  std::size_t n = 0;
  REQUIRE(cudaGraphGetNodes(g, nullptr, &n) == cudaSuccess);
  return n;
}

std::uint64_t graph_attr(cudaGraphMemAttributeType a) {
  std::uint64_t v = 0;
  REQUIRE(cudaDeviceGetGraphMemAttribute(0, a, &v) == cudaSuccess);
  return v;
}

/// Device memory in use, as every process sees it (cudaMemGetInfo).
std::uint64_t device_used() {
  std::size_t free = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free, &total) == cudaSuccess);
  return total - free;
}

} // namespace

// --- capture across streams -----------------------------------------------------------------

// cuda_runtime_api.h:2437-2439 (cudaStreamBeginCapture): "When a stream is in capture mode, all
// operations pushed into the stream will not be executed, but will instead be captured into a
// graph"; cuda_runtime_api.h:2195 (cudaStreamWaitEvent): "Makes all future work submitted to
// stream wait for all work captured in event". A stream that waits on an event recorded in a
// capture therefore captures too (Programming Guide, "Cross-stream Dependencies and Events").
TEST_CASE("a stream that waits on an event recorded in a capture joins it: its work is captured") {
  fresh_state st("capfork");
  st.use_here();
  cudaStream_t origin = new_stream(), side = new_stream();
  cudaEvent_t fork = new_event(), join = new_event();
  int counter = 0;
  REQUIRE(cudaStreamBeginCapture(origin, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(simtest::launch_count(origin, 1000, &counter) == cudaSuccess);
  REQUIRE(cudaEventRecord(fork, origin) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(side, fork, 0) == cudaSuccess);
  CHECK(capture_status(side) == cudaStreamCaptureStatusActive);
  unsigned long long origin_id = 0, side_id = 0;
  cudaStreamCaptureStatus status{};
  REQUIRE(cudaStreamGetCaptureInfo(origin, &status, &origin_id) == cudaSuccess);
  REQUIRE(cudaStreamGetCaptureInfo(side, &status, &side_id) == cudaSuccess);
  CHECK(side_id == origin_id); // one capture sequence
  REQUIRE(simtest::launch_count(side, 1000, &counter) == cudaSuccess);
  REQUIRE(cudaEventRecord(join, side) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(origin, join, 0) == cudaSuccess);
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(origin, &g) == cudaSuccess);
  REQUIRE(g != nullptr);
  // Ending the capture takes every stream of it out of capture mode.
  CHECK(capture_status(side) == cudaStreamCaptureStatusNone);
  REQUIRE(cudaStreamSynchronize(side) == cudaSuccess);
  CHECK(counter == 0); // the side stream's kernel was captured, not run
  CHECK(node_count(g) == 2);
  cudaGraphExec_t x = nullptr;
  REQUIRE(cudaGraphInstantiate(&x, g, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(x, origin) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(origin) == cudaSuccess);
  CHECK(counter == 2); // both kernels run when the graph does
  CHECK(cudaGraphExecDestroy(x) == cudaSuccess);
  CHECK(cudaGraphDestroy(g) == cudaSuccess);
}

// driver_types.h:1035-1039: cudaErrorStreamCaptureUnjoined, "The capture sequence contains a
// fork that was not joined to the primary stream."; cuda_runtime_api.h:2567-2568
// (cudaStreamEndCapture): "If capture was invalidated, due to a violation of the rules of stream
// capture, then a NULL graph will be returned."
TEST_CASE("a fork not joined back to the origin stream ends the capture with "
          "cudaErrorStreamCaptureUnjoined") {
  fresh_state st("capunjoined");
  st.use_here();
  cudaStream_t origin = new_stream(), side = new_stream();
  cudaEvent_t fork = new_event();
  int counter = 0;
  REQUIRE(cudaStreamBeginCapture(origin, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(cudaEventRecord(fork, origin) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(side, fork, 0) == cudaSuccess);
  REQUIRE(simtest::launch_count(side, 1000, &counter) == cudaSuccess);
  REQUIRE(simtest::launch_count(origin, 1000, &counter) == cudaSuccess);
  // Ending the capture on the side stream: it was not initiated there (driver_types.h:1030-1033,
  // cudaErrorStreamCaptureUnmatched).
  cudaGraph_t g = nullptr;
  CHECK(cudaStreamEndCapture(side, &g) == cudaErrorStreamCaptureUnmatched);
  CHECK(cudaStreamEndCapture(origin, &g) == cudaErrorStreamCaptureUnjoined);
  CHECK(g == nullptr);
  CHECK(capture_status(side) == cudaStreamCaptureStatusNone);
  CHECK(capture_status(origin) == cudaStreamCaptureStatusNone);
  REQUIRE(cudaStreamSynchronize(side) == cudaSuccess);
  CHECK(counter == 0); // nothing captured ever ran
  // Both streams are ordinary streams again.
  REQUIRE(simtest::launch_count(side, 1000, &counter) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(side) == cudaSuccess);
  CHECK(counter == 1);
  (void)cudaGetLastError();
}

// A fork whose stream only waited (no work of its own) has nothing left unjoined; a join that
// comes back through a second event is enough (Programming Guide, "Cross-stream Dependencies").
TEST_CASE("a fork with no work of its own, or joined back, ends the capture normally") {
  fresh_state st("capjoined");
  st.use_here();
  cudaStream_t origin = new_stream(), side = new_stream();
  cudaEvent_t fork = new_event();
  REQUIRE(cudaStreamBeginCapture(origin, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  REQUIRE(simtest::launch(origin, 1000) == cudaSuccess);
  REQUIRE(cudaEventRecord(fork, origin) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(side, fork, 0) == cudaSuccess);
  REQUIRE(simtest::launch(origin, 1000) == cudaSuccess);
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(origin, &g) == cudaSuccess);
  CHECK(node_count(g) == 2);
  CHECK(cudaGraphDestroy(g) == cudaSuccess);
}

// driver_types.h:1025-1028: cudaErrorStreamCaptureMerge, "The operation would have resulted in a
// merge of two independent capture sequences."
TEST_CASE("waiting on an event of another capture is cudaErrorStreamCaptureMerge") {
  fresh_state st("capmerge");
  st.use_here();
  cudaStream_t a = new_stream(), b = new_stream();
  cudaEvent_t e = new_event();
  REQUIRE(cudaStreamBeginCapture(a, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(b, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  REQUIRE(cudaEventRecord(e, a) == cudaSuccess);
  CHECK(cudaStreamWaitEvent(b, e, 0) == cudaErrorStreamCaptureMerge);
  cudaGraph_t g = nullptr;
  CHECK(cudaStreamEndCapture(b, &g) == cudaErrorStreamCaptureInvalidated);
  CHECK(cudaStreamEndCapture(a, &g) == cudaSuccess);
  CHECK(cudaGraphDestroy(g) == cudaSuccess);
  (void)cudaGetLastError();
}

// --- events from outside a capture ----------------------------------------------------------

// driver_types.h:1041-1046: cudaErrorStreamCaptureIsolation, "A dependency would have been
// created which crosses the capture sequence boundary. Only implicit in-stream ordering
// dependencies are allowed to cross the boundary."; driver_types.h:132 (cudaEventWaitExternal):
// "Event is captured in the graph as an external event node when performing stream capture".
TEST_CASE("a capture waiting on an event recorded outside it: isolation error, unless external") {
  fresh_state st("capisolation");
  st.use_here();
  cudaStream_t s = new_stream(), other = new_stream();
  cudaEvent_t outside = new_event();
  REQUIRE(cudaEventRecord(outside, other) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(other) == cudaSuccess); // complete: still outside the capture
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  CHECK(cudaStreamWaitEvent(s, outside, 0) == cudaErrorStreamCaptureIsolation);
  CHECK(capture_status(s) == cudaStreamCaptureStatusInvalidated);
  cudaGraph_t g = nullptr;
  CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);
  CHECK(g == nullptr);
  (void)cudaGetLastError();

  // With cudaEventWaitExternal the wait becomes a node: each replay waits for the event.
  int counter = 0;
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(s, outside, cudaEventWaitExternal) == cudaSuccess);
  REQUIRE(simtest::launch_count(s, 1000, &counter) == cudaSuccess);
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  CHECK(node_count(g) == 2);
  cudaGraphExec_t x = nullptr;
  REQUIRE(cudaGraphInstantiate(&x, g, 0) == cudaSuccess);
  gate closed;
  REQUIRE(cudaLaunchHostFunc(other, &gate::wait, &closed) == cudaSuccess);
  REQUIRE(cudaEventRecord(outside, other) == cudaSuccess); // recorded behind the closed gate
  REQUIRE(cudaGraphLaunch(x, s) == cudaSuccess);
  std::this_thread::sleep_for(20ms);
  CHECK(cudaStreamQuery(s) == cudaErrorNotReady); // the graph waits for the event
  CHECK(counter == 0);
  closed.open();
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(counter == 1);
  CHECK(cudaGraphExecDestroy(x) == cudaSuccess);
  CHECK(cudaGraphDestroy(g) == cudaSuccess);
}

// driver_types.h:129 and cuda_runtime_api.h:2861-2862 (cudaEventRecordWithFlags):
// "cudaEventRecordExternal: Event is captured in the graph as an external event node when
// performing stream capture." The node records the event each time the graph runs.
TEST_CASE("cudaEventRecordWithFlags(cudaEventRecordExternal) in a capture adds an event-record "
          "node") {
  fresh_state st("caprecord");
  st.use_here();
  cudaStream_t s = new_stream();
  cudaEvent_t before = new_event(), external = new_event();
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(simtest::launch(s, 30 * ms) == cudaSuccess);
  REQUIRE(cudaEventRecordWithFlags(external, s, cudaEventRecordExternal) == cudaSuccess);
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  CHECK(node_count(g) == 2);                      // the kernel and the event-record node
  CHECK(cudaEventQuery(external) == cudaSuccess); // not recorded by the capture itself
  cudaGraphExec_t x = nullptr;
  REQUIRE(cudaGraphInstantiate(&x, g, 0) == cudaSuccess);
  gate closed;
  REQUIRE(cudaEventRecord(before, s) == cudaSuccess);
  REQUIRE(cudaLaunchHostFunc(s, &gate::wait, &closed) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(x, s) == cudaSuccess);
  CHECK(cudaEventQuery(external) == cudaErrorNotReady); // recorded when the graph gets there
  closed.open();
  REQUIRE(cudaEventSynchronize(external) == cudaSuccess);
  float t = 0;
  REQUIRE(cudaEventElapsedTime(&t, before, external) == cudaSuccess);
  CHECK(t >= 29.0f); // the graph's kernel ran before the node recorded the event
  CHECK(cudaEventRecordWithFlags(external, s, 0x10) == cudaErrorInvalidValue);
  CHECK(cudaGraphExecDestroy(x) == cudaSuccess);
  CHECK(cudaGraphDestroy(g) == cudaSuccess);
  (void)cudaGetLastError();
}

// --- graph memory -----------------------------------------------------------------------------

// cuda_runtime_api.h:11079-11082 (cudaDeviceGraphMemTrim): "Free unused memory that was cached
// on the specified device for use with graphs back to the OS. Blocks which are not in use by a
// graph that is either currently executing or scheduled to execute are freed back to the
// operating system."; driver_types.h:2268-2293 and cuda_runtime_api.h:11111-11117: UsedMemCurrent
// is the memory "currently associated with graphs", ReservedMemCurrent the memory "currently
// allocated for use by the CUDA graphs asynchronous allocator". The memory a graph's allocation
// node maps stays in the graph pool after its free node ran (Programming Guide, "Graph Memory
// Nodes", "Physical Memory Footprint"), so the device keeps it until a trim.
TEST_CASE("graph memory stays reserved after the free node runs, until cudaDeviceGraphMemTrim") {
  fresh_state st("graphmem");
  st.use_here();
  cudaStream_t s = new_stream();
  const std::uint64_t base = device_used(); // the context
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(cudaMallocAsync(&p, 64 * MiB, s) == cudaSuccess);
  REQUIRE(simtest::launch(s, 1000) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  cudaGraphExec_t x = nullptr;
  REQUIRE(cudaGraphInstantiate(&x, g, 0) == cudaSuccess);
  CHECK(graph_attr(cudaGraphMemAttrReservedMemCurrent) == 0); // nothing mapped before a launch
  CHECK(device_used() == base);
  REQUIRE(cudaGraphLaunch(x, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess); // the free node has run
  CHECK(graph_attr(cudaGraphMemAttrReservedMemCurrent) == 64 * MiB);
  CHECK(graph_attr(cudaGraphMemAttrUsedMemCurrent) == 64 * MiB); // still mapped to the graph
  CHECK(device_used() == base + 64 * MiB);                       // and held on the device
  REQUIRE(cudaGraphLaunch(x, s) == cudaSuccess);                 // a replay reuses it
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(graph_attr(cudaGraphMemAttrReservedMemHigh) == 64 * MiB);
  CHECK(device_used() == base + 64 * MiB);
  // The trim releases what no executing or scheduled graph uses; the next launch maps again.
  REQUIRE(cudaDeviceGraphMemTrim(0) == cudaSuccess);
  CHECK(graph_attr(cudaGraphMemAttrReservedMemCurrent) == 0);
  CHECK(graph_attr(cudaGraphMemAttrUsedMemCurrent) == 0);
  CHECK(device_used() == base);
  REQUIRE(cudaGraphLaunch(x, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(device_used() == base + 64 * MiB);
  // Destroying the graph unmaps its memory, which stays reserved in the pool.
  CHECK(cudaGraphExecDestroy(x) == cudaSuccess);
  CHECK(cudaGraphDestroy(g) == cudaSuccess);
  CHECK(graph_attr(cudaGraphMemAttrUsedMemCurrent) == 0);
  CHECK(graph_attr(cudaGraphMemAttrReservedMemCurrent) == 64 * MiB);
  CHECK(device_used() == base + 64 * MiB);
  REQUIRE(cudaDeviceGraphMemTrim(0) == cudaSuccess);
  CHECK(device_used() == base);
  // cuda_runtime_api.h:11112-11113: "High watermark can only be reset to zero."
  std::uint64_t zero = 0, one = 1;
  CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrReservedMemHigh, &zero) == cudaSuccess);
  CHECK(graph_attr(cudaGraphMemAttrReservedMemHigh) == 0);
  CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &one) ==
        cudaErrorInvalidValue);
  CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &zero) ==
        cudaErrorInvalidValue);
  CHECK(cudaDeviceGetGraphMemAttribute(7, cudaGraphMemAttrUsedMemCurrent, &one) ==
        cudaErrorInvalidDevice); // cuda_runtime_api.h:11123-11125
  (void)cudaGetLastError();
}

// cuda_runtime_api.h:11081-11082: the trim keeps blocks "in use by a graph that is either
// currently executing or scheduled to execute"; an allocation a graph made and nobody freed yet
// is in use too (Programming Guide, "Physical Memory Footprint").
TEST_CASE("cudaDeviceGraphMemTrim keeps the memory of a running graph and of a live allocation") {
  fresh_state st("graphtrim");
  st.use_here();
  cudaStream_t s = new_stream();
  const std::uint64_t base = device_used();
  // A graph still running after its free node ran: its host node waits at a gate.
  gate closed;
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* q = nullptr;
  REQUIRE(cudaMallocAsync(&q, 8 * MiB, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(q, s) == cudaSuccess);
  REQUIRE(cudaLaunchHostFunc(s, &gate::wait, &closed) == cudaSuccess);
  cudaGraph_t running = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &running) == cudaSuccess);
  cudaGraphExec_t xr = nullptr;
  REQUIRE(cudaGraphInstantiate(&xr, running, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(xr, s) == cudaSuccess);
  closed.wait_entered(); // the free node has run, the graph has not finished
  REQUIRE(cudaDeviceGraphMemTrim(0) == cudaSuccess);
  CHECK(graph_attr(cudaGraphMemAttrReservedMemCurrent) == 8 * MiB);
  closed.open();
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaDeviceGraphMemTrim(0) == cudaSuccess);
  CHECK(graph_attr(cudaGraphMemAttrReservedMemCurrent) == 0);

  // An allocation the graph makes and does not free stays in use until something frees it.
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(cudaMallocAsync(&p, 16 * MiB, s) == cudaSuccess);
  REQUIRE(simtest::launch(s, 1000) == cudaSuccess);
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  cudaGraphExec_t x = nullptr;
  REQUIRE(cudaGraphInstantiate(&x, g, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(x, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaDeviceGraphMemTrim(0) == cudaSuccess); // the allocation is still live
  CHECK(graph_attr(cudaGraphMemAttrUsedMemCurrent) == 16 * MiB);
  CHECK(device_used() == base + 16 * MiB);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess); // freed outside the graph
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(device_used() == base + 16 * MiB); // the pool keeps it until a trim
  REQUIRE(cudaDeviceGraphMemTrim(0) == cudaSuccess);
  CHECK(graph_attr(cudaGraphMemAttrReservedMemCurrent) == 0);
  CHECK(device_used() == base);
  CHECK(cudaGraphExecDestroy(x) == cudaSuccess);
  CHECK(cudaGraphDestroy(g) == cudaSuccess);
  CHECK(cudaGraphExecDestroy(xr) == cudaSuccess);
  CHECK(cudaGraphDestroy(running) == cudaSuccess);
}

// cudaMemPoolCreate is a potentially unsafe call (cudaThreadExchangeStreamCaptureMode): refused,
// with cudaErrorStreamCaptureUnsupported, from a thread in Global mode while another thread has
// a Global capture (as on an H200, driver 580, CUDA 13.0); allowed in Relaxed mode, which leaves
// the capture valid.
TEST_CASE("cudaMemPoolCreate during a global capture: refused in global mode, allowed relaxed") {
  fresh_state st("cappool");
  st.use_here();
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  auto create = [&](cudaStreamCaptureMode mode) {
    cudaError_t e = cudaErrorUnknown;
    std::thread([&] {
      REQUIRE(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
      cudaMemPool_t pool = nullptr;
      e = cudaMemPoolCreate(&pool, &props);
      if (e == cudaSuccess) CHECK(cudaMemPoolDestroy(pool) == cudaSuccess);
    }).join();
    return e;
  };
  cudaStreamCaptureStatus status{};
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  CHECK(create(cudaStreamCaptureModeRelaxed) == cudaSuccess);
  REQUIRE(cudaStreamIsCapturing(s, &status) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusActive);
  CHECK(create(cudaStreamCaptureModeGlobal) == cudaErrorStreamCaptureUnsupported);
  REQUIRE(cudaStreamIsCapturing(s, &status) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusInvalidated);
  cudaGraph_t g = nullptr;
  CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();
  cudaStreamDestroy(s);
}
