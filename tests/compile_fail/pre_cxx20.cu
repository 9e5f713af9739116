// SPDX-License-Identifier: Apache-2.0
// Compiled by nvcc at its default standard (C++17) by compile-fail/pre-cxx20/nvcc: must stop with
// the #error of <gpushare/detail/require_cpp20.hpp> naming C++20.
#include <gpushare/cuda.hpp>

__global__ void kernel() {}

int main() { return 0; }
