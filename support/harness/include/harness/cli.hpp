// SPDX-License-Identifier: Apache-2.0
// The demos' command line: --duration SECONDS, --simulate, --help. A bad option prints what was
// wrong, the usage line and a hint to run --help, and exits with status 2.
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

/// What one demo's options mean (the text of its --help).
struct cli_spec {
  const char* summary = "";     ///< one line: what the demo shows
  double default_duration = 10; ///< seconds
  const char* duration_help = "measure for about this long in all";
  const char* simulate_help = "simulate the GPU on the CPU even if a CUDA device is here";
};

inline void print_usage(std::FILE* to, const char* program, const cli_spec& spec) {
  std::fprintf(to,
               "usage: %s [--duration SECONDS] [--simulate] [--help]\n"
               "%s\n"
               "  --duration SECONDS  %s (default %g)\n"
               "  --simulate          %s\n"
               "  --help              show this text\n",
               program, spec.summary, spec.duration_help, spec.default_duration,
               spec.simulate_help);
}

/// Parses the command line; on --help prints the usage and exits 0. On a bad option prints to
/// stderr "<program>: <what was wrong>", the usage line and "run '<program> --help' for the
/// options", and exits 2.
inline cli_options parse_cli(int argc, char** argv, const cli_spec& spec) {
  cli_options o;
  o.duration_s = spec.default_duration;
  const char* program = argc > 0 ? argv[0] : "demo";
  const auto fail = [&](const std::string& why) {
    std::fprintf(stderr,
                 "%s: %s\nusage: %s [--duration SECONDS] [--simulate] [--help]\nrun '%s --help' "
                 "for the options\n",
                 program, why.c_str(), program, program);
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      print_usage(stdout, program, spec);
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
        fail(std::string("--duration must be a number of seconds from 0.5 to 3600, not '") + value +
             "'");
      o.duration_s = seconds;
    } else {
      fail(std::string("unknown option '") + std::string(arg) + "'");
    }
  }
  return o;
}

inline cli_options parse_cli(int argc, char** argv, const char* summary, double default_duration) {
  cli_spec spec;
  spec.summary = summary;
  spec.default_duration = default_duration;
  return parse_cli(argc, argv, spec);
}

} // namespace demo
