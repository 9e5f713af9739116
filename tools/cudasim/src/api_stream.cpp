// SPDX-License-Identifier: Apache-2.0
// Runtime API: streams, events, stream capture, host functions (graphs: api_graph.cpp; capture
// across streams: capture.cpp).
#include <cuda_runtime_api.h>

#include <algorithm>

#include "capture.hpp"
#include "runtime.hpp"
#include "shared.hpp"

using namespace cudasim;

namespace cudasim {

/// Stream calls share this prologue: resolve the handle (creating the context), refuse work
/// on a context with a sticky error.
cudaError_t stream_of(cudaStream_t handle, bool ptsz, stream_obj*& s) {
  runtime& rt = runtime::get();
  if (const cudaError_t e = rt.resolve(handle, ptsz, s); e != cudaSuccess) return e;
  bind_thread(s->ctx);
  return sticky_of(s->ctx);
}

cudaError_t work_stream_of(cudaStream_t handle, bool ptsz, stream_obj*& s) {
  if (const cudaError_t e = stream_of(handle, ptsz, s); e != cudaSuccess) return e;
  // Work for a stream whose capture was invalidated fails until the capture ends.
  if (s->cap && s->cap->invalidated) return cudaErrorStreamCaptureInvalidated;
  // Work for the legacy stream while a blocking stream captures would depend on the capture.
  return runtime::get().check_legacy(s, true);
}

} // namespace cudasim

namespace {

cudaError_t stream_create(cudaStream_t* out, unsigned flags, int priority, const char* name) {
  if (const cudaError_t e = enter(name); e != cudaSuccess) return fail(e);
  if (!out || (flags & ~1u) != 0) return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  context* ctx = nullptr;
  if (const cudaError_t e = rt.context_of(current_device(), true, ctx); e != cudaSuccess)
    return fail(e);
  if (const cudaError_t e = sticky_of(ctx); e != cudaSuccess) return fail(e);
  auto* s = new stream_obj();
  s->ctx = ctx;
  s->flags = flags;
  s->priority = std::clamp(priority, -5, 0);
  ctx->streams.push_back(s);
  rt.streams.insert(s);
  *out = reinterpret_cast<cudaStream_t>(s);
  return cudaSuccess;
}

cudaError_t stream_synchronize(cudaStream_t stream, bool ptsz, const char* name) {
  if (const cudaError_t e = enter(name); e != cudaSuccess) return fail(e);
  runtime& rt = runtime::get();
  done_ptr last;
  context* ctx = nullptr; // not the stream: another thread may destroy it while this one waits
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    stream_obj* s = nullptr;
    if (const cudaError_t e = stream_of(stream, ptsz, s); e != cudaSuccess) return fail(e);
    ctx = s->ctx;
    if (s->cap) { // synchronising a capturing stream is never legal
      s->cap->invalidated = true;
      return fail(cudaErrorStreamCaptureUnsupported);
    }
    if (const cudaError_t e = rt.check_legacy(s, true); e != cudaSuccess) return fail(e);
    if (const cudaError_t e = rt.check_unsafe_call(); e != cudaSuccess) return fail(e);
    std::lock_guard<std::mutex> l(s->m);
    last = s->last;
  }
  rt.wait(last, false);
  std::lock_guard<std::mutex> lock(rt.mutex);
  rt.release_pools(ctx);
  return fail(static_cast<cudaError_t>(ctx->sticky.load()));
}

/// cudaStreamQuery's answer, not recorded as the last error (the caller decides).
cudaError_t stream_query(cudaStream_t stream, bool ptsz, const char* name) {
  if (const cudaError_t e = enter(name); e != cudaSuccess) return e;
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  stream_obj* s = nullptr;
  if (const cudaError_t e = stream_of(stream, ptsz, s); e != cudaSuccess) return e;
  if (s->cap) {
    s->cap->invalidated = true;
    return cudaErrorStreamCaptureUnsupported;
  }
  if (const cudaError_t e = rt.check_legacy(s, true); e != cudaSuccess) return e;
  if (const cudaError_t e = rt.check_unsafe_call(); e != cudaSuccess) return e;
  std::lock_guard<std::mutex> l(s->m);
  return !s->last || s->last->ready() ? cudaSuccess : cudaErrorNotReady;
}

/// cudaEventQuery's answer, not recorded as the last error (the caller decides).
cudaError_t event_query(cudaEvent_t event, const char* name) {
  if (const cudaError_t e = enter(name); e != cudaSuccess) return e;
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  auto* ev = reinterpret_cast<event_obj*>(event);
  if (!rt.events.count(ev)) return cudaErrorInvalidResourceHandle;
  if (const cudaError_t e = sticky_of(ev->ctx); e != cudaSuccess) return e;
  if (ev->captured) return cudaErrorCapturedEvent;
  if (const cudaError_t e = rt.check_unsafe_call(); e != cudaSuccess) return e;
  if (!ev->done) return cudaSuccess; // never recorded: complete by definition
  if (!ev->done->ready()) return cudaErrorNotReady;
  return cudaSuccess;
}

cudaError_t event_record(cudaEvent_t event, cudaStream_t stream, unsigned flags, bool ptsz,
                         const char* name) {
  if (const cudaError_t e = enter(name); e != cudaSuccess) return fail(e);
  if ((flags & ~unsigned{cudaEventRecordExternal}) != 0) return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  auto* ev = reinterpret_cast<event_obj*>(event);
  if (!rt.events.count(ev)) return fail(cudaErrorInvalidResourceHandle);
  stream_obj* s = nullptr;
  if (const cudaError_t e = work_stream_of(stream, ptsz, s); e != cudaSuccess) return fail(e);
  // "event and stream must be on the same CUDA context" (cudaEventRecord's documentation).
  if (ev->ctx != s->ctx) return fail(cudaErrorInvalidResourceHandle);
  work w{};
  w.kind = work::event_record;
  w.event = ev;
  if (s->cap) {
    // In a capture: a dependency for other streams of the capture, or with
    // cudaEventRecordExternal an event-record node that records the event when the graph runs.
    if (flags & cudaEventRecordExternal)
      (void)rt.submit(s, std::move(w));
    else
      capture_record(ev, s);
    return cudaSuccess;
  }
  ev->done = rt.submit(s, std::move(w));
  ev->captured = false;
  return cudaSuccess;
}

cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned flags, bool ptsz,
                              const char* name) {
  if (const cudaError_t e = enter(name); e != cudaSuccess) return fail(e);
  if ((flags & ~unsigned{cudaEventWaitExternal}) != 0) return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  auto* ev = reinterpret_cast<event_obj*>(event);
  if (!rt.events.count(ev)) return fail(cudaErrorInvalidResourceHandle);
  stream_obj* s = nullptr;
  if (const cudaError_t e = work_stream_of(stream, ptsz, s); e != cudaSuccess) return fail(e);
  if (const auto captured = capture_wait(s, ev, flags))
    return *captured == cudaSuccess ? cudaSuccess : fail(*captured);
  if (!ev->done) return cudaSuccess; // never recorded: nothing to wait for
  work w{};
  w.kind = work::wait;
  w.wait_for = ev->done;
  (void)rt.submit(s, std::move(w));
  return cudaSuccess;
}

cudaError_t launch_host_func(cudaStream_t stream, cudaHostFn_t fn, void* user, bool ptsz,
                             const char* name) {
  if (const cudaError_t e = enter(name); e != cudaSuccess) return fail(e);
  if (!fn) return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  stream_obj* s = nullptr;
  if (const cudaError_t e = work_stream_of(stream, ptsz, s); e != cudaSuccess) return fail(e);
  work w{};
  w.kind = work::host_fn;
  w.fn = fn;
  w.user = user;
  (void)rt.submit(s, std::move(w));
  return cudaSuccess;
}

cudaError_t begin_capture(cudaStream_t stream, cudaStreamCaptureMode mode, bool ptsz,
                          const char* name) {
  if (const cudaError_t e = enter(name); e != cudaSuccess) return fail(e);
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  stream_obj* s = nullptr;
  if (const cudaError_t e = stream_of(stream, ptsz, s); e != cudaSuccess) return fail(e);
  if (s->type == stream_obj::legacy) return fail(cudaErrorStreamCaptureUnsupported);
  if (s->cap) return fail(cudaErrorIllegalState);
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
}

cudaError_t end_capture(cudaStream_t stream, cudaGraph_t* graph, bool ptsz, const char* name) {
  if (const cudaError_t e = enter(name); e != cudaSuccess) return fail(e);
  if (!graph) return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  stream_obj* s = nullptr;
  if (const cudaError_t e = stream_of(stream, ptsz, s); e != cudaSuccess) return fail(e);
  capture* c = s->cap;
  if (!c) return fail(cudaErrorIllegalState);
  if (c->origin != s) return fail(cudaErrorStreamCaptureUnmatched); // a stream that joined
  if (c->thread != std::this_thread::get_id() && c->mode != cudaStreamCaptureModeRelaxed)
    return fail(cudaErrorStreamCaptureWrongThread);
  graph_obj* g = nullptr;
  const cudaError_t result = finish_capture(c, g);
  *graph = reinterpret_cast<cudaGraph_t>(g);
  return result == cudaSuccess ? cudaSuccess : fail(result);
}

cudaError_t is_capturing(cudaStream_t stream, cudaStreamCaptureStatus* status, bool ptsz,
                         const char* name) {
  if (const cudaError_t e = enter(name); e != cudaSuccess) return fail(e);
  if (!status) return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  stream_obj* s = nullptr;
  if (const cudaError_t e = stream_of(stream, ptsz, s); e != cudaSuccess) return fail(e);
  // On the legacy stream while a blocking stream captures: cudaErrorStreamCaptureImplicit, and
  // the capture is not invalidated (cudaStreamIsCapturing's documentation).
  if (const cudaError_t e = rt.check_legacy(s, false); e != cudaSuccess) return fail(e);
  *status = !s->cap               ? cudaStreamCaptureStatusNone
            : s->cap->invalidated ? cudaStreamCaptureStatusInvalidated
                                  : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t capture_info(cudaStream_t stream, cudaStreamCaptureStatus* status,
                         unsigned long long* id, cudaGraph_t* graph, bool ptsz, const char* name) {
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

namespace cudasim {
int drv_stream_query(void* stream) {
  return static_cast<int>(stream_query(static_cast<cudaStream_t>(stream), false, "cuStreamQuery"));
}
int drv_event_query(void* event) {
  return static_cast<int>(event_query(static_cast<cudaEvent_t>(event), "cuEventQuery"));
}
} // namespace cudasim

extern "C" {

cudaError_t cudaStreamCreate(cudaStream_t* s) { return stream_create(s, 0, 0, "cudaStreamCreate"); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  return stream_create(s, flags, 0, "cudaStreamCreateWithFlags");
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int flags, int priority) {
  return stream_create(s, flags, priority, "cudaStreamCreateWithPriority");
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (const cudaError_t e = enter("cudaStreamDestroy"); e != cudaSuccess) return fail(e);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  auto* s = reinterpret_cast<stream_obj*>(stream);
  if (!rt.streams.count(s)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = sticky_of(s->ctx); e != cudaSuccess) return fail(e);
  // Work already queued still runs and the call returns at once (the documented behaviour);
  // the handle is dead at once, the worker thread ends when the work is done.
  rt.destroy_stream(s);
  return cudaSuccess;
}

cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  if (const cudaError_t e = enter("cudaStreamGetFlags"); e != cudaSuccess) return fail(e);
  if (!flags) return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  stream_obj* s = nullptr;
  if (const cudaError_t e = rt.resolve(stream, false, s); e != cudaSuccess) return fail(e);
  if (const cudaError_t e = sticky_of(s->ctx); e != cudaSuccess) return fail(e);
  *flags = s->flags;
  return cudaSuccess;
}

cudaError_t cudaStreamGetPriority(cudaStream_t stream, int* priority) {
  if (const cudaError_t e = enter("cudaStreamGetPriority"); e != cudaSuccess) return fail(e);
  if (!priority) return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  stream_obj* s = nullptr;
  if (const cudaError_t e = rt.resolve(stream, false, s); e != cudaSuccess) return fail(e);
  if (const cudaError_t e = sticky_of(s->ctx); e != cudaSuccess) return fail(e);
  *priority = s->priority;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  return stream_synchronize(s, false, "cudaStreamSynchronize");
}
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) {
  return stream_synchronize(s, true, "cudaStreamSynchronize_ptsz");
}
// NotReady is recorded as the last error like any other result but cudaSuccess
// (cuda_runtime_api.h:1119, cudaGetLastError: "the last error that has been produced by any of
// the runtime calls"; driver_types.h:762 lists cudaErrorNotReady among the errors).
cudaError_t cudaStreamQuery(cudaStream_t s) {
  return fail(stream_query(s, false, "cudaStreamQuery"));
}
cudaError_t cudaStreamQuery_ptsz(cudaStream_t s) {
  return fail(stream_query(s, true, "cudaStreamQuery_ptsz"));
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  return stream_wait_event(s, e, flags, false, "cudaStreamWaitEvent");
}
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  return stream_wait_event(s, e, flags, true, "cudaStreamWaitEvent_ptsz");
}
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* user) {
  return launch_host_func(s, fn, user, false, "cudaLaunchHostFunc");
}
cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t s, cudaHostFn_t fn, void* user) {
  return launch_host_func(s, fn, user, true, "cudaLaunchHostFunc_ptsz");
}
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
  if (deps) *deps = nullptr;
  if (edges) *edges = nullptr;
  if (count) *count = 0;
  return capture_info(s, st, id, g, false, "cudaStreamGetCaptureInfo");
}
cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t s, cudaStreamCaptureStatus* st,
                                          unsigned long long* id, cudaGraph_t* g,
                                          const cudaGraphNode_t** deps,
                                          const cudaGraphEdgeData** edges, size_t* count) {
  if (deps) *deps = nullptr;
  if (edges) *edges = nullptr;
  if (count) *count = 0;
  return capture_info(s, st, id, g, true, "cudaStreamGetCaptureInfo_ptsz");
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (const cudaError_t e = enter("cudaThreadExchangeStreamCaptureMode"); e != cudaSuccess)
    return fail(e);
  if (!mode) return fail(cudaErrorInvalidValue);
  std::swap(*mode, thread_capture_mode());
  return cudaSuccess;
}

// --- events -----------------------------------------------------------------------------

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (const cudaError_t e = enter("cudaEventCreateWithFlags"); e != cudaSuccess) return fail(e);
  constexpr unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (!event || (flags & ~known) != 0) return fail(cudaErrorInvalidValue);
  if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))
    return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  context* ctx = nullptr;
  if (const cudaError_t e = rt.context_of(current_device(), true, ctx); e != cudaSuccess)
    return fail(e);
  if (const cudaError_t e = sticky_of(ctx); e != cudaSuccess) return fail(e);
  auto* ev = new event_obj();
  ev->ctx = ctx;
  ev->flags = flags;
  rt.events.insert(ev);
  *event = reinterpret_cast<cudaEvent_t>(ev);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (const cudaError_t e = enter("cudaEventDestroy"); e != cudaSuccess) return fail(e);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  auto* ev = reinterpret_cast<event_obj*>(event);
  if (!rt.events.count(ev)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = sticky_of(ev->ctx); e != cudaSuccess) return fail(e);
  rt.events.erase(ev);
  delete ev; // its completion lives on in the stream that records it
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  return event_record(e, s, 0, false, "cudaEventRecord");
}
cudaError_t cudaEventRecord_ptsz(cudaEvent_t e, cudaStream_t s) {
  return event_record(e, s, 0, true, "cudaEventRecord_ptsz");
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned int flags) {
  return event_record(e, s, flags, false, "cudaEventRecordWithFlags");
}
cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t e, cudaStream_t s, unsigned int flags) {
  return event_record(e, s, flags, true, "cudaEventRecordWithFlags_ptsz");
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  return fail(event_query(event, "cudaEventQuery")); // NotReady recorded too: see cudaStreamQuery
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (const cudaError_t e = enter("cudaEventSynchronize"); e != cudaSuccess) return fail(e);
  runtime& rt = runtime::get();
  done_ptr done;
  bool blocking = false;
  context* ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    auto* ev = reinterpret_cast<event_obj*>(event);
    if (!rt.events.count(ev)) return fail(cudaErrorInvalidResourceHandle);
    ctx = ev->ctx;
    if (const cudaError_t e = sticky_of(ctx); e != cudaSuccess) return fail(e);
    if (ev->captured) return fail(cudaErrorCapturedEvent);
    if (const cudaError_t e = rt.check_unsafe_call(); e != cudaSuccess) return fail(e);
    done = ev->done;
    blocking = (ev->flags & cudaEventBlockingSync) != 0;
  }
  rt.wait(done, blocking);
  std::lock_guard<std::mutex> lock(rt.mutex);
  rt.release_pools(ctx);
  return fail(sticky_of(ctx)); // a fault while it waited: the event's context reports it
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (const cudaError_t e = enter("cudaEventElapsedTime"); e != cudaSuccess) return fail(e);
  if (!ms) return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  auto* a = reinterpret_cast<event_obj*>(start);
  auto* b = reinterpret_cast<event_obj*>(end);
  if (!rt.events.count(a) || !rt.events.count(b)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = sticky_of(a->ctx); e != cudaSuccess) return fail(e);
  if (const cudaError_t e = sticky_of(b->ctx); e != cudaSuccess) return fail(e);
  if (a->captured || b->captured) return fail(cudaErrorCapturedEvent);
  if ((a->flags | b->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  if (!a->done || !b->done) return fail(cudaErrorInvalidResourceHandle);
  if (!a->done->ready() || !b->done->ready()) return fail(cudaErrorNotReady);
  const double diff = static_cast<double>(b->done->at) - static_cast<double>(a->done->at);
  *ms = static_cast<float>(diff / 1e6);
  return cudaSuccess;
}

} // extern "C"
