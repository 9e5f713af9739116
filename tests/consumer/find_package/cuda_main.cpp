// SPDX-License-Identifier: Apache-2.0
// Built against gpushare::cuda from an installed gpushare: counts devices; no GPU must be the
// documented error (errc::no_device), not a crash.
#include <gpushare/cuda.hpp>

#include <cstdio>

int main() {
  try {
    std::printf("gpushare::cuda sees %d device(s)\n", gpushare::cuda::device_count());
    return 0;
  } catch (const gpushare::error& e) {
    std::printf("gpushare::cuda: %s\n", e.what());
    return e.code() == gpushare::errc::no_device ? 0 : 1;
  }
}
