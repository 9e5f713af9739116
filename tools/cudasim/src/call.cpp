// SPDX-License-Identifier: Apache-2.0
// The shared prologues of the runtime calls (call.hpp) and of the stream calls (runtime.hpp:
// stream_of, work_stream_of).
#include "call.hpp"

#include <cuda_runtime_api.h>

#include <utility>

#include "runtime.hpp"

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

cudaError_t enqueue(const enqueue_call& c, cudaError_t args, work w) {
  done_ptr done;
  const cudaError_t e = api_call(c.name, args, [&](runtime& rt) {
    stream_obj* s = nullptr;
    if (const cudaError_t r = c.resolve(c.stream, c.ptsz, s); r != cudaSuccess) return r;
    if (c.sync)
      if (const cudaError_t r = rt.check_unsafe_call(); r != cudaSuccess) return r;
    done = rt.submit(s, std::move(w));
    return cudaSuccess;
  });
  if (e != cudaSuccess) return e;
  if (c.sync) runtime::get().wait(done, false);
  return cudaSuccess;
}

cudaError_t event_and_stream(cudaEvent_t event, cudaStream_t stream, bool ptsz, event_obj*& ev,
                             stream_obj*& s) {
  ev = reinterpret_cast<event_obj*>(event);
  if (!runtime::get().events.count(ev)) return cudaErrorInvalidResourceHandle;
  return work_stream_of(stream, ptsz, s);
}

cudaError_t context_for(int device, context*& ctx) {
  if (const cudaError_t e = runtime::get().context_of(device, true, ctx); e != cudaSuccess)
    return e;
  return sticky_of(ctx);
}

} // namespace cudasim
