// SPDX-License-Identifier: Apache-2.0
// Runtime API: devices, versions, errors, driver entry points, cudasim's own functions.
#include <cuda_runtime_api.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "call.hpp"
#include "config.hpp"
#include "runtime.hpp"
#include "shared.hpp"

using namespace cudasim;

namespace {

constexpr int sim_runtime_version = 13000;
constexpr int sim_driver_version = 13000;

const unit_info& unit_of(const context* ctx) { return shared::get().units()[ctx->unit]; }

// Driver API entry points the CUDA layer asks for (cudaGetDriverEntryPointByVersion).
thread_local context* tl_bound = nullptr; // the thread's current driver context

int drv_device_get(int* device, int ordinal) {
  runtime& rt = runtime::get();
  if (rt.init() != cudaSuccess) return 3; // CUDA_ERROR_NOT_INITIALIZED
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (!device || ordinal < 0 || static_cast<std::size_t>(ordinal) >= rt.contexts.size())
    return 101; // CUDA_ERROR_INVALID_DEVICE
  *device = ordinal;
  return 0;
}

int drv_primary_ctx_get_state(int device, unsigned* flags, int* active) {
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (device < 0 || static_cast<std::size_t>(device) >= rt.contexts.size()) return 101;
  if (!flags || !active) return 1; // CUDA_ERROR_INVALID_VALUE
  *flags = 0;
  *active = rt.contexts[static_cast<std::size_t>(device)]->slot >= 0 ? 1 : 0;
  return 0;
}

int drv_ctx_get_current(void** ctx) {
  if (!ctx) return 1;
  *ctx = tl_bound;
  return 0;
}

int drv_ctx_set_current(void* ctx) {
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (!ctx) {
    // No context current: the runtime's current device is its default again, device 0 (the
    // runtime's device is the current context's; see docs/cudasim.md, "Driver entry points").
    tl_bound = nullptr;
    current_device() = 0;
    return 0;
  }
  for (auto& c : rt.contexts)
    if (c.get() == ctx && c->slot >= 0) {
      tl_bound = c.get();
      current_device() = c->ordinal;
      return 0;
    }
  return 201; // CUDA_ERROR_INVALID_CONTEXT
}

/// The current device's sticky error (cudaSuccess before initialisation or without a context),
/// and its context in `ctx`.
cudaError_t current_sticky(const context*& ctx) {
  ctx = nullptr;
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (rt.init_pid.load() != ::getpid()) return cudaSuccess;
  context* c = nullptr;
  if (rt.context_of(current_device(), false, c) != cudaSuccess) return cudaSuccess;
  ctx = c;
  return static_cast<cudaError_t>(c->sticky.load());
}

/// The context whose sticky error cudaGetLastError has reported to this thread already.
thread_local const context* tl_sticky_reported = nullptr;

} // namespace

namespace cudasim {
/// Binds the calling thread to `ctx` (what cudaSetDevice and first use do).
void bind_thread(context* ctx) { tl_bound = ctx; }
} // namespace cudasim

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return fail(cudaErrorInvalidValue);
  *count = 0;
  return api_call("cudaGetDeviceCount", cudaSuccess, [&](runtime& rt) {
    *count = static_cast<int>(rt.contexts.size());
    return cudaSuccess;
  });
}

cudaError_t cudaGetDevice(int* device) {
  if (const cudaError_t e = enter("cudaGetDevice"); e != cudaSuccess) return fail(e);
  if (!device) return fail(cudaErrorInvalidValue);
  *device = current_device();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  return api_call("cudaSetDevice", cudaSuccess, [&](runtime& rt) {
    context* ctx = nullptr;
    // CUDA 12 and later: cudaSetDevice initialises the device's primary context at once.
    if (const cudaError_t e = rt.context_of(device, true, ctx); e != cudaSuccess) return e;
    current_device() = device;
    bind_thread(ctx);
    return cudaSuccess;
  });
}

cudaError_t cudaSetDeviceFlags(unsigned int) {
  if (const cudaError_t e = enter("cudaSetDeviceFlags"); e != cudaSuccess) return fail(e);
  return cudaSuccess;
}

cudaError_t cudaInitDevice(int device, unsigned int, unsigned int) {
  return api_call("cudaInitDevice", cudaSuccess, [&](runtime& rt) {
    context* ctx = nullptr;
    return rt.context_of(device, true, ctx);
  });
}

namespace {
cudaError_t fill_properties(cudaDeviceProp* prop, int device) {
  if (!prop) return fail(cudaErrorInvalidValue);
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  context* ctx = nullptr;
  if (const cudaError_t e = rt.context_of(device, false, ctx); e != cudaSuccess) return fail(e);
  const unit_info& u = unit_of(ctx);
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "%s", cfg().name.c_str());
  std::memcpy(prop->uuid.bytes, u.raw, 16);
  prop->totalGlobalMem = u.total;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->memPitch = SIZE_MAX;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->totalConstMem = 65536;
  prop->major = 9;
  prop->minor = 0;
  prop->textureAlignment = 512;
  prop->multiProcessorCount = 132;
  prop->integrated = 0;
  prop->canMapHostMemory = 1;
  prop->concurrentKernels = 1;
  prop->pciBusID = 0x10 + u.gpu;
  prop->pciDomainID = 0;
  prop->pciDeviceID = 0;
  prop->asyncEngineCount = 2;
  prop->unifiedAddressing = 1;
  prop->memoryBusWidth = 5120;
  prop->l2CacheSize = 50 * 1024 * 1024;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->streamPrioritiesSupported = 1;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->regsPerMultiprocessor = 65536;
  prop->managedMemory = 1;
  prop->concurrentManagedAccess = 1;
  prop->sharedMemPerBlockOptin = 227 * 1024;
  prop->maxBlocksPerMultiProcessor = 32;
  return cudaSuccess;
}
} // namespace

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (const cudaError_t e = enter("cudaGetDeviceProperties"); e != cudaSuccess) return fail(e);
  return fill_properties(prop, device);
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (const cudaError_t e = enter("cudaDeviceGetAttribute"); e != cudaSuccess) return fail(e);
  if (!value) return fail(cudaErrorInvalidValue);
  cudaDeviceProp p{};
  if (const cudaError_t e = fill_properties(&p, device); e != cudaSuccess) return e;
  switch (attr) {
  case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
  case cudaDevAttrMaxBlockDimX:
  case cudaDevAttrMaxBlockDimY: *value = 1024; break;
  case cudaDevAttrMaxBlockDimZ: *value = 64; break;
  case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
  case cudaDevAttrMaxGridDimY:
  case cudaDevAttrMaxGridDimZ: *value = 65535; break;
  case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(p.sharedMemPerBlock); break;
  case cudaDevAttrMaxSharedMemoryPerBlockOptin:
    *value = static_cast<int>(p.sharedMemPerBlockOptin);
    break;
  case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
    *value = static_cast<int>(p.sharedMemPerMultiprocessor);
    break;
  case cudaDevAttrWarpSize: *value = 32; break;
  case cudaDevAttrMaxRegistersPerBlock:
  case cudaDevAttrMaxRegistersPerMultiprocessor: *value = 65536; break;
  case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
  case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
  case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
  case cudaDevAttrMaxThreadsPerMultiProcessor: *value = p.maxThreadsPerMultiProcessor; break;
  case cudaDevAttrMaxBlocksPerMultiprocessor: *value = p.maxBlocksPerMultiProcessor; break;
  case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
  case cudaDevAttrConcurrentKernels:
  case cudaDevAttrUnifiedAddressing:
  case cudaDevAttrMemoryPoolsSupported:
  case cudaDevAttrCanMapHostMemory:
  case cudaDevAttrStreamPrioritiesSupported: *value = 1; break;
  case cudaDevAttrPciBusId: *value = p.pciBusID; break;
  case cudaDevAttrPciDeviceId: *value = p.pciDeviceID; break;
  case cudaDevAttrPciDomainId: *value = p.pciDomainID; break;
  case cudaDevAttrTotalConstantMemory: *value = static_cast<int>(p.totalConstMem); break;
  case cudaDevAttrTextureAlignment: *value = 512; break;
  case cudaDevAttrAsyncEngineCount: *value = 2; break;
  default: *value = 0; break;
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* bus, int len, int device) {
  return api_call("cudaDeviceGetPCIBusId", invalid_if(!bus || len <= 0), [&](runtime& rt) {
    context* ctx = nullptr;
    if (const cudaError_t e = rt.context_of(device, false, ctx); e != cudaSuccess) return e;
    std::snprintf(bus, static_cast<std::size_t>(len), "0000:%02x:00.0", 0x10 + unit_of(ctx).gpu);
    return cudaSuccess;
  });
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (const cudaError_t e = enter("cudaDeviceGetStreamPriorityRange"); e != cudaSuccess)
    return fail(e);
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  context* ctx = nullptr;
  const cudaError_t result = api_call("cudaDeviceSynchronize", cudaSuccess, [&](runtime& rt) {
    if (const cudaError_t e = context_for(current_device(), ctx); e != cudaSuccess) return e;
    // Synchronising a device on which a capture is under way is never legal.
    bool capturing = false;
    for (stream_obj* t : ctx->streams)
      if (t->cap) {
        t->cap->invalidated = true;
        capturing = true;
      }
    if (capturing) return cudaErrorStreamCaptureUnsupported;
    return rt.check_unsafe_call();
  });
  if (result != cudaSuccess) return result;
  runtime& rt = runtime::get();
  rt.synchronize(ctx);
  std::lock_guard<std::mutex> lock(rt.mutex);
  rt.release_pools(ctx);
  return fail(static_cast<cudaError_t>(ctx->sticky.load()));
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  return api_call("cudaMemGetInfo", invalid_if(!free || !total), [&](runtime&) {
    context* ctx = nullptr;
    if (const cudaError_t e = context_for(current_device(), ctx); e != cudaSuccess) return e;
    const memory_info m = shared::get().memory(ctx->unit);
    *total = m.total;
    *free = m.total > m.used ? m.total - m.used : 0;
    return cudaSuccess;
  });
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (const cudaError_t e = enter("cudaRuntimeGetVersion", false); e != cudaSuccess) return fail(e);
  if (!version) return fail(cudaErrorInvalidValue);
  *version = sim_runtime_version;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  if (const cudaError_t e = enter("cudaDriverGetVersion", false); e != cudaSuccess) return fail(e);
  if (!version) return fail(cudaErrorInvalidValue);
  *version = sim_driver_version;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  if (const cudaError_t e = enter("cudaGetLastError", false); e != cudaSuccess) return e;
  // A sticky error is reported once, like a recorded one (observed on an H200, driver 580, CUDA
  // 13.0: cudaGetLastError returned it, then cudaSuccess); every further call that does CUDA
  // work on the context still returns it, and records it again.
  const cudaError_t e = last_error();
  last_error() = cudaSuccess;
  const context* ctx = nullptr;
  if (const cudaError_t sticky = current_sticky(ctx);
      sticky != cudaSuccess && tl_sticky_reported != ctx) {
    tl_sticky_reported = ctx;
    return sticky;
  }
  return e;
}

cudaError_t cudaPeekAtLastError(void) {
  if (const cudaError_t e = enter("cudaPeekAtLastError", false); e != cudaSuccess) return e;
  const context* ctx = nullptr;
  if (const cudaError_t sticky = current_sticky(ctx);
      sticky != cudaSuccess && tl_sticky_reported != ctx)
    return sticky;
  return last_error();
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int,
                                             unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
  if (const cudaError_t e = enter("cudaGetDriverEntryPointByVersion"); e != cudaSuccess)
    return fail(e);
  if (!symbol || !fn) return fail(cudaErrorInvalidValue);
  const std::string name(symbol);
  void* found = nullptr;
  if (name == "cuDeviceGet") found = reinterpret_cast<void*>(&drv_device_get);
  if (name == "cuDevicePrimaryCtxGetState")
    found = reinterpret_cast<void*>(&drv_primary_ctx_get_state);
  if (name == "cuCtxGetCurrent") found = reinterpret_cast<void*>(&drv_ctx_get_current);
  if (name == "cuCtxSetCurrent") found = reinterpret_cast<void*>(&drv_ctx_set_current);
  if (name == "cuStreamQuery") found = reinterpret_cast<void*>(&drv_stream_query);
  if (name == "cuEventQuery") found = reinterpret_cast<void*>(&drv_event_query);
  *fn = found;
  if (status) *status = found ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** fn,
                                                  unsigned int version, unsigned long long flags,
                                                  cudaDriverEntryPointQueryResult* status) {
  return cudaGetDriverEntryPointByVersion(symbol, fn, version, flags, status);
}

// --- cudasim's own interface (cudasim/cudasim.h) ------------------------------------------

const char* cudasimVersion(void) { return "cudasim 1.0"; }

int cudasimSetKernelModel(const void* kernel, int arg_count, const size_t* arg_sizes,
                          cudasimDurationFn duration, cudasimExecuteFn execute) {
  if (!kernel || arg_count < 0 || (arg_count > 0 && !arg_sizes)) return cudaErrorInvalidValue;
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  kernel_info& k = rt.kernels[kernel];
  k.host_fun = kernel;
  k.modelled = true;
  k.model = {arg_count, {arg_sizes, arg_sizes + arg_count}, duration, execute};
  return 0;
}

int cudasimGetStats(cudasimStats* stats, size_t size) {
  if (!stats) return cudaErrorInvalidValue;
  runtime& rt = runtime::get();
  cudasimStats s{};
  s.api_calls = rt.api_calls.load();
  s.spin_wait_ns = rt.spin_wait_ns.load();
  s.blocking_wait_ns = rt.blocking_wait_ns.load();
  s.kernels = rt.kernels_done.load();
  s.kernel_ns = rt.kernel_ns.load();
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    for (const auto& c : rt.contexts)
      if (c->slot >= 0) s.context_switches += shared::get().switches(c->slot);
  }
  std::memcpy(stats, &s, std::min(size, sizeof s));
  return 0;
}

unsigned long long cudasimApiCalls(const char* name) {
  runtime& rt = runtime::get();
  if (!name) return rt.api_calls.load();
  std::lock_guard<std::mutex> lock(rt.mutex);
  const auto it = rt.calls_by_name.find(name);
  return it == rt.calls_by_name.end() ? 0 : it->second;
}

} // extern "C"
