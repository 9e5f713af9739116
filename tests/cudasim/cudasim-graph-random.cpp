// SPDX-License-Identifier: Apache-2.0
// Random capture programs, seeded: random streams, random kinds of work, random forks and joins,
// then the captured graph read back (docs/cudasim.md, "Graph inspection") and checked against
// the capture rule (a node depends on its stream's previous node and on the nodes of the events
// the stream waited on since; Programming Guide, "Cross-stream Dependencies and Events") and
// against properties any graph has: the edges are the union of the nodes' dependencies and of
// their dependents reversed, the roots are the nodes without dependencies, there is no cycle,
// every node is reached from a root, and the nodes of one stream are totally ordered.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "sim_graph.hpp"
#include "sim_kernels.hpp"
#include "sim_util.hpp"

using simtest::edge;
using simtest::node_list;

namespace {

using node_set = std::set<cudaGraphNode_t>;

constexpr int streams = 4;
constexpr std::uint32_t first_seed = 0xB12;
constexpr int programs = 150;

void CUDART_CB count_call(void* counter) { ++*static_cast<int*>(counter); }

/// One random capture program, run: its graph and what the test expects of it.
struct program {
  std::mt19937 rng;
  cudaStream_t s[streams] = {};
  cudaEvent_t ev = nullptr;
  void* dev = nullptr;
  unsigned char host[2][64] = {};
  int host_calls = 0;
  cudaGraph_t graph = nullptr; ///< the capture's graph, read as it grows
  bool capturing[streams] = {true, false, false, false};
  node_set tips[streams];                   ///< what the next node of each stream depends on
  node_set known;                           ///< the nodes seen so far
  std::map<cudaGraphNode_t, node_set> deps; ///< expected dependencies of each node
  std::map<cudaGraphNode_t, cudaGraphNodeType> types;
  std::vector<node_list> order;            ///< each stream's nodes in capture order
  std::vector<std::pair<void*, int>> live; ///< graph allocations not freed, with their stream

  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); }
  int pick_capturing() {
    for (;;)
      if (const int i = pick(streams); capturing[i]) return i;
  }

  /// The one node the last call added (the graph read before and after).
  cudaGraphNode_t new_node() {
    node_set added;
    for (cudaGraphNode_t n : simtest::graph_nodes(graph))
      if (!known.count(n)) added.insert(n);
    REQUIRE(added.size() == 1);
    known.insert(*added.begin());
    return *added.begin();
  }

  void work(int i) {
    cudaGraphNodeType type = cudaGraphNodeTypeKernel;
    switch (pick(live.empty() ? 5 : 6)) {
    case 0: REQUIRE(simtest::launch(s[i], 1000) == cudaSuccess); break;
    case 1:
      REQUIRE(cudaMemcpyAsync(host[1], host[0], 64, cudaMemcpyHostToHost, s[i]) == cudaSuccess);
      type = cudaGraphNodeTypeMemcpy;
      break;
    case 2:
      REQUIRE(cudaMemsetAsync(dev, pick(256), 64, s[i]) == cudaSuccess);
      type = cudaGraphNodeTypeMemset;
      break;
    case 3:
      REQUIRE(cudaLaunchHostFunc(s[i], count_call, &host_calls) == cudaSuccess);
      type = cudaGraphNodeTypeHost;
      break;
    case 4: {
      void* p = nullptr;
      REQUIRE(cudaMallocAsync(&p, 4096, s[i]) == cudaSuccess);
      live.emplace_back(p, i);
      type = cudaGraphNodeTypeMemAlloc;
      break;
    }
    default: {
      // Freed on the stream that allocated it: ordered after its allocation.
      const auto it = live.begin() + pick(static_cast<int>(live.size()));
      i = it->second;
      REQUIRE(cudaFreeAsync(it->first, s[i]) == cudaSuccess);
      live.erase(it);
      type = cudaGraphNodeTypeMemFree;
    }
    }
    const cudaGraphNode_t n = new_node();
    deps[n] = tips[i];
    types[n] = type;
    tips[i] = {n};
    order[static_cast<std::size_t>(i)].push_back(n);
  }

  /// Stream `to` waits on an event recorded on `from` (a fork when `to` did not capture).
  void wait(int to, int from) {
    REQUIRE(cudaEventRecord(ev, s[from]) == cudaSuccess);
    REQUIRE(cudaStreamWaitEvent(s[to], ev, 0) == cudaSuccess);
    if (capturing[to])
      tips[to].insert(tips[from].begin(), tips[from].end());
    else
      tips[to] = tips[from];
    capturing[to] = true;
  }

  void step() {
    const int r = pick(10);
    const int a = pick_capturing();
    if (r < 6) return work(a);
    const int b = pick(streams);
    if (b == a) return work(a);
    if (capturing[b] && r < 8)
      wait(a, b); // a join of b into a
    else
      wait(b, a); // a fork of a into b, or a join of a into b
  }

  void run(int steps) {
    order.resize(streams);
    for (auto& st : s)
      REQUIRE(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess);
    REQUIRE(cudaEventCreate(&ev) == cudaSuccess);
    REQUIRE(cudaMalloc(&dev, 64) == cudaSuccess);
    REQUIRE(cudaStreamBeginCapture(s[0], cudaStreamCaptureModeGlobal) == cudaSuccess);
    cudaStreamCaptureStatus status{};
    REQUIRE(cudaStreamGetCaptureInfo(s[0], &status, nullptr, &graph) == cudaSuccess);
    for (int k = 0; k < steps; ++k) step();
    while (!live.empty()) {
      REQUIRE(cudaFreeAsync(live.back().first, s[live.back().second]) == cudaSuccess);
      const int i = live.back().second;
      live.pop_back();
      const cudaGraphNode_t n = new_node();
      deps[n] = tips[i];
      types[n] = cudaGraphNodeTypeMemFree;
      tips[i] = {n};
      order[static_cast<std::size_t>(i)].push_back(n);
    }
    for (int i = 1; i < streams; ++i)
      if (capturing[i]) wait(0, i); // every fork joined back
    cudaGraph_t g = nullptr;
    REQUIRE(cudaStreamEndCapture(s[0], &g) == cudaSuccess);
    REQUIRE(g == graph);
  }

  void destroy() {
    REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
    for (auto st : s) REQUIRE(cudaStreamDestroy(st) == cudaSuccess);
    REQUIRE(cudaEventDestroy(ev) == cudaSuccess);
    REQUIRE(cudaFree(dev) == cudaSuccess);
  }
};

/// Whether every node is reached from a root along the edges, and none lies on a cycle (Kahn's
/// algorithm takes every node).
void check_acyclic_and_rooted(const node_list& nodes, const std::vector<edge>& edges,
                              const node_set& roots) {
  std::map<cudaGraphNode_t, int> indegree;
  std::map<cudaGraphNode_t, node_list> out;
  for (const auto& [from, to] : edges) {
    ++indegree[to];
    out[from].push_back(to);
  }
  node_list ready(roots.begin(), roots.end());
  std::size_t taken = 0;
  while (!ready.empty()) {
    const cudaGraphNode_t n = ready.back();
    ready.pop_back();
    ++taken;
    for (cudaGraphNode_t t : out[n])
      if (--indegree[t] == 0) ready.push_back(t);
  }
  CHECK(taken == nodes.size());
}

/// Whether `to` is reached from `from` along the edges.
bool reaches(cudaGraphNode_t from, cudaGraphNode_t to,
             const std::map<cudaGraphNode_t, node_set>& deps) {
  node_list todo{to};
  node_set seen;
  while (!todo.empty()) {
    const cudaGraphNode_t n = todo.back();
    todo.pop_back();
    if (n == from) return true;
    if (!seen.insert(n).second) continue;
    const auto it = deps.find(n);
    if (it != deps.end()) todo.insert(todo.end(), it->second.begin(), it->second.end());
  }
  return false;
}

void check_graph(program& p) {
  const node_list nodes = simtest::graph_nodes(p.graph);
  CHECK(nodes.size() == p.known.size());
  CHECK(simtest::as_set(nodes) == p.known);
  std::multiset<edge> by_deps, by_dependents;
  std::map<cudaGraphNode_t, node_set> deps;
  node_set no_deps;
  for (cudaGraphNode_t n : nodes) {
    const node_list d = simtest::dependencies(n);
    CHECK(simtest::as_set(d).size() == d.size()); // no edge twice
    deps[n] = simtest::as_set(d);
    CHECK(deps[n] == p.deps[n]);
    CHECK(simtest::node_type(n) == p.types[n]);
    if (d.empty()) no_deps.insert(n);
    for (cudaGraphNode_t from : d) by_deps.emplace(from, n);
    for (cudaGraphNode_t to : simtest::dependents(n)) by_dependents.emplace(n, to);
  }
  const std::vector<edge> edges = simtest::graph_edges(p.graph);
  CHECK(std::multiset<edge>(edges.begin(), edges.end()) == by_deps);
  CHECK(by_dependents == by_deps);
  const node_list roots = simtest::root_nodes(p.graph);
  CHECK(simtest::as_set(roots) == no_deps);
  CHECK(roots.size() == no_deps.size());
  check_acyclic_and_rooted(nodes, edges, simtest::as_set(roots));
  for (const node_list& one : p.order)
    for (std::size_t i = 1; i < one.size(); ++i) {
      CHECK(deps[one[i]].count(one[i - 1]) == 1); // the stream's previous node, directly
      CHECK(reaches(one[0], one[i], deps));
    }
}

} // namespace

TEST_CASE("random capture programs: the graph read back is the one the capture rule makes") {
  simtest::fresh_state st("graphs-random");
  st.use_here();
  std::size_t total_nodes = 0, total_edges = 0;
  for (int k = 0; k < programs; ++k) {
    const std::uint32_t seed = first_seed + static_cast<std::uint32_t>(k);
    CAPTURE(seed);
    program p;
    p.rng.seed(seed);
    p.run(5 + p.pick(40));
    check_graph(p);
    total_nodes += p.known.size();
    total_edges += simtest::graph_edges(p.graph).size();
    // The graph runs: each host node once.
    int hosts = 0;
    for (const auto& [n, t] : p.types) hosts += t == cudaGraphNodeTypeHost ? 1 : 0;
    cudaGraphExec_t x = nullptr;
    REQUIRE(cudaGraphInstantiate(&x, p.graph, 0) == cudaSuccess);
    REQUIRE(cudaGraphLaunch(x, p.s[0]) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(p.s[0]) == cudaSuccess);
    CHECK(p.host_calls == hosts);
    REQUIRE(cudaGraphExecDestroy(x) == cudaSuccess);
    p.destroy();
  }
  MESSAGE("seeds " << first_seed << ".." << first_seed + programs - 1 << ": " << total_nodes
                   << " nodes, " << total_edges << " edges");
  CHECK(total_edges > total_nodes / 2); // the programs are not trivial
}
