// SPDX-License-Identifier: Apache-2.0
// Compiled as C++17 by the compile-fail/pre-cxx20 tests: must stop with the one clear #error of
// <gpushare/detail/require_cpp20.hpp>, not with errors deep inside the headers.
#include <gpushare/gpushare.hpp>

int main() { return 0; }
