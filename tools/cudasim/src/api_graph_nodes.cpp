// SPDX-License-Identifier: Apache-2.0
// Runtime API: reading a graph's nodes and edges (cudaGraphGetNodes, cudaGraphGetRootNodes,
// cudaGraphGetEdges, cudaGraphNodeGetDependencies, cudaGraphNodeGetDependentNodes,
// cudaGraphNodeGetType) and the parameters of each kind of node stream capture makes
// (docs/cudasim.md, "Graph inspection"). A node's handle is its work object; its edges are the
// dependencies capture gave it (capture.cpp). Like building a graph, none of this is work on a
// context: no sticky error stops it.
#include <cuda_runtime_api.h>

#include <algorithm>

#include "call.hpp"
#include "runtime.hpp"

using namespace cudasim;

namespace {

graph_obj* graph_of(runtime& rt, cudaGraph_t handle) {
  auto* g = reinterpret_cast<graph_obj*>(handle);
  return rt.graphs.count(g) ? g : nullptr;
}

/// A node of one of the process's graphs: the graph and the node's index in it.
struct node_ref {
  graph_obj* graph = nullptr;
  std::size_t index = 0;
  work& node() const { return *graph->nodes[index]; }
};

/// The node `handle` names; false when it names no node of a graph that exists. The handle is
/// compared, never dereferenced: a destroyed graph's nodes name nothing.
bool node_of(runtime& rt, cudaGraphNode_t handle, node_ref& out) {
  const auto* w = reinterpret_cast<const work*>(handle);
  if (!w) return false;
  for (graph_obj* g : rt.graphs)
    if (const auto it = g->index.find(w); it != g->index.end()) {
      out = {g, it->second};
      return true;
    }
  return false;
}

cudaGraphNode_t handle_of(const graph_obj& g, std::size_t index) {
  return reinterpret_cast<cudaGraphNode_t>(g.nodes[index].get());
}

/// The node type of a piece of captured work (graph_end is never a node).
cudaGraphNodeType type_of(const work& w) {
  switch (w.kind) {
  case work::kernel: return cudaGraphNodeTypeKernel;
  case work::copy:
  case work::copy2d: return cudaGraphNodeTypeMemcpy;
  case work::set: return cudaGraphNodeTypeMemset;
  case work::host_fn: return cudaGraphNodeTypeHost;
  case work::event_record: return cudaGraphNodeTypeEventRecord;
  case work::wait: return cudaGraphNodeTypeWaitEvent;
  case work::alloc: return cudaGraphNodeTypeMemAlloc;
  case work::free_async: return cudaGraphNodeTypeMemFree;
  case work::graph_end: break;
  }
  return cudaGraphNodeTypeEmpty;
}

/// Returns a list of nodes as the inspection calls do ("Otherwise, \p numNodes entries will be
/// filled in", cuda_runtime_api.h:11270-11273): the first *count of `list` into `out` (when not
/// null) with null past its end and default edge data beside each into `edges` (when not
/// null), then the list's whole length into *count.
void write_nodes(const graph_obj& g, const std::vector<std::size_t>& list, cudaGraphNode_t* out,
                 cudaGraphEdgeData* edges, std::size_t* count) {
  if (out)
    for (std::size_t i = 0; i < *count; ++i) {
      out[i] = i < list.size() ? handle_of(g, list[i]) : nullptr;
      if (edges) edges[i] = cudaGraphEdgeData{};
    }
  *count = list.size();
}

std::vector<std::size_t> dependents_of(const graph_obj& g, std::size_t node) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < g.deps.size(); ++i)
    if (std::find(g.deps[i].begin(), g.deps[i].end(), node) != g.deps[i].end()) out.push_back(i);
  return out;
}

/// cudaGraphNodeGetDependencies and cudaGraphNodeGetDependentNodes: cudaErrorInvalidValue for
/// no count, edge data without nodes ("If \p edgeData is non-NULL, then \p pDependencies must
/// be as well", cuda_runtime_api.h:11378-11379) or a handle that names no node. Captured edges
/// carry default data only, so a query without edge data is never lossy.
cudaError_t node_edges(const char* name, cudaGraphNode_t node, cudaGraphNode_t* out,
                       cudaGraphEdgeData* edges, size_t* count, bool dependents) {
  return api_call(name, invalid_if(!count || (edges && !out)), [&](runtime& rt) {
    node_ref n;
    if (!node_of(rt, node, n)) return cudaErrorInvalidValue;
    const graph_obj& g = *n.graph;
    write_nodes(g, dependents ? dependents_of(g, n.index) : g.deps[n.index], out, edges, count);
    return cudaSuccess;
  });
}

/// A getter of one type of node: cudaErrorInvalidValue for a null output, a handle that names no
/// node, or a node of another type (each getter's documented results are cudaSuccess and
/// cudaErrorInvalidValue); else `read(node)` fills the output.
template <class Read>
cudaError_t node_getter(const char* name, cudaGraphNode_t node, const void* output,
                        cudaGraphNodeType type, Read&& read) {
  return api_call(name, invalid_if(!output), [&](runtime& rt) {
    node_ref n;
    if (!node_of(rt, node, n) || type_of(n.node()) != type) return cudaErrorInvalidValue;
    read(n);
    return cudaSuccess;
  });
}

cudaPitchedPtr pitched(const void* p, std::size_t pitch, std::size_t width, std::size_t height) {
  return cudaPitchedPtr{const_cast<void*>(p), pitch, width, height};
}

/// A memcpy node's parameters: a copy from cudaMemcpyAsync is one row of `bytes` (pitch
/// `bytes`), a 2D copy `height` rows of `width` with its pitches; the kind as the call gave it.
cudaMemcpy3DParms memcpy_params(const work& w) {
  cudaMemcpy3DParms p{};
  if (w.kind == work::copy2d) {
    p.srcPtr = pitched(w.src, w.spitch, w.width, w.height);
    p.dstPtr = pitched(w.dst, w.dpitch, w.width, w.height);
    p.extent = cudaExtent{w.width, w.height, 1};
  } else {
    p.srcPtr = pitched(w.src, w.bytes, w.bytes, 1);
    p.dstPtr = pitched(w.dst, w.bytes, w.bytes, 1);
    p.extent = cudaExtent{w.bytes, 1, 1};
  }
  p.kind = w.copy_kind;
  return p;
}

/// A kernel node's parameters. kernelParams points at the node's copies of the arguments, which
/// cudasim keeps only for a kernel whose model declares them (cudasim/cudasim.h): null for
/// another. The array belongs to the node (cuda_runtime_api.h:9613-9616).
cudaKernelNodeParams kernel_params(const node_ref& n) {
  const work& w = n.node();
  std::vector<void*>& argv = n.graph->kernel_params[n.index];
  argv.clear();
  for (const auto& a : w.args) argv.push_back(const_cast<unsigned char*>(a.data()));
  cudaKernelNodeParams p{};
  p.func = const_cast<void*>(w.func);
  p.gridDim = w.grid;
  p.blockDim = w.block;
  p.sharedMemBytes = static_cast<unsigned int>(w.shared_mem);
  p.kernelParams = argv.empty() ? nullptr : argv.data();
  p.extra = nullptr;
  return p;
}

} // namespace

extern "C" {

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  return api_call("cudaGraphGetNodes", invalid_if(!count), [&](runtime& rt) {
    const graph_obj* g = graph_of(rt, graph);
    if (!g) return cudaErrorInvalidValue;
    std::vector<std::size_t> all(g->nodes.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    write_nodes(*g, all, nodes, nullptr, count);
    return cudaSuccess;
  });
}

cudaError_t cudaGraphGetRootNodes(cudaGraph_t graph, cudaGraphNode_t* roots, size_t* count) {
  return api_call("cudaGraphGetRootNodes", invalid_if(!count), [&](runtime& rt) {
    const graph_obj* g = graph_of(rt, graph);
    if (!g) return cudaErrorInvalidValue;
    std::vector<std::size_t> list;
    for (std::size_t i = 0; i < g->deps.size(); ++i)
      if (g->deps[i].empty()) list.push_back(i);
    write_nodes(*g, list, roots, nullptr, count);
    return cudaSuccess;
  });
}

// "\p from and \p to may both be NULL ... If \p edgeData is non-NULL then \p from and \p to must
// be as well" (cuda_runtime_api.h:11334-11341). Edges come in the order of their destination
// node, then of its dependencies.
cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t* from, cudaGraphNode_t* to,
                              cudaGraphEdgeData* edge_data, size_t* count) {
  const bool invalid = !count || (!from != !to) || (edge_data && !from);
  return api_call("cudaGraphGetEdges", invalid_if(invalid), [&](runtime& rt) {
    const graph_obj* g = graph_of(rt, graph);
    if (!g) return cudaErrorInvalidValue;
    std::vector<std::size_t> sources, targets;
    for (std::size_t i = 0; i < g->deps.size(); ++i)
      for (std::size_t d : g->deps[i]) {
        sources.push_back(d);
        targets.push_back(i);
      }
    if (from) {
      std::size_t n = *count;
      write_nodes(*g, sources, from, edge_data, &n);
      write_nodes(*g, targets, to, nullptr, count);
    }
    *count = sources.size();
    return cudaSuccess;
  });
}

cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t* deps,
                                         cudaGraphEdgeData* edge_data, size_t* count) {
  return node_edges("cudaGraphNodeGetDependencies", node, deps, edge_data, count, false);
}

cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node, cudaGraphNode_t* dependents,
                                           cudaGraphEdgeData* edge_data, size_t* count) {
  return node_edges("cudaGraphNodeGetDependentNodes", node, dependents, edge_data, count, true);
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  return api_call("cudaGraphNodeGetType", invalid_if(!type), [&](runtime& rt) {
    node_ref n;
    if (!node_of(rt, node, n)) return cudaErrorInvalidValue;
    *type = type_of(n.node());
    return cudaSuccess;
  });
}

// --- each type's parameters ------------------------------------------------------------------

cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, cudaKernelNodeParams* params) {
  return node_getter("cudaGraphKernelNodeGetParams", node, params, cudaGraphNodeTypeKernel,
                     [&](const node_ref& n) { *params = kernel_params(n); });
}

cudaError_t cudaGraphMemcpyNodeGetParams(cudaGraphNode_t node, cudaMemcpy3DParms* params) {
  return node_getter("cudaGraphMemcpyNodeGetParams", node, params, cudaGraphNodeTypeMemcpy,
                     [&](const node_ref& n) { *params = memcpy_params(n.node()); });
}

// cudaMemsetAsync sets bytes: one row of `bytes` one-byte elements, of the value's low byte.
cudaError_t cudaGraphMemsetNodeGetParams(cudaGraphNode_t node, cudaMemsetParams* params) {
  return node_getter("cudaGraphMemsetNodeGetParams", node, params, cudaGraphNodeTypeMemset,
                     [&](const node_ref& n) {
                       const work& w = n.node();
                       *params = cudaMemsetParams{
                           w.dst, w.bytes, static_cast<unsigned char>(w.value), 1, w.bytes, 1};
                     });
}

cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t node, cudaHostNodeParams* params) {
  return node_getter("cudaGraphHostNodeGetParams", node, params, cudaGraphNodeTypeHost,
                     [&](const node_ref& n) {
                       *params = cudaHostNodeParams{n.node().fn, n.node().user};
                     });
}

cudaError_t cudaGraphEventRecordNodeGetEvent(cudaGraphNode_t node, cudaEvent_t* event) {
  return node_getter(
      "cudaGraphEventRecordNodeGetEvent", node, event, cudaGraphNodeTypeEventRecord,
      [&](const node_ref& n) { *event = reinterpret_cast<cudaEvent_t>(n.node().event); });
}

cudaError_t cudaGraphEventWaitNodeGetEvent(cudaGraphNode_t node, cudaEvent_t* event) {
  return node_getter(
      "cudaGraphEventWaitNodeGetEvent", node, event, cudaGraphNodeTypeWaitEvent,
      [&](const node_ref& n) { *event = reinterpret_cast<cudaEvent_t>(n.node().event); });
}

// An allocation from cudaMallocAsync in a capture: pinned device memory of the capturing
// stream's device, no access descriptors, its size and the address fixed at capture.
cudaError_t cudaGraphMemAllocNodeGetParams(cudaGraphNode_t node, cudaMemAllocNodeParams* params) {
  return node_getter("cudaGraphMemAllocNodeGetParams", node, params, cudaGraphNodeTypeMemAlloc,
                     [&](const node_ref& n) {
                       const work& w = n.node();
                       *params = cudaMemAllocNodeParams{};
                       params->poolProps.allocType = cudaMemAllocationTypePinned;
                       params->poolProps.handleTypes = cudaMemHandleTypeNone;
                       params->poolProps.location = {cudaMemLocationTypeDevice, w.device};
                       params->bytesize = w.bytes;
                       params->dptr = w.ptr;
                     });
}

// dptr_out: "Pointer to return the device address" (cuda_runtime_api.h:11060).
cudaError_t cudaGraphMemFreeNodeGetParams(cudaGraphNode_t node, void* dptr_out) {
  return node_getter("cudaGraphMemFreeNodeGetParams", node, dptr_out, cudaGraphNodeTypeMemFree,
                     [&](const node_ref& n) { *static_cast<void**>(dptr_out) = n.node().ptr; });
}

} // extern "C"
