// SPDX-License-Identifier: Apache-2.0
// Built against an installed gpushare found with find_package(gpushare).
#include <gpushare/error.hpp>
#include <gpushare/version.hpp>

#include <cstdio>

int main() {
  std::printf("gpushare %d.%d.%d (find_package)\n", gpushare::version.major,
              gpushare::version.minor, gpushare::version.patch);
  return gpushare::version.major == GPUSHARE_VERSION_MAJOR ? 0 : 1;
}
