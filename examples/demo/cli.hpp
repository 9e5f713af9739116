// SPDX-License-Identifier: Apache-2.0
// The demos' command line: --duration SECONDS, --simulate, --help. A bad flag prints the usage
// and exits with status 2.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace demo {

struct cli_options {
  double duration_s = 0; ///< about how long the demo measures, in all
  bool simulate = false; ///< use the simulated GPU even when a real one is there
};

inline void print_usage(std::FILE* to, const char* program, const char* summary,
                        double default_duration) {
  std::fprintf(to,
               "usage: %s [--duration SECONDS] [--simulate] [--help]\n"
               "%s\n"
               "  --duration SECONDS  measure for about this long in all (default %g)\n"
               "  --simulate          simulate the GPU on the CPU even if a CUDA device is here\n"
               "  --help              show this text\n",
               program, summary, default_duration);
}

/// Parses the command line; on --help prints the usage and exits 0, on a bad flag prints the
/// usage to stderr and exits 2.
inline cli_options parse_cli(int argc, char** argv, const char* summary, double default_duration) {
  cli_options o;
  o.duration_s = default_duration;
  const char* program = argc > 0 ? argv[0] : "demo";
  const auto fail = [&](const std::string& why) {
    std::fprintf(stderr, "%s: %s\n", program, why.c_str());
    print_usage(stderr, program, summary, default_duration);
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      print_usage(stdout, program, summary, default_duration);
      std::exit(0);
    } else if (arg == "--simulate") {
      o.simulate = true;
    } else if (arg == "--duration" || arg.starts_with("--duration=")) {
      std::string value;
      if (arg == "--duration") {
        if (i + 1 >= argc) fail("--duration needs a number of seconds");
        value = argv[++i];
      } else {
        value = std::string(arg.substr(std::string_view("--duration=").size()));
      }
      char* end = nullptr;
      const double seconds = std::strtod(value.c_str(), &end);
      if (value.empty() || end == nullptr || *end != '\0' || !(seconds >= 0.5) ||
          !(seconds <= 3600))
        fail("--duration must be a number of seconds from 0.5 to 3600, not '" + value + "'");
      o.duration_s = seconds;
    } else {
      fail("unknown option '" + std::string(arg) + "'");
    }
  }
  return o;
}

} // namespace demo
