// SPDX-License-Identifier: Apache-2.0
// Human-readable formatting for the gpushare tool: sizes, durations, percentages, names of
// settings, and a text table whose columns line up.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <gpushare/options.hpp>
#include <gpushare/table.hpp>
#include <gpushare/text.hpp>

namespace gpushare::cli {

/// `s` made safe for a terminal: every byte outside printable ASCII (control bytes such as ESC,
/// BEL, CR and LF, DEL, and every byte >= 0x80) becomes \xNN, and a backslash becomes \\, so
/// a string read from a table can neither move the cursor, nor start a new row, nor look like an
/// escape it is not.
inline std::string safe_text(std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      out += ch;
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

/// A count and its noun, singular for exactly one: plural(1, "table") == "1 table",
/// plural(2, "table") == "2 tables", plural(0, "table") == "0 tables". `many` is the plural form
/// when adding an "s" is wrong.
inline std::string plural(std::uint64_t n, std::string_view one, std::string_view many = {}) {
  std::string out = std::to_string(n) + " ";
  if (n == 1) return out + std::string(one);
  return many.empty() ? out + std::string(one) + "s" : out + std::string(many);
}

/// "4.00 GiB"; "unlimited" for 2^63 bytes or more (the capacity of an unlimited table).
inline std::string bytes_text(std::uint64_t bytes) {
  if (bytes >= unlimited_memory) return "unlimited";
  return format_bytes(bytes);
}

/// `units` / 10^`digits` as an exact decimal: fixed_decimal(1500000000, 9) == "1.5",
/// fixed_decimal(700000, 6) == "0.7", fixed_decimal(3, 0) == "3".
inline std::string fixed_decimal(std::uint64_t units, unsigned digits) {
  std::uint64_t scale = 1;
  for (unsigned i = 0; i < digits; ++i) scale *= 10;
  std::string out = std::to_string(units / scale);
  if (digits == 0) return out;
  std::string frac = std::to_string(scale + units % scale).substr(1);
  frac.erase(frac.find_last_not_of('0') + 1);
  if (!frac.empty()) out += "." + frac;
  return out;
}

/// "850 ms", "12.41 s", "5m03s", "2h05m", "3d04h".
inline std::string duration_text(std::uint64_t ns) {
  char buf[48];
  const std::uint64_t ms = ns / 1'000'000;
  if (ms < 1000) {
    std::snprintf(buf, sizeof buf, "%llu ms", static_cast<unsigned long long>(ms));
  } else if (ms < 60'000) {
    std::snprintf(buf, sizeof buf, "%llu.%02llu s", static_cast<unsigned long long>(ms / 1000),
                  static_cast<unsigned long long>(ms % 1000 / 10));
  } else {
    const std::uint64_t s = ms / 1000;
    if (s < 3600)
      std::snprintf(buf, sizeof buf, "%llum%02llus", static_cast<unsigned long long>(s / 60),
                    static_cast<unsigned long long>(s % 60));
    else if (s < 86'400)
      std::snprintf(buf, sizeof buf, "%lluh%02llum", static_cast<unsigned long long>(s / 3600),
                    static_cast<unsigned long long>(s % 3600 / 60));
    else
      std::snprintf(buf, sizeof buf, "%llud%02lluh", static_cast<unsigned long long>(s / 86'400),
                    static_cast<unsigned long long>(s % 86'400 / 3600));
  }
  return buf;
}

/// "12.3%" (one decimal).
inline std::string percent_text(double percent) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", percent);
  return buf;
}

/// A quantum: "500 us", "5 ms", "1.5 s".
inline std::string quantum_text(std::uint64_t ns) {
  if (ns < 1'000'000) return fixed_decimal(ns, 3) + " us";
  if (ns < 1'000'000'000) return fixed_decimal(ns, 6) + " ms";
  return fixed_decimal(ns, 9) + " s";
}

/// A guard bound (max_guard): "none" for 0, else "200 ms", "30 s".
inline std::string guard_bound_text(std::uint64_t ns) {
  return ns == 0 ? std::string("none") : quantum_text(ns);
}

/// A session's own guard bound: "200 ms"; for 0 (none of its own) "table default (30 s)".
inline std::string session_guard_bound_text(std::uint64_t ns, std::uint64_t table_default_ns) {
  return ns != 0 ? quantum_text(ns) : "table default (" + guard_bound_text(table_default_ns) + ")";
}

/// A compute guarantee: "none" for 0, else "10%".
inline std::string guarantee_text(std::uint32_t ppm) {
  return ppm == 0 ? std::string("none") : format_percent(ppm);
}

/// A pause hold: "none", or the ratio to its device time ("2x", "0.5x").
inline std::string pause_hold_text(std::uint32_t ppm) {
  if (ppm == 0) return "none";
  std::string out = std::to_string(ppm / 1'000'000);
  if (const std::uint32_t frac = ppm % 1'000'000; frac != 0) {
    std::string digits = std::to_string(1'000'000 + frac).substr(1);
    digits.erase(digits.find_last_not_of('0') + 1);
    out.append(".").append(digits);
  }
  return out.append("x");
}

/// "low", "normal", "high", "critical", or the number for the unnamed classes 4..7.
inline std::string priority_text(int p) {
  switch (p) {
  case priority::low: return "low";
  case priority::normal: return "normal";
  case priority::high: return "high";
  case priority::critical: return "critical";
  default: return std::to_string(p);
  }
}

inline const char* handover_text(handover_point h) {
  return h == handover_point::at_yield ? "yield" : "guard";
}

/// "0600", "0660": a file mode in octal.
inline std::string mode_text(std::uint32_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777u);
  return buf;
}

/// "3 s ago", "5 min ago", "2 h ago" for a past realtime instant; "in the future" if the clocks
/// disagree.
inline std::string age_text(std::uint64_t now_unix_ns, std::uint64_t then_unix_ns) {
  if (then_unix_ns > now_unix_ns) return "just now";
  const std::uint64_t s = (now_unix_ns - then_unix_ns) / 1'000'000'000;
  if (s < 120) return std::to_string(s) + " s ago";
  if (s < 7200) return std::to_string(s / 60) + " min ago";
  return std::to_string(s / 3600) + " h ago";
}

/// The terminal columns `s` takes: its bytes that do not continue a UTF-8 sequence (every cell the
/// tool prints is ASCII, safe_text, except `top`'s history, whose glyphs are one column each).
inline std::size_t columns_of(std::string_view s) {
  std::size_t n = 0;
  for (const char ch : s) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

/// A table of text whose columns line up: left-aligned text, right-aligned numbers.
class text_table {
public:
  enum class align { left, right };
  struct column {
    std::string title;
    align alignment = align::left;
  };

  explicit text_table(std::vector<column> columns) : columns_(std::move(columns)) {}

  void add_row(std::vector<std::string> cells) {
    cells.resize(columns_.size());
    rows_.push_back(std::move(cells));
  }

  /// The header line then one line per row, each starting with `indent`, columns separated by two
  /// spaces, no trailing spaces.
  std::string render(std::string_view indent = "") const {
    std::vector<std::size_t> width(columns_.size());
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      width[c] = columns_of(columns_[c].title);
      for (const auto& r : rows_) width[c] = std::max(width[c], columns_of(r[c]));
    }
    std::string out;
    auto line = [&](const std::vector<std::string>& cells) {
      std::string l(indent);
      for (std::size_t c = 0; c < columns_.size(); ++c) {
        if (c > 0) l += "  ";
        const std::size_t pad = width[c] - columns_of(cells[c]);
        if (columns_[c].alignment == align::right) l.append(pad, ' ');
        l += cells[c];
        if (columns_[c].alignment == align::left) l.append(pad, ' ');
      }
      l.erase(l.find_last_not_of(' ') + 1);
      out += l + "\n";
    };
    std::vector<std::string> titles;
    for (const auto& c : columns_) titles.push_back(c.title);
    line(titles);
    for (const auto& r : rows_) line(r);
    return out;
  }

private:
  std::vector<column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

} // namespace gpushare::cli
