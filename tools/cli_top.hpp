// SPDX-License-Identifier: Apache-2.0
// `gpushare top`: the status, refreshed every interval until Ctrl-C (or --iterations).
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

inline int run_top(std::span<const std::string> args) {
  static constexpr flag_spec specs[] = {{"--domain", true},
                                        {"--all-domains", false},
                                        {"--dir", true},
                                        {"--interval", true},
                                        {"--iterations", true}};
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

  struct sigaction sa {};
  sa.sa_handler = top_on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0; // no SA_RESTART: the sleep returns at once
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  const bool tty = ::isatty(STDOUT_FILENO) == 1;
  sample previous = take_sample(domain);
  for (std::uint64_t n = 0; !iterations || n < *iterations; ++n) {
    if (!sleep_unless_interrupted(interval_ns)) break;
    sample now = take_sample(domain);
    std::string frame = "gpushare top  " + clock_text(now.taken_unix_ns) + "  every " +
                        seconds_text(interval_ns) +
                        ", RECENT = share of device time over the last interval (Ctrl-C quits)\n" +
                        status_text(&previous, now, domain);
    // Clear the screen only for a terminal; a pipe or file gets frames one after another.
    write_stdout(tty ? "\x1b[H\x1b[2J" + frame : frame + "\n");
    previous = std::move(now);
  }
  return 0;
}

} // namespace gpushare::cli
