// SPDX-License-Identifier: Apache-2.0
// memory_resource as a CCCL cuda::mr resource (CCCL 3.0's experimental memory-resource concepts).
//
// CCCL's cuda::mr concepts are experimental in CCCL 3.0 (the CUDA 13.0 toolkit's version) and
// change shape in 3.1+. When the including code opts in to them (it defines
// LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE before including CCCL or this header) and the
// CCCL major.minor is 3.0, this header defines cccl_memory_resource: a memory_resource that also
// takes cuda::stream_ref and declares the device_accessible property, so it satisfies
// cuda::mr::async_resource_with<cccl_memory_resource, cuda::mr::device_accessible>, and
// GPUSHARE_CUDA_MR is 1. Otherwise GPUSHARE_CUDA_MR is 0 and nothing is defined.
//
// It is a type of its own, so that memory_resource has one definition in every translation unit
// whatever macros they define (the one-definition rule).
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <gpushare/cuda/memory_resource.hpp>

#if defined(LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE) && __has_include(<cuda/memory_resource>)
#include <cuda/memory_resource>
#include <cuda/stream_ref>
#if defined(CCCL_MAJOR_VERSION) && CCCL_MAJOR_VERSION == 3 && CCCL_MINOR_VERSION == 0
#define GPUSHARE_CUDA_MR 1
#endif
#endif
#ifndef GPUSHARE_CUDA_MR
#define GPUSHARE_CUDA_MR 0
#endif

#include <gpushare/cuda/detail/runtime_names_begin.hpp>

#if GPUSHARE_CUDA_MR
namespace gpushare {
inline namespace v0 {
namespace cuda {

/// memory_resource with CCCL 3.0's cuda::mr interface: cuda::stream_ref overloads of the
/// stream-ordered pair, and the device_accessible property.
class cccl_memory_resource : public memory_resource {
public:
  using memory_resource::memory_resource;
  explicit cccl_memory_resource(const memory_resource& r) : memory_resource(r) {}

  using memory_resource::allocate_async;
  using memory_resource::deallocate_async;

  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment,
                                     ::cuda::stream_ref stream) {
    return memory_resource::allocate_async(bytes, alignment, stream.get());
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment,
                        ::cuda::stream_ref stream) noexcept {
    memory_resource::deallocate_async(p, bytes, alignment, stream.get());
  }

  friend void get_property(const cccl_memory_resource&, ::cuda::mr::device_accessible) noexcept {}
};

} // namespace cuda
} // namespace v0
} // namespace gpushare
#endif

#include <gpushare/cuda/detail/runtime_names_end.hpp>
