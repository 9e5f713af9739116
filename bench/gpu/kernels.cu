// SPDX-License-Identifier: Apache-2.0
#include <cuda_bf16.h>
#include <time.h>

#include <cudasim/cudasim.h>

#include "kernels.hpp"

namespace bench::gpu {
namespace {

constexpr unsigned threads = 256;

unsigned blocks_for(std::size_t n) {
  const std::size_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 65535u * 16u ? (b > 0 ? b : 1) : 65535u * 16u);
}

__device__ std::uint32_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<std::uint32_t>(x);
}

__global__ void fill_random(__nv_bfloat16* p, std::size_t n, std::uint32_t seed) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const std::uint32_t r = mix((static_cast<std::uint64_t>(seed) << 40) ^ i);
    // 24 random bits -> [-1, 1); never exactly zero in practice, and never a NaN.
    const float v = static_cast<float>(r >> 8) * (2.0f / 16777216.0f) - 1.0f;
    p[i] = __float2bfloat16(v);
  }
}

__global__ void activation(__nv_bfloat16* p, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const float x = __bfloat162float(p[i]);
    p[i] = __float2bfloat16(x > 0.0f ? x : 0.01f * x);
  }
}

__global__ void stamp(std::uint64_t* out) {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  *out = t;
}

// On the simulated CUDA runtime (tools/cudasim, docs/cudasim.md) device code does not run: these
// models say how long each kernel occupies the simulated GPU, and what the stamp writes. On a
// GPU they are unused.
//   fill_random, activation: memory-bound, a fixed 2 us (a small kernel's floor on a GPU) plus
//     the bytes they move at 2.5 TB/s (about 75% of an H100 SXM's 3.35 TB/s): fill_random
//     writes 2 bytes per element, activation reads and writes them. Neither computes values:
//     nothing on the simulator reads them (its GEMMs compute nothing, and the benchmark skips
//     its numerical check there), and filling them on the host would only cost time and memory.
//   stamp: 1 us; it writes the host's CLOCK_REALTIME (ns since the epoch, like the GPU's
//     %globaltimer) at the kernel's start, i.e. at its completion minus its duration. The
//     benchmark maps it to CLOCK_MONOTONIC with calibrate_clock(), as it maps the GPU's timer.
constexpr unsigned long long simulated_floor_ns = 2000;
constexpr double simulated_bytes_per_ns = 2500; // 2.5 TB/s
constexpr unsigned long long simulated_stamp_ns = 1000;

unsigned long long memory_bound_ns(std::size_t bytes) {
  return simulated_floor_ns +
         static_cast<unsigned long long>(static_cast<double>(bytes) / simulated_bytes_per_ns);
}

void stamp_execute(const cudasimLaunch* l) {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  const std::uint64_t now = static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
                            static_cast<std::uint64_t>(ts.tv_nsec);
  **static_cast<std::uint64_t* const*>(l->args[0]) = now - simulated_stamp_ns;
}

[[maybe_unused]] const bool models_declared = [] {
  cudasim::set_kernel_model<__nv_bfloat16*, std::size_t, std::uint32_t>(
      reinterpret_cast<const void*>(&fill_random), [](const cudasimLaunch* l) {
        return memory_bound_ns(2 * *static_cast<const std::size_t*>(l->args[1]));
      });
  cudasim::set_kernel_model<__nv_bfloat16*, std::size_t>(
      reinterpret_cast<const void*>(&activation), [](const cudasimLaunch* l) {
        return memory_bound_ns(4 * *static_cast<const std::size_t*>(l->args[1]));
      });
  return cudasim::set_kernel_model<std::uint64_t*>(
      reinterpret_cast<const void*>(&stamp),
      [](const cudasimLaunch*) { return simulated_stamp_ns; }, &stamp_execute);
}();

} // namespace

cudaError_t launch_fill_random(cudaStream_t stream, void* p, std::size_t n, std::uint32_t seed) {
  fill_random<<<blocks_for(n), threads, 0, stream>>>(static_cast<__nv_bfloat16*>(p), n, seed);
  return cudaGetLastError();
}

cudaError_t launch_activation(cudaStream_t stream, void* p, std::size_t n) {
  activation<<<blocks_for(n), threads, 0, stream>>>(static_cast<__nv_bfloat16*>(p), n);
  return cudaGetLastError();
}

cudaError_t launch_stamp(cudaStream_t stream, std::uint64_t* out) {
  stamp<<<1, 1, 0, stream>>>(out);
  return cudaGetLastError();
}

} // namespace bench::gpu
