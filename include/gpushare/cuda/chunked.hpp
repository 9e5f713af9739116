// SPDX-License-Identifier: Apache-2.0
// Long work cut into guarded chunks (issue 41, item 5; docs/design.md section 12, "Long kernels").
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>

#include <gpushare/cuda/default_stream.hpp>
#include <gpushare/cuda/device_session.hpp>
#include <gpushare/cuda/scoped_kernel.hpp>
#include <gpushare/error.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {

/// Enqueues `items` work items on `stream` in chunks of `chunk_items` (the last may be shorter),
/// each in its own cuda::scoped_kernel: `launch(first, count)` enqueues items [first, first +
/// count), in order (a kernel over that part of a grid, a slice of a batch). Each chunk's guard
/// end is a point where the device goes to a session that should run now (a higher priority
/// class, or an equal one whose turn came), so such a session waits for about one chunk of this
/// work (and what the in-flight bound keeps queued), not for all of it: the floor a long
/// low-class kernel sets under a high class's latency becomes a chunk. Size chunks by the
/// device time one takes: a millisecond or so costs nothing measurable in guards and keeps a
/// higher class's wait at about that. Returns the number of chunks; an exception from `launch`
/// ends its chunk's guard and propagates. `chunk_items` of 0 is errc::invalid_argument.
template <class Launch>
std::size_t launch_chunked(device_session& s, std::size_t items, std::size_t chunk_items,
                           Launch&& launch, cudaStream_t stream = GPUSHARE_CUDA_DEFAULT_STREAM) {
  if (chunk_items == 0)
    throw error(errc::invalid_argument,
                "launch_chunked: chunk_items is 0; give the items one chunk enqueues (at least 1)");
  std::size_t chunks = 0;
  for (std::size_t first = 0; first < items; ++chunks) {
    const std::size_t count = std::min(chunk_items, items - first);
    {
      scoped_kernel g(s, stream);
      launch(first, count);
    }
    first += count;
  }
  return chunks;
}

} // namespace cuda
} // namespace v0
} // namespace gpushare
