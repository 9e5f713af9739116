// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

/// Library version (semantic versioning).
#define GPUSHARE_VERSION_MAJOR 0
#define GPUSHARE_VERSION_MINOR 1
#define GPUSHARE_VERSION_PATCH 0
#define GPUSHARE_VERSION_STRING "0.1.0"

namespace gpushare {
/// Versioned inline namespace: two gpushare versions linked into one program do not collide.
inline namespace v0 {

/// A library version: major.minor.patch.
struct library_version {
  int major; ///< major version
  int minor; ///< minor version
  int patch; ///< patch version
};

/// This library's version (GPUSHARE_VERSION_*).
inline constexpr library_version version{GPUSHARE_VERSION_MAJOR, GPUSHARE_VERSION_MINOR,
                                         GPUSHARE_VERSION_PATCH};

/// Layout version of the shared table. Processes agree on a table only when this number matches;
/// bump it whenever a byte of detail/layout.hpp changes meaning.
inline constexpr unsigned table_layout_version = 13;

} // namespace v0
} // namespace gpushare
