// SPDX-License-Identifier: Apache-2.0
// Runtime API: what nvcc-compiled code calls to register its kernels and launch them, and
// cudaLaunchKernel. Device code never runs: a kernel occupies the simulated device for the
// duration its model gives (cudasim/cudasim.h: by address, else by name), else CUDASIM_KERNELS's
// duration for its name, else CUDASIM_KERNEL_US. Kernels are known by the names they were
// registered with (__cudaRegisterFunction's device name: kernel_names.hpp).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "config.hpp"
#include "kernel_names.hpp"
#include "runtime.hpp"

using namespace cudasim;

namespace {

struct call_configuration {
  dim3 grid, block;
  size_t shared_mem;
  cudaStream_t stream;
};
thread_local std::vector<call_configuration> tl_configurations;

/// The kernel work of one launch: the arguments copied (as many as its model declares), its
/// duration and completion function from its model. Call with the runtime's mutex held.
cudaError_t kernel_work(kernel_info& k, dim3 grid, dim3 block, void** args, size_t shared_mem,
                        work& w) {
  std::uint64_t ns = 0;
  const kernel_model& m = runtime::get().model_of(k, ns);
  w.kind = work::kernel;
  w.func = k.host_fun;
  w.grid = grid;
  w.block = block;
  w.shared_mem = shared_mem;
  if (m.arg_count > 0 && !args) return cudaErrorInvalidValue;
  for (int i = 0; i < m.arg_count; ++i) {
    const auto* p = static_cast<const unsigned char*>(args[i]);
    w.args.emplace_back(p, p + m.arg_sizes[static_cast<std::size_t>(i)]);
  }
  w.ns = ns;
  if (m.duration) {
    std::vector<void*> argv;
    for (auto& a : w.args) argv.push_back(a.data());
    const cudasimLaunch l{argv.data(), grid, block, shared_mem};
    w.ns = m.duration(&l);
  }
  w.execute = m.execute;
  return cudaSuccess;
}

cudaError_t launch(kernel_info* k, dim3 grid, dim3 block, void** args, size_t shared_mem,
                   cudaStream_t stream, bool ptsz, const char* name) {
  if (const cudaError_t e = enter(name); e != cudaSuccess) return fail(e);
  if (!k) return fail(cudaErrorInvalidDeviceFunction);
  const unsigned long long threads = static_cast<unsigned long long>(block.x) * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0 || threads > 1024 || block.z > 64 ||
      grid.y > 65535 || grid.z > 65535 || shared_mem > 227 * 1024)
    return fail(cudaErrorInvalidConfiguration);
  runtime& rt = runtime::get();
  std::unique_lock<std::mutex> lock(rt.mutex);
  stream_obj* s = nullptr;
  if (const cudaError_t e = work_stream_of(stream, ptsz, s); e != cudaSuccess) return fail(e);
  {
    // A full launch queue blocks the launching thread until the stream makes room. Counted as
    // blocked until the runtime's mutex is held again, the stream cannot be freed meanwhile.
    std::unique_lock<std::mutex> q(s->m);
    if (s->queue.size() >= max_queued && !s->cap) {
      ++s->blocked_launches;
      lock.unlock();
      s->space.wait(q, [s] { return s->queue.size() < max_queued; });
      q.unlock();
      lock.lock();
      q.lock();
      if (--s->blocked_launches == 0 && s->destroyed) s->cv.notify_all();
    }
  }
  work w{};
  if (const cudaError_t e = kernel_work(*k, grid, block, args, shared_mem, w); e != cudaSuccess)
    return fail(e);
  ++rt.launches;
  w.fault = !s->cap && cfg().sticky_at_launch != 0 && rt.launches == cfg().sticky_at_launch;
  (void)rt.submit(s, std::move(w));
  return cudaSuccess;
}

kernel_info* find_kernel(const void* fun) {
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  const auto it = rt.kernels.find(fun);
  return it == rt.kernels.end() ? nullptr : &it->second;
}

} // namespace

const kernel_model& runtime::model_of(kernel_info& k, std::uint64_t& ns) {
  static const kernel_model none;
  ns = cfg().kernel_ns;
  if (k.modelled) return k.model;
  if (k.resolved != name_models_version) {
    if (k.resolved == 0) k.names = kernel_names(k.name);
    k.resolved = name_models_version;
    k.named = nullptr;
    for (const auto& [pattern, model] : name_models)
      if (matches_name(pattern, k.names)) {
        k.named = &model;
        break;
      }
    k.ns = cfg().kernel_ns;
    for (const kernel_rule& rule : cfg().kernels)
      if (matches_name(rule.pattern, k.names)) {
        k.ns = rule.ns;
        break;
      }
  }
  ns = k.ns;
  return k.named ? *k.named : none;
}

extern "C" {

int cudasimSetKernelModelByName(const char* pattern, int arg_count, const size_t* arg_sizes,
                                cudasimDurationFn duration, cudasimExecuteFn execute) {
  if (!pattern || !*pattern || arg_count < 0 || (arg_count > 0 && !arg_sizes))
    return cudaErrorInvalidValue;
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  kernel_model m{arg_count, {arg_sizes, arg_sizes + arg_count}, duration, execute};
  auto it = std::find_if(rt.name_models.begin(), rt.name_models.end(),
                         [pattern](const auto& entry) { return entry.first == pattern; });
  if (it != rt.name_models.end())
    it->second = std::move(m); // in place: kernels that matched it keep pointing at it
  else
    rt.name_models.emplace_back(pattern, std::move(m));
  ++rt.name_models_version; // every kernel looks at its names again at its next launch
  return 0;
}

void** __cudaRegisterFatBinary(void* fat_cubin) {
  // The handle only has to be unique; the fat binary itself is never read.
  return new void*(fat_cubin);
}

void __cudaRegisterFatBinaryEnd(void**) {}

void __cudaUnregisterFatBinary(void** handle) { delete handle; }

void __cudaRegisterFunction(void**, const char* host_fun, char*, const char* device_name, int,
                            uint3*, uint3*, dim3*, dim3*, int*) {
  runtime& rt = runtime::get();
  std::lock_guard<std::mutex> lock(rt.mutex);
  kernel_info& k = rt.kernels[host_fun];
  k.host_fun = host_fun;
  k.name = device_name ? device_name : "";
  k.resolved = 0; // its names are looked at again at its next launch
}

void __cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int) {}
void __cudaRegisterManagedVar(void**, void**, char*, const char*, int, size_t, int, int) {}
char __cudaInitModule(void**) { return 1; }

unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared_mem,
                                     struct CUstream_st* stream) {
  tl_configurations.push_back({grid, block, shared_mem, stream});
  return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* shared_mem, void* stream) {
  if (tl_configurations.empty()) return cudaErrorInvalidConfiguration;
  const call_configuration c = tl_configurations.back();
  tl_configurations.pop_back();
  *grid = c.grid;
  *block = c.block;
  *shared_mem = c.shared_mem;
  *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}

cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* fun) {
  kernel_info* k = find_kernel(fun);
  if (!kernel) return cudaErrorInvalidValue;
  *kernel = reinterpret_cast<cudaKernel_t>(k);
  return k ? cudaSuccess : cudaErrorInvalidDeviceFunction;
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                               size_t shared_mem, cudaStream_t stream) {
  return launch(reinterpret_cast<kernel_info*>(kernel), grid, block, args, shared_mem, stream,
                false, "cudaLaunchKernel");
}

cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                                    size_t shared_mem, cudaStream_t stream) {
  return launch(reinterpret_cast<kernel_info*>(kernel), grid, block, args, shared_mem, stream, true,
                "cudaLaunchKernel_ptsz");
}

cudaError_t cudaLaunchKernel(const void* fun, dim3 grid, dim3 block, void** args, size_t shared_mem,
                             cudaStream_t stream) {
  return launch(find_kernel(fun), grid, block, args, shared_mem, stream, false, "cudaLaunchKernel");
}

cudaError_t cudaLaunchKernel_ptsz(const void* fun, dim3 grid, dim3 block, void** args,
                                  size_t shared_mem, cudaStream_t stream) {
  return launch(find_kernel(fun), grid, block, args, shared_mem, stream, true,
                "cudaLaunchKernel_ptsz");
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* fun) {
  if (const cudaError_t e = enter("cudaFuncGetAttributes"); e != cudaSuccess) return fail(e);
  if (!attr) return fail(cudaErrorInvalidValue);
  if (!find_kernel(fun)) return fail(cudaErrorInvalidDeviceFunction);
  std::memset(attr, 0, sizeof *attr);
  attr->maxThreadsPerBlock = 1024;
  attr->numRegs = 32;
  attr->ptxVersion = 90;
  attr->binaryVersion = 90;
  attr->maxDynamicSharedSizeBytes = 48 * 1024;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* fun, cudaFuncAttribute, int) {
  if (const cudaError_t e = enter("cudaFuncSetAttribute"); e != cudaSuccess) return fail(e);
  return find_kernel(fun) ? cudaSuccess : fail(cudaErrorInvalidDeviceFunction);
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void* fun,
                                                                   int block_size, size_t,
                                                                   unsigned int) {
  if (const cudaError_t e = enter("cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags");
      e != cudaSuccess)
    return fail(e);
  if (!blocks || block_size <= 0) return fail(cudaErrorInvalidValue);
  if (!find_kernel(fun)) return fail(cudaErrorInvalidDeviceFunction);
  *blocks = std::max(1, std::min(32, 2048 / block_size));
  return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* fun,
                                                          int block_size, size_t shared) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, fun, block_size, shared, 0);
}

} // extern "C"
