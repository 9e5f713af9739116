// SPDX-License-Identifier: Apache-2.0
// Reading captured graphs (docs/cudasim.md, "Graph inspection"): the nodes stream capture makes,
// their types, the roots, the edges both ways, each type's parameters, and the results for bad
// arguments, as cuda_runtime_api.h (CUDA 13.0) documents them. Simulator only (label cudasim),
// each test case a process on a fresh device state.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <set>
#include <vector>

#include "sim_graph.hpp"
#include "sim_kernels.hpp"
#include "sim_objects.hpp"
#include "sim_util.hpp"

using simtest::new_event;
using simtest::new_stream;

using simtest::as_set;
using simtest::dependencies;
using simtest::dependents;
using simtest::edge;
using simtest::fresh_state;
using simtest::graph_edges;
using simtest::graph_nodes;
using simtest::node_list;
using simtest::node_type;
using simtest::root_nodes;

namespace {

int host_calls = 0;
void CUDART_CB count_call(void* counter) { ++*static_cast<int*>(counter); }

/// A kernel launch with a grid, block and shared memory of its own (simtest::count_kernel).
cudaError_t launch_shaped(cudaStream_t s, std::uint64_t ns, int* counter) {
  simtest::declare_kernels();
  void* args[] = {&ns, &counter};
  return cudaLaunchKernel(reinterpret_cast<const void*>(&simtest::count_kernel), dim3(4, 2, 1),
                          dim3(32, 4, 1), args, 128, s);
}

std::set<edge> edge_set(cudaGraph_t g) {
  const std::vector<edge> e = graph_edges(g);
  return {e.begin(), e.end()};
}

/// The graph of the one-stream test: six nodes of these types, in a chain.
void check_chain(cudaGraph_t g, const node_list& n) {
  REQUIRE(n.size() == 6);
  const cudaGraphNodeType types[] = {cudaGraphNodeTypeKernel,      cudaGraphNodeTypeMemcpy,
                                     cudaGraphNodeTypeMemset,      cudaGraphNodeTypeHost,
                                     cudaGraphNodeTypeEventRecord, cudaGraphNodeTypeWaitEvent};
  for (std::size_t i = 0; i < n.size(); ++i) {
    CAPTURE(i);
    CHECK(node_type(n[i]) == types[i]);
    CHECK(as_set(dependencies(n[i])) ==
          (i == 0 ? std::set<cudaGraphNode_t>{} : std::set<cudaGraphNode_t>{n[i - 1]}));
    CHECK(as_set(dependents(n[i])) ==
          (i + 1 == n.size() ? std::set<cudaGraphNode_t>{} : std::set<cudaGraphNode_t>{n[i + 1]}));
  }
  CHECK(root_nodes(g) == node_list{n[0]});
  std::set<edge> chain;
  for (std::size_t i = 1; i < n.size(); ++i) chain.emplace(n[i - 1], n[i]);
  CHECK(edge_set(g) == chain);
  CHECK(graph_edges(g).size() == 5);
}

/// The kernel and memcpy nodes of the one-stream test: what the launch and the copy were given.
void check_kernel_and_copy(cudaGraphNode_t kernel, cudaGraphNode_t copy, const int* counter,
                           const void* dev, const void* host) {
  cudaKernelNodeParams k{};
  REQUIRE(cudaGraphKernelNodeGetParams(kernel, &k) == cudaSuccess);
  CHECK(k.func == reinterpret_cast<void*>(&simtest::count_kernel));
  CHECK((k.gridDim.x == 4 && k.gridDim.y == 2 && k.gridDim.z == 1));
  CHECK((k.blockDim.x == 32 && k.blockDim.y == 4 && k.blockDim.z == 1));
  CHECK(k.sharedMemBytes == 128);
  REQUIRE(k.kernelParams != nullptr);
  CHECK(*static_cast<std::uint64_t*>(k.kernelParams[0]) == 5000);
  CHECK(*static_cast<int**>(k.kernelParams[1]) == counter);
  CHECK(k.extra == nullptr);

  cudaMemcpy3DParms c{};
  REQUIRE(cudaGraphMemcpyNodeGetParams(copy, &c) == cudaSuccess);
  CHECK(c.srcPtr.ptr == host);
  CHECK(c.dstPtr.ptr == dev);
  CHECK((c.extent.width == 3000 && c.extent.height == 1 && c.extent.depth == 1));
  CHECK(c.kind == cudaMemcpyHostToDevice);
  CHECK((c.srcArray == nullptr && c.dstArray == nullptr));
}

/// Each getter refuses a node of another type, a handle that names no node, and a null output
/// (cudaErrorInvalidValue), and writes nothing then.
void check_getters_refuse(cudaGraphNode_t kernel, cudaGraphNode_t memset,
                          cudaGraphNode_t stranger) {
  constexpr cudaError_t bad = cudaErrorInvalidValue;
  cudaKernelNodeParams k{};
  cudaMemcpy3DParms c{};
  cudaMemsetParams m{};
  cudaHostNodeParams h{};
  cudaEvent_t ev = nullptr;
  cudaMemAllocNodeParams a{};
  void* p = nullptr;
  CHECK(cudaGraphKernelNodeGetParams(memset, &k) == bad);
  CHECK(cudaGraphKernelNodeGetParams(stranger, &k) == bad);
  CHECK(cudaGraphKernelNodeGetParams(kernel, nullptr) == bad);
  CHECK(cudaGraphMemsetNodeGetParams(kernel, &m) == bad);
  CHECK(cudaGraphMemsetNodeGetParams(memset, nullptr) == bad);
  CHECK(cudaGraphMemcpyNodeGetParams(kernel, &c) == bad);
  CHECK(cudaGraphHostNodeGetParams(kernel, &h) == bad);
  CHECK(cudaGraphEventRecordNodeGetEvent(kernel, &ev) == bad);
  CHECK(cudaGraphEventWaitNodeGetEvent(memset, &ev) == bad);
  CHECK(cudaGraphMemAllocNodeGetParams(kernel, &a) == bad);
  CHECK(cudaGraphMemFreeNodeGetParams(memset, &p) == bad);
  CHECK(cudaGraphMemFreeNodeGetParams(nullptr, &p) == bad);
  CHECK(ev == nullptr);
  CHECK(p == nullptr);
}

} // namespace

// One stream: every node depends on the stream's previous node (Programming Guide, "Stream
// Capture"); cudaEventRecord without cudaEventRecordExternal adds no node.
TEST_CASE("one stream: one node per call, a chain, each type's parameters") {
  fresh_state st("graphs-chain");
  st.use_here();
  cudaStream_t s = new_stream();
  cudaEvent_t plain = new_event(), recorded = new_event(), waited = new_event();
  void* dev = nullptr;
  REQUIRE(cudaMalloc(&dev, 4096) == cudaSuccess);
  std::vector<unsigned char> host(4096, 7);
  REQUIRE(cudaEventRecord(waited, s) == cudaSuccess); // recorded outside the capture
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  int counter = 0, calls = 0;

  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(launch_shaped(s, 5000, &counter) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(dev, host.data(), 3000, cudaMemcpyHostToDevice, s) == cudaSuccess);
  REQUIRE(cudaEventRecord(plain, s) == cudaSuccess); // no node
  REQUIRE(cudaMemsetAsync(dev, 0x5A, 1000, s) == cudaSuccess);
  REQUIRE(cudaLaunchHostFunc(s, count_call, &calls) == cudaSuccess);
  REQUIRE(cudaEventRecordWithFlags(recorded, s, cudaEventRecordExternal) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(s, waited, cudaEventWaitExternal) == cudaSuccess);
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);

  const node_list n = graph_nodes(g);
  check_chain(g, n);

  check_kernel_and_copy(n[0], n[1], &counter, dev, host.data());

  cudaMemsetParams m{};
  REQUIRE(cudaGraphMemsetNodeGetParams(n[2], &m) == cudaSuccess);
  CHECK(m.dst == dev);
  CHECK(m.value == 0x5A);
  CHECK(m.elementSize == 1);
  CHECK((m.width == 1000 && m.height == 1));

  cudaHostNodeParams h{};
  REQUIRE(cudaGraphHostNodeGetParams(n[3], &h) == cudaSuccess);
  CHECK((h.fn == &count_call)); // (function pointers: doctest cannot print them)
  CHECK(h.userData == &calls);

  cudaEvent_t ev = nullptr;
  REQUIRE(cudaGraphEventRecordNodeGetEvent(n[4], &ev) == cudaSuccess);
  CHECK(ev == recorded);
  REQUIRE(cudaGraphEventWaitNodeGetEvent(n[5], &ev) == cudaSuccess);
  CHECK(ev == waited);

  // The graph read is the graph that runs.
  cudaGraphExec_t x = nullptr;
  REQUIRE(cudaGraphInstantiate(&x, g, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(x, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(counter == 1);
  CHECK(calls == 1);
  CHECK(static_cast<unsigned char*>(dev)[999] == 0x5A);
  CHECK(static_cast<unsigned char*>(dev)[2999] == 7);
  REQUIRE(cudaGraphExecDestroy(x) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(g) == cudaSuccess);
}

// A fork (a stream waits on an event of the origin) and a join (the origin waits on an event of
// the side stream): the side's first node depends on the origin's node before the record, and
// the origin's next node on both streams' last nodes (Programming Guide, "Cross-stream
// Dependencies and Events").
TEST_CASE("two streams forked and joined: a diamond") {
  fresh_state st("graphs-diamond");
  st.use_here();
  cudaStream_t origin = new_stream(), side = new_stream();
  cudaEvent_t fork = new_event(), join = new_event();
  void* dev = nullptr;
  REQUIRE(cudaMalloc(&dev, 256) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(origin, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(simtest::launch(origin, 1000) == cudaSuccess); // a
  REQUIRE(cudaEventRecord(fork, origin) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(side, fork, 0) == cudaSuccess);
  REQUIRE(simtest::launch(origin, 1000) == cudaSuccess);                     // b
  REQUIRE(cudaMemsetAsync(dev, 1, 256, side) == cudaSuccess);                // c
  REQUIRE(cudaLaunchHostFunc(side, count_call, &host_calls) == cudaSuccess); // d
  REQUIRE(cudaEventRecord(join, side) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(origin, join, 0) == cudaSuccess);
  REQUIRE(simtest::launch(origin, 1000) == cudaSuccess); // e
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(origin, &g) == cudaSuccess);

  const node_list n = graph_nodes(g);
  REQUIRE(n.size() == 5);
  const cudaGraphNode_t a = n[0], b = n[1], c = n[2], d = n[3], e = n[4];
  CHECK(node_type(c) == cudaGraphNodeTypeMemset);
  CHECK(node_type(d) == cudaGraphNodeTypeHost);
  CHECK(node_type(e) == cudaGraphNodeTypeKernel);
  CHECK(root_nodes(g) == node_list{a});
  CHECK(edge_set(g) == std::set<edge>{{a, b}, {a, c}, {c, d}, {b, e}, {d, e}});
  CHECK(as_set(dependents(a)) == std::set<cudaGraphNode_t>{b, c});
  CHECK(as_set(dependencies(e)) == std::set<cudaGraphNode_t>{b, d});
  CHECK(dependencies(c) == node_list{a});
  CHECK(dependents(d) == node_list{e});
  CHECK(dependents(e).empty());
  REQUIRE(cudaGraphDestroy(g) == cudaSuccess);
}

// A stream that joins before the origin captured anything depends on nothing: two roots.
TEST_CASE("a fork before any work: each stream's first node is a root") {
  fresh_state st("graphs-roots");
  st.use_here();
  cudaStream_t origin = new_stream(), side = new_stream();
  cudaEvent_t fork = new_event(), join = new_event();
  REQUIRE(cudaStreamBeginCapture(origin, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(cudaEventRecord(fork, origin) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(side, fork, 0) == cudaSuccess);
  REQUIRE(simtest::launch(origin, 1000) == cudaSuccess);
  REQUIRE(simtest::launch(side, 1000) == cudaSuccess);
  REQUIRE(cudaEventRecord(join, side) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(origin, join, 0) == cudaSuccess);
  REQUIRE(cudaLaunchHostFunc(origin, count_call, &host_calls) == cudaSuccess);
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(origin, &g) == cudaSuccess);
  const node_list n = graph_nodes(g);
  REQUIRE(n.size() == 3);
  CHECK(as_set(root_nodes(g)) == std::set<cudaGraphNode_t>{n[0], n[1]});
  CHECK(edge_set(g) == std::set<edge>{{n[0], n[2]}, {n[1], n[2]}});
  REQUIRE(cudaGraphDestroy(g) == cudaSuccess);
}

// cudaMallocAsync and cudaFreeAsync in a capture are memory nodes (Programming Guide, "Graph
// Memory Nodes"): the address fixed at capture, the size asked for, the capturing device.
TEST_CASE("graph memory: allocation and free nodes and their parameters") {
  fresh_state st("graphs-memory");
  st.use_here();
  cudaStream_t s = new_stream();
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(cudaMallocAsync(&p, 3 << 20, s) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(p, 0, 3 << 20, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  const node_list n = graph_nodes(g);
  REQUIRE(n.size() == 3);
  CHECK(node_type(n[0]) == cudaGraphNodeTypeMemAlloc);
  CHECK(node_type(n[1]) == cudaGraphNodeTypeMemset);
  CHECK(node_type(n[2]) == cudaGraphNodeTypeMemFree);
  CHECK(edge_set(g) == std::set<edge>{{n[0], n[1]}, {n[1], n[2]}});
  cudaMemAllocNodeParams a{};
  a.bytesize = 1;
  REQUIRE(cudaGraphMemAllocNodeGetParams(n[0], &a) == cudaSuccess);
  CHECK(a.dptr == p);
  CHECK(a.bytesize == (3u << 20));
  CHECK(a.poolProps.allocType == cudaMemAllocationTypePinned);
  CHECK(a.poolProps.location.type == cudaMemLocationTypeDevice);
  CHECK(a.poolProps.location.id == 0);
  void* freed = nullptr;
  REQUIRE(cudaGraphMemFreeNodeGetParams(n[2], &freed) == cudaSuccess);
  CHECK(freed == p);
  REQUIRE(cudaGraphDestroy(g) == cudaSuccess);
}

// Arrays of another length than the list: "numNodes entries will be filled in. If numNodes is
// higher than the actual number of nodes, the remaining entries in nodes will be set to NULL"
// (cuda_runtime_api.h:11270-11273, alike for roots, edges, dependencies and dependents); the
// count returned is the list's length.
TEST_CASE("arrays too small or too large: what fits is filled, the rest null, the full count") {
  fresh_state st("graphs-arrays");
  st.use_here();
  cudaStream_t s = new_stream();
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  for (int i = 0; i < 4; ++i) REQUIRE(simtest::launch(s, 1000) == cudaSuccess);
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  const node_list all = graph_nodes(g);
  REQUIRE(all.size() == 4);
  auto* const mark = reinterpret_cast<cudaGraphNode_t>(std::uintptr_t{0x1234});

  node_list a(6, mark);
  std::size_t count = 2;
  REQUIRE(cudaGraphGetNodes(g, a.data(), &count) == cudaSuccess);
  CHECK(count == 4);
  CHECK(node_list(a.begin(), a.begin() + 3) == node_list{all[0], all[1], mark});
  count = 6;
  REQUIRE(cudaGraphGetNodes(g, a.data(), &count) == cudaSuccess);
  CHECK(count == 4);
  CHECK(a == node_list{all[0], all[1], all[2], all[3], nullptr, nullptr});

  node_list from(5, mark), to(5, mark);
  std::vector<cudaGraphEdgeData> data(5);
  for (auto& d : data) d.type = 0xEE;
  count = 1;
  REQUIRE(cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &count) == cudaSuccess);
  CHECK(count == 3);
  CHECK((from[0] == all[0] && to[0] == all[1] && from[1] == mark && to[1] == mark));
  CHECK(data[0].type == 0); // default edge data: a full dependency
  CHECK(data[1].type == 0xEE);
  count = 5;
  REQUIRE(cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &count) == cudaSuccess);
  CHECK(count == 3);
  CHECK((from[3] == nullptr && to[3] == nullptr && from[4] == nullptr && to[4] == nullptr));
  CHECK((from[2] == all[2] && to[2] == all[3]));

  node_list d(3, mark);
  count = 3;
  REQUIRE(cudaGraphNodeGetDependencies(all[2], d.data(), data.data(), &count) == cudaSuccess);
  CHECK(count == 1);
  CHECK(d == node_list{all[1], nullptr, nullptr});
  d.assign(3, mark);
  count = 0;
  REQUIRE(cudaGraphNodeGetDependentNodes(all[0], d.data(), nullptr, &count) == cudaSuccess);
  CHECK(count == 1);
  CHECK(d[0] == mark);
  count = 1;
  REQUIRE(cudaGraphGetRootNodes(g, d.data(), &count) == cudaSuccess);
  CHECK(count == 1);
  CHECK(d[0] == all[0]);
  REQUIRE(cudaGraphDestroy(g) == cudaSuccess);
}

// Bad arguments: each call's documented results are cudaSuccess and cudaErrorInvalidValue (and
// cudaErrorLossyQuery, which default edge data never gives): a null output or count, a handle
// that names no graph or node, a getter for another type of node, edge data without the arrays
// it goes with (cuda_runtime_api.h:11340-11341, 11378-11379, 11416-11417).
TEST_CASE("bad arguments are cudaErrorInvalidValue, recorded as the last error") {
  fresh_state st("graphs-errors");
  st.use_here();
  cudaStream_t s = new_stream();
  void* dev = nullptr;
  REQUIRE(cudaMalloc(&dev, 64) == cudaSuccess);
  int counter = 0;
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(launch_shaped(s, 1000, &counter) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(dev, 0, 64, s) == cudaSuccess);
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  const node_list n = graph_nodes(g);
  REQUIRE(n.size() == 2);
  const cudaGraphNode_t kernel = n[0], memset = n[1];
  constexpr cudaError_t bad = cudaErrorInvalidValue;
  auto* const stranger = reinterpret_cast<cudaGraphNode_t>(&counter); // names no node

  std::size_t count = 0;
  cudaGraphNode_t one[1] = {};
  cudaGraphEdgeData data[1] = {};
  cudaGraphNodeType type{};
  CHECK(cudaGraphNodeGetType(nullptr, &type) == bad);
  CHECK(cudaGetLastError() == bad);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(cudaGraphNodeGetType(stranger, &type) == bad);
  CHECK(cudaGraphNodeGetType(kernel, nullptr) == bad);
  CHECK(cudaGraphGetNodes(g, nullptr, nullptr) == bad);
  CHECK(cudaGraphGetNodes(nullptr, nullptr, &count) == bad);
  CHECK(cudaGraphGetRootNodes(g, one, nullptr) == bad);
  CHECK(cudaGraphGetRootNodes(reinterpret_cast<cudaGraph_t>(&counter), one, &count) == bad);
  CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, nullptr) == bad);
  CHECK(cudaGraphGetEdges(nullptr, nullptr, nullptr, nullptr, &count) == bad);
  count = 1;
  CHECK(cudaGraphGetEdges(g, one, nullptr, nullptr, &count) == bad);  // from without to
  CHECK(cudaGraphGetEdges(g, nullptr, one, nullptr, &count) == bad);  // to without from
  CHECK(cudaGraphGetEdges(g, nullptr, nullptr, data, &count) == bad); // data without both
  CHECK(cudaGraphNodeGetDependencies(memset, nullptr, data, &count) == bad);
  CHECK(cudaGraphNodeGetDependencies(memset, one, nullptr, nullptr) == bad);
  CHECK(cudaGraphNodeGetDependencies(stranger, one, nullptr, &count) == bad);
  CHECK(cudaGraphNodeGetDependentNodes(kernel, nullptr, data, &count) == bad);
  CHECK(cudaGraphNodeGetDependentNodes(nullptr, one, nullptr, &count) == bad);
  CHECK(cudaGraphNodeGetDependentNodes(kernel, one, nullptr, nullptr) == bad);

  check_getters_refuse(kernel, memset, stranger);
  // The right getter still works, and the nodes of a destroyed graph name nothing.
  cudaMemsetParams m{};
  CHECK(cudaGraphMemsetNodeGetParams(memset, &m) == cudaSuccess);
  CHECK(m.width == 64);
  REQUIRE(cudaGraphDestroy(g) == cudaSuccess);
  CHECK(cudaGraphNodeGetType(kernel, &type) == bad);
  CHECK(cudaGraphGetNodes(g, nullptr, &count) == bad);
  CHECK(cudaGetLastError() == bad);
}

// A graph being captured can be read (cudaStreamGetCaptureInfo gives it), and a graph from
// cudaGraphCreate has no nodes and no edges.
TEST_CASE("a graph read during its capture, and an empty graph") {
  fresh_state st("graphs-during");
  st.use_here();
  cudaStream_t s = new_stream();
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(simtest::launch(s, 1000) == cudaSuccess);
  cudaStreamCaptureStatus status{};
  cudaGraph_t during = nullptr;
  REQUIRE(cudaStreamGetCaptureInfo(s, &status, nullptr, &during) == cudaSuccess);
  REQUIRE(during != nullptr);
  const node_list first = graph_nodes(during);
  CHECK(first.size() == 1);
  REQUIRE(cudaLaunchHostFunc(s, count_call, &host_calls) == cudaSuccess);
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  CHECK(g == during);
  const node_list n = graph_nodes(g);
  REQUIRE(n.size() == 2);
  CHECK(n[0] == first[0]); // handles stay valid as the capture goes on
  CHECK(dependencies(n[1]) == node_list{first[0]});
  REQUIRE(cudaGraphDestroy(g) == cudaSuccess);

  cudaGraph_t empty = nullptr;
  REQUIRE(cudaGraphCreate(&empty, 0) == cudaSuccess);
  CHECK(graph_nodes(empty).empty());
  CHECK(root_nodes(empty).empty());
  CHECK(graph_edges(empty).empty());
  REQUIRE(cudaGraphDestroy(empty) == cudaSuccess);
}
