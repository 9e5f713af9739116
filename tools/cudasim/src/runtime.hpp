// SPDX-License-Identifier: Apache-2.0
// The per-process half of cudasim: contexts, streams (FIFO queues with a worker thread each,
// which ends when the stream is destroyed and its work done),
// events, stream-ordered pools, stream capture and graphs. The shared half (device memory,
// contexts of all processes, time slices) is in shared.hpp. docs/cudasim.md says what each
// part models and where the rule comes from.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cudasim/cudasim.h"

namespace cudasim {

/// Completion of one piece of stream work, shared by whoever waits on it.
struct completion {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::uint64_t at = 0; // monotonic ns when it completed
  void finish(std::uint64_t t);
  bool ready();
  void wait();
};
using done_ptr = std::shared_ptr<completion>;

/// A kernel model (cudasim/cudasim.h): the parameters' sizes (arg_count -1: none declared, no
/// argument is copied) and its functions, either of which may be null.
struct kernel_model {
  int arg_count = -1;
  std::vector<std::size_t> arg_sizes;
  cudasimDurationFn duration = nullptr;
  cudasimExecuteFn execute = nullptr;
};

struct kernel_info {
  const void* host_fun = nullptr;
  std::string name;      ///< the device name it was registered with (mangled), "" if none
  bool modelled = false; ///< `model` was declared by address (cudasimSetKernelModel)
  kernel_model model;
  // What its names give (runtime::model_of), computed at its first launch and again after the
  // models by name change:
  std::uint64_t resolved = 0;          ///< runtime::name_models_version then; 0: never
  std::vector<std::string> names;      ///< kernel_names(name)
  const kernel_model* named = nullptr; ///< the first model by name that matches, if any
  std::uint64_t ns = 0;                ///< else CUDASIM_KERNELS's duration or CUDASIM_KERNEL_US
};

struct context;
struct event_obj;
struct pool_obj;
struct stream_obj;

/// One piece of work: a stream operation, or a graph node.
struct work {
  enum kind_t {
    kernel,
    event_record,
    host_fn,
    copy,
    copy2d,
    set,
    alloc,
    free_async,
    wait,
    graph_end
  } kind;
  // kernel
  const void* func = nullptr;         // the host function it was launched by
  cudasimExecuteFn execute = nullptr; // its model's, run when it completes
  std::vector<std::vector<unsigned char>> args;
  dim3 grid{}, block{};
  std::size_t shared_mem = 0;
  std::uint64_t ns = 0;
  bool fault = false;
  // event record (outside capture, or an external record node); an external wait node's event
  event_obj* event = nullptr;
  // host function
  cudaHostFn_t fn = nullptr;
  void* user = nullptr;
  // copies and sets
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0, width = 0, height = 0, dpitch = 0, spitch = 0;
  int value = 0;
  cudaMemcpyKind copy_kind = cudaMemcpyDefault; // as the call gave it
  // graph memory nodes (an allocation node's size in `bytes`) and stream-ordered frees
  void* ptr = nullptr;
  int device = 0; // an allocation node's
  pool_obj* pool = nullptr;
  // cudaStreamWaitEvent
  done_ptr wait_for;
  // graph_end: the end of one launch of a graph, whose allocation nodes these are
  std::vector<void*> allocs;
};

/// A graph: its nodes (a node's handle is its work object) and, per node, the nodes it depends
/// on (indices into `nodes`, in the order capture added them): the graph's edges.
struct graph_obj {
  std::vector<std::unique_ptr<work>> nodes;
  std::vector<std::vector<std::size_t>> deps;
  std::map<const work*, std::size_t> index; // a node's position in `nodes`
  // The argument pointers cudaGraphKernelNodeGetParams returns, owned by the node (written
  // again at each query, with the same values).
  std::map<std::size_t, std::vector<void*>> kernel_params;
};
struct graph_exec_obj {
  std::vector<work> nodes;
  context* ctx = nullptr; // instantiated on the context of the device current then
};

/// One capture sequence: the streams capturing into it (the origin, where it began, and those
/// that joined it by waiting on one of its events) and their tips, by index into graph->nodes
/// (the graph holds each node's dependencies). A stream's tips are the nodes its next captured
/// work depends on.
struct capture {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  graph_obj* graph = nullptr;
  bool invalidated = false;
  unsigned long long id = 0;
  stream_obj* origin = nullptr;
  std::map<stream_obj*, std::vector<std::size_t>> tips; // per capturing stream
};

/// How much work a stream may hold before a launch blocks the host thread until there is room:
/// a GPU's launch queue is finite too, so a host loop cannot run arbitrarily far ahead.
constexpr std::size_t max_queued = 1024;

struct stream_obj {
  enum type_t { normal, legacy, per_thread } type = normal;
  context* ctx = nullptr;
  unsigned flags = 0;
  int priority = 0;
  bool destroyed = false;
  capture* cap = nullptr; // guarded by the runtime's mutex

  std::mutex m;
  std::condition_variable cv;
  std::condition_variable space; // signalled when the worker takes an item (see max_queued)
  struct item {
    work w;
    std::vector<done_ptr> deps;
    done_ptr done;
  };
  std::deque<item> queue;
  bool worker = false;      // a worker thread runs the queue (it ends when the stream is
                            // destroyed and its queue is done: runtime::retire)
  int blocked_launches = 0; // launches waiting for room in the queue (they keep the stream)
  done_ptr last;            // the last work submitted (guarded by m)

  bool blocking() const { return type != normal || (flags & cudaStreamNonBlocking) == 0; }
};

struct event_obj {
  context* ctx = nullptr; // created on the context of the device current then
  unsigned flags = 0;
  done_ptr done;         // null: never recorded
  bool captured = false; // last recorded in a capturing stream
  // When captured: the capture (its id) and the nodes the record stands for.
  unsigned long long capture_id = 0;
  std::vector<std::size_t> nodes;
};

struct pool_obj {
  context* ctx = nullptr;
  std::uint64_t reserved = 0, used = 0, threshold = 0, reserved_high = 0, used_high = 0;
  // Bytes of stream-ordered frees that have run but that no stream, event or device
  // synchronisation has observed yet: cudaMemPoolTrimTo cannot release them (release_pools).
  std::uint64_t unobserved = 0;
  bool is_default = true;
};

/// The device's graph memory pool (per process and device): physical memory reserved for graph
/// allocations, charged to the device until cudaDeviceGraphMemTrim releases what is not in use;
/// `used` is what is mapped to graph allocations now.
struct graph_pool {
  std::uint64_t reserved = 0, used = 0, reserved_high = 0, used_high = 0;
};

struct context {
  int ordinal = 0; // as this process numbers devices
  int unit = 0;    // the shared device unit
  int slot = -1;   // shared context slot; -1 until created
  std::atomic<int> sticky{cudaSuccess};
  stream_obj* legacy = nullptr;
  std::vector<stream_obj*> streams;
  pool_obj default_pool;
  pool_obj* current_pool = &default_pool;
  std::vector<pool_obj*> pools;
  graph_pool graph_mem;
};

/// The sticky error of `ctx` (cudaSuccess when it has none). After a device fault every call
/// that does CUDA work on the context returns it: "This leaves the process in an inconsistent
/// state and any further CUDA work will return the same error" (driver_types.h, on
/// cudaErrorLaunchFailure). docs/cudasim.md, "Errors", lists the calls that do no such work.
inline cudaError_t sticky_of(const context* ctx) {
  return ctx ? static_cast<cudaError_t>(ctx->sticky.load()) : cudaSuccess;
}

struct allocation {
  enum kind_t { device, async, graph, host } kind;
  std::size_t size = 0;
  context* ctx = nullptr;
  pool_obj* pool = nullptr;
  // graph allocations (see graph_pool): `live` from a launch until a free of it runs; `backed`
  // while physical memory of the pool is mapped to it; `runs`: launches scheduled or running.
  bool live = false;
  bool backed = false;
  int runs = 0;
};

/// The process-wide runtime (never destroyed: stream workers may outlive main).
class runtime {
public:
  static runtime& get();

  std::mutex mutex; // guards everything below that is not atomic
  std::atomic<pid_t> init_pid{0};
  cudaError_t init_result = cudaSuccess;
  std::vector<int> visible_units; // ordinal -> shared unit
  std::vector<std::unique_ptr<context>> contexts;
  std::map<const void*, kernel_info> kernels;
  std::list<std::pair<std::string, kernel_model>> name_models; // cudasimSetKernelModelByName
  std::uint64_t name_models_version = 1;                       // changes with name_models
  std::set<stream_obj*> streams;
  std::set<event_obj*> events;
  std::set<graph_obj*> graphs;
  std::set<graph_exec_obj*> execs;
  std::set<pool_obj*> pools;
  std::map<void*, allocation> allocations;
  std::vector<capture*> captures;
  unsigned long long capture_ids = 0;
  std::uint64_t allocated_bytes = 0, allocation_calls = 0, launches = 0;

  // statistics
  std::atomic<unsigned long long> api_calls{0}, spin_wait_ns{0}, blocking_wait_ns{0},
      kernels_done{0}, kernel_ns{0};
  std::map<std::string, unsigned long long> calls_by_name;

  /// Initialises on first use: configuration, shared state, visible devices. Returns
  /// cudaSuccess, cudaErrorNoDevice or cudaErrorInitializationError.
  cudaError_t init();
  /// The context of `ordinal`, created (charging its memory) when `create`.
  cudaError_t context_of(int ordinal, bool create, context*& out);
  /// Resolves a stream handle (0, cudaStreamLegacy, cudaStreamPerThread or a created stream)
  /// for the calling thread; `per_thread_default` maps 0 to the per-thread stream.
  cudaError_t resolve(cudaStream_t handle, bool per_thread_default, stream_obj*& out);
  /// Submits work to a stream in order (or appends it to the stream's capture graph).
  done_ptr submit(stream_obj* s, work w);
  /// Stream capture rules for a "potentially unsafe" call by this thread.
  cudaError_t check_unsafe_call();
  /// cudaErrorStreamCaptureImplicit when `s` is the legacy stream and a blocking stream of its
  /// context captures (invalidating those captures when `invalidate`).
  cudaError_t check_legacy(stream_obj* s, bool invalidate);
  /// At a stream, event or device synchronisation: the frees that have run are observed, and
  /// idle pool memory above the release threshold is released.
  void release_pools(context* ctx);
  /// Maps graph-pool memory to the allocations `ptrs` (a launch), growing the pool's
  /// reservation as needed; cudaErrorMemoryAllocation when the device has no room.
  cudaError_t back_graph_memory(context* ctx, const std::vector<void*>& ptrs);
  /// Unmaps graph allocations no launch uses and that are not live (all of the context's, or
  /// those in `only`), then with `release` gives the pool's unused reservation back.
  void trim_graph_memory(context* ctx, const std::vector<void*>* only, bool release);
  void wait(const done_ptr& d, bool blocking_sync);
  /// Waits for all work of this process on `ctx`.
  void synchronize(context* ctx);
  /// Charges device memory (fault injection first); false when it does not fit.
  bool charge(context* ctx, std::uint64_t bytes);
  /// The model a launch of `k` follows: its own (by address), else the first model by name
  /// that matches one of its names, else none; `ns` is the duration when the model gives none
  /// (CUDASIM_KERNELS's, else CUDASIM_KERNEL_US). Call with `mutex` held.
  const kernel_model& model_of(kernel_info& k, std::uint64_t& ns);
  /// Marks a stream destroyed (cudaStreamDestroy): its queued work still runs, then its worker
  /// thread ends and the object is freed. Call with `mutex` held.
  void destroy_stream(stream_obj* s);

private:
  runtime() = default;
  void run_worker(stream_obj* s);
  /// Ends a destroyed stream whose queue is done; false if work or a launch came meanwhile.
  bool retire(stream_obj* s);
  /// Removes a stream from its context and frees it (`mutex` held; no thread uses it).
  void forget(stream_obj* s);
  void execute(stream_obj* s, work& w);
  /// A free (stream-ordered or a graph's free node) or the end of a graph launch.
  void execute_memory_node(const work& w);
};

/// The calling thread's current device (cudaSetDevice), 0 until set.
int& current_device();
/// The calling thread's stream capture interaction mode (cudaThreadExchangeStreamCaptureMode).
cudaStreamCaptureMode& thread_capture_mode();
/// The calling thread's last error.
cudaError_t& last_error();
/// Records `e` as the calling thread's last error (unless cudaSuccess) and returns it.
cudaError_t fail(cudaError_t e);
/// fail(), except that cudaErrorNotReady (a query's answer) is not recorded: observed on an
/// H200 (driver 580, CUDA 13.0), where cudaGetLastError returned cudaSuccess after it.
cudaError_t fail_unless_not_ready(cudaError_t e);
/// Counts a call of `name` and, unless the call needs no initialisation, initialises; returns
/// the error every call of a forked child or a misconfigured process gets.
cudaError_t enter(const char* name, bool initialise = true);

/// Resolves a stream for a stream call and binds the thread to its context; returns the
/// context's sticky error if it has one. Call with the runtime's mutex held.
cudaError_t stream_of(cudaStream_t handle, bool ptsz, stream_obj*& s);
/// stream_of for calls that enqueue work: also refuses work for an invalidated capture
/// (cudaErrorStreamCaptureInvalidated) and for the legacy stream while a blocking stream of its
/// context captures (cudaErrorStreamCaptureImplicit, invalidating that capture).
cudaError_t work_stream_of(cudaStream_t handle, bool ptsz, stream_obj*& s);
/// The driver API's cuStreamQuery and cuEventQuery (CUresult): the runtime queries' answers
/// without recording them as the thread's last error (driver calls never touch it).
int drv_stream_query(void* stream);
int drv_event_query(void* event);
/// Binds the calling thread's driver context (cudaSetDevice, first use).
void bind_thread(context* ctx);

void* map_memory(std::size_t bytes);
void unmap_memory(void* p, std::size_t bytes);

} // namespace cudasim
