// SPDX-License-Identifier: Apache-2.0
// Runtime API: streams, their synchronisation, waits on events and host functions (events:
// api_event.cpp; stream capture: api_capture.cpp; graphs: api_graph.cpp).
#include <cuda_runtime_api.h>

#include <algorithm>

#include "call.hpp"
#include "capture.hpp"
#include "runtime.hpp"

using namespace cudasim;

namespace {

cudaError_t stream_create(cudaStream_t* out, unsigned flags, int priority, const char* name) {
  return api_call(name, invalid_if(!out || (flags & ~1u) != 0), [&](runtime& rt) {
    context* ctx = nullptr;
    if (const cudaError_t e = context_for(current_device(), ctx); e != cudaSuccess) return e;
    auto* s = new stream_obj();
    s->ctx = ctx;
    s->flags = flags;
    s->priority = std::clamp(priority, -5, 0);
    ctx->streams.push_back(s);
    rt.streams.insert(s);
    *out = reinterpret_cast<cudaStream_t>(s);
    return cudaSuccess;
  });
}

/// cudaStreamGetFlags and cudaStreamGetPriority: one field of the stream.
template <class T>
cudaError_t stream_field(const char* name, cudaStream_t stream, T* out, T stream_obj::*field) {
  return api_call(name, invalid_if(!out), [&](runtime& rt) {
    stream_obj* s = nullptr;
    if (const cudaError_t e = rt.resolve(stream, false, s); e != cudaSuccess) return e;
    if (const cudaError_t e = sticky_of(s->ctx); e != cudaSuccess) return e;
    *out = s->*field;
    return cudaSuccess;
  });
}

cudaError_t stream_synchronize(cudaStream_t stream, bool ptsz, const char* name) {
  done_ptr last;
  context* ctx = nullptr; // not the stream: another thread may destroy it while this one waits
  const cudaError_t result = api_call(name, cudaSuccess, [&](runtime& rt) {
    stream_obj* s = nullptr;
    if (const cudaError_t e = stream_of(stream, ptsz, s); e != cudaSuccess) return e;
    ctx = s->ctx;
    if (s->cap) { // synchronising a capturing stream is never legal
      s->cap->invalidated = true;
      return cudaErrorStreamCaptureUnsupported;
    }
    if (const cudaError_t e = rt.check_legacy(s, true); e != cudaSuccess) return e;
    if (const cudaError_t e = rt.check_unsafe_call(); e != cudaSuccess) return e;
    std::lock_guard<std::mutex> l(s->m);
    last = s->last;
    return cudaSuccess;
  });
  if (result != cudaSuccess) return result;
  runtime& rt = runtime::get();
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

cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned flags, bool ptsz,
                              const char* name) {
  const bool known_flags = (flags & ~unsigned{cudaEventWaitExternal}) == 0;
  return api_call(name, invalid_if(!known_flags), [&](runtime& rt) {
    event_obj* ev = nullptr;
    stream_obj* s = nullptr;
    if (const cudaError_t e = event_and_stream(event, stream, ptsz, ev, s); e != cudaSuccess)
      return e;
    if (const auto captured = capture_wait(s, ev, flags)) return *captured;
    if (!ev->done) return cudaSuccess; // never recorded: nothing to wait for
    work w{};
    w.kind = work::wait;
    w.wait_for = ev->done;
    (void)rt.submit(s, std::move(w));
    return cudaSuccess;
  });
}

cudaError_t launch_host_func(cudaStream_t stream, cudaHostFn_t fn, void* user, bool ptsz,
                             const char* name) {
  work w{};
  w.kind = work::host_fn;
  w.fn = fn;
  w.user = user;
  return enqueue({name, stream, ptsz}, invalid_if(!fn), std::move(w));
}

} // namespace

namespace cudasim {
int drv_stream_query(void* stream) {
  return static_cast<int>(stream_query(static_cast<cudaStream_t>(stream), false, "cuStreamQuery"));
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
  return api_call("cudaStreamDestroy", cudaSuccess, [&](runtime& rt) {
    auto* s = reinterpret_cast<stream_obj*>(stream);
    if (!rt.streams.count(s)) return cudaErrorInvalidResourceHandle;
    if (const cudaError_t e = sticky_of(s->ctx); e != cudaSuccess) return e;
    // Work already queued still runs and the call returns at once (the documented behaviour);
    // the handle is dead at once, the worker thread ends when the work is done.
    rt.destroy_stream(s);
    return cudaSuccess;
  });
}

cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  return stream_field("cudaStreamGetFlags", stream, flags, &stream_obj::flags);
}
cudaError_t cudaStreamGetPriority(cudaStream_t stream, int* priority) {
  return stream_field("cudaStreamGetPriority", stream, priority, &stream_obj::priority);
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  return stream_synchronize(s, false, "cudaStreamSynchronize");
}
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) {
  return stream_synchronize(s, true, "cudaStreamSynchronize_ptsz");
}
// NotReady is not recorded as the last error (observed on an H200, driver 580, CUDA 13.0: after
// a cudaEventQuery that returned it, cudaGetLastError returned cudaSuccess); any other error is.
cudaError_t cudaStreamQuery(cudaStream_t s) {
  return fail_unless_not_ready(stream_query(s, false, "cudaStreamQuery"));
}
cudaError_t cudaStreamQuery_ptsz(cudaStream_t s) {
  return fail_unless_not_ready(stream_query(s, true, "cudaStreamQuery_ptsz"));
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

} // extern "C"
