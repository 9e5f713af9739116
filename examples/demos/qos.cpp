// SPDX-License-Identifier: Apache-2.0
// QoS: a high-priority inference process next to a low-priority training process, measured
// alone, co-located without gpushare, and co-located with gpushare (harness/qos_scenario.hpp).
//
//   ./build/examples/qos [--duration SECONDS] [--simulate] [--quiet]
#include <cstdio>
#include <exception>

#include <harness/context.hpp>
#include <harness/demo_main.hpp>
#include <harness/mode.hpp>
#include <harness/qos_scenario.hpp>

int main(int argc, char** argv) {
  return demo::demo_main(
      argc, argv, "qos", "Inference latency and training throughput, with and without gpushare.",
      12, [](const demo::device_mode& mode, double duration_s) {
        std::printf("%s\n%s\n", demo::mode_line(mode).c_str(), demo::simulation_note(mode));
        demo::run_context run(mode, "qos");
        demo::qos::params p;
        p.phase_ns = static_cast<std::uint64_t>(duration_s / 4 * 1e9);
        demo::qos::print_intro(p);
        const auto r = demo::qos::run(run, p);
        demo::qos::print_report(r);
        std::printf("\n");
        demo::result_line("mode", demo::mode_key(mode));
        demo::qos::print_results(r);
      });
}
