// SPDX-License-Identifier: Apache-2.0
// The demos' machine-readable trailer: lines "result <key>=<value>" after the report, for tests
// and scripts (grep '^result ').
#pragma once

#include <cstdio>
#include <string>

namespace demo {

inline void result_line(const std::string& key, double value) {
  std::printf("result %s=%.6g\n", key.c_str(), value);
}
inline void result_line(const std::string& key, const std::string& value) {
  std::printf("result %s=%s\n", key.c_str(), value.c_str());
}

} // namespace demo
