// SPDX-License-Identifier: Apache-2.0
// Runtime API: device memory, stream-ordered pools, copies and sets, host memory.
#include <cuda_runtime_api.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "call.hpp"
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
  return api_call(name, invalid_if(!ptr), [&](runtime& rt) {
    stream_obj* s = nullptr;
    if (const cudaError_t e = work_stream_of(stream, ptsz, s); e != cudaSuccess) return e;
    // cudaMallocFromPoolAsync on a stream outside any capture is a potentially unsafe call while
    // a capture is under way (observed on an H200, driver 580, CUDA 13.0: 900 from another
    // thread than a Global capture's). Not modelled for cudaMallocAsync (`pool` null), not seen.
    if (pool && !s->cap)
      if (const cudaError_t e = rt.check_unsafe_call(); e != cudaSuccess) return e;
    if (!pool) pool = s->ctx->current_pool;
    if (size == 0) {
      *ptr = nullptr;
      return cudaSuccess;
    }
    void* p = map_memory(size);
    if (!p) return cudaErrorMemoryAllocation;
    if (s->cap) {
      // In a capture the allocation becomes a graph memory node: the address is fixed now, the
      // graph memory pool maps memory to it when the graph is launched (back_graph_memory).
      rt.allocations[p] = {allocation::graph, size, s->ctx, pool, false};
      work w{};
      w.kind = work::alloc;
      w.ptr = p;
      w.bytes = size;
      w.device = s->ctx->ordinal;
      (void)rt.submit(s, std::move(w));
      *ptr = p;
      return cudaSuccess;
    }
    const std::uint64_t need = round_up(size, 512);
    pool->unobserved -= std::min(pool->unobserved, need); // reused first, in stream order
    if (pool->used + pool->unobserved + need > pool->reserved) {
      const std::uint64_t grow =
          round_up(pool->used + pool->unobserved + need - pool->reserved, pool_granule);
      if (!rt.charge(s->ctx, grow)) {
        unmap_memory(p, size);
        return cudaErrorMemoryAllocation;
      }
      pool->reserved += grow;
      pool->reserved_high = std::max(pool->reserved_high, pool->reserved);
    }
    pool->used += need;
    pool->used_high = std::max(pool->used_high, pool->used);
    rt.allocations[p] = {allocation::async, size, s->ctx, pool, true};
    *ptr = p;
    return cudaSuccess;
  });
}

cudaError_t free_async(void* ptr, cudaStream_t stream, bool ptsz, const char* name) {
  return api_call(name, cudaSuccess, [&](runtime& rt) {
    stream_obj* s = nullptr;
    if (const cudaError_t e = work_stream_of(stream, ptsz, s); e != cudaSuccess) return e;
    if (!ptr) return cudaSuccess;
    const auto it = rt.allocations.find(ptr);
    if (it == rt.allocations.end() || it->second.kind == allocation::host)
      return cudaErrorInvalidValue;
    work w{};
    w.kind = work::free_async;
    w.ptr = ptr;
    (void)rt.submit(s, std::move(w));
    return cudaSuccess;
  });
}

cudaError_t copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream,
                 bool ptsz, bool sync, const char* name) {
  work w{};
  w.kind = work::copy;
  w.dst = dst;
  w.src = src;
  w.bytes = bytes;
  w.copy_kind = kind;
  return enqueue({name, stream, ptsz, sync}, invalid_if(bytes && (!dst || !src)), std::move(w));
}

cudaError_t set(void* dst, int value, size_t bytes, cudaStream_t stream, bool ptsz, bool sync,
                const char* name) {
  work w{};
  w.kind = work::set;
  w.dst = dst;
  w.value = value;
  w.bytes = bytes;
  return enqueue({name, stream, ptsz, sync}, invalid_if(bytes && !dst), std::move(w));
}

pool_obj* pool_of(cudaMemPool_t handle) {
  auto* p = reinterpret_cast<pool_obj*>(handle);
  runtime& rt = runtime::get();
  if (rt.pools.count(p)) return p;
  for (auto& c : rt.contexts)
    if (&c->default_pool == p) return p;
  return nullptr;
}

/// A pool's object (a device's default pool too) and its context's sticky error;
/// cudaErrorInvalidValue when `handle` names no pool.
cudaError_t pool_for(cudaMemPool_t handle, pool_obj*& p) {
  p = pool_of(handle);
  if (!p) return cudaErrorInvalidValue;
  return sticky_of(p->ctx);
}

/// cudaMallocFromPoolAsync: the pool looked up first, before the call is entered.
cudaError_t malloc_from_pool(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t s, bool ptsz,
                             const char* name) {
  pool_obj* p = nullptr;
  {
    runtime& rt = runtime::get();
    std::lock_guard<std::mutex> lock(rt.mutex);
    p = pool_of(pool);
  }
  if (!p) return fail(cudaErrorInvalidValue);
  return malloc_async(ptr, size, p, s, ptsz, name);
}

/// cudaDeviceGetMemPool and cudaDeviceGetDefaultMemPool: the pool `which` gives of the device's
/// context.
template <class Which>
cudaError_t device_pool(const char* name, cudaMemPool_t* pool, int device, Which which) {
  return api_call(name, invalid_if(!pool), [&](runtime&) {
    context* ctx = nullptr;
    if (const cudaError_t e = context_for(device, ctx); e != cudaSuccess) return e;
    *pool = reinterpret_cast<cudaMemPool_t>(which(*ctx));
    return cudaSuccess;
  });
}

/// The first half of cudaFree and cudaFreeHost, under the runtime's mutex: `ptr`'s allocation
/// after the capture rules for an unsafe call (cudaErrorInvalidValue if it has none).
cudaError_t find_allocation(runtime& rt, void* ptr, allocation& a) {
  if (const cudaError_t e = rt.check_unsafe_call(); e != cudaSuccess) return e;
  const auto it = rt.allocations.find(ptr);
  if (it == rt.allocations.end()) return cudaErrorInvalidValue;
  a = it->second;
  return cudaSuccess;
}

/// The second half of cudaFree and cudaFreeHost, after the device was synchronised: unmaps
/// `ptr`. `device`: the cudaMalloc allocation the first half found, whose size is unmapped and
/// given back to the device; null for host memory, whose size is read again.
cudaError_t unmap_allocation(void* ptr, const allocation* device) {
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  const auto it = rt.allocations.find(ptr);
  if (it == rt.allocations.end()) return fail(cudaErrorInvalidValue);
  if (device) shared::get().uncharge(device->ctx->slot, round_up(device->size, 512));
  unmap_memory(ptr, device ? device->size : it->second.size);
  rt.allocations.erase(it);
  return cudaSuccess;
}

} // namespace

extern "C" {

cudaError_t cudaMalloc(void** ptr, size_t size) {
  return api_call("cudaMalloc", invalid_if(!ptr), [&](runtime& rt) {
    context* ctx = nullptr;
    if (const cudaError_t e = current_context(ctx); e != cudaSuccess) return e;
    if (const cudaError_t e = rt.check_unsafe_call(); e != cudaSuccess) return e;
    if (size == 0) {
      *ptr = nullptr;
      return cudaSuccess;
    }
    const std::uint64_t bytes = round_up(size, 512);
    if (!rt.charge(ctx, bytes)) return cudaErrorMemoryAllocation;
    void* p = map_memory(size);
    if (!p) {
      shared::get().uncharge(ctx->slot, bytes);
      return cudaErrorMemoryAllocation;
    }
    rt.allocations[p] = {allocation::device, size, ctx, nullptr, true};
    *ptr = p;
    return cudaSuccess;
  });
}

cudaError_t cudaFree(void* ptr) {
  context* ctx = nullptr;
  allocation a{};
  bool synchronise = false; // memory of cudaMalloc: freed after the device is synchronised
  const cudaError_t result = api_call("cudaFree", cudaSuccess, [&](runtime& rt) {
    if (const cudaError_t e = current_context(ctx); e != cudaSuccess) return e;
    if (!ptr) return cudaSuccess; // cudaFree(0): initialises the context, nothing else
    if (const cudaError_t e = find_allocation(rt, ptr, a); e != cudaSuccess) return e;
    if (a.kind == allocation::host || a.kind == allocation::graph) return cudaErrorInvalidValue;
    if (a.kind == allocation::async) {
      // A stream-ordered allocation freed by cudaFree: returned to its pool now, without
      // waiting for work that may still use it.
      a.pool->used -= std::min<std::uint64_t>(a.pool->used, round_up(a.size, 512));
      ::madvise(ptr, a.size, MADV_DONTNEED);
      rt.allocations.erase(ptr);
      return cudaSuccess;
    }
    synchronise = true;
    return cudaSuccess;
  });
  if (result != cudaSuccess || !synchronise) return result;
  // cudaFree of cudaMalloc memory synchronises the device first.
  runtime::get().synchronize(a.ctx);
  if (const cudaError_t e = unmap_allocation(ptr, &a); e != cudaSuccess) return e;
  return fail(sticky_of(ctx));
}

cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t s) {
  return malloc_async(ptr, size, nullptr, s, false, "cudaMallocAsync");
}
cudaError_t cudaMallocAsync_ptsz(void** ptr, size_t size, cudaStream_t s) {
  return malloc_async(ptr, size, nullptr, s, true, "cudaMallocAsync_ptsz");
}
cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t s) {
  return malloc_from_pool(ptr, size, pool, s, false, "cudaMallocFromPoolAsync");
}
cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t pool,
                                         cudaStream_t s) {
  return malloc_from_pool(ptr, size, pool, s, true, "cudaMallocFromPoolAsync_ptsz");
}
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t s) {
  return free_async(ptr, s, false, "cudaFreeAsync");
}
cudaError_t cudaFreeAsync_ptsz(void* ptr, cudaStream_t s) {
  return free_async(ptr, s, true, "cudaFreeAsync_ptsz");
}

cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* pool, int device) {
  return device_pool("cudaDeviceGetMemPool", pool, device,
                     [](context& c) { return c.current_pool; });
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  return device_pool("cudaDeviceGetDefaultMemPool", pool, device,
                     [](context& c) { return &c.default_pool; });
}

cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t pool) {
  return api_call("cudaDeviceSetMemPool", cudaSuccess, [&](runtime&) {
    context* ctx = nullptr;
    if (const cudaError_t e = context_for(device, ctx); e != cudaSuccess) return e;
    pool_obj* p = pool_of(pool);
    if (!p || p->ctx != ctx) return cudaErrorInvalidValue;
    ctx->current_pool = p;
    return cudaSuccess;
  });
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  return api_call("cudaMemPoolCreate", invalid_if(!pool || !props), [&](runtime& rt) {
    // props is read once the call is entered (api_call: `args` dereferences nothing).
    if (props->location.type != cudaMemLocationTypeDevice) return cudaErrorInvalidValue;
    context* ctx = nullptr;
    if (const cudaError_t e = context_for(props->location.id, ctx); e != cudaSuccess) return e;
    // A potentially unsafe call during a capture (observed on an H200, driver 580, CUDA 13.0:
    // cudaErrorStreamCaptureUnsupported while another thread held a Global capture).
    if (const cudaError_t e = rt.check_unsafe_call(); e != cudaSuccess) return e;
    auto* p = new pool_obj();
    p->ctx = ctx;
    p->is_default = false;
    ctx->pools.push_back(p);
    rt.pools.insert(p);
    *pool = reinterpret_cast<cudaMemPool_t>(p);
    return cudaSuccess;
  });
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
  return api_call("cudaMemPoolDestroy", cudaSuccess, [&](runtime& rt) {
    auto* p = reinterpret_cast<pool_obj*>(pool);
    if (!rt.pools.count(p)) return cudaErrorInvalidValue;
    if (const cudaError_t e = sticky_of(p->ctx); e != cudaSuccess) return e;
    if (p->ctx->slot >= 0 && p->reserved > p->used)
      shared::get().uncharge(p->ctx->slot, p->reserved - p->used);
    p->reserved = p->used; // memory of live allocations stays until they are freed
    p->unobserved = 0;
    auto& v = p->ctx->pools;
    v.erase(std::remove(v.begin(), v.end(), p), v.end());
    if (p->ctx->current_pool == p) p->ctx->current_pool = &p->ctx->default_pool;
    rt.pools.erase(p); // the object stays: live allocations still point at it
    return cudaSuccess;
  });
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) {
  return api_call("cudaMemPoolTrimTo", cudaSuccess, [&](runtime&) {
    pool_obj* p = nullptr;
    if (const cudaError_t e = pool_for(pool, p); e != cudaSuccess) return e;
    // Frees that have run but that no synchronisation has observed count as outstanding
    // (cudaMemPoolTrimTo's documentation; observed on an H200, driver 580, CUDA 13.0).
    const std::uint64_t target =
        std::max<std::uint64_t>(keep, round_up(p->used + p->unobserved, pool_granule));
    if (p->reserved > target) {
      if (p->ctx->slot >= 0) shared::get().uncharge(p->ctx->slot, p->reserved - target);
      p->reserved = target;
    }
    return cudaSuccess;
  });
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  return api_call("cudaMemPoolSetAttribute", invalid_if(!value), [&](runtime&) {
    pool_obj* p = nullptr;
    if (const cudaError_t e = pool_for(pool, p); e != cudaSuccess) return e;
    const auto v = *static_cast<std::uint64_t*>(value);
    switch (attr) {
    case cudaMemPoolAttrReleaseThreshold: p->threshold = v; return cudaSuccess;
    case cudaMemPoolAttrReservedMemHigh:
      if (v != 0) return cudaErrorInvalidValue;
      p->reserved_high = p->reserved;
      return cudaSuccess;
    case cudaMemPoolAttrUsedMemHigh:
      if (v != 0) return cudaErrorInvalidValue;
      p->used_high = p->used;
      return cudaSuccess;
    case cudaMemPoolReuseFollowEventDependencies:
    case cudaMemPoolReuseAllowOpportunistic:
    case cudaMemPoolReuseAllowInternalDependencies: return cudaSuccess;
    default: return cudaErrorInvalidValue;
    }
  });
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  return api_call("cudaMemPoolGetAttribute", invalid_if(!value), [&](runtime&) {
    pool_obj* p = nullptr;
    if (const cudaError_t e = pool_for(pool, p); e != cudaSuccess) return e;
    auto* out = static_cast<std::uint64_t*>(value);
    switch (attr) {
    case cudaMemPoolAttrReleaseThreshold: *out = p->threshold; return cudaSuccess;
    case cudaMemPoolAttrReservedMemCurrent: *out = p->reserved; return cudaSuccess;
    case cudaMemPoolAttrReservedMemHigh: *out = p->reserved_high; return cudaSuccess;
    case cudaMemPoolAttrUsedMemCurrent: *out = p->used; return cudaSuccess;
    case cudaMemPoolAttrUsedMemHigh: *out = p->used_high; return cudaSuccess;
    case cudaMemPoolReuseFollowEventDependencies:
    case cudaMemPoolReuseAllowOpportunistic:
    case cudaMemPoolReuseAllowInternalDependencies:
      *static_cast<int*>(value) = 1;
      return cudaSuccess;
    default: return cudaErrorInvalidValue;
    }
  });
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return copy(dst, src, bytes, kind, nullptr, false, true, "cudaMemcpy");
}
cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return copy(dst, src, bytes, kind, nullptr, true, true, "cudaMemcpy_ptds");
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s) {
  return copy(dst, src, bytes, kind, s, false, false, "cudaMemcpyAsync");
}
cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                                 cudaStream_t s) {
  return copy(dst, src, bytes, kind, s, true, false, "cudaMemcpyAsync_ptsz");
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
                         size_t height, cudaMemcpyKind kind) {
  const bool invalid = width > dpitch || width > spitch || (height && width && (!dst || !src));
  work w{};
  w.kind = work::copy2d;
  w.copy_kind = kind;
  w.dst = dst;
  w.src = src;
  w.dpitch = dpitch;
  w.spitch = spitch;
  w.width = width;
  w.height = height;
  // The legacy stream through stream_of: unlike cudaMemcpy, not refused while a blocking stream
  // captures (only the capture rules for an unsafe call apply).
  return enqueue({"cudaMemcpy2D", nullptr, false, true, stream_of}, invalid_if(invalid),
                 std::move(w));
}

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  return api_call("cudaHostAlloc", invalid_if(!ptr || (flags & ~0xfu) != 0), [&](runtime& rt) {
    context* ctx = nullptr;
    if (const cudaError_t e = current_context(ctx); e != cudaSuccess) return e;
    if (const cudaError_t e = rt.check_unsafe_call(); e != cudaSuccess) return e;
    void* p = map_memory(size);
    if (!p) return cudaErrorMemoryAllocation;
    rt.allocations[p] = {allocation::host, size, ctx, nullptr, false};
    *ptr = p;
    return cudaSuccess;
  });
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned int flags) {
  return api_call("cudaHostGetDevicePointer", invalid_if(!device || flags != 0), [&](runtime& rt) {
    const auto it = rt.allocations.find(host);
    if (it == rt.allocations.end() || it->second.kind != allocation::host)
      return cudaErrorInvalidValue;
    if (const cudaError_t e = sticky_of(it->second.ctx); e != cudaSuccess) return e;
    *device = host; // unified addressing: the same address on both sides
    return cudaSuccess;
  });
}

cudaError_t cudaFreeHost(void* ptr) {
  context* ctx = nullptr;
  bool synchronise = false;
  const cudaError_t result = api_call("cudaFreeHost", cudaSuccess, [&](runtime& rt) {
    if (!ptr) return cudaSuccess;
    allocation a{};
    if (const cudaError_t e = find_allocation(rt, ptr, a); e != cudaSuccess) return e;
    if (a.kind != allocation::host) return cudaErrorInvalidValue;
    ctx = a.ctx;
    if (const cudaError_t e = sticky_of(ctx); e != cudaSuccess) return e;
    synchronise = true;
    return cudaSuccess;
  });
  if (result != cudaSuccess || !synchronise) return result;
  runtime::get().synchronize(ctx); // like cudaFree, cudaFreeHost synchronises the device
  return unmap_allocation(ptr, nullptr);
}

} // extern "C"
