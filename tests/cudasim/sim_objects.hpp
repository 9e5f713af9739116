// SPDX-License-Identifier: Apache-2.0
// CUDA objects the simulator tests make: a non-blocking stream and an event, each REQUIREd to
// be created.
#pragma once

#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

namespace simtest {

inline cudaStream_t new_stream() {
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  return s;
}

inline cudaEvent_t new_event() {
  cudaEvent_t e = nullptr;
  REQUIRE(cudaEventCreate(&e) == cudaSuccess);
  return e;
}

} // namespace simtest
