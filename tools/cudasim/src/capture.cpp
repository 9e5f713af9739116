// SPDX-License-Identifier: Apache-2.0
// Stream capture across streams (capture.hpp). The rules: the CUDA Programming Guide, "Stream
// Capture" ("Cross-stream Dependencies and Events", "Prohibited and Unhandled Operations"), and
// the error codes of driver_types.h (cudaErrorStreamCaptureMerge, Unjoined, Isolation).
#include "capture.hpp"

#include <algorithm>

namespace cudasim {

namespace {

capture* capture_by_id(unsigned long long id) {
  for (capture* c : runtime::get().captures)
    if (c->id == id) return c;
  return nullptr;
}

void add_tips(std::vector<std::size_t>& tips, const std::vector<std::size_t>& more) {
  for (std::size_t n : more)
    if (std::find(tips.begin(), tips.end(), n) == tips.end()) tips.push_back(n);
}

/// Whether every node of `c` is reached backwards from the origin stream's tips.
bool all_joined(capture* c) {
  const std::vector<std::vector<std::size_t>>& deps = c->graph->deps;
  std::vector<char> seen(deps.size(), 0);
  std::vector<std::size_t> todo = c->tips[c->origin];
  while (!todo.empty()) {
    const std::size_t n = todo.back();
    todo.pop_back();
    if (n >= seen.size() || seen[n]) continue;
    seen[n] = 1;
    todo.insert(todo.end(), deps[n].begin(), deps[n].end());
  }
  return std::all_of(seen.begin(), seen.end(), [](char v) { return v != 0; });
}

} // namespace

void capture_node(stream_obj* s, work w) {
  // The node depends on the stream's tips: its previous node, and the nodes of the events it
  // has waited on since (CUDA Programming Guide, "Cross-stream Dependencies and Events").
  capture* c = s->cap;
  graph_obj& g = *c->graph;
  const std::size_t index = g.nodes.size();
  g.nodes.push_back(std::make_unique<work>(std::move(w)));
  g.index[g.nodes.back().get()] = index;
  std::vector<std::size_t>& tips = c->tips[s];
  g.deps.push_back(tips);
  tips.assign(1, index);
}

void capture_record(event_obj* ev, stream_obj* s) {
  // The record expresses a dependency only: no timestamp, no completion. The event stays a
  // captured event until it is recorded again outside a capture.
  ev->captured = true;
  ev->done = nullptr;
  ev->capture_id = s->cap->id;
  ev->nodes = s->cap->tips[s];
}

std::optional<cudaError_t> capture_wait(stream_obj* s, event_obj* ev, unsigned flags) {
  const bool external = (flags & cudaEventWaitExternal) != 0;
  if (s->cap && external) {
    // An external event node: each launch of the graph waits for the event's work then.
    work w{};
    w.kind = work::wait;
    w.event = ev;
    capture_node(s, std::move(w));
    return cudaSuccess;
  }
  if (ev->captured) {
    capture* c = capture_by_id(ev->capture_id);
    if (!c) return cudaSuccess; // its capture has ended: nothing to wait for
    if (!s->cap) {
      // The stream joins the capture: its later work is captured after the event's nodes.
      s->cap = c;
      c->tips[s] = ev->nodes;
      return cudaSuccess;
    }
    if (s->cap == c) {
      add_tips(c->tips[s], ev->nodes);
      return cudaSuccess;
    }
    s->cap->invalidated = true; // two independent capture sequences would merge
    return cudaErrorStreamCaptureMerge;
  }
  if (!s->cap) return std::nullopt;
  // A capturing stream waiting on an event recorded outside any capture. An event never
  // recorded stands for no work (cudaEventRecordWithFlags' documentation): nothing to cross.
  if (!ev->done) return cudaSuccess;
  s->cap->invalidated = true;
  return cudaErrorStreamCaptureIsolation;
}

cudaError_t finish_capture(capture* c, graph_obj*& out) {
  runtime& rt = runtime::get();
  const bool joined = c->invalidated || all_joined(c);
  for (auto& ctx : rt.contexts)
    for (stream_obj* t : ctx->streams)
      if (t->cap == c) t->cap = nullptr;
  rt.captures.erase(std::find(rt.captures.begin(), rt.captures.end(), c));
  const cudaError_t result = c->invalidated ? cudaErrorStreamCaptureInvalidated
                             : !joined      ? cudaErrorStreamCaptureUnjoined
                                            : cudaSuccess;
  if (result != cudaSuccess) {
    rt.graphs.erase(c->graph);
    delete c->graph;
    out = nullptr;
  } else {
    out = c->graph;
  }
  delete c;
  return result;
}

} // namespace cudasim
