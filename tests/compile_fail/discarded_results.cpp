// SPDX-License-Identifier: Apache-2.0
// Compile-fail cases for the [[nodiscard]] API (tests/compile_fail/expect_diagnostics.cmake).
// Case 0 uses every call correctly and must compile cleanly under -Wall -Wextra -Werror; every
// other case discards one result or guard, which would silently release memory or end a guarded
// region at once, and must be rejected with a diagnostic that names `nodiscard`, on the line
// marked `// case <n>`. -DCASE=<n> compiles one case; -DCASE=-1 compiles every discarding case
// at once, each in a function of its own.
#include <gpushare/gpushare.hpp>

#include <chrono>

#ifndef CASE
#error "compile with -DCASE=<n>, or -DCASE=-1 for every discarding case"
#endif
#define GPUSHARE_CASE(n) (CASE == (n) || (CASE == -1 && (n) > 0))

using namespace std::chrono_literals;

#if GPUSHARE_CASE(0)
void case_0(gpushare::session& s) {
  auto a = s.reserve(1, 1s);
  auto b = s.reserve(1);
  auto c = s.try_reserve(1);
  const bool grown = a.try_grow(1);
  (void)grown;
  gpushare::scoped_kernel g1(s);
  gpushare::scoped_kernel g2(s, 1s);
  gpushare::session other("key");
  (void)b;
  (void)c;
  (void)other;
}
#endif
#if GPUSHARE_CASE(1)
void case_1(gpushare::session& s) {
  s.reserve(512ull << 20, 1s); // case 1: the reservation would be released at once
}
#endif
#if GPUSHARE_CASE(2)
void case_2(gpushare::session& s) {
  s.reserve(512ull << 20); // case 2
}
#endif
#if GPUSHARE_CASE(3)
void case_3(gpushare::session& s) {
  s.try_reserve(512ull << 20); // case 3
}
#endif
#if GPUSHARE_CASE(4)
void case_4(gpushare::session& s) {
  gpushare::scoped_kernel{s}; // case 4: the guard would end at once
}
#endif
#if GPUSHARE_CASE(5)
void case_5(gpushare::session& s) {
  gpushare::scoped_kernel(s, 1s); // case 5
}
#endif
#if GPUSHARE_CASE(6)
void case_6(gpushare::session& s) {
  auto r = s.reserve(1, 1s);
  r.try_grow(1); // case 6
}
#endif
#if GPUSHARE_CASE(7)
void case_7() {
  gpushare::session{"key"}; // case 7: joins and leaves at once
}
#endif
#if CASE < -1 || CASE > 7
#error "no such case"
#endif

int main() { return 0; }
