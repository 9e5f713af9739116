// SPDX-License-Identifier: Apache-2.0
// Stream capture across streams: the nodes a capture records and their dependencies, streams
// that join a capture by waiting on one of its events, the events of captures, external event
// nodes, and the end of a capture (docs/cudasim.md, "Stream capture and graphs"). All of it is
// called with the runtime's mutex held.
#pragma once

#include <cuda_runtime_api.h>

#include <optional>

#include "runtime.hpp"

namespace cudasim {

/// Appends `w` to the capture of `s` (which captures) as a node that depends on the stream's
/// tips; the node becomes the stream's only tip.
void capture_node(stream_obj* s, work w);

/// cudaEventRecord on a capturing stream: the event becomes a captured event that stands for the
/// stream's tips in its capture.
void capture_record(event_obj* ev, stream_obj* s);

/// cudaStreamWaitEvent when the stream captures or the event was recorded in a capture. A
/// captured event joins a stream that does not capture to the event's capture, or adds the
/// event's nodes to the tips of a stream of the same capture (cudaErrorStreamCaptureMerge for a
/// stream of another capture). A capturing stream may wait on an event recorded outside any
/// capture only with cudaEventWaitExternal, which adds an external wait node
/// (cudaErrorStreamCaptureIsolation otherwise). Returns nullopt for an ordinary wait (neither
/// side captures).
std::optional<cudaError_t> capture_wait(stream_obj* s, event_obj* ev, unsigned flags);

/// cudaStreamEndCapture on `s`, the capture's origin: takes every stream of the capture out of
/// capture mode and destroys the capture. Returns the graph through `out` (null on failure) and
/// cudaSuccess, cudaErrorStreamCaptureInvalidated, or cudaErrorStreamCaptureUnjoined when a node
/// is not reached from the origin stream's tips (a fork not joined back).
cudaError_t finish_capture(capture* c, graph_obj*& out);

} // namespace cudasim
