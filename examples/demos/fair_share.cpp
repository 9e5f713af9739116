// SPDX-License-Identifier: Apache-2.0
// Fair share: three busy workers with shares 1:1:2, without gpushare, with it, and with a compute
// cap on the share-2 worker; configured against achieved device time
// (harness/fair_share_scenario.hpp).
//
//   ./build/examples/fair_share [--duration SECONDS] [--simulate] [--quiet]
#include <cstdio>
#include <exception>

#include <harness/context.hpp>
#include <harness/demo_main.hpp>
#include <harness/fair_share_scenario.hpp>
#include <harness/mode.hpp>

int main(int argc, char** argv) {
  return demo::demo_main(argc, argv, "fair_share",
                         "Device time split by shares 1:1:2, then with a 30% cap on one worker.", 6,
                         [](const demo::device_mode& mode, double duration_s) {
                           std::printf("%s\n%s\n", demo::mode_line(mode).c_str(),
                                       demo::simulation_note(mode));
                           demo::run_context run(mode, "share");
                           demo::fair_share::params p;
                           p.phase_ns = static_cast<std::uint64_t>(duration_s / 3 * 1e9);
                           demo::fair_share::print_intro(p);
                           const auto r = demo::fair_share::run(run, p);
                           demo::fair_share::print_report(r, p);
                           std::printf("\n");
                           demo::result_line("mode", demo::mode_key(mode));
                           demo::fair_share::print_results(r, p);
                         });
}
