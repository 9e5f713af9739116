// SPDX-License-Identifier: Apache-2.0
// Compile-fail cases for the CUDA layer's [[nodiscard]] API; see discarded_results.cpp.
#include <gpushare/cuda.hpp>

#ifndef CASE
#error "compile with -DCASE=<n>, or -DCASE=-1 for every discarding case"
#endif
#define GPUSHARE_CASE(n) (CASE == (n) || (CASE == -1 && (n) > 0))

namespace gc = gpushare::cuda;

#if GPUSHARE_CASE(0)
void case_0(gc::device_session& s, gc::memory_resource& mr, cudaStream_t stream) {
  gc::scoped_kernel guard(s, stream);
  void* p = s.malloc(256);
  void* q = s.malloc_async(256, stream);
  void* r = mr.allocate(256);
  void* t = mr.allocate_async(256, 256, stream);
  gc::device_session other(0);
  (void)p;
  (void)q;
  (void)r;
  (void)t;
  (void)other;
}
#endif
#if GPUSHARE_CASE(1)
void case_1(gc::device_session& s, cudaStream_t stream) {
  gc::scoped_kernel{s, stream}; // case 1: the guard would end at once
}
#endif
#if GPUSHARE_CASE(2)
void case_2(gc::device_session& s) {
  s.malloc(256); // case 2: the allocation would leak, charged to the budget
}
#endif
#if GPUSHARE_CASE(3)
void case_3(gc::device_session& s, cudaStream_t stream) {
  s.malloc_async(256, stream); // case 3
}
#endif
#if GPUSHARE_CASE(4)
void case_4(gc::memory_resource& mr) {
  mr.allocate(256); // case 4
}
#endif
#if GPUSHARE_CASE(5)
void case_5(gc::memory_resource& mr, cudaStream_t stream) {
  mr.allocate_async(256, 256, stream); // case 5
}
#endif
#if GPUSHARE_CASE(6)
void case_6() {
  gc::device_session{0}; // case 6: joins and leaves at once
}
#endif
#if CASE < -1 || CASE > 6
#error "no such case"
#endif

int main() { return 0; }
