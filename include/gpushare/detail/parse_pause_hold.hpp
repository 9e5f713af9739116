// SPDX-License-Identifier: Apache-2.0
// The pause hold's setting (session_options::pause_hold_ppm, GPUSHARE_PAUSE_HOLD, `gpushare set
// --pause-hold`): its forms, range, default and parser. docs/design.md, "Pause hold".
#pragma once

#include <cstdint>
#include <string_view>

#include <gpushare/detail/parse.hpp>

namespace gpushare {
inline namespace v0 {
namespace detail {

/// What GPUSHARE_PAUSE_HOLD accepts (quoted in its errors).
inline constexpr std::string_view pause_hold_forms =
    "\"none\" (or \"0\": never hold through pauses), or a ratio from 0 to 100 (\"2\", \"0.5\"): "
    "the idle it may keep through its pauses while below its share, per unit of its device time";
/// A pause hold, in ppm of the session's device time: 0 (none) to 100 times.
inline constexpr setting_range pause_hold_range{"pause hold", 0, 100'000'000, false};
/// The pause hold of a session that sets none: idle up to twice its own device time (the device
/// at least a third busy while it holds through pauses). docs/design.md, "Pause hold".
inline constexpr std::uint32_t default_pause_hold_ppm = 2'000'000;

/// A pause hold (GPUSHARE_PAUSE_HOLD): "none", "off" or "0": 0; else a ratio from 0 to 100 with
/// at most 6 decimals ("2", "0.5"), in millionths (2 -> 2000000).
inline std::uint32_t parse_pause_hold_ppm(std::string_view s) {
  static constexpr value_kind kind{"pause hold", pause_hold_forms};
  if (iequals(s, "none") || iequals(s, "off")) return 0;
  const decimal d = parse_decimal(kind, s, s);
  if (d.length != s.size()) reject(kind, s, "unexpected characters after the number");
  if (d.whole > 100 || (d.whole == 100 && d.micros > 0)) reject(kind, s, "it must be at most 100");
  return static_cast<std::uint32_t>(d.whole * 1'000'000 + d.micros);
}

} // namespace detail
} // namespace v0
} // namespace gpushare
