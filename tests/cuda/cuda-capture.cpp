// SPDX-License-Identifier: Apache-2.0
// The CUDA layer and stream capture across streams and graph memory (design.md, "Budgeted
// memory"): memory a session allocates during a capture is graph memory, which the device's
// graph memory pool keeps after the graph's free ran, so the budget keeps it charged until
// release_graph_memory(); a stream that joined an application's capture by waiting on one of its
// events is capturing for gpushare too. Each test runs on a GPU and on the simulated runtime.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cstdint>

#include <gpushare/cuda.hpp>

#include "cuda_test_util.hpp"
#include "kernels.hpp"

namespace gc = gpushare::cuda;

namespace {

using cutest::no_overhead;
using cutest::stream;

constexpr std::uint64_t MiB = 1ull << 20;

/// The device's graph memory pool (this process's), as CUDA reports it.
std::uint64_t graph_pool(cudaGraphMemAttributeType a) {
  std::uint64_t v = 0;
  REQUIRE(cudaDeviceGetGraphMemAttribute(0, a, &v) == cudaSuccess);
  return v;
}

/// Ends the capture on `s`, instantiates the graph, launches it once and waits for it.
struct captured_graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  explicit captured_graph(cudaStream_t s) {
    REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  }
  void run(cudaStream_t s) {
    REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  }
  std::size_t nodes() {
    std::size_t n = 0;
    REQUIRE(cudaGraphGetNodes(graph, nullptr, &n) == cudaSuccess);
    return n;
  }
  ~captured_graph() { destroy(); }
  void destroy() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    exec = nullptr;
    graph = nullptr;
  }
};

} // namespace

TEST_CASE("memory allocated in a capture stays charged after its captured free, while the "
          "graph pool holds it, until release_graph_memory()") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("capalloc");
  gc::device_session s(0, d.options(), no_overhead());
  d.uses(s.device().uuid);
  stream st;
  REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* p = s.malloc_async(8 * MiB, st.s);
  REQUIRE(p != nullptr);
  CHECK(s.info().reserved == 8 * MiB);
  s.free_async(p, st.s);
  CHECK(s.info().reserved == 8 * MiB); // graph memory: the free node will not give it back
  CHECK(s.statistics().graph_bytes_held == 8 * MiB);
  captured_graph g(st.s);
  CHECK(g.nodes() == 2); // the allocation and the free, as graph memory nodes
  g.run(st.s);
  g.run(st.s);
  // After the free node ran the device's graph pool still holds the memory: so does the budget.
  CHECK(graph_pool(cudaGraphMemAttrReservedMemCurrent) >= 8 * MiB);
  s.synchronize();
  CHECK(s.info().reserved == 8 * MiB);
  g.destroy();
  CHECK(s.release_graph_memory() == 8 * MiB);
  CHECK(s.info().reserved == 0);
  CHECK(s.statistics().graph_bytes_held == 0);
  CHECK(graph_pool(cudaGraphMemAttrReservedMemCurrent) == 0); // the session trimmed the pool
}

TEST_CASE("release_graph_memory() keeps what the graph pool still reserves: an allocation not "
          "freed yet") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("capkeep");
  gc::device_session s(0, d.options(), no_overhead());
  d.uses(s.device().uuid);
  stream st;
  REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* p = s.malloc_async(16 * MiB, st.s); // freed after the graph, outside it
  REQUIRE(gpushare_test::launch_spin(st.s, 100'000) == cudaSuccess);
  captured_graph g(st.s);
  g.run(st.s);
  g.destroy(); // the allocation outlives its graph until freed
  CHECK(s.release_graph_memory() == 0);
  CHECK(s.info().reserved == 16 * MiB);
  s.free_async(p, st.s);
  REQUIRE(cudaStreamSynchronize(st.s) == cudaSuccess);
  CHECK(s.info().reserved == 16 * MiB); // freed, but still in the graph pool
  CHECK(s.release_graph_memory() == 16 * MiB);
  CHECK(s.info().reserved == 0);
}

TEST_CASE("a session's end trims the graph memory pool its graph memory was in") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("capend");
  stream st;
  {
    gc::device_session s(0, d.options(), no_overhead());
    d.uses(s.device().uuid);
    REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    s.free_async(s.malloc_async(4 * MiB, st.s), st.s);
    captured_graph g(st.s);
    g.run(st.s);
    g.destroy();
    CHECK(graph_pool(cudaGraphMemAttrReservedMemCurrent) >= 4 * MiB);
  }
  CHECK(graph_pool(cudaGraphMemAttrReservedMemCurrent) == 0);
}

TEST_CASE("a guard and an allocation on a stream that joined an application's capture are "
          "captured too") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("capfork");
  gc::device_session s(0, d.options(), no_overhead());
  d.uses(s.device().uuid);
  stream origin, side;
  cudaEvent_t fork = nullptr, join = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&join, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(origin.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(gpushare_test::launch_spin(origin.s, 100'000) == cudaSuccess);
  REQUIRE(cudaEventRecord(fork, origin.s) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(side.s, fork, 0) == cudaSuccess); // the side stream joins
  {
    gc::scoped_kernel guard(s, side.s); // would add event nodes if it recorded its events
    REQUIRE(gpushare_test::launch_spin(side.s, 100'000) == cudaSuccess);
  }
  void* p = s.malloc_async(2 * MiB, side.s);
  s.free_async(p, side.s);
  REQUIRE(cudaEventRecord(join, side.s) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(origin.s, join, 0) == cudaSuccess);
  captured_graph g(origin.s);
  CHECK(g.nodes() == 4); // two kernels, the allocation and the free
  CHECK(s.statistics().captured_guards == 1);
  CHECK(s.statistics().graph_bytes_held == 2 * MiB);
  g.run(origin.s);
  g.destroy();
  CHECK(s.release_graph_memory() == 2 * MiB);
  CHECK(cudaEventDestroy(fork) == cudaSuccess);
  CHECK(cudaEventDestroy(join) == cudaSuccess);
}
