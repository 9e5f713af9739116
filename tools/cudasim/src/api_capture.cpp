// SPDX-License-Identifier: Apache-2.0
// Runtime API: stream capture, which records a stream's work into a graph (graphs:
// api_graph.cpp; capture across streams and its nodes: capture.cpp).
#include <cuda_runtime_api.h>

#include <thread>
#include <utility>

#include "call.hpp"
#include "capture.hpp"
#include "runtime.hpp"

using namespace cudasim;

namespace {

cudaError_t begin_capture(cudaStream_t stream, cudaStreamCaptureMode mode, bool ptsz,
                          const char* name) {
  const bool known_mode = mode == cudaStreamCaptureModeGlobal ||
                          mode == cudaStreamCaptureModeThreadLocal ||
                          mode == cudaStreamCaptureModeRelaxed;
  return api_call(name, invalid_if(!known_mode), [&](runtime& rt) {
    stream_obj* s = nullptr;
    if (const cudaError_t e = stream_of(stream, ptsz, s); e != cudaSuccess) return e;
    if (s->type == stream_obj::legacy) return cudaErrorStreamCaptureUnsupported;
    if (s->cap) return cudaErrorIllegalState;
    auto* c = new capture();
    c->mode = mode;
    c->thread = std::this_thread::get_id();
    c->graph = new graph_obj();
    c->id = ++rt.capture_ids;
    c->origin = s;
    c->tips[s] = {};
    rt.graphs.insert(c->graph);
    rt.captures.push_back(c);
    s->cap = c;
    return cudaSuccess;
  });
}

cudaError_t end_capture(cudaStream_t stream, cudaGraph_t* graph, bool ptsz, const char* name) {
  return api_call(name, invalid_if(!graph), [&](runtime&) {
    stream_obj* s = nullptr;
    if (const cudaError_t e = stream_of(stream, ptsz, s); e != cudaSuccess) return e;
    capture* c = s->cap;
    if (!c) return cudaErrorIllegalState;
    if (c->origin != s) return cudaErrorStreamCaptureUnmatched; // a stream that joined
    if (c->thread != std::this_thread::get_id() && c->mode != cudaStreamCaptureModeRelaxed)
      return cudaErrorStreamCaptureWrongThread;
    graph_obj* g = nullptr;
    const cudaError_t result = finish_capture(c, g);
    *graph = reinterpret_cast<cudaGraph_t>(g);
    return result;
  });
}

cudaError_t is_capturing(cudaStream_t stream, cudaStreamCaptureStatus* status, bool ptsz,
                         const char* name) {
  return api_call(name, invalid_if(!status), [&](runtime& rt) {
    stream_obj* s = nullptr;
    if (const cudaError_t e = stream_of(stream, ptsz, s); e != cudaSuccess) return e;
    // On the legacy stream while a blocking stream captures: cudaErrorStreamCaptureImplicit,
    // and the capture is not invalidated (cudaStreamIsCapturing's documentation).
    if (const cudaError_t e = rt.check_legacy(s, false); e != cudaSuccess) return e;
    *status = !s->cap               ? cudaStreamCaptureStatusNone
              : s->cap->invalidated ? cudaStreamCaptureStatusInvalidated
                                    : cudaStreamCaptureStatusActive;
    return cudaSuccess;
  });
}

/// cudaStreamGetCaptureInfo: is_capturing, then the capture's id and graph; the dependencies
/// and edges are not modelled (none).
cudaError_t capture_info(cudaStream_t stream, cudaStreamCaptureStatus* status,
                         unsigned long long* id, cudaGraph_t* graph, const cudaGraphNode_t** deps,
                         const cudaGraphEdgeData** edges, size_t* count, bool ptsz,
                         const char* name) {
  if (deps) *deps = nullptr;
  if (edges) *edges = nullptr;
  if (count) *count = 0;
  if (const cudaError_t e = is_capturing(stream, status, ptsz, name); e != cudaSuccess) return e;
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  stream_obj* s = nullptr;
  (void)rt.resolve(stream, ptsz, s);
  if (id) *id = s && s->cap ? s->cap->id : 0;
  if (graph) *graph = s && s->cap ? reinterpret_cast<cudaGraph_t>(s->cap->graph) : nullptr;
  return cudaSuccess;
}

} // namespace

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
  return begin_capture(s, mode, false, "cudaStreamBeginCapture");
}
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, cudaStreamCaptureMode mode) {
  return begin_capture(s, mode, true, "cudaStreamBeginCapture_ptsz");
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
  return end_capture(s, g, false, "cudaStreamEndCapture");
}
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t* g) {
  return end_capture(s, g, true, "cudaStreamEndCapture_ptsz");
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* st) {
  return is_capturing(s, st, false, "cudaStreamIsCapturing");
}
cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t s, cudaStreamCaptureStatus* st) {
  return is_capturing(s, st, true, "cudaStreamIsCapturing_ptsz");
}
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, cudaStreamCaptureStatus* st,
                                     unsigned long long* id, cudaGraph_t* g,
                                     const cudaGraphNode_t** deps, const cudaGraphEdgeData** edges,
                                     size_t* count) {
  return capture_info(s, st, id, g, deps, edges, count, false, "cudaStreamGetCaptureInfo");
}
cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t s, cudaStreamCaptureStatus* st,
                                          unsigned long long* id, cudaGraph_t* g,
                                          const cudaGraphNode_t** deps,
                                          const cudaGraphEdgeData** edges, size_t* count) {
  return capture_info(s, st, id, g, deps, edges, count, true, "cudaStreamGetCaptureInfo_ptsz");
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (const cudaError_t e = enter("cudaThreadExchangeStreamCaptureMode"); e != cudaSuccess)
    return fail(e);
  if (!mode) return fail(cudaErrorInvalidValue);
  std::swap(*mode, thread_capture_mode());
  return cudaSuccess;
}

} // extern "C"
