// SPDX-License-Identifier: Apache-2.0
// `gpushare top`'s history: each session's share of device time over the last minute, drawn as a
// sparkline, and the frame fitted to the terminal's width (docs/cli.md, "gpushare top").
#pragma once

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "cli_format.hpp"
#include "cli_sample.hpp"

namespace gpushare::cli {

/// How far back the history reaches.
inline constexpr std::uint64_t history_span_ns = 60'000'000'000;

/// One refresh's figure for a session: its share of device time (%) over [start, end]
/// (monotonic ns, the two samples' times).
struct share_point {
  std::uint64_t start_ns = 0, end_ns = 0;
  double percent = 0;
};

/// Who a history belongs to: a session in a reused slot (another generation or process) starts a
/// fresh one.
using history_key = std::tuple<std::string, std::uint32_t, std::uint32_t, std::int32_t>;

inline history_key key_of(const table_reading& t, const session_info& i) {
  return {t.entry.object_name, i.id.slot, i.id.generation, i.pid};
}

/// The recent device share of every live session, refresh by refresh, over the last minute.
class share_history {
public:
  /// Adds what each session of `now` used since `before` (a session new in `now` has no figure
  /// yet); forgets sessions that are gone and points older than the span.
  void record(const sample* before, const sample& now) {
    std::map<history_key, std::deque<share_point>> kept;
    for (const table_reading& t : now.tables) {
      if (!t.snapshot) continue;
      const recent_usage recent = recent_device_usage(find_previous(before, t), t);
      for (std::size_t k = 0; k < t.snapshot->sessions.size(); ++k) {
        const history_key key = key_of(t, t.snapshot->sessions[k]);
        std::deque<share_point> points;
        if (auto it = points_.find(key); it != points_.end()) points = std::move(it->second);
        if (recent.percent[k] && recent.window_ns)
          points.push_back({t.taken_ns - *recent.window_ns, t.taken_ns, *recent.percent[k]});
        while (!points.empty() && points.front().end_ns + history_span_ns < t.taken_ns)
          points.pop_front();
        kept.emplace(key, std::move(points));
      }
    }
    points_ = std::move(kept);
  }

  /// The points of one session (empty when it has none).
  const std::deque<share_point>& of(const table_reading& t, const session_info& i) const {
    static const std::deque<share_point> none;
    const auto it = points_.find(key_of(t, i));
    return it == points_.end() ? none : it->second;
  }

  std::size_t sessions() const { return points_.size(); }

private:
  std::map<history_key, std::deque<share_point>> points_;
};

/// The share in each of `width` equal buckets of the minute before `now_ns`, oldest first: the
/// time-weighted mean of the points that cover the bucket, nullopt where none does.
inline std::vector<std::optional<double>> history_buckets(const std::deque<share_point>& points,
                                                          std::uint64_t now_ns, std::size_t width) {
  std::vector<std::optional<double>> out(width);
  if (width == 0) return out;
  const double span = static_cast<double>(history_span_ns);
  const double begin = static_cast<double>(now_ns) - span, step = span / static_cast<double>(width);
  for (std::size_t b = 0; b < width; ++b) {
    const double lo = begin + step * static_cast<double>(b), hi = lo + step;
    double covered = 0, sum = 0;
    for (const share_point& p : points) {
      const double overlap = std::min(hi, static_cast<double>(p.end_ns)) -
                             std::max(lo, static_cast<double>(p.start_ns));
      if (overlap <= 0 || !std::isfinite(p.percent)) continue;
      covered += overlap;
      sum += overlap * std::clamp(p.percent, 0.0, 100.0);
    }
    if (covered > 0) out[b] = sum / covered;
  }
  return out;
}

/// One glyph per value, eight levels of the whole device (not scaled to the values, so that
/// sessions compare): up to 12.5% (idle too) the lowest, over 87.5% the full block; a space where
/// there is no value. `utf8`: the block elements U+2581..U+2588; otherwise "_.:-=+*#".
inline std::string sparkline(const std::vector<std::optional<double>>& values, bool utf8) {
  static constexpr const char* blocks[] = {"\u2581", "\u2582", "\u2583", "\u2584",
                                           "\u2585", "\u2586", "\u2587", "\u2588"};
  static constexpr char ascii[] = "_.:-=+*#";
  std::string out;
  for (const auto& v : values) {
    if (!v || !std::isfinite(*v)) {
      out += ' ';
      continue;
    }
    const double level = std::ceil(std::clamp(*v, 0.0, 100.0) / 12.5) - 1;
    const auto i = static_cast<std::size_t>(std::clamp(level, 0.0, 7.0));
    if (utf8)
      out += blocks[i];
    else
      out += ascii[i];
  }
  return out;
}

/// Whether the locale's character set is UTF-8 (LC_ALL, else LC_CTYPE, else LANG, as setlocale
/// reads them).
inline bool locale_is_utf8() {
  const char* chosen = nullptr;
  for (const char* name : {"LC_ALL", "LC_CTYPE", "LANG"})
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') {
      chosen = v;
      break;
    }
  if (chosen == nullptr) return false;
  std::string lower(chosen);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find("utf-8") != std::string::npos || lower.find("utf8") != std::string::npos;
}

/// The width to fit: `--width`, else the terminal's (stdout), else $COLUMNS, else nullopt (no
/// limit: a pipe or file gets whole lines).
inline std::optional<std::size_t> frame_width(std::optional<std::size_t> option) {
  if (option) return option;
  winsize ws{};
  if (::isatty(STDOUT_FILENO) == 1 && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS"); c != nullptr) {
    char* end = nullptr;
    const long n = std::strtol(c, &end, 10);
    if (end != c && *end == '\0' && n >= 20 && n <= 10000) return static_cast<std::size_t>(n);
  }
  return std::nullopt;
}

/// The widest line of `text`, in terminal columns.
inline std::size_t widest_line(std::string_view text) {
  std::size_t widest = 0;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    widest = std::max(widest, columns_of(text.substr(at, end - at)));
    at = end + 1;
  }
  return widest;
}

/// `text` with every line cut to `width` columns, a cut line ending in '>' (never splitting a
/// UTF-8 sequence).
inline std::string fit_lines(std::string_view text, std::size_t width) {
  width = std::max<std::size_t>(width, 2);
  std::string out;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    if (columns_of(line) <= width) {
      out += line;
    } else {
      std::size_t cols = 0, i = 0;
      for (; i < line.size(); ++i) {
        const bool starts = (static_cast<unsigned char>(line[i]) & 0xC0) != 0x80;
        if (starts && ++cols > width - 1) break;
      }
      out.append(line.substr(0, i)).append(">");
    }
    if (end < text.size()) out += '\n';
    at = end + 1;
  }
  return out;
}

} // namespace gpushare::cli
