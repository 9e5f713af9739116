// SPDX-License-Identifier: Apache-2.0
#include <harness/kernels.hpp>

#include <cudasim/cudasim.h>

namespace demo::gpu {
namespace {

__device__ float busy_sink;

// `marker` is never reached (the caller passes -1 and x stays positive); the store it guards
// keeps the compiler from removing the loop.
__global__ void busy_kernel(std::uint64_t iterations, float marker) {
  float x = 1.0f + 1e-6f * static_cast<float>(threadIdx.x);
  for (std::uint64_t i = 0; i < iterations; ++i) x = fmaf(x, 0.999999f, 1e-6f);
  if (x == marker) busy_sink = x;
}

// On the simulated CUDA runtime (tools/cudasim, docs/cudasim.md) device code does not run: this
// model says how long busy_kernel occupies the simulated GPU. It is 1 ns per iteration for each
// wave of blocks, a wave being as many blocks as the simulated GPU holds at once (132
// multiprocessors of 2048 threads, as cudasim describes its device). 1 ns is a round figure, not
// a GPU's rate: the demos never assume it, calibrate() measures the rate on the simulator as it
// does on a GPU, so it only sets how many iterations a kernel of a given length has. On a GPU
// the model is unused.
constexpr unsigned long long simulated_resident_threads = 132ull * 2048;

unsigned long long busy_duration(const cudasimLaunch* l) {
  const unsigned long long iterations = *static_cast<const std::uint64_t*>(l->args[0]);
  const unsigned long long threads_per_block =
      static_cast<unsigned long long>(l->block.x) * l->block.y * l->block.z;
  const unsigned long long blocks =
      static_cast<unsigned long long>(l->grid.x) * l->grid.y * l->grid.z;
  const unsigned long long per_wave =
      simulated_resident_threads / (threads_per_block > 0 ? threads_per_block : 1);
  const unsigned long long waves = (blocks + per_wave - 1) / per_wave;
  return iterations * (waves > 0 ? waves : 1);
}

[[maybe_unused]] const bool model_declared = cudasim::set_kernel_model<std::uint64_t, float>(
    reinterpret_cast<const void*>(&busy_kernel), &busy_duration);

} // namespace

cudaError_t launch_busy(cudaStream_t stream, std::uint64_t iterations, unsigned blocks) {
  busy_kernel<<<blocks, 256, 0, stream>>>(iterations, -1.0f);
  return cudaGetLastError();
}

} // namespace demo::gpu
