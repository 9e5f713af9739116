// SPDX-License-Identifier: Apache-2.0
// Runtime API: device memory, stream-ordered pools, copies and sets, host memory.
#include <cuda_runtime_api.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "runtime.hpp"
#include "shared.hpp"

using namespace cudasim;

namespace {

constexpr std::uint64_t pool_granule = 2ull << 20;
std::uint64_t round_up(std::uint64_t v, std::uint64_t to) { return (v + to - 1) / to * to; }

cudaError_t current_context(context*& ctx) {
  runtime& rt = runtime::get();
  if (const cudaError_t e = rt.context_of(current_device(), true, ctx); e != cudaSuccess) return e;
  bind_thread(ctx);
  return sticky_of(ctx);
}

cudaError_t malloc_async(void** ptr, size_t size, pool_obj* pool, cudaStream_t stream, bool ptsz,
                         const char* name) {
  if (const cudaError_t e = enter(name); e != cudaSuccess) return fail(e);
  if (!ptr) return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  stream_obj* s = nullptr;
  if (const cudaError_t e = work_stream_of(stream, ptsz, s); e != cudaSuccess) return fail(e);
  if (!pool) pool = s->ctx->current_pool;
  if (size == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  void* p = map_memory(size);
  if (!p) return fail(cudaErrorMemoryAllocation);
  if (s->cap) {
    // In a capture the allocation becomes a graph memory node: the address is fixed now, the
    // graph memory pool maps memory to it when the graph is launched (back_graph_memory).
    rt.allocations[p] = {allocation::graph, size, s->ctx, pool, false};
    work w{};
    w.kind = work::alloc;
    w.ptr = p;
    (void)rt.submit(s, std::move(w));
    *ptr = p;
    return cudaSuccess;
  }
  const std::uint64_t need = round_up(size, 512);
  if (pool->used + need > pool->reserved) {
    const std::uint64_t grow = round_up(pool->used + need - pool->reserved, pool_granule);
    if (!rt.charge(s->ctx, grow)) {
      unmap_memory(p, size);
      return fail(cudaErrorMemoryAllocation);
    }
    pool->reserved += grow;
    pool->reserved_high = std::max(pool->reserved_high, pool->reserved);
  }
  pool->used += need;
  pool->used_high = std::max(pool->used_high, pool->used);
  rt.allocations[p] = {allocation::async, size, s->ctx, pool, true};
  *ptr = p;
  return cudaSuccess;
}

cudaError_t free_async(void* ptr, cudaStream_t stream, bool ptsz, const char* name) {
  if (const cudaError_t e = enter(name); e != cudaSuccess) return fail(e);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  stream_obj* s = nullptr;
  if (const cudaError_t e = work_stream_of(stream, ptsz, s); e != cudaSuccess) return fail(e);
  if (!ptr) return cudaSuccess;
  const auto it = rt.allocations.find(ptr);
  if (it == rt.allocations.end() || it->second.kind == allocation::host)
    return fail(cudaErrorInvalidValue);
  work w{};
  w.kind = work::free_async;
  w.ptr = ptr;
  (void)rt.submit(s, std::move(w));
  return cudaSuccess;
}

cudaError_t copy(void* dst, const void* src, size_t bytes, cudaStream_t stream, bool ptsz,
                 bool sync, const char* name) {
  if (const cudaError_t e = enter(name); e != cudaSuccess) return fail(e);
  if (bytes && (!dst || !src)) return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  done_ptr done;
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    stream_obj* s = nullptr;
    if (const cudaError_t e = work_stream_of(stream, ptsz, s); e != cudaSuccess) return fail(e);
    if (sync)
      if (const cudaError_t e = rt.check_unsafe_call(); e != cudaSuccess) return fail(e);
    work w{};
    w.kind = work::copy;
    w.dst = dst;
    w.src = src;
    w.bytes = bytes;
    done = rt.submit(s, std::move(w));
  }
  if (sync) rt.wait(done, false);
  return cudaSuccess;
}

cudaError_t set(void* dst, int value, size_t bytes, cudaStream_t stream, bool ptsz, bool sync,
                const char* name) {
  if (const cudaError_t e = enter(name); e != cudaSuccess) return fail(e);
  if (bytes && !dst) return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  done_ptr done;
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    stream_obj* s = nullptr;
    if (const cudaError_t e = work_stream_of(stream, ptsz, s); e != cudaSuccess) return fail(e);
    if (sync)
      if (const cudaError_t e = rt.check_unsafe_call(); e != cudaSuccess) return fail(e);
    work w{};
    w.kind = work::set;
    w.dst = dst;
    w.value = value;
    w.bytes = bytes;
    done = rt.submit(s, std::move(w));
  }
  if (sync) rt.wait(done, false);
  return cudaSuccess;
}

pool_obj* pool_of(cudaMemPool_t handle) {
  auto* p = reinterpret_cast<pool_obj*>(handle);
  runtime& rt = runtime::get();
  if (rt.pools.count(p)) return p;
  for (auto& c : rt.contexts)
    if (&c->default_pool == p) return p;
  return nullptr;
}

} // namespace

extern "C" {

cudaError_t cudaMalloc(void** ptr, size_t size) {
  if (const cudaError_t e = enter("cudaMalloc"); e != cudaSuccess) return fail(e);
  if (!ptr) return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  context* ctx = nullptr;
  if (const cudaError_t e = current_context(ctx); e != cudaSuccess) return fail(e);
  if (const cudaError_t e = rt.check_unsafe_call(); e != cudaSuccess) return fail(e);
  if (size == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  const std::uint64_t bytes = round_up(size, 512);
  if (!rt.charge(ctx, bytes)) return fail(cudaErrorMemoryAllocation);
  void* p = map_memory(size);
  if (!p) {
    shared::get().uncharge(ctx->slot, bytes);
    return fail(cudaErrorMemoryAllocation);
  }
  rt.allocations[p] = {allocation::device, size, ctx, nullptr, true};
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (const cudaError_t e = enter("cudaFree"); e != cudaSuccess) return fail(e);
  runtime& rt = runtime::get();
  context* ctx = nullptr;
  allocation a{};
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    if (const cudaError_t e = current_context(ctx); e != cudaSuccess) return fail(e);
    if (!ptr) return cudaSuccess; // cudaFree(0): initialises the context, nothing else
    if (const cudaError_t e = rt.check_unsafe_call(); e != cudaSuccess) return fail(e);
    const auto it = rt.allocations.find(ptr);
    if (it == rt.allocations.end() || it->second.kind == allocation::host)
      return fail(cudaErrorInvalidValue);
    a = it->second;
    if (a.kind == allocation::async) {
      // A stream-ordered allocation freed by cudaFree: returned to its pool now, without
      // waiting for work that may still use it.
      a.pool->used -= std::min<std::uint64_t>(a.pool->used, round_up(a.size, 512));
      ::madvise(ptr, a.size, MADV_DONTNEED);
      rt.allocations.erase(it);
      return cudaSuccess;
    }
    if (a.kind == allocation::graph) return fail(cudaErrorInvalidValue);
  }
  // cudaFree of cudaMalloc memory synchronises the device first.
  rt.synchronize(a.ctx);
  std::lock_guard<std::mutex> lock(rt.mutex);
  const auto it = rt.allocations.find(ptr);
  if (it == rt.allocations.end()) return fail(cudaErrorInvalidValue);
  shared::get().uncharge(a.ctx->slot, round_up(a.size, 512));
  unmap_memory(ptr, a.size);
  rt.allocations.erase(it);
  return fail(sticky_of(ctx));
}

cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t s) {
  return malloc_async(ptr, size, nullptr, s, false, "cudaMallocAsync");
}
cudaError_t cudaMallocAsync_ptsz(void** ptr, size_t size, cudaStream_t s) {
  return malloc_async(ptr, size, nullptr, s, true, "cudaMallocAsync_ptsz");
}
cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t s) {
  pool_obj* p = nullptr;
  {
    runtime& rt = runtime::get();
    std::lock_guard<std::mutex> lock(rt.mutex);
    p = pool_of(pool);
  }
  if (!p) return fail(cudaErrorInvalidValue);
  return malloc_async(ptr, size, p, s, false, "cudaMallocFromPoolAsync");
}
cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t pool,
                                         cudaStream_t s) {
  pool_obj* p = nullptr;
  {
    runtime& rt = runtime::get();
    std::lock_guard<std::mutex> lock(rt.mutex);
    p = pool_of(pool);
  }
  if (!p) return fail(cudaErrorInvalidValue);
  return malloc_async(ptr, size, p, s, true, "cudaMallocFromPoolAsync_ptsz");
}
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t s) {
  return free_async(ptr, s, false, "cudaFreeAsync");
}
cudaError_t cudaFreeAsync_ptsz(void* ptr, cudaStream_t s) {
  return free_async(ptr, s, true, "cudaFreeAsync_ptsz");
}

cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* pool, int device) {
  if (const cudaError_t e = enter("cudaDeviceGetMemPool"); e != cudaSuccess) return fail(e);
  if (!pool) return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  context* ctx = nullptr;
  if (const cudaError_t e = rt.context_of(device, true, ctx); e != cudaSuccess) return fail(e);
  if (const cudaError_t e = sticky_of(ctx); e != cudaSuccess) return fail(e);
  *pool = reinterpret_cast<cudaMemPool_t>(ctx->current_pool);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (const cudaError_t e = enter("cudaDeviceGetDefaultMemPool"); e != cudaSuccess) return fail(e);
  if (!pool) return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  context* ctx = nullptr;
  if (const cudaError_t e = rt.context_of(device, true, ctx); e != cudaSuccess) return fail(e);
  if (const cudaError_t e = sticky_of(ctx); e != cudaSuccess) return fail(e);
  *pool = reinterpret_cast<cudaMemPool_t>(&ctx->default_pool);
  return cudaSuccess;
}

cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t pool) {
  if (const cudaError_t e = enter("cudaDeviceSetMemPool"); e != cudaSuccess) return fail(e);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  context* ctx = nullptr;
  if (const cudaError_t e = rt.context_of(device, true, ctx); e != cudaSuccess) return fail(e);
  if (const cudaError_t e = sticky_of(ctx); e != cudaSuccess) return fail(e);
  pool_obj* p = pool_of(pool);
  if (!p || p->ctx != ctx) return fail(cudaErrorInvalidValue);
  ctx->current_pool = p;
  return cudaSuccess;
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  if (const cudaError_t e = enter("cudaMemPoolCreate"); e != cudaSuccess) return fail(e);
  if (!pool || !props || props->location.type != cudaMemLocationTypeDevice)
    return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  context* ctx = nullptr;
  if (const cudaError_t e = rt.context_of(props->location.id, true, ctx); e != cudaSuccess)
    return fail(e);
  if (const cudaError_t e = sticky_of(ctx); e != cudaSuccess) return fail(e);
  auto* p = new pool_obj();
  p->ctx = ctx;
  p->is_default = false;
  ctx->pools.push_back(p);
  rt.pools.insert(p);
  *pool = reinterpret_cast<cudaMemPool_t>(p);
  return cudaSuccess;
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
  if (const cudaError_t e = enter("cudaMemPoolDestroy"); e != cudaSuccess) return fail(e);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  auto* p = reinterpret_cast<pool_obj*>(pool);
  if (!rt.pools.count(p)) return fail(cudaErrorInvalidValue);
  if (const cudaError_t e = sticky_of(p->ctx); e != cudaSuccess) return fail(e);
  if (p->ctx->slot >= 0 && p->reserved > p->used)
    shared::get().uncharge(p->ctx->slot, p->reserved - p->used);
  p->reserved = p->used; // memory of live allocations stays until they are freed
  auto& v = p->ctx->pools;
  v.erase(std::remove(v.begin(), v.end(), p), v.end());
  if (p->ctx->current_pool == p) p->ctx->current_pool = &p->ctx->default_pool;
  rt.pools.erase(p); // the object stays: live allocations still point at it
  return cudaSuccess;
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) {
  if (const cudaError_t e = enter("cudaMemPoolTrimTo"); e != cudaSuccess) return fail(e);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  pool_obj* p = pool_of(pool);
  if (!p) return fail(cudaErrorInvalidValue);
  if (const cudaError_t e = sticky_of(p->ctx); e != cudaSuccess) return fail(e);
  const std::uint64_t target = std::max<std::uint64_t>(keep, round_up(p->used, pool_granule));
  if (p->reserved > target) {
    if (p->ctx->slot >= 0) shared::get().uncharge(p->ctx->slot, p->reserved - target);
    p->reserved = target;
  }
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  if (const cudaError_t e = enter("cudaMemPoolSetAttribute"); e != cudaSuccess) return fail(e);
  if (!value) return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  pool_obj* p = pool_of(pool);
  if (!p) return fail(cudaErrorInvalidValue);
  if (const cudaError_t e = sticky_of(p->ctx); e != cudaSuccess) return fail(e);
  const auto v = *static_cast<std::uint64_t*>(value);
  switch (attr) {
  case cudaMemPoolAttrReleaseThreshold: p->threshold = v; return cudaSuccess;
  case cudaMemPoolAttrReservedMemHigh:
    if (v != 0) return fail(cudaErrorInvalidValue);
    p->reserved_high = p->reserved;
    return cudaSuccess;
  case cudaMemPoolAttrUsedMemHigh:
    if (v != 0) return fail(cudaErrorInvalidValue);
    p->used_high = p->used;
    return cudaSuccess;
  case cudaMemPoolReuseFollowEventDependencies:
  case cudaMemPoolReuseAllowOpportunistic:
  case cudaMemPoolReuseAllowInternalDependencies: return cudaSuccess;
  default: return fail(cudaErrorInvalidValue);
  }
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  if (const cudaError_t e = enter("cudaMemPoolGetAttribute"); e != cudaSuccess) return fail(e);
  if (!value) return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  pool_obj* p = pool_of(pool);
  if (!p) return fail(cudaErrorInvalidValue);
  if (const cudaError_t e = sticky_of(p->ctx); e != cudaSuccess) return fail(e);
  auto* out = static_cast<std::uint64_t*>(value);
  switch (attr) {
  case cudaMemPoolAttrReleaseThreshold: *out = p->threshold; return cudaSuccess;
  case cudaMemPoolAttrReservedMemCurrent: *out = p->reserved; return cudaSuccess;
  case cudaMemPoolAttrReservedMemHigh: *out = p->reserved_high; return cudaSuccess;
  case cudaMemPoolAttrUsedMemCurrent: *out = p->used; return cudaSuccess;
  case cudaMemPoolAttrUsedMemHigh: *out = p->used_high; return cudaSuccess;
  case cudaMemPoolReuseFollowEventDependencies:
  case cudaMemPoolReuseAllowOpportunistic:
  case cudaMemPoolReuseAllowInternalDependencies: *static_cast<int*>(value) = 1; return cudaSuccess;
  default: return fail(cudaErrorInvalidValue);
  }
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  return copy(dst, src, bytes, nullptr, false, true, "cudaMemcpy");
}
cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  return copy(dst, src, bytes, nullptr, true, true, "cudaMemcpy_ptds");
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                            cudaStream_t s) {
  return copy(dst, src, bytes, s, false, false, "cudaMemcpyAsync");
}
cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                                 cudaStream_t s) {
  return copy(dst, src, bytes, s, true, false, "cudaMemcpyAsync_ptsz");
}
cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  return set(dst, value, bytes, nullptr, false, true, "cudaMemset");
}
cudaError_t cudaMemset_ptds(void* dst, int value, size_t bytes) {
  return set(dst, value, bytes, nullptr, true, true, "cudaMemset_ptds");
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t s) {
  return set(dst, value, bytes, s, false, false, "cudaMemsetAsync");
}
cudaError_t cudaMemsetAsync_ptsz(void* dst, int value, size_t bytes, cudaStream_t s) {
  return set(dst, value, bytes, s, true, false, "cudaMemsetAsync_ptsz");
}

cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                         size_t height, cudaMemcpyKind) {
  if (const cudaError_t e = enter("cudaMemcpy2D"); e != cudaSuccess) return fail(e);
  if (width > dpitch || width > spitch || (height && width && (!dst || !src)))
    return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  done_ptr done;
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    stream_obj* s = nullptr;
    if (const cudaError_t e = stream_of(nullptr, false, s); e != cudaSuccess) return fail(e);
    if (const cudaError_t e = rt.check_unsafe_call(); e != cudaSuccess) return fail(e);
    work w{};
    w.kind = work::copy2d;
    w.dst = dst;
    w.src = src;
    w.dpitch = dpitch;
    w.spitch = spitch;
    w.width = width;
    w.height = height;
    done = rt.submit(s, std::move(w));
  }
  rt.wait(done, false);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  if (const cudaError_t e = enter("cudaHostAlloc"); e != cudaSuccess) return fail(e);
  if (!ptr || (flags & ~0xfu) != 0) return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  context* ctx = nullptr;
  if (const cudaError_t e = current_context(ctx); e != cudaSuccess) return fail(e);
  if (const cudaError_t e = rt.check_unsafe_call(); e != cudaSuccess) return fail(e);
  void* p = map_memory(size);
  if (!p) return fail(cudaErrorMemoryAllocation);
  rt.allocations[p] = {allocation::host, size, ctx, nullptr, false};
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned int flags) {
  if (const cudaError_t e = enter("cudaHostGetDevicePointer"); e != cudaSuccess) return fail(e);
  if (!device || flags != 0) return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  const auto it = rt.allocations.find(host);
  if (it == rt.allocations.end() || it->second.kind != allocation::host)
    return fail(cudaErrorInvalidValue);
  if (const cudaError_t e = sticky_of(it->second.ctx); e != cudaSuccess) return fail(e);
  *device = host; // unified addressing: the same address on both sides
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  if (const cudaError_t e = enter("cudaFreeHost"); e != cudaSuccess) return fail(e);
  runtime& rt = runtime::get();
  context* ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    if (!ptr) return cudaSuccess;
    if (const cudaError_t e = rt.check_unsafe_call(); e != cudaSuccess) return fail(e);
    const auto it = rt.allocations.find(ptr);
    if (it == rt.allocations.end() || it->second.kind != allocation::host)
      return fail(cudaErrorInvalidValue);
    ctx = it->second.ctx;
    if (const cudaError_t e = sticky_of(ctx); e != cudaSuccess) return fail(e);
  }
  rt.synchronize(ctx); // like cudaFree, cudaFreeHost synchronises the device
  std::lock_guard<std::mutex> lock(rt.mutex);
  const auto it = rt.allocations.find(ptr);
  if (it == rt.allocations.end()) return fail(cudaErrorInvalidValue);
  unmap_memory(ptr, it->second.size);
  rt.allocations.erase(it);
  return cudaSuccess;
}

} // extern "C"
