// SPDX-License-Identifier: Apache-2.0
// Thrust and CCCL integration, compiled by nvcc: device_vector with the budgeted allocator, a sort
// whose temporary storage is charged to the session, and (at compile time) the memory resource
// against CCCL's experimental cuda::mr concepts.
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#include <doctest/doctest.h>

#include <thrust/device_vector.h>
#include <thrust/host_vector.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <gpushare/cuda.hpp>
#include <gpushare/cuda/cccl_memory_resource.hpp>
#include <gpushare/cuda/thrust.hpp>

#include "cuda_test_util.hpp"

namespace gc = gpushare::cuda;

#if GPUSHARE_CUDA_MR
static_assert(::cuda::mr::resource<gc::cccl_memory_resource>);
static_assert(::cuda::mr::async_resource<gc::cccl_memory_resource>);
static_assert(
    ::cuda::mr::async_resource_with<gc::cccl_memory_resource, ::cuda::mr::device_accessible>);
#endif

TEST_CASE("the memory resource satisfies CCCL's cuda::mr concepts with this toolkit") {
  // A compile-time fact, reported at run time so that a toolkit without them is visible.
  std::printf("CCCL %d.%d, cuda::mr concepts %s\n", CCCL_MAJOR_VERSION, CCCL_MINOR_VERSION,
              GPUSHARE_CUDA_MR ? "satisfied" : "not available");
  CHECK(GPUSHARE_CUDA_MR == (CCCL_MAJOR_VERSION == 3 && CCCL_MINOR_VERSION == 0 ? 1 : 0));
}

TEST_CASE("a device_vector with the budgeted allocator is charged, and over budget is bad_alloc") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("tvec");
  auto opts = d.options("vectors");
  opts.memory_limit = gpushare::memory_amount::of_bytes(16u << 20);
  gc::device_options dev;
  dev.context_overhead = 0;
  gc::device_session s(0, opts, dev);
  d.uses(s.device().uuid);
  using alloc = gc::thrust_allocator<std::uint32_t>;
  {
    thrust::device_vector<std::uint32_t, alloc> v(1u << 20, 7u, alloc(s)); // 4 MiB
    CHECK(s.info().reserved == 4u << 20);
    try {
      thrust::device_vector<std::uint32_t, alloc> big(8u << 20, alloc(s)); // 32 MiB
      FAIL("an over-budget device_vector was allocated");
    } catch (const std::bad_alloc& e) {
      const std::string m = e.what();
      CHECK(m.find("'vectors'") != std::string::npos);
      CHECK(m.find("16.00 MiB") != std::string::npos);
    }
    CHECK(s.info().reserved == 4u << 20);
  }
  CHECK(s.info().reserved == 0);
}

TEST_CASE("thrust::sort with the budgeted policy charges its temporaries") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("tsort");
  gc::device_options dev;
  dev.context_overhead = 0;
  gc::device_session s(0, d.options(), dev);
  d.uses(s.device().uuid);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  const std::size_t n = 1u << 22;
  std::vector<std::uint32_t> host(n);
  std::mt19937 rng(42);
  for (auto& x : host) x = rng();
  thrust::device_vector<std::uint32_t, gc::thrust_allocator<std::uint32_t>> v(
      host.begin(), host.end(), gc::thrust_allocator<std::uint32_t>(s));
  const std::uint64_t data_bytes = n * sizeof(std::uint32_t);
  CHECK(s.info().reserved == data_bytes);
  {
    gc::scoped_kernel guard(s, stream);
    thrust::sort(gc::thrust_policy(s, stream), v.begin(), v.end());
  }
  s.synchronize();
  CHECK(s.info().peak > data_bytes); // radix sort needed temporary storage, charged while used
  CHECK(s.info().reserved == data_bytes);
  CHECK(s.info().device_ns > 0);
  cudaStreamDestroy(stream);
}

TEST_CASE("thrust computes correct results with the budgeted allocator and policy (GPU only: "
          "device code)") {
  CUTEST_REQUIRE_DEVICE_CODE();
  cutest::private_domain d("tresult");
  gc::device_options dev;
  dev.context_overhead = 0;
  gc::device_session s(0, d.options(), dev);
  d.uses(s.device().uuid);
  using alloc = gc::thrust_allocator<std::uint32_t>;
  thrust::device_vector<std::uint32_t, alloc> sevens(1u << 20, 7u, alloc(s));
  CHECK(thrust::reduce(sevens.begin(), sevens.end(), 0ull) == 7ull << 20);
  const std::size_t n = 1u << 22;
  std::vector<std::uint32_t> host(n);
  std::mt19937 rng(42);
  for (auto& x : host) x = rng();
  thrust::device_vector<std::uint32_t, alloc> v(host.begin(), host.end(), alloc(s));
  {
    gc::scoped_kernel guard(s, nullptr);
    thrust::sort(gc::thrust_policy(s, nullptr), v.begin(), v.end());
  }
  s.synchronize();
  std::sort(host.begin(), host.end());
  thrust::host_vector<std::uint32_t> sorted(v.begin(), v.end());
  CHECK(std::equal(host.begin(), host.end(), sorted.begin()));
}

TEST_CASE("a sort whose temporaries exceed the budget fails with bad_alloc and leaves no charge") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("tsortlimit");
  auto opts = d.options("tight");
  const std::size_t n = 1u << 22;
  opts.memory_limit = gpushare::memory_amount::of_bytes(n * sizeof(std::uint32_t) + 4096);
  gc::device_options dev;
  dev.context_overhead = 0;
  gc::device_session s(0, opts, dev);
  d.uses(s.device().uuid);
  thrust::device_vector<std::uint32_t, gc::thrust_allocator<std::uint32_t>> v(
      n, gc::thrust_allocator<std::uint32_t>(s));
  thrust::sequence(v.begin(), v.end(), 0u);
  CHECK_THROWS_AS(thrust::sort(gc::thrust_policy(s, nullptr), v.begin(), v.end()), std::bad_alloc);
  s.synchronize();
  CHECK(s.info().reserved == n * sizeof(std::uint32_t));
}
