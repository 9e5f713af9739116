// SPDX-License-Identifier: Apache-2.0
// The showcase: the QoS scenario, then the fair-share scenario, with a combined report. It is
// what README.md's first command runs.
//
//   ./build/examples/showcase [--duration SECONDS] [--simulate] [--quiet]
#include <cstdio>
#include <exception>

#include <harness/context.hpp>
#include <harness/demo_main.hpp>
#include <harness/fair_share_scenario.hpp>
#include <harness/mode.hpp>
#include <harness/qos_scenario.hpp>
#include <harness/report.hpp>

int main(int argc, char** argv) {
  return demo::demo_main(
      argc, argv, "showcase",
      "Latency protection and fair sharing of one device, with and without gpushare.", 12,
      [](const demo::device_mode& mode, double duration_s) {
        std::printf("%s\n", demo::mode_line(mode).c_str());
        std::printf("gpushare showcase: processes sharing one device, with and without gpushare "
                    "(about %.0f s)\n%s\n",
                    duration_s, demo::simulation_note(mode));
        demo::qos::params qp; // 60% of the time: 4 phases
        qp.phase_ns = static_cast<std::uint64_t>(duration_s * 0.6 / 4 * 1e9);
        demo::fair_share::params fp; // 40%: 3 phases
        fp.phase_ns = static_cast<std::uint64_t>(duration_s * 0.4 / 3 * 1e9);

        const double fair_s = static_cast<double>(fp.phase_ns) / 1e9 * 3;
        demo::progress_stage("showcase: [1/2] QoS", fair_s);
        std::printf("[1/2] ");
        demo::qos::print_intro(qp);
        demo::qos::result q;
        {
          demo::run_context run(mode, "qos");
          q = demo::qos::run(run, qp);
        }
        demo::qos::print_report(q);

        demo::progress_stage("showcase: [2/2] fair share", 0);
        std::printf("\n[2/2] ");
        demo::fair_share::print_intro(fp);
        demo::fair_share::result f;
        {
          demo::run_context run(mode, "share");
          f = demo::fair_share::run(run, fp);
        }
        demo::fair_share::print_report(f, fp);

        std::printf("\nSummary (%s; every figure above was measured in this run)\n",
                    demo::mode_title(mode));
        if (q.trust.trustworthy) {
          std::printf(
              "  latency:    inference p99 with gpushare %.2f ms, %.2fx its p99 alone (%.2f ms);"
              "\n              without gpushare %.2f ms, which grows with the length of the "
              "run\n",
              q.with_gpushare.p99_ms,
              demo::qos::ratio(q.with_gpushare.p99_ms, q.inference_alone.p99_ms),
              q.inference_alone.p99_ms, q.without_gpushare.p99_ms);
          std::printf(
              "  throughput: training kept %.0f%% of its solo throughput with gpushare (%.0f%% "
              "without)\n",
              100 *
                  demo::qos::ratio(q.with_gpushare.training_per_s, q.training_alone.training_per_s),
              100 * demo::qos::ratio(q.without_gpushare.training_per_s,
                                     q.training_alone.training_per_s));
        } else {
          std::printf(
              "  latency, throughput: no findings: the QoS figures are NOT trustworthy (see "
              "the warning above)\n");
        }
        if (f.trust.trustworthy) {
          std::printf(
              "  shares:     1:1:2 -> %.1f / %.1f / %.1f %% with gpushare (%.1f / %.1f / %.1f "
              "%% without)\n",
              f.with_shares.achieved[0], f.with_shares.achieved[1], f.with_shares.achieved[2],
              f.without_gpushare.achieved[0], f.without_gpushare.achieved[1],
              f.without_gpushare.achieved[2]);
          std::printf("  cap:        worker-c, capped at %.0f%%, used %.1f%% of the wall time\n",
                      static_cast<double>(fp.cap_ppm) / 10'000, f.with_cap.capped_of_wall);
        } else {
          std::printf(
              "  shares, cap: no findings: the fair-share figures are NOT trustworthy (see the "
              "warning above)\n");
        }
        std::printf("  (memory budgets: the memory_budget demo)\n\n");
        demo::result_line("mode", demo::mode_key(mode));
        demo::qos::print_results(q);
        demo::fair_share::print_results(f, fp);
      });
}
