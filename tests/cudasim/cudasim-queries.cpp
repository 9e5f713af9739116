// SPDX-License-Identifier: Apache-2.0
// cudasim's rule for query results (docs/cudasim.md, "Errors"): cudaEventQuery and
// cudaStreamQuery record cudaErrorNotReady as the thread's last error like any other result but
// cudaSuccess (cuda_runtime_api.h:1119, cudaGetLastError returns "the last error that has been
// produced by any of the runtime calls"; driver_types.h:762 lists cudaErrorNotReady, "calls that
// may return this value include cudaEventQuery() and cudaStreamQuery()"). The driver API's
// cuEventQuery and cuStreamQuery (cuda.h:16071, 15766), reached through
// cudaGetDriverEntryPointByVersion, give the same answers and never touch the runtime's last
// error. Real runtimes need a GPU to confirm the first rule (PyTorch clears the error after
// each NotReady query for that reason); the second holds by construction of the two APIs.
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

TEST_CASE("NotReady from cudaEventQuery and cudaStreamQuery is recorded as the last error") {
  fresh_state st("notready");
  st.use_here();
  cudaStream_t s = nullptr;
  cudaEvent_t e = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  REQUIRE(cudaEventCreate(&e) == cudaSuccess);
  REQUIRE(simtest::launch(s, 300 * ms) == cudaSuccess);
  REQUIRE(cudaEventRecord(e, s) == cudaSuccess);
  CHECK(cudaEventQuery(e) == cudaErrorNotReady);
  CHECK(cudaPeekAtLastError() == cudaErrorNotReady);
  CHECK(cudaGetLastError() == cudaErrorNotReady); // read and reset
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(cudaStreamQuery(s) == cudaErrorNotReady);
  CHECK(cudaGetLastError() == cudaErrorNotReady);
  // It replaces an error that was pending, as any failing call does.
  REQUIRE(cudaSetDevice(99) == cudaErrorInvalidDevice);
  CHECK(cudaEventQuery(e) == cudaErrorNotReady);
  CHECK(cudaGetLastError() == cudaErrorNotReady);
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
