// SPDX-License-Identifier: Apache-2.0
// The prelude of every README fragment (a ```cpp block without `int main`): what a fragment may
// use without declaring it. tests/readme/extract.cmake puts each fragment's #include lines after
// this header and the rest of the fragment in the body of a function. The names below are the
// placeholders the README's fragments stand on; they are declared, never defined, since the
// fragments are only compiled. Add a name here when a new fragment needs one, rather than
// declaring it in the README.
#pragma once

#include <gpushare/gpushare.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

// Compute arbitration: the application's training loop.
extern int steps;           // iterations of the loop
void launch_step_kernels(); // puts one step's work on the device

// Cooperative reclaim: the application's cache, which frees `bytes` of its device memory.
void drop_cache_entries(std::uint64_t bytes);

// Notices: the application's logger.
void my_log(const std::string& line);

// The CUDA layer: a kernel and its launch configuration (nvcc compiles these fragments).
extern std::size_t n; // elements in the buffer
extern unsigned blocks;
extern unsigned threads;
#ifdef __CUDACC__
__global__ void my_kernel(float* x, std::size_t n);
#endif
