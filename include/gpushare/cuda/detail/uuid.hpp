// SPDX-License-Identifier: Apache-2.0
// A GPU's UUID as text, the way nvidia-smi and NVML write it. CUDA-free, so it is unit-tested
// without a GPU.
#pragma once

#include <cstddef>
#include <string>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

/// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (lower-case hex, 4-2-2-2-6 bytes) from the 16
/// bytes of cudaDeviceProp::uuid. The same physical GPU gives the same text in every process,
/// whatever CUDA_VISIBLE_DEVICES says, so it names the GPU's table.
inline std::string format_gpu_uuid(const unsigned char (&bytes)[16]) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string s = "GPU-";
  for (std::size_t i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += hex[bytes[i] >> 4];
    s += hex[bytes[i] & 15];
  }
  return s;
}

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare
