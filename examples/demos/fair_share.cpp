// SPDX-License-Identifier: Apache-2.0
// Fair share: three busy workers with shares 1:1:2, without gpushare, with it, and with a compute
// cap on the share-2 worker; configured against achieved device time
// (demo/fair_share_scenario.hpp).
//
//   ./build/examples/fair_share [--duration SECONDS] [--simulate]
#include <cstdio>
#include <exception>

#include <harness/cli.hpp>
#include <harness/context.hpp>
#include <harness/fair_share_scenario.hpp>
#include <harness/mode.hpp>

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0); // keep lines in order when piped
  const auto cli = demo::parse_cli(
      argc, argv, "Device time split by shares 1:1:2, then with a 30% cap on one worker.", 6);
  const demo::device_mode mode = demo::detect_mode(cli.simulate);
  std::printf("%s\n%s\n", demo::mode_line(mode).c_str(), demo::simulation_note(mode));
  try {
    demo::run_context run(mode, "share");
    demo::fair_share::params p;
    p.phase_ns = static_cast<std::uint64_t>(cli.duration_s / 3 * 1e9);
    demo::fair_share::print_intro(p);
    const auto r = demo::fair_share::run(run, p);
    demo::fair_share::print_report(r, p);
    std::printf("\n");
    demo::result_line("mode", demo::mode_key(mode));
    demo::fair_share::print_results(r, p);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fair_share: FAILED: %s\n", e.what());
    return 1;
  }
  return 0;
}
