// SPDX-License-Identifier: Apache-2.0
// Compile-fail cases for the CUDA layer's [[nodiscard]] API; see discarded_results.cpp.
#include <gpushare/cuda.hpp>

#ifndef CASE
#error "compile with -DCASE=<n>"
#endif

void exercise(gpushare::cuda::device_session& s, gpushare::cuda::memory_resource& mr,
              cudaStream_t stream) {
#if CASE == 0
  gpushare::cuda::scoped_kernel guard(s, stream);
  void* p = s.malloc(256);
  void* q = s.malloc_async(256, stream);
  void* r = mr.allocate(256);
  void* t = mr.allocate_async(256, 256, stream);
  gpushare::cuda::device_session other(0);
  (void)p;
  (void)q;
  (void)r;
  (void)t;
  (void)other;
#elif CASE == 1
  (void)mr;
  gpushare::cuda::scoped_kernel{s, stream}; // the guard would end at once
#elif CASE == 2
  (void)mr;
  (void)stream;
  s.malloc(256); // the allocation would leak, charged to the budget
#elif CASE == 3
  (void)mr;
  s.malloc_async(256, stream);
#elif CASE == 4
  (void)s;
  (void)stream;
  mr.allocate(256);
#elif CASE == 5
  (void)s;
  mr.allocate_async(256, 256, stream);
#elif CASE == 6
  (void)mr;
  (void)s;
  (void)stream;
  gpushare::cuda::device_session{0}; // joins and leaves at once
#else
#error "no such case"
#endif
}

int main() { return 0; }
