// SPDX-License-Identifier: Apache-2.0
// The two kinds of failure of the gpushare tool, which main() maps to exit codes.
#pragma once

#include <stdexcept>

namespace gpushare::cli {

/// A mistake in the command line: main() prints it with the usage, exit code 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A failure at run time (no such session, an ambiguous name, a refused change): exit code 1.
/// Errors thrown by the library (gpushare::error) are treated the same way.
struct runtime_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

} // namespace gpushare::cli
