// SPDX-License-Identifier: Apache-2.0
// Built with gpushare as a subproject, added with add_subdirectory().
#include <gpushare/error.hpp>
#include <gpushare/version.hpp>

#include <cstdio>

int main() {
  std::printf("gpushare %d.%d.%d (add_subdirectory)\n", gpushare::version.major,
              gpushare::version.minor, gpushare::version.patch);
  return gpushare::version.major == GPUSHARE_VERSION_MAJOR ? 0 : 1;
}
