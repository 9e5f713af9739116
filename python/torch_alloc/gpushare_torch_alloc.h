/* SPDX-License-Identifier: Apache-2.0
 * gpushare's budgeted allocator for PyTorch: a shared library (libgpushare_torch_alloc.so) whose
 * two allocation functions have the signatures of PyTorch's pluggable allocators
 * (torch/csrc/cuda/CUDAPluggableAllocator.h: void*(size_t, int, cudaStream_t) and
 * void(void*, size_t, int, cudaStream_t)), for torch.cuda.memory.CUDAPluggableAllocator. Each
 * allocation is charged to this process's gpushare::cuda::device_session for the device, opened
 * on first use. The Python side is gpushare.torch (docs/python.md, "PyTorch").
 *
 * No function throws or aborts: failures return NULL or -1, and gpushare_torch_last_error()
 * says what went wrong on the calling thread. */
#ifndef GPUSHARE_TORCH_ALLOC_H
#define GPUSHARE_TORCH_ALLOC_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define GPUSHARE_TORCH_API __attribute__((visibility("default")))
#else
#define GPUSHARE_TORCH_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Budgeted stream-ordered allocation of `size` bytes on `device`, ordered on `stream`
 * (cudaMallocFromPoolAsync from the session's own pool). Opens the device's session on first
 * use. Returns NULL for 0 bytes, and NULL with the reason in gpushare_torch_last_error() when the
 * budget cannot give the bytes within the allocation timeout (default 0: fail at once) or CUDA
 * fails; PyTorch turns NULL into its out-of-memory error when the allocator backs a MemPool. */
GPUSHARE_TORCH_API void* gpushare_torch_malloc(size_t size, int device, cudaStream_t stream);

/* Returns `ptr` (from gpushare_torch_malloc on `device`) with a free ordered on `stream`
 * (cudaFreeAsync): work queued on `stream` before the free still sees the memory. With
 * sync_on_free=1 the device is synchronised first, for memory that other streams used. Errors
 * (an unknown pointer) are recorded for gpushare_torch_last_error() and counted in the stats. */
GPUSHARE_TORCH_API void gpushare_torch_free(void* ptr, size_t size, int device,
                                            cudaStream_t stream);

/* Settings for the sessions opened from now on: "key=value" pairs separated by ';' or ',',
 * or NULL / "" for none. Keys: name, memory_limit, memory_guarantee, priority, domain, capacity,
 * headroom, alloc_timeout (how long malloc waits for other sessions to free memory: "0" fail
 * at once (the default), "500ms", "none"), sync_on_free (0 or 1, default 0). A key not given
 * takes its GPUSHARE_* variable, as device_session does. Replaces earlier settings. Fails (-1)
 * while a session is open (call gpushare_torch_shutdown() first) or on a bad key or value. */
GPUSHARE_TORCH_API int gpushare_torch_configure(const char* settings);

/* Opens the session of `device` now (-1: the calling thread's current device) if it is not
 * open, so that a bad setting or a missing device shows before the first allocation. 0 or -1. */
GPUSHARE_TORCH_API int gpushare_torch_open(int device);

typedef struct gpushare_torch_stats {
  uint64_t allocated;        /* bytes of this allocator's live allocations on the device */
  uint64_t allocations;      /* their number */
  uint64_t failed_mallocs;   /* gpushare_torch_malloc calls that returned NULL for size > 0 */
  uint64_t failed_frees;     /* gpushare_torch_free calls that found an error */
  uint64_t charged;          /* the session's reserved bytes in the table (includes frees whose
                                memory the device has not got back yet) */
  uint64_t external;         /* the session's external usage (context overhead, published) */
  uint64_t memory_limit;     /* the session's memory limit */
  uint64_t context_overhead; /* the process's context overhead, if this session carries it */
  uint64_t device_total;     /* the device's memory */
} gpushare_torch_stats;

/* Fills *out for `device`. 0: the session is open; 1: no session is open on the device (*out is
 * zeroed); -1: error. */
GPUSHARE_TORCH_API int gpushare_torch_get_stats(int device, gpushare_torch_stats* out);

/* Waits for the device session's stream-ordered frees and returns their bytes to the budget
 * (device_session::synchronize). 0, 1 (no session open), or -1. */
GPUSHARE_TORCH_API int gpushare_torch_synchronize(int device);

/* Publishes `bytes` as the session's external usage (memory the process uses outside this
 * allocator, e.g. PyTorch's caching allocator in budget mode). Opens the session if needed.
 * 0 or -1. */
GPUSHARE_TORCH_API int gpushare_torch_set_external_usage(int device, uint64_t bytes);

/* Closes every session (each leaves its table). Fails (-1) while allocations are live, naming
 * the device and bytes: their frees would have no session to return to. Sessions still open
 * when the process exits are reclaimed by the table like those of a process that died. */
GPUSHARE_TORCH_API int gpushare_torch_shutdown(void);

/* What the last failing call on this thread reported; "" if none failed. */
GPUSHARE_TORCH_API const char* gpushare_torch_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* GPUSHARE_TORCH_ALLOC_H */
