// SPDX-License-Identifier: Apache-2.0
#include <cuda_bf16.h>

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
