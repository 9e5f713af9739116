// SPDX-License-Identifier: Apache-2.0
// Counters of a device session's CUDA side, kept in this process (device_session::cuda_stats()).
#pragma once

#include <cstdint>

namespace gpushare {
inline namespace v0 {
namespace cuda {

/// What the CUDA layer did for one device session, for monitoring and tests. The table's
/// session_info holds the arbitration's figures (device time, guards, waits); these are the
/// CUDA-side events behind them.
struct cuda_stats {
  std::uint64_t drains = 0; ///< waits for this session's guarded work to finish (handovers,
                            ///< yields, synchronize)
  /// Drains that gave up after the drain timeout (GPUSHARE_DRAIN_TIMEOUT): the device was handed
  /// over while this session's work still ran (e.g. it waited on another process).
  std::uint64_t drain_timeouts = 0;
  /// Waits for all of this process's work on the device before a handover (GPUSHARE_DRAIN=device).
  std::uint64_t device_drains = 0;
  /// Such waits skipped because a blocking stream of the process was being captured (a
  /// cudaDeviceSynchronize then would break the capture).
  std::uint64_t device_drains_skipped = 0;
  std::uint64_t captured_guards = 0; ///< guards on a capturing stream: nothing timed
  /// Regions whose completion CUDA could not report (a failed event query, e.g. after a sticky
  /// error): not accounted, their events dropped rather than reused.
  std::uint64_t unknown_regions = 0;
  /// Stream-ordered frees whose completion could not be confirmed: their bytes stay charged.
  std::uint64_t frees_kept_charged = 0;
  /// Bytes still charged for stream-ordered memory that the session freed but its pool has not
  /// yet given back to the device (released when another session waits for memory, or at
  /// synchronize()).
  std::uint64_t pool_bytes_held = 0;
  /// Bytes still charged for graph memory: what the session allocated during stream captures.
  /// The device's graph memory pool keeps such memory after the graphs' frees ran, so it stays
  /// charged until device_session::release_graph_memory() or the session's end.
  std::uint64_t graph_bytes_held = 0;
  /// Guard ends that kept the lower in-flight bound (GPUSHARE_MAX_IN_FLIGHT_LOWER) because a
  /// session of a higher priority class had asked for the device lately.
  std::uint64_t lower_bound_exits = 0;
  /// Guard ends that left work in flight and marked it in the table, so that no lower class is
  /// granted the device before it finished (or the mark's deadline passed).
  std::uint64_t marked_exits = 0;
  /// Of those, the marks a host function clears as the work finishes (a lower class was
  /// active); the others end at their deadline.
  std::uint64_t mark_host_functions = 0;
  /// Waits for this session's GPU work (drains, the in-flight bound) that blocked on a host
  /// function's signal rather than polling.
  std::uint64_t signalled_waits = 0;
  /// Guards timed in a batch with others (guard_timing::batched: the session was uncontended),
  /// rather than by a start and a stop event of their own.
  std::uint64_t batched_guards = 0;
  /// The batches those guards made, closed so far (each is one region: a start and a stop
  /// event, timed and settled once).
  std::uint64_t batches = 0;
};

} // namespace cuda
} // namespace v0
} // namespace gpushare
