// SPDX-License-Identifier: Apache-2.0
// QoS: a high-priority inference process next to a low-priority training process, measured
// alone, co-located without gpushare, and co-located with gpushare (demo/qos_scenario.hpp).
//
//   ./build/examples/qos [--duration SECONDS] [--simulate]
#include <cstdio>
#include <exception>

#include <harness/cli.hpp>
#include <harness/context.hpp>
#include <harness/mode.hpp>
#include <harness/qos_scenario.hpp>

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0); // keep lines in order when piped
  const auto cli = demo::parse_cli(
      argc, argv, "Inference latency and training throughput, with and without gpushare.", 12);
  const demo::device_mode mode = demo::detect_mode(cli.simulate);
  std::printf("%s\n%s\n", demo::mode_line(mode).c_str(), demo::simulation_note(mode));
  try {
    demo::run_context run(mode, "qos");
    demo::qos::params p;
    p.phase_ns = static_cast<std::uint64_t>(cli.duration_s / 4 * 1e9);
    demo::qos::print_intro(p);
    const auto r = demo::qos::run(run, p);
    demo::qos::print_report(r);
    std::printf("\n");
    demo::result_line("mode", demo::mode_key(mode));
    demo::qos::print_results(r);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qos: FAILED: %s\n", e.what());
    return 1;
  }
  return 0;
}
