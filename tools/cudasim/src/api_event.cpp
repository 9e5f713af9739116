// SPDX-License-Identifier: Apache-2.0
// Runtime API: events: their records (in stream capture: capture.cpp), queries, synchronisation
// and elapsed times.
#include <cuda_runtime_api.h>

#include "call.hpp"
#include "capture.hpp"
#include "runtime.hpp"

using namespace cudasim;

namespace {

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
  const bool known_flags = (flags & ~unsigned{cudaEventRecordExternal}) == 0;
  return api_call(name, invalid_if(!known_flags), [&](runtime& rt) {
    event_obj* ev = nullptr;
    stream_obj* s = nullptr;
    if (const cudaError_t e = event_and_stream(event, stream, ptsz, ev, s); e != cudaSuccess)
      return e;
    // "event and stream must be on the same CUDA context" (cudaEventRecord's documentation).
    if (ev->ctx != s->ctx) return cudaErrorInvalidResourceHandle;
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
  });
}

} // namespace

namespace cudasim {
int drv_event_query(void* event) {
  return static_cast<int>(event_query(static_cast<cudaEvent_t>(event), "cuEventQuery"));
}
} // namespace cudasim

extern "C" {

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  constexpr unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  const bool invalid = !event || (flags & ~known) != 0 ||
                       ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming));
  return api_call("cudaEventCreateWithFlags", invalid_if(invalid), [&](runtime& rt) {
    context* ctx = nullptr;
    if (const cudaError_t e = context_for(current_device(), ctx); e != cudaSuccess) return e;
    auto* ev = new event_obj();
    ev->ctx = ctx;
    ev->flags = flags;
    rt.events.insert(ev);
    *event = reinterpret_cast<cudaEvent_t>(ev);
    return cudaSuccess;
  });
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  return api_call("cudaEventDestroy", cudaSuccess, [&](runtime& rt) {
    auto* ev = reinterpret_cast<event_obj*>(event);
    if (!rt.events.count(ev)) return cudaErrorInvalidResourceHandle;
    if (const cudaError_t e = sticky_of(ev->ctx); e != cudaSuccess) return e;
    rt.events.erase(ev);
    delete ev; // its completion lives on in the stream that records it
    return cudaSuccess;
  });
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
  return fail_unless_not_ready(event_query(event, "cudaEventQuery")); // see cudaStreamQuery
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  done_ptr done;
  bool blocking = false;
  context* ctx = nullptr;
  const cudaError_t result = api_call("cudaEventSynchronize", cudaSuccess, [&](runtime& rt) {
    auto* ev = reinterpret_cast<event_obj*>(event);
    if (!rt.events.count(ev)) return cudaErrorInvalidResourceHandle;
    ctx = ev->ctx;
    if (const cudaError_t e = sticky_of(ctx); e != cudaSuccess) return e;
    if (ev->captured) return cudaErrorCapturedEvent;
    if (const cudaError_t e = rt.check_unsafe_call(); e != cudaSuccess) return e;
    done = ev->done;
    blocking = (ev->flags & cudaEventBlockingSync) != 0;
    return cudaSuccess;
  });
  if (result != cudaSuccess) return result;
  runtime& rt = runtime::get();
  rt.wait(done, blocking);
  std::lock_guard<std::mutex> lock(rt.mutex);
  rt.release_pools(ctx);
  return fail(sticky_of(ctx)); // a fault while it waited: the event's context reports it
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  return api_call("cudaEventElapsedTime", invalid_if(!ms), [&](runtime& rt) {
    auto* a = reinterpret_cast<event_obj*>(start);
    auto* b = reinterpret_cast<event_obj*>(end);
    if (!rt.events.count(a) || !rt.events.count(b)) return cudaErrorInvalidResourceHandle;
    if (const cudaError_t e = sticky_of(a->ctx); e != cudaSuccess) return e;
    if (const cudaError_t e = sticky_of(b->ctx); e != cudaSuccess) return e;
    if (a->captured || b->captured) return cudaErrorCapturedEvent;
    if ((a->flags | b->flags) & cudaEventDisableTiming) return cudaErrorInvalidResourceHandle;
    if (!a->done || !b->done) return cudaErrorInvalidResourceHandle;
    if (!a->done->ready() || !b->done->ready()) return cudaErrorNotReady;
    const double diff = static_cast<double>(b->done->at) - static_cast<double>(a->done->at);
    *ms = static_cast<float>(diff / 1e6);
    return cudaSuccess;
  });
}

} // extern "C"
