// SPDX-License-Identifier: Apache-2.0
// Compile-fail cases for the [[nodiscard]] API (tests/compile_fail/expect_diagnostics.cmake).
// Case 0 uses every call correctly and must compile cleanly under -Wall -Wextra -Werror; every
// other case discards one result or guard, which would silently release memory or end a guarded
// region at once, and must be rejected with a diagnostic that names `nodiscard`.
#include <gpushare/gpushare.hpp>

#include <chrono>

#ifndef CASE
#error "compile with -DCASE=<n>"
#endif

void exercise(gpushare::session& s) {
  using namespace std::chrono_literals;
#if CASE == 0
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
#elif CASE == 1
  s.reserve(512ull << 20, 1s); // the reservation would be released at once
#elif CASE == 2
  s.reserve(512ull << 20);
#elif CASE == 3
  s.try_reserve(512ull << 20);
#elif CASE == 4
  gpushare::scoped_kernel{s}; // the guard would end at once
#elif CASE == 5
  gpushare::scoped_kernel(s, 1s);
#elif CASE == 6
  auto r = s.reserve(1, 1s);
  r.try_grow(1);
#elif CASE == 7
  (void)s;
  gpushare::session{"key"}; // joins and leaves at once
#else
#error "no such case"
#endif
}

int main() { return 0; }
