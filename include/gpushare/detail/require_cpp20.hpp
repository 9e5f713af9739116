// SPDX-License-Identifier: Apache-2.0
// Stops a compile that is not C++20 with one clear message, before the first C++20 construct
// fails somewhere deep in a header. Every public header includes this first.
#pragma once

#if !defined(__cplusplus) || __cplusplus < 202002L
#error                                                                                             \
    "gpushare requires C++20: compile with -std=c++20 (g++, clang++ and nvcc alike; nvcc 13 defaults to C++17). With CMake, linking gpushare::gpushare or gpushare::cuda asks for it."
#endif
