// SPDX-License-Identifier: Apache-2.0
// Memory budget: four jobs whose memory needs add up to 150% of the device. Without gpushare
// each job allocates when it starts, and the jobs that find the device full fail with
// out-of-memory. With gpushare each job first reserves its memory in the shared budget: the
// jobs that do not fit wait until a running job finishes and releases its memory, then run.
//
//   ./build/examples/memory_budget [--duration SECONDS] [--simulate] [--quiet]
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include <harness/context.hpp>
#include <harness/demo_main.hpp>
#include <harness/mode.hpp>
#include <harness/processes.hpp>
#include <harness/report.hpp>
#include <harness/worker.hpp>

namespace {

constexpr int jobs = 4;
constexpr std::uint64_t stagger_ns = 100'000'000; // job k starts k x 100 ms after the first
constexpr std::uint64_t kernel_ns = 2'000'000;

enum class outcome : int { running, finished, out_of_memory, failed };

struct job_record {
  outcome result = outcome::running;
  double waited_ms = 0; ///< in the allocation
  bool blocked = false; ///< its reservation waited for memory another job held (table's count)
  double ran_s = 0;     ///< from the allocation to the end of the job's kernels
  char message[160] = {};
};

struct board {
  demo::start_gate gate;
  std::array<job_record, jobs> job;
};

std::string job_name(int index) { return "job-" + std::to_string(index + 1); }

// One job: allocate its memory, run its kernels (yielding every 5), free the memory.
void job(const demo::run_context& run, board& b, int index, std::uint64_t bytes, int kernels,
         bool with_gpushare) {
  job_record& me = b.job[index];
  demo::worker_device dev(run, with_gpushare ? std::optional(run.options(job_name(index)))
                                             : std::nullopt);
  b.gate.arrive_and_wait();
  demo::sleep_until_ns(b.gate.go_ns.load() + static_cast<std::uint64_t>(index) * stagger_ns);
  const std::uint64_t asked = demo::now_ns();
  try {
    demo::buffer memory = dev.allocate(bytes);
    const std::uint64_t got = demo::now_ns();
    me.waited_ms = static_cast<double>(got - asked) / 1e6;
    me.blocked = dev.reserve_waits() > 0;
    for (int k = 0; k < kernels; ++k) {
      {
        const demo::region r = dev.guard();
        dev.kernel(kernel_ns);
      }
      if (k % 5 == 4) {
        dev.sync();
        dev.yield();
      }
    }
    dev.sync();
    me.ran_s = static_cast<double>(demo::now_ns() - got) / 1e9;
    me.result = outcome::finished;
  } catch (const demo::out_of_memory& e) {
    me.result = outcome::out_of_memory;
    std::snprintf(me.message, sizeof me.message, "%s", e.what());
  } catch (const std::exception& e) {
    me.result = outcome::failed;
    std::snprintf(me.message, sizeof me.message, "%s", e.what());
  }
}

struct phase_summary {
  int finished = 0, out_of_memory = 0, failed = 0, waited = 0;
  double max_wait_ms = 0;
};

phase_summary run_phase(const demo::run_context& run, std::uint64_t bytes, int kernels,
                        bool with_gpushare) {
  demo::shared<board> b;
  {
    demo::children procs;
    for (int i = 0; i < jobs; ++i)
      procs.spawn(job_name(i), [&, i] { job(run, *b, i, bytes, kernels, with_gpushare); });
    procs.open_gate(b->gate, jobs);
    procs.wait_all();
  }
  phase_summary s;
  std::printf("\n  %s:\n", with_gpushare
                               ? "with gpushare (each job reserves its memory in the budget first)"
                               : "without gpushare (each job allocates when it starts)");
  for (int i = 0; i < jobs; ++i) {
    const job_record& j = b->job[i];
    const std::string name = job_name(i);
    switch (j.result) {
    case outcome::finished:
      ++s.finished;
      if (j.blocked) {
        ++s.waited;
        s.max_wait_ms = std::max(s.max_wait_ms, j.waited_ms);
      }
      if (with_gpushare && j.blocked)
        std::printf("    %-6s finished   waited %5.2f s for its memory, then ran %.2f s\n",
                    name.c_str(), j.waited_ms / 1e3, j.ran_s);
      else if (with_gpushare)
        std::printf("    %-6s finished   its memory was free at once, then ran %.2f s\n",
                    name.c_str(), j.ran_s);
      else
        std::printf("    %-6s finished   allocated at once, then ran %.2f s\n", name.c_str(),
                    j.ran_s);
      break;
    case outcome::out_of_memory:
      ++s.out_of_memory;
      std::printf("    %-6s FAILED     %s\n", name.c_str(), j.message);
      break;
    default:
      ++s.failed;
      std::printf("    %-6s ERROR      %s\n", name.c_str(),
                  j.message[0] ? j.message : "(the process ended early)");
      break;
    }
  }
  return s;
}

} // namespace

int main(int argc, char** argv) {
  return demo::demo_main(
      argc, argv, "memory_budget",
      "Jobs asking for 150% of the device's memory, with and without gpushare.", 3,
      [](const demo::device_mode& mode, double duration_s) {
        std::printf("%s\n", demo::mode_line(mode).c_str());
        if (!mode.gpu)
          std::printf("The simulated device's memory is a shared counter with a capacity.\n");
        else if (demo::on_simulated_runtime(mode))
          std::printf(
              "The CUDA runtime here is cudasim, a simulation: its device memory is a counter "
              "that processes\nshare, charged by cudaMalloc (no GPU).\n");
        std::printf("\n");
        demo::run_context run(mode, "memory", 8 * demo::GiB);
        // 3/8 of the device each: two jobs fit, four need 150% of it.
        const std::uint64_t bytes = run.device_memory() / 8 * 3;
        // Two jobs share the device at a time, so each phase takes about two jobs' device time.
        const int kernels = std::max(5, static_cast<int>(duration_s / 6 * 1e9 / kernel_ns));
        std::printf("Memory budget: %d jobs each need %s of device memory (%s in all);\nthe device "
                    "has %s. Each job then runs %d kernels of %.0f ms.\n",
                    jobs, gpushare::format_bytes(bytes).c_str(),
                    gpushare::format_bytes(bytes * jobs).c_str(),
                    gpushare::format_bytes(run.device_memory()).c_str(), kernels,
                    static_cast<double>(kernel_ns) / 1e6);
        const phase_summary without = run_phase(run, bytes, kernels, false);
        const phase_summary with = run_phase(run, bytes, kernels, true);
        std::printf("\n  without gpushare: %d of %d jobs failed with out-of-memory, %d finished\n",
                    without.out_of_memory, jobs, without.finished);
        std::printf("  with gpushare:    %d of %d jobs finished, %d waited for memory (longest "
                    "%.2f s), %d failed\n",
                    with.finished, jobs, with.waited, with.max_wait_ms / 1e3,
                    with.out_of_memory + with.failed);
        std::printf(
            "  (a job waited for memory when its reservation found the memory held by other "
            "jobs and\n  blocked until one released it, as the table counts it; the others "
            "got theirs at once)\n\n");
        demo::result_line("mode", demo::mode_key(mode));
        demo::result_line("memory_budget.jobs", jobs);
        demo::result_line("memory_budget.without_finished", without.finished);
        demo::result_line("memory_budget.without_oom", without.out_of_memory);
        demo::result_line("memory_budget.without_errors", without.failed);
        demo::result_line("memory_budget.with_finished", with.finished);
        demo::result_line("memory_budget.with_failed", with.out_of_memory + with.failed);
        demo::result_line("memory_budget.with_waited", with.waited);
        demo::result_line("memory_budget.with_max_wait_ms", with.max_wait_ms);
      });
}
