// SPDX-License-Identifier: Apache-2.0
// cudasim's rule for query results (docs/cudasim.md, "Errors"): the cudaErrorNotReady of
// cudaEventQuery and cudaStreamQuery is not recorded as the thread's last error, and leaves an
// error that was pending in place. Issue 25 read cuda_runtime_api.h:1119 (cudaGetLastError
// returns "the last error that has been produced by any of the runtime calls") and
// driver_types.h:762 as saying it was; on an H200 (driver 580, CUDA 13.0) cudaGetLastError
// returned cudaSuccess right after cudaEventQuery's NotReady (cuda-errors). The driver API's
// cuEventQuery and cuStreamQuery (cuda.h:16071, 15766), reached through
// cudaGetDriverEntryPointByVersion, give the same answers and never touch the runtime's last
// error, by construction of the two APIs.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cstdint>

#include "sim_kernels.hpp"
#include "sim_util.hpp"

using simtest::fresh_state;

namespace {

constexpr std::uint64_t ms = 1'000'000; // nanoseconds
constexpr int cu_success = 0, cu_not_ready = 600, cu_invalid_handle = 400;

template <class Fn> Fn driver(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  REQUIRE(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) ==
          cudaSuccess);
  REQUIRE(found == cudaDriverEntryPointSuccess);
  return reinterpret_cast<Fn>(fn);
}

} // namespace

TEST_CASE("NotReady from cudaEventQuery and cudaStreamQuery is not recorded as the last error") {
  fresh_state st("notready");
  st.use_here();
  cudaStream_t s = nullptr;
  cudaEvent_t e = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  REQUIRE(cudaEventCreate(&e) == cudaSuccess);
  REQUIRE(simtest::launch(s, 300 * ms) == cudaSuccess);
  REQUIRE(cudaEventRecord(e, s) == cudaSuccess);
  CHECK(cudaEventQuery(e) == cudaErrorNotReady);
  CHECK(cudaPeekAtLastError() == cudaSuccess);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(cudaStreamQuery(s) == cudaErrorNotReady);
  CHECK(cudaGetLastError() == cudaSuccess);
  // An error that was pending stays in place.
  REQUIRE(cudaSetDevice(99) == cudaErrorInvalidDevice);
  CHECK(cudaEventQuery(e) == cudaErrorNotReady);
  CHECK(cudaStreamQuery(s) == cudaErrorNotReady);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(cudaEventQuery(e) == cudaSuccess);
  CHECK(cudaStreamQuery(s) == cudaSuccess);
  CHECK(cudaGetLastError() == cudaSuccess); // success records nothing
  cudaEventDestroy(e);
  cudaStreamDestroy(s);
}

TEST_CASE("the driver's cuEventQuery and cuStreamQuery answer alike and leave the last error") {
  fresh_state st("drvquery");
  st.use_here();
  const auto event_query = driver<int (*)(cudaEvent_t)>("cuEventQuery");
  const auto stream_query = driver<int (*)(cudaStream_t)>("cuStreamQuery");
  cudaStream_t s = nullptr;
  cudaEvent_t e = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  REQUIRE(cudaEventCreate(&e) == cudaSuccess);
  REQUIRE(simtest::launch(s, 300 * ms) == cudaSuccess);
  REQUIRE(cudaEventRecord(e, s) == cudaSuccess);
  CHECK(event_query(e) == cu_not_ready);
  CHECK(stream_query(s) == cu_not_ready);
  CHECK(cudaPeekAtLastError() == cudaSuccess); // nothing recorded
  REQUIRE(cudaSetDevice(99) == cudaErrorInvalidDevice);
  CHECK(event_query(e) == cu_not_ready);
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidDevice); // the pending error stays
  CHECK(event_query(reinterpret_cast<cudaEvent_t>(&st)) == cu_invalid_handle); // not an event
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(event_query(e) == cu_success);
  CHECK(stream_query(s) == cu_success);
  CHECK(cudaGetLastError() == cudaSuccess);
  cudaEventDestroy(e);
  cudaStreamDestroy(s);
}

// cudaMemPoolTrimTo: "Allocations that have been asynchronously freed but whose completion has
// not been observed on the host (eg. by a synchronize) can count as outstanding." A query that
// finds the free complete observes nothing; a synchronisation does (as on an H200, driver 580,
// CUDA 13.0, where a free cuEventQuery had found complete stayed reserved through a trim).
TEST_CASE("a pool free found complete by a query stays reserved through a trim until a sync") {
  fresh_state st("poolobserve");
  st.use_here();
  cudaStream_t s = nullptr;
  cudaEvent_t e = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  REQUIRE(cudaEventCreate(&e) == cudaSuccess);
  cudaMemPool_t pool = nullptr;
  REQUIRE(cudaDeviceGetMemPool(&pool, 0) == cudaSuccess);
  auto reserved = [&] {
    std::uint64_t v = 0;
    REQUIRE(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &v) == cudaSuccess);
    return v;
  };
  void* p = nullptr;
  REQUIRE(cudaMallocAsync(&p, 4 << 20, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaEventRecord(e, s) == cudaSuccess);
  while (cudaEventQuery(e) == cudaErrorNotReady) {
  }
  REQUIRE(cudaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(reserved() == 4u << 20); // run, not observed: outstanding
  REQUIRE(cudaEventSynchronize(e) == cudaSuccess);
  CHECK(reserved() == 0); // observed: released at the synchronisation (threshold 0)
  cudaEventDestroy(e);
  cudaStreamDestroy(s);
}
