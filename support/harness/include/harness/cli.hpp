// SPDX-License-Identifier: Apache-2.0
// The demos' command line: --duration SECONDS, --simulate, --quiet, --help, on the harness's option
// table (options.hpp). A bad option prints what was wrong, the usage line and a hint to run --help,
// and exits with status 2.
#pragma once

#include "options.hpp"

namespace demo {

struct cli_options {
  double duration_s = 0; ///< about how long the demo measures, in all
  bool simulate = false; ///< use the simulated GPU even when a real one is there
  bool quiet = false;    ///< no progress line on the terminal (results are still printed)
};

/// What one demo's options mean (the text of its --help).
struct cli_spec {
  const char* summary = "";     ///< one line: what the demo shows
  double default_duration = 10; ///< seconds
  const char* duration_help = "measure for about this long in all";
  const char* simulate_help = "simulate the GPU on the CPU even if a CUDA device is here";
  const char* quiet_help = "no progress line on the terminal (results are still printed)";
};

/// Parses the command line (harness/options.hpp); on --help prints the usage and exits 0. On a
/// bad option prints to stderr "<program>: <what was wrong>", the usage line and "run '<program>
/// --help' for the options", and exits 2.
inline cli_options parse_cli(int argc, char** argv, const cli_spec& spec) {
  using opt = option<cli_options>;
  const opt options[] = {
      opt("--duration", "SECONDS", &cli_options::duration_s, spec.duration_help)
          .range(0.5, 3600)
          .noun("number of seconds"),
      opt("--simulate", "", &cli_options::simulate, spec.simulate_help),
      opt("--quiet", "", &cli_options::quiet, spec.quiet_help),
  };
  cli_options o;
  o.duration_s = spec.default_duration;
  command_line<cli_options> cl;
  cl.summary = spec.summary;
  cl.options = options;
  parse(cl, argc, argv, o);
  return o;
}

inline cli_options parse_cli(int argc, char** argv, const char* summary, double default_duration) {
  cli_spec spec;
  spec.summary = summary;
  spec.default_duration = default_duration;
  return parse_cli(argc, argv, spec);
}

} // namespace demo
