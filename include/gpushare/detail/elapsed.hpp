// SPDX-License-Identifier: Apache-2.0
// A measured duration in a message, rounded for a human ("7.93s", "250us"): format_elapsed().
// Settings keep format_duration() (detail/parse.hpp), whose form parse_duration() reads back
// exactly; a measured time has no such form ("7929106847ns", issue 42 B10) and needs none.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// `ns` in the largest unit of h, min, s, ms, us that it reaches, to three significant digits
/// at most, trailing zeros dropped ("7.93s", "12.5ms", "250us", "1.5h"); below 1 us in ns.
inline std::string format_elapsed(std::uint64_t ns) {
  struct unit {
    std::string_view name;
    std::uint64_t ns;
  };
  static constexpr unit units[] = {{"h", 3'600'000'000'000},
                                   {"min", 60'000'000'000},
                                   {"s", 1'000'000'000},
                                   {"ms", 1'000'000},
                                   {"us", 1'000}};
  for (const unit& u : units) {
    if (ns < u.ns) continue;
    const double v = static_cast<double>(ns) / static_cast<double>(u.ns);
    char buf[40];
    std::snprintf(buf, sizeof buf, v >= 99.95 ? "%.0f" : v >= 9.995 ? "%.1f" : "%.2f", v);
    std::string s(buf);
    if (s.find('.') != std::string::npos) {
      while (s.back() == '0') s.pop_back();
      if (s.back() == '.') s.pop_back();
    }
    return s.append(u.name);
  }
  return std::to_string(ns) + "ns";
}

} // namespace detail
} // namespace v0
} // namespace gpushare
