// SPDX-License-Identifier: Apache-2.0
// The prologue every runtime call that touches the model shares: enter (count the call,
// initialise, refuse a forked child), the call's own check of its arguments, the runtime's mutex,
// and the result recorded as the thread's last error unless it is cudaSuccess. `enqueue` adds the
// stream and the work for the calls that only enqueue one piece of work.
#pragma once

#include <cuda_runtime_api.h>

#include <mutex>

#include "runtime.hpp"

namespace cudasim {

/// cudaErrorInvalidValue when `invalid`: a call's check of its arguments, for api_call.
constexpr cudaError_t invalid_if(bool invalid) {
  return invalid ? cudaErrorInvalidValue : cudaSuccess;
}

/// Runs the call `name`: enter(name), then the arguments' check (`args`: cudaSuccess when they
/// are valid), then `body(rt)` with the runtime's mutex held. What fails is recorded as the last
/// error (fail); what `body` returns is the call's result. `args` is computed before enter runs,
/// so it tests the arguments' values and dereferences none of them.
template <class Body> cudaError_t api_call(const char* name, cudaError_t args, Body&& body) {
  if (const cudaError_t e = enter(name); e != cudaSuccess) return fail(e);
  if (args != cudaSuccess) return fail(args);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  return fail(body(rt));
}

/// How a call that enqueues work resolves its stream: work_stream_of, or stream_of for one that
/// does not refuse work for the legacy stream while a blocking stream captures (cudaMemcpy2D).
using stream_rule = cudaError_t (*)(cudaStream_t handle, bool ptsz, stream_obj*& s);

/// A call that enqueues one piece of work on a stream.
struct enqueue_call {
  const char* name;
  cudaStream_t stream;
  bool ptsz;         ///< 0 is the per-thread stream (the _ptsz and _ptds entry points)
  bool sync = false; ///< synchronous: the capture rules for an unsafe call, then waits for it
  stream_rule resolve = work_stream_of;
};

/// api_call(c.name, args, ...) that resolves c's stream, with c.sync checks the capture rules
/// for an unsafe call (runtime::check_unsafe_call), submits `w`; with c.sync then waits for it
/// with the mutex released. cudaSuccess once it is enqueued (or done).
cudaError_t enqueue(const enqueue_call& c, cudaError_t args, work w);

/// The event and the stream of cudaEventRecord and cudaStreamWaitEvent: the event handle checked
/// first (cudaErrorInvalidResourceHandle), then the stream resolved for work (work_stream_of).
/// Call with the runtime's mutex held.
cudaError_t event_and_stream(cudaEvent_t event, cudaStream_t stream, bool ptsz, event_obj*& ev,
                             stream_obj*& s);

/// The context of `device`, created, and its sticky error: the prologue of calls that create an
/// object on a device (a stream, an event, a pool, an executable graph). Call with the
/// runtime's mutex held.
cudaError_t context_for(int device, context*& ctx);

} // namespace cudasim
