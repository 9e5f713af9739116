// SPDX-License-Identifier: Apache-2.0
// A session on a real GPU: the table named by the GPU's UUID, capacity from the device's memory,
// the process's context overhead accounted, budgeted allocation.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <gpushare/cuda/detail/context_registry.hpp>
#include <gpushare/cuda/detail/probe.hpp>
#include <gpushare/cuda/detail/state.hpp>
#include <gpushare/cuda/device.hpp>
#include <gpushare/cuda/error.hpp>
#include <gpushare/cuda/options.hpp>
#include <gpushare/cuda/stats.hpp>
#include <gpushare/session.hpp>

#include <gpushare/cuda/detail/runtime_names_begin.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {

class scoped_kernel;
class memory_resource;

/// A process's membership in the table of one GPU. The table is named by the GPU's UUID, so
/// processes that see the GPU under different ordinals (CUDA_VISIBLE_DEVICES) meet in it; a
/// process using several GPUs opens one device_session per GPU.
///
///     gpushare::cuda::device_session s(0);               // device 0 as this process sees it
///     float* x = static_cast<float*>(s.malloc(n * 4));   // charged to the budget
///     {
///       gpushare::cuda::scoped_kernel guard(s, stream);  // waits for its turn on the GPU
///       my_kernel<<<grid, block, 0, stream>>>(x, n);
///     }                                                  // GPU time measured with events
///     s.yield();                                         // iteration boundary
///     s.free(x);
///
/// Opening it (in this order): checks that a device exists (errc::no_device otherwise, with
/// CUDA's reason); creates this process's context on the device if it has none and measures its
/// overhead (see overhead_method()); joins the table, creating it with capacity = device memory -
/// headroom when it does not exist; records the overhead as external usage, once per process and
/// table (see carries_context_overhead()); records the device's free memory in the table.
class device_session {
public:
  /// `device`: the CUDA ordinal as this process sees it; -1 for the calling thread's current
  /// device. Session options and the GPUSHARE_* environment work as for gpushare::session.
  [[nodiscard]] explicit device_session(int device = -1, const session_options& opts = {},
                                        const device_options& dopts = {}) {
    const resolved_device_options r = resolve_device_options(dopts);
    info_ = describe_device(device < 0 ? current_device() : device);

    std::size_t total = 0;
    detail::context_registry& registry = detail::context_registry::instance();
    if (r.context_overhead) {
      total = create_context();
      overhead_ = *r.context_overhead;
      source_ = detail::overhead_source::configured;
    } else {
      // One measurement per process and device: a later session finds the context existing and
      // uses the figure measured when it was created.
      std::lock_guard measuring(registry.measuring());
      if (const auto known = registry.measurement(info_.uuid)) {
        total = create_context();
        overhead_ = known->first;
        source_ = known->second;
      } else {
        total = measure_context(r);
        if (detail::is_measured(source_)) registry.remember(info_.uuid, overhead_, source_);
      }
    }

    session_options o = opts;
    // Its device picks the per-device values of a cluster scheduler's limits
    // (CUDA_DEVICE_MEMORY_LIMIT_<n>, docs/cluster-env.md).
    if (!o.device_ordinal) o.device_ordinal = info_.ordinal;
    // The device's memory minus headroom, unless the code or GPUSHARE_CAPACITY sets one.
    if (!o.capacity && !process_environment("GPUSHARE_CAPACITY"))
      o.capacity = capacity_for_device(total, r);
    session_.emplace(info_.uuid, o);
    share_ = std::make_shared<detail::overhead_share>();
    share_->core = session_->shared_core();
    share_->table = session_->table_name();
    share_->overhead = overhead_;
    registry.join(share_);
    try {
      state_ = std::make_shared<detail::device_state>(session_->shared_core(), info_.ordinal,
                                                      state_options_of(r));
      state_->observe_device(info_.name);
    } catch (...) {
      registry.leave(share_); // no destructor runs for a constructor that throws
      throw;
    }
  }

  /// Takes over `o`'s session; `o` is left not joined. Assigning leaves this session first.
  device_session(device_session&&) noexcept = default;
  /// See the move constructor.
  device_session& operator=(device_session&& o) noexcept {
    if (this != &o) {
      leave();
      session_ = std::move(o.session_);
      state_ = std::move(o.state_);
      share_ = std::move(o.share_);
      info_ = std::move(o.info_);
      overhead_ = o.overhead_;
      source_ = o.source_;
    }
    return *this;
  }
  device_session(const device_session&) = delete;
  device_session& operator=(const device_session&) = delete;
  ~device_session() { leave(); }

  /// The device: ordinal, UUID (the table's key), name, memory.
  const device_info& device() const noexcept { return info_; }
  /// The underlying session: reserve(), try_reserve(), configure(), info(), id() ...
  gpushare::session& host() { return sess(); }

  /// An iteration boundary: if another session waits for the GPU, first waits for this
  /// session's guarded work still in flight (so the next holder does not find it in its way),
  /// then gives way as session::yield() does. One relaxed load when nobody waits.
  void yield() {
    if (!state_) return;
    state_->check_not_forked();
    if (state_->core().others_waiting())
      state_->core().add_device_time(state_->drain_for_handover());
    sess().yield();
  }

  /// As gpushare::session::give_way_due(): whether a session that should run now waits (end the
  /// guard, or the persistent kernel, at the next point that can).
  bool give_way_due() { return state_ && sess().give_way_due(); }

  /// Keeps the device through the gaps after this session's guards against lower classes for
  /// the next `d`, at most 10 ms after its last guard (session::linger).
  template <class Rep, class Period> void linger(std::chrono::duration<Rep, Period> d) {
    sess().linger(d);
  }

  /// Waits for this session's guarded work and stream-ordered frees still in flight, and
  /// accounts them.
  void synchronize() {
    usable().check_not_forked();
    state_->core().add_device_time(state_->drain_regions(detail::wait_limit::none));
    state_->release_finished_frees(detail::frees_wait::wait);
    state_->release_pool_memory(detail::pool_trim::always);
  }

  /// What the CUDA side did for this session in this process: drains and drain timeouts,
  /// captured guards, regions and frees CUDA could not confirm, pool bytes still held.
  cuda_stats statistics() { return usable().stats(); }

  /// Budgeted cudaMalloc: reserves `bytes` (waiting up to the allocation timeout for other
  /// sessions to free memory), then allocates them on this device; if cudaMalloc fails the
  /// reservation is rolled back. Over this session's limit: errc::over_limit at once, naming the
  /// session, its limit and the request. Returns nullptr for 0 bytes.
  [[nodiscard]] void* malloc(std::size_t bytes) {
    void* p = usable().allocate(bytes);
    remember_or_free(p, bytes, nullptr, detail::allocation_kind::plain);
    return p;
  }
  /// cudaFree, then the bytes return to the budget. `p` must come from malloc(); nullptr is a
  /// no-op; an unknown pointer, or one from malloc_async() (cudaFree would not wait for its
  /// stream), is errc::invalid_argument.
  void free(void* p) {
    if (!p) return;
    usable().deallocate(p, state_->forget(p, detail::allocation_kind::plain));
  }
  /// Budgeted stream-ordered allocation on `stream`, from a memory pool of this session's own
  /// (cudaMallocFromPoolAsync): trimming it never touches the application's pools or their
  /// release thresholds. On a stream being captured, the allocation becomes a graph node: its
  /// bytes are graph memory, charged from the capture on until release_graph_memory(), since
  /// the device's graph memory pool keeps them after the graph's free ran (a free of it, in the
  /// capture or later, returns nothing). Free it with free_async().
  [[nodiscard]] void* malloc_async(std::size_t bytes, cudaStream_t stream) {
    void* p = usable().allocate_async(bytes, stream);
    remember_or_free(p, bytes, stream, detail::allocation_kind::stream_ordered);
    return p;
  }
  /// cudaFreeAsync on `stream`; the bytes return to the budget once the free has executed and
  /// the pool has given the memory back to the device (at once when another session waits for
  /// memory, else at the pool's next synchronisation). `p` must come from malloc_async().
  void free_async(void* p, cudaStream_t stream) {
    if (!p) return;
    usable().deallocate_async(p, state_->forget(p, detail::allocation_kind::stream_ordered),
                              stream);
  }

  /// Call once the executable graphs (cudaGraphExec_t) holding memory this session allocated
  /// during stream captures are destroyed: trims the device's graph memory pool
  /// (cudaDeviceGraphMemTrim, which frees the memory no executing or scheduled graph uses, the
  /// application's included: those graphs map memory again at their next launch), then returns
  /// to the budget the graph memory the pool no longer reserves
  /// (cudaGraphMemAttrReservedMemCurrent). Returns the bytes returned. A graph of the session's
  /// memory launched after this call maps memory outside the budget. See cuda_stats::
  /// graph_bytes_held; the session's end trims the pool too.
  std::uint64_t release_graph_memory() { return usable().release_graph_memory(); }

  /// The CUDA stream priority that matches this session's priority class (stream_priority_for:
  /// the default up to priority::normal, one step more urgent per class above, within the
  /// device's range), for streams the application creates itself (cudaStreamCreateWithPriority,
  /// torch.cuda.Stream(priority=...)). It matters when sessions of different classes share one
  /// process, hence one context: the GPU then schedules the higher class's blocks first, where
  /// gpushare's arbitration can only order whole guards. Between processes the GPU time-slices
  /// contexts and stream priorities do not apply.
  int stream_priority() {
    int least = 0, greatest = 0;
    {
      detail::device_scope on(info_.ordinal);
      detail::check(cudaDeviceGetStreamPriorityRange(&least, &greatest),
                    "cudaDeviceGetStreamPriorityRange");
    }
    return detail::stream_priority_for(sess().info().priority, least, greatest);
  }
  /// A new stream on this session's device with stream_priority(); `flags` as for
  /// cudaStreamCreateWithFlags (default: not synchronising with the legacy default stream).
  /// The caller destroys it (cudaStreamDestroy).
  [[nodiscard]] cudaStream_t create_stream(unsigned flags = cudaStreamNonBlocking) {
    const int priority = stream_priority();
    detail::device_scope on(info_.ordinal);
    cudaStream_t s = nullptr;
    detail::check(cudaStreamCreateWithPriority(&s, flags, priority),
                  "cudaStreamCreateWithPriority");
    return s;
  }

  /// Device memory this process uses outside gpushare's allocations: `extra` (e.g. a cuBLAS
  /// workspace), plus the context overhead while this session carries it. Replaces an earlier
  /// extra amount.
  void set_external_usage(std::uint64_t extra) {
    sess();
    detail::context_registry::instance().set_extra(*share_, extra);
  }

  /// The overhead of this process's CUDA context on the device, and how it was obtained:
  ///   "measured (per process)": the device memory NVML lists for this process right after the
  ///     session created the context (nvmlDeviceGetComputeRunningProcesses_v3), which other
  ///     processes creating contexts or allocating at the same moment do not disturb;
  ///   "measured (device delta)": the device's free memory (NVML) before and after the context
  ///     was created, when NVML does not list this process (e.g. it runs in another PID
  ///     namespace);
  ///   "configured": device_options::context_overhead or GPUSHARE_CONTEXT_OVERHEAD;
  ///   "estimated": 512 MiB, when nothing could be measured: the context existed before the
  ///     process's first session opened (the application used the device first), or NVML is
  ///     unavailable;
  ///   "estimated (measurement implausible)": 512 MiB, because the figure measured was 0, over
  ///     4 GiB or over the device's memory.
  /// A later session of the process on the same device reports the first one's figure and method.
  /// Modules the runtime loads lazily after the session opened are not included.
  std::uint64_t context_overhead() const noexcept { return overhead_; }
  /// How context_overhead() was obtained (see there).
  const char* overhead_method() const noexcept { return detail::to_string(source_); }

  /// Whether this session's external usage includes the context overhead now. A process's
  /// context is counted once per table: by the first of its live device sessions on the table
  /// (same domain and device); when that one closes, another takes the charge over.
  bool carries_context_overhead() const {
    sess();
    return detail::context_registry::instance().carrying(*share_);
  }

  /// Records the device's current free memory in the table, then takes a snapshot: its
  /// device_free and device_untracked show memory used outside gpushare.
  table_snapshot snapshot() {
    usable().observe_device(info_.name);
    return sess().snapshot();
  }
  /// As gpushare::session::info().
  session_info info() { return sess().info(); }
  /// As gpushare::session::configure().
  void configure(const settings_change& c) { sess().configure(c); }
  /// As gpushare::session::name().
  const std::string& name() const { return sess().name(); }
  /// As gpushare::session::id().
  session_id id() const { return sess().id(); }
  /// As gpushare::session::table_name().
  const std::string& table_name() const { return sess().table_name(); }
  /// Whether it is still in the table (false after leave() or a move).
  bool joined() const noexcept { return session_ && session_->joined(); }
  /// What its join had to tell that is not an error (gpushare::session::notices()).
  const std::vector<notice>& notices() const { return sess().notices(); }

  /// Waits for work in flight, then leaves the table (the destructor does it otherwise).
  void leave() noexcept {
    if (state_) state_->shutdown();
    if (share_) detail::context_registry::instance().leave(share_); // hands the overhead on
    if (session_) session_->leave();
  }

  /// The shared CUDA-side state (for memory resources and allocators built on this session).
  const std::shared_ptr<detail::device_state>& shared_state() const {
    if (!state_) throw error(errc::session_closed, "this device session was moved from");
    return state_;
  }

private:
  friend class scoped_kernel;

  gpushare::session& sess() {
    if (!session_ || !state_)
      throw error(errc::session_closed, "this device session was moved from");
    return *session_;
  }
  const gpushare::session& sess() const {
    if (!session_ || !state_)
      throw error(errc::session_closed, "this device session was moved from");
    return *session_;
  }

  detail::device_state& usable() const {
    if (!state_) throw error(errc::session_closed, "this device session was moved from");
    return *state_;
  }

  /// Records a new pointer's size; if that fails (no memory for the map), frees it again.
  void remember_or_free(void* p, std::size_t bytes, cudaStream_t stream,
                        detail::allocation_kind kind) {
    if (!p) return;
    try {
      state_->remember(p, bytes, kind);
    } catch (...) {
      if (kind == detail::allocation_kind::stream_ordered)
        state_->deallocate_async(p, bytes, stream);
      else
        state_->deallocate(p, bytes);
      throw;
    }
  }

  /// What the CUDA-side state uses of the resolved options.
  static detail::state_options state_options_of(const resolved_device_options& r) noexcept {
    return {r.allocation_timeout_ns,
            r.max_in_flight_ns,
            r.max_in_flight_lower_ns,
            r.drain_timeout_ns,
            r.drain,
            r.timing};
  }

  /// Makes sure this process has its context on the device; returns the device's memory.
  std::size_t create_context() const {
    std::size_t free = 0, total = 0;
    detail::device_scope on(info_.ordinal); // creates this process's context if needed
    detail::check(detail::own_call([&] { return cudaFree(nullptr); }),
                  "cudaFree(nullptr) (creating the CUDA context)");
    detail::check(detail::own_call([&] { return cudaMemGetInfo(&free, &total); }),
                  "cudaMemGetInfo");
    return total;
  }

  /// Creates this process's context on the device and measures what it costs (see
  /// overhead_method()); sets overhead_ and source_, returns the device's memory. Measured only
  /// when the context does not exist yet: afterwards NVML's per-process figure includes the
  /// application's own allocations.
  std::size_t measure_context(const resolved_device_options& r) {
    const std::optional<bool> had_context = detail::primary_context_active(info_.ordinal);
    const detail::nvml_library& nvml = detail::process_nvml();
    std::optional<std::uint64_t> free_before;
    if (had_context == false) free_before = nvml.free_memory(info_.uuid);
    const std::size_t total = create_context();
    detail::overhead_measurement m;
    m.device_total = total;
    if (had_context == false) {
      m.per_process = nvml.process_memory(info_.uuid, static_cast<unsigned>(::getpid()));
      const auto after = nvml.free_memory(info_.uuid);
      if (free_before && after && *after <= *free_before) m.device_delta = *free_before - *after;
    }
    const auto [overhead, source] = detail::choose_context_overhead(r.context_overhead, m);
    overhead_ = overhead;
    source_ = source;
    return total;
  }

  std::optional<gpushare::session> session_;
  std::shared_ptr<detail::device_state> state_;
  std::shared_ptr<detail::overhead_share> share_;
  device_info info_;
  std::uint64_t overhead_ = 0;
  detail::overhead_source source_ = detail::overhead_source::estimated;
};

} // namespace cuda
} // namespace v0
} // namespace gpushare

#include <gpushare/cuda/detail/runtime_names_end.hpp>
