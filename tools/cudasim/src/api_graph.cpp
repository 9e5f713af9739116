// SPDX-License-Identifier: Apache-2.0
// Runtime API: graphs (created by stream capture), their launches, and the device's graph memory
// pool (cudaDeviceGraphMemTrim, cudaDevice{Get,Set}GraphMemAttribute). Reading a graph's nodes
// and edges: api_graph_nodes.cpp.
#include <cuda_runtime_api.h>

#include "call.hpp"
#include "runtime.hpp"
#include "shared.hpp"

using namespace cudasim;

namespace {

std::vector<void*> alloc_nodes(const graph_exec_obj& x) {
  std::vector<void*> out;
  for (const work& n : x.nodes)
    if (n.kind == work::alloc) out.push_back(n.ptr);
  return out;
}

/// Enqueues one node of a launch. External event nodes use the event as it is now: a wait node
/// waits for the event's last record, a record node records it.
void submit_node(runtime& rt, stream_obj* s, work n) {
  event_obj* ev = n.event && rt.events.count(n.event) != 0 ? n.event : nullptr;
  const work::kind_t kind = n.kind;
  if (kind == work::wait && n.event) n.wait_for = ev && !ev->captured ? ev->done : nullptr;
  const done_ptr done = rt.submit(s, std::move(n));
  if (kind == work::event_record && ev && done) {
    ev->done = done;
    ev->captured = false;
  }
}

cudaError_t graph_launch(cudaGraphExec_t exec, cudaStream_t stream, bool ptsz, const char* name) {
  return api_call(name, cudaSuccess, [&](runtime& rt) {
    auto* x = reinterpret_cast<graph_exec_obj*>(exec);
    if (!rt.execs.count(x)) return cudaErrorInvalidResourceHandle;
    stream_obj* s = nullptr;
    if (const cudaError_t e = work_stream_of(stream, ptsz, s); e != cudaSuccess) return e;
    // Graph memory: the graph pool maps memory to the allocation nodes before the launch runs;
    // it keeps it after their free nodes ran (CUDA Programming Guide, "Graph Memory Nodes").
    const std::vector<void*> allocs = s->cap ? std::vector<void*>{} : alloc_nodes(*x);
    if (!allocs.empty())
      if (const cudaError_t e = rt.back_graph_memory(s->ctx, allocs); e != cudaSuccess) return e;
    for (const work& n : x->nodes) submit_node(rt, s, n);
    if (!allocs.empty()) {
      work end{};
      end.kind = work::graph_end;
      end.allocs = allocs;
      (void)rt.submit(s, std::move(end));
    }
    return cudaSuccess;
  });
}

/// The context of `device` for the graph memory calls (not created: without one, the pool is
/// empty); cudaErrorInvalidDevice for an ordinal that names no device, or its sticky error.
cudaError_t graph_pool_of(int device, context*& ctx) {
  if (const cudaError_t e = runtime::get().context_of(device, false, ctx); e != cudaSuccess)
    return e;
  return sticky_of(ctx);
}

} // namespace

extern "C" {

cudaError_t cudaGraphCreate(cudaGraph_t* graph, unsigned int) {
  return api_call("cudaGraphCreate", invalid_if(!graph), [&](runtime& rt) {
    auto* g = new graph_obj();
    rt.graphs.insert(g);
    *graph = reinterpret_cast<cudaGraph_t>(g);
    return cudaSuccess;
  });
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  return api_call("cudaGraphInstantiate", invalid_if(!exec), [&](runtime& rt) {
    auto* g = reinterpret_cast<graph_obj*>(graph);
    if (!rt.graphs.count(g)) return cudaErrorInvalidResourceHandle;
    // The executable graph belongs to the current device's context (a graph itself to none).
    context* ctx = nullptr;
    if (const cudaError_t e = context_for(current_device(), ctx); e != cudaSuccess) return e;
    auto* x = new graph_exec_obj();
    x->ctx = ctx;
    for (const auto& n : g->nodes) x->nodes.push_back(*n);
    rt.execs.insert(x);
    *exec = reinterpret_cast<cudaGraphExec_t>(x);
    return cudaSuccess;
  });
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s) {
  return graph_launch(x, s, false, "cudaGraphLaunch");
}
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t x, cudaStream_t s) {
  return graph_launch(x, s, true, "cudaGraphLaunch_ptsz");
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  return api_call("cudaGraphDestroy", cudaSuccess, [&](runtime& rt) {
    auto* g = reinterpret_cast<graph_obj*>(graph);
    if (!rt.graphs.erase(g)) return cudaErrorInvalidResourceHandle;
    delete g;
    return cudaSuccess;
  });
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  return api_call("cudaGraphExecDestroy", cudaSuccess, [&](runtime& rt) {
    auto* x = reinterpret_cast<graph_exec_obj*>(exec);
    if (!rt.execs.count(x)) return cudaErrorInvalidResourceHandle;
    if (const cudaError_t e = sticky_of(x->ctx); e != cudaSuccess) return e;
    rt.execs.erase(x);
    // Its allocations that are neither live nor in a launch still running lose their mapping;
    // the memory stays reserved in the graph pool until a trim.
    const std::vector<void*> allocs = alloc_nodes(*x);
    rt.trim_graph_memory(nullptr, &allocs, false);
    delete x; // queued copies of its nodes are owned by the streams
    return cudaSuccess;
  });
}

// --- the graph memory pool ------------------------------------------------------------------

cudaError_t cudaDeviceGraphMemTrim(int device) {
  return api_call("cudaDeviceGraphMemTrim", cudaSuccess, [&](runtime& rt) {
    context* ctx = nullptr;
    if (const cudaError_t e = graph_pool_of(device, ctx); e != cudaSuccess) return e;
    rt.trim_graph_memory(ctx, nullptr, true);
    return cudaSuccess;
  });
}

cudaError_t cudaDeviceGetGraphMemAttribute(int device, cudaGraphMemAttributeType attr,
                                           void* value) {
  return api_call("cudaDeviceGetGraphMemAttribute", cudaSuccess, [&](runtime&) {
    context* ctx = nullptr;
    if (const cudaError_t e = graph_pool_of(device, ctx); e != cudaSuccess) return e;
    if (!value) return cudaErrorInvalidValue;
    const graph_pool& gp = ctx->graph_mem;
    auto* out = static_cast<std::uint64_t*>(value); // cuuint64_t, driver_types.h
    switch (attr) {
    case cudaGraphMemAttrUsedMemCurrent: *out = gp.used; return cudaSuccess;
    case cudaGraphMemAttrUsedMemHigh: *out = gp.used_high; return cudaSuccess;
    case cudaGraphMemAttrReservedMemCurrent: *out = gp.reserved; return cudaSuccess;
    case cudaGraphMemAttrReservedMemHigh: *out = gp.reserved_high; return cudaSuccess;
    default: return cudaErrorInvalidValue;
    }
  });
}

cudaError_t cudaDeviceSetGraphMemAttribute(int device, cudaGraphMemAttributeType attr,
                                           void* value) {
  return api_call("cudaDeviceSetGraphMemAttribute", cudaSuccess, [&](runtime&) {
    context* ctx = nullptr;
    if (const cudaError_t e = graph_pool_of(device, ctx); e != cudaSuccess) return e;
    // Only the high watermarks, and only reset to zero: from then on they follow the current
    // amounts again.
    if (!value || *static_cast<std::uint64_t*>(value) != 0) return cudaErrorInvalidValue;
    graph_pool& gp = ctx->graph_mem;
    switch (attr) {
    case cudaGraphMemAttrUsedMemHigh: gp.used_high = gp.used; return cudaSuccess;
    case cudaGraphMemAttrReservedMemHigh: gp.reserved_high = gp.reserved; return cudaSuccess;
    default: return cudaErrorInvalidValue;
    }
  });
}

} // extern "C"
