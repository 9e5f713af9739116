// SPDX-License-Identifier: Apache-2.0
// `gpushare top`: the status, refreshed every interval until Ctrl-C (or --iterations), with each
// session's share over the last minute, fitted to the terminal's width (cli_top_history.hpp).
#pragma once

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "cli_args.hpp"
#include "cli_sample.hpp"
#include "cli_status.hpp"
#include "cli_top_history.hpp"
#include "cli_usage.hpp"

namespace gpushare::cli {

inline volatile std::sig_atomic_t top_interrupted = 0;

extern "C" inline void top_on_signal(int) { top_interrupted = 1; }

/// Sleeps `ns` unless SIGINT or SIGTERM arrives first; returns false if one did.
inline bool sleep_unless_interrupted(std::uint64_t ns) {
  timespec left{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  while (!top_interrupted) {
    if (::nanosleep(&left, &left) == 0) return !top_interrupted;
    if (errno != EINTR) return !top_interrupted;
  }
  return false;
}

/// "14:03:27" in local time.
inline std::string clock_text(std::uint64_t unix_ns) {
  const time_t t = static_cast<time_t>(unix_ns / 1'000'000'000);
  tm local{};
  char buf[16] = "";
  if (::localtime_r(&t, &local) != nullptr) std::strftime(buf, sizeof buf, "%H:%M:%S", &local);
  return buf;
}

/// How `top` draws a frame.
struct top_view {
  std::optional<std::size_t> width; ///< fit every line to it; nullopt: no limit
  bool utf8 = true;                 ///< the history's glyphs
};

/// The width of the history in the full view: one glyph per 2 s of the minute.
inline constexpr std::size_t full_history_width = 30;

/// The compact state of a session: running, waiting or idle, or "stuck?" for one in a guard far
/// longer than its quanta.
inline std::string short_state(const session_info& i) {
  if (guard_stuck(i)) return "stuck?";
  const std::string s = state_text(i);
  return s.substr(0, s.find(','));
}

/// The compact view of one readable table for a terminal `width` columns wide: a line of facts,
/// then NAME, STATE, SHARE, RECENT and the minute, the names cut to leave the history room.
inline std::string compact_table(const sample* before, const table_reading& t,
                                 const share_history& h, const top_view& v, std::size_t width) {
  const table_snapshot& s = *t.snapshot;
  std::string holder = "none";
  for (const auto& i : s.sessions)
    if (i.holds_device) holder = safe_text(i.name);
  std::string out = safe_text(s.object_name) + "  holder " + holder + ", reserved " +
                    bytes_text(s.reserved_total) + " of " + bytes_text(s.capacity) + "\n";
  if (s.sessions.empty()) return out + "  no live sessions\n";
  std::size_t longest = 4;
  for (const auto& i : s.sessions) longest = std::max(longest, columns_of(safe_text(i.name)));
  constexpr std::size_t fixed = 2 + 2 + 7 + 2 + 5 + 2 + 6 + 2; // indent, STATE, SHARE, RECENT
  std::size_t name_w = std::min<std::size_t>(longest, 20);
  if (width < fixed + name_w + 10)
    name_w = std::max<std::size_t>(4, width - std::min(width, fixed + 10));
  const std::size_t hist_w =
      std::clamp<std::size_t>(width - std::min(width, fixed + name_w), 4, 60);
  const recent_usage recent = recent_device_usage(find_previous(before, t), t);
  text_table tt({{"NAME", text_table::align::left},
                 {"STATE", text_table::align::left},
                 {"SHARE", text_table::align::right},
                 {"RECENT", text_table::align::right},
                 {hist_w >= 11  ? "LAST MINUTE"
                  : hist_w >= 6 ? "MINUTE"
                                : "MIN",
                  text_table::align::left}});
  for (std::size_t k = 0; k < s.sessions.size(); ++k) {
    const session_info& i = s.sessions[k];
    std::string name = safe_text(i.name);
    if (name.size() > name_w) name = name.substr(0, name_w - 1) + "~";
    tt.add_row({name, short_state(i), std::to_string(i.share),
                recent.percent[k] ? percent_text(*recent.percent[k]) : std::string("-"),
                sparkline(history_buckets(h.of(t, i), t.taken_ns, hist_w), v.utf8)});
  }
  return out + tt.render("  ");
}

/// One frame: the full status with the LAST MINUTE column, or, where a line of it would not fit
/// the width, the compact view; every line then fitted to the width.
inline std::string top_frame(const sample* before, const sample& now, const domain_choice& domain,
                             const share_history& h, const top_view& v) {
  const extra_column minute{
      "LAST MINUTE", [&](const table_reading& t, std::size_t k) {
        const session_info& i = t.snapshot->sessions[k];
        return sparkline(history_buckets(h.of(t, i), t.taken_ns, full_history_width), v.utf8);
      }};
  std::string text = status_text(before, now, domain, &minute);
  if (v.width && widest_line(text) > *v.width && !now.tables.empty()) {
    text = status_text(before, now, domain, nullptr);
    text = text.substr(0, text.find('\n') + 1); // the counts line
    for (const auto& t : now.tables)
      text += "\n" + (t.snapshot ? compact_table(before, t, h, v, *v.width)
                                 : safe_text(t.entry.object_name) + "  " +
                                       safe_text(unreadable_text(t)) + "\n");
  }
  return v.width ? fit_lines(text, *v.width) : text;
}

inline int run_top(std::span<const std::string> args) {
  static constexpr flag_spec specs[] = {
      {"--domain", true},     {"--all-domains", false}, {"--dir", true},   {"--interval", true},
      {"--iterations", true}, {"--width", true},        {"--ascii", false}};
  const parsed_args a = parse_command_line(args, specs, 0);
  if (a.help) {
    write_stdout(std::string(top_usage));
    return 0;
  }
  const domain_choice domain = domain_option(a);
  const std::uint64_t interval_ns =
      a.value("--interval") ? parse_interval_ns("--interval", *a.value("--interval"), top_interval)
                            : 1'000'000'000;
  std::optional<std::uint64_t> iterations;
  if (const auto n = a.value("--iterations"))
    iterations = parse_count("--iterations", *n, 1, 1'000'000'000);
  std::optional<std::size_t> width;
  if (const auto w = a.value("--width"))
    width = static_cast<std::size_t>(parse_count("--width", *w, 20, 10'000));
  // Block glyphs only for a terminal of a UTF-8 locale: a pipe or file gets ASCII only, as every
  // other output of the tool (scripts, and the trust tests, expect no byte outside it).
  const bool tty = ::isatty(STDOUT_FILENO) == 1;
  const top_view view{frame_width(width), !a.has("--ascii") && tty && locale_is_utf8()};

  struct sigaction sa {};
  sa.sa_handler = top_on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0; // no SA_RESTART: the sleep returns at once
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  share_history history;
  sample previous = take_sample(domain);
  for (std::uint64_t n = 0; !iterations || n < *iterations; ++n) {
    if (!sleep_unless_interrupted(interval_ns)) break;
    sample now = take_sample(domain);
    history.record(&previous, now);
    top_view v = view;
    if (!width) v.width = frame_width(std::nullopt); // the terminal may have been resized
    std::string frame = "gpushare top  " + clock_text(now.taken_unix_ns) + "  every " +
                        seconds_text(interval_ns) +
                        "; RECENT: share of device time over the last interval, LAST MINUTE: "
                        "over the last minute (Ctrl-C quits)\n" +
                        top_frame(&previous, now, domain, history, v);
    if (v.width) frame = fit_lines(frame, *v.width);
    // Clear the screen only for a terminal; a pipe or file gets frames one after another.
    write_stdout(tty ? "\x1b[H\x1b[2J" + frame : frame + "\n");
    previous = std::move(now);
  }
  return 0;
}

} // namespace gpushare::cli
