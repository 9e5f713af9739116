// SPDX-License-Identifier: Apache-2.0
// Reading a graph for the simulator's graph tests: its nodes, roots, edges, and each node's type,
// dependencies and dependents, through the runtime's inspection calls (each list asked for its
// length first, then read into an array of that length).
#pragma once

#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <set>
#include <utility>
#include <vector>

namespace simtest {

using node_list = std::vector<cudaGraphNode_t>;
using edge = std::pair<cudaGraphNode_t, cudaGraphNode_t>; ///< from, to

/// A list read by a call of the shape f(array, count): the count first, then the array.
template <class Call> node_list read_list(Call&& call) {
  std::size_t n = 0;
  REQUIRE(call(nullptr, &n) == cudaSuccess);
  node_list out(n, nullptr);
  std::size_t m = n;
  REQUIRE(call(out.data(), &m) == cudaSuccess);
  CHECK(m == n);
  return out;
}

inline node_list graph_nodes(cudaGraph_t g) {
  return read_list([g](cudaGraphNode_t* a, std::size_t* n) { return cudaGraphGetNodes(g, a, n); });
}

inline node_list root_nodes(cudaGraph_t g) {
  return read_list(
      [g](cudaGraphNode_t* a, std::size_t* n) { return cudaGraphGetRootNodes(g, a, n); });
}

inline node_list dependencies(cudaGraphNode_t node) {
  return read_list([node](cudaGraphNode_t* a, std::size_t* n) {
    return cudaGraphNodeGetDependencies(node, a, nullptr, n);
  });
}

inline node_list dependents(cudaGraphNode_t node) {
  return read_list([node](cudaGraphNode_t* a, std::size_t* n) {
    return cudaGraphNodeGetDependentNodes(node, a, nullptr, n);
  });
}

inline std::vector<edge> graph_edges(cudaGraph_t g) {
  std::size_t n = 0;
  REQUIRE(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n) == cudaSuccess);
  node_list from(n, nullptr), to(n, nullptr);
  std::size_t m = n;
  REQUIRE(cudaGraphGetEdges(g, from.data(), to.data(), nullptr, &m) == cudaSuccess);
  CHECK(m == n);
  std::vector<edge> out;
  for (std::size_t i = 0; i < n; ++i) out.emplace_back(from[i], to[i]);
  return out;
}

inline cudaGraphNodeType node_type(cudaGraphNode_t node) {
  cudaGraphNodeType t = cudaGraphNodeTypeCount;
  REQUIRE(cudaGraphNodeGetType(node, &t) == cudaSuccess);
  return t;
}

inline std::set<cudaGraphNode_t> as_set(const node_list& l) { return {l.begin(), l.end()}; }

} // namespace simtest
