// SPDX-License-Identifier: Apache-2.0
// The frame every scenario demo's main() shares: line-buffered output, the command line
// (cli.hpp), the mode (mode.hpp), the progress line on a terminal (progress.hpp; off with
// --quiet), then the demo's own body; a failure is reported as "<name>: FAILED: <why>" with exit
// status 1.
#pragma once

#include <cstdio>
#include <exception>

#include "cli.hpp"
#include "mode.hpp"
#include "progress.hpp"

namespace demo {

/// Runs `body(mode, duration_s)` for the demo `name` after parsing its command line (`summary`
/// and `default_duration` make its --help) and detecting the mode. Returns main()'s status.
template <class Body>
int demo_main(int argc, char** argv, const char* name, const char* summary, double default_duration,
              Body&& body) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0); // keep lines in order when piped
  const cli_options cli = parse_cli(argc, argv, summary, default_duration);
  const device_mode mode = detect_mode(cli.simulate);
  progress_line progress(progress_wanted(cli.quiet));
  current_progress().line = &progress;
  progress_stage(name, 0);
  int status = 0;
  try {
    body(mode, cli.duration_s);
  } catch (const std::exception& e) {
    progress.clear();
    std::fprintf(stderr, "%s: FAILED: %s\n", name, e.what());
    status = 1;
  }
  current_progress().line = nullptr;
  return status;
}

} // namespace demo
