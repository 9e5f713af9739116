// SPDX-License-Identifier: Apache-2.0
// Quick start: the smallest complete use of gpushare. Join the device's table with a session,
// reserve memory in the shared budget before allocating it, put work on the device only inside
// scoped_kernel guards, and yield at iteration boundaries. On a GPU it uses the CUDA layer; with
// none it does the same on a simulated device, through the host API.
//
//   ./build/examples/quickstart [--duration SECONDS] [--simulate]
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

#include <gpushare/gpushare.hpp>
#ifdef GPUSHARE_HARNESS_CUDA
#include <gpushare/cuda.hpp>
#endif

#include <harness/cli.hpp>
#include <harness/interrupt_cleanup.hpp>
#include <harness/mode.hpp>
#include <harness/report.hpp>
#include <harness/sim_device.hpp>

using namespace std::chrono_literals;
constexpr std::uint64_t GiB = 1ull << 30;
constexpr std::uint64_t kernel_ns = 2'000'000;

// What the table says about this session at the end.
void report(const gpushare::session_info& i, int steps) {
  std::printf("%d step%s: the table accounted %.1f ms of device time in %llu guard%s; this "
              "session reserved at most %s\n",
              steps, steps == 1 ? "" : "s", static_cast<double>(i.device_ns) / 1e6,
              static_cast<unsigned long long>(i.guards), i.guards == 1 ? "" : "s",
              gpushare::detail::format_bytes(i.peak).c_str());
  demo::result_line("quickstart.steps", steps);
  demo::result_line("quickstart.guards", static_cast<double>(i.guards));
  demo::result_line("quickstart.device_ms", static_cast<double>(i.device_ns) / 1e6);
}

// No GPU: a simulated one, and the host API. The table's key names the device.
void run_simulated(gpushare::session_options o, double seconds) {
  demo::sim_device device; // used by this process only
  device.memory_capacity = 8 * GiB;
  o.capacity = device.memory_capacity; // the creator of the table sets its capacity
  gpushare::session s("simulated-gpu", o);
  gpushare::reservation weights = s.reserve(1 * GiB, 10s);                      // the budget first,
  if (!device.try_allocate(1 * GiB)) throw std::runtime_error("out of memory"); // then memory
  int steps = 0;
  for (const auto end = demo::now_ns() + static_cast<std::uint64_t>(seconds * 1e9);
       demo::now_ns() < end; ++steps) {
    {
      gpushare::scoped_kernel guard(s); // waits for this session's turn
      device.run_kernel(kernel_ns);     // work goes on the device only inside a guard
      device.run_kernel(kernel_ns);
    }
    s.yield(); // an iteration boundary: let a waiting peer run
  }
  report(s.info(), steps);
  device.free(1 * GiB);
} // the reservation is released, then the session leaves the table

#ifdef GPUSHARE_HARNESS_CUDA
// A GPU: a device session (its table is named by the GPU's UUID) and stream guards.
void run_on_gpu(const gpushare::session_options& o, const demo::gpu::busy_kernel_rate& kernel,
                double seconds) {
  gpushare::cuda::device_session s(0, o);
  void* weights = s.malloc(1 * GiB); // reserved in the budget, then cudaMalloc
  cudaStream_t stream = nullptr;
  demo::gpu::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  int steps = 0;
  for (const auto end = demo::now_ns() + static_cast<std::uint64_t>(seconds * 1e9);
       demo::now_ns() < end; ++steps) {
    {
      gpushare::cuda::scoped_kernel guard(s, stream); // waits for this session's turn
      kernel.launch(stream, kernel_ns);               // timed on the GPU by CUDA events
      kernel.launch(stream, kernel_ns);
    }
    demo::gpu::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    s.yield();
  }
  s.synchronize(); // account the last regions
  report(s.info(), steps);
  s.free(weights);
  cudaStreamDestroy(stream);
}
#endif

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const auto cli = demo::parse_cli(
      argc, argv, "The smallest use of gpushare: session, memory budget, guard, yield.", 1);
  const demo::device_mode mode = demo::detect_mode(cli.simulate);
  std::printf("%s\n", demo::mode_line(mode).c_str());

  gpushare::session_options o; // unset fields come from GPUSHARE_* variables, then defaults
  o.name = "quickstart";
  o.priority = gpushare::priority::normal;
  o.share = 1;
  o.domain = "demo" + std::to_string(::getpid()) + "-quick"; // a table of its own; usually unset
  const std::string key = mode.gpu ? mode.uuid : "simulated-gpu";
  const std::string table =
      gpushare::detail::table_object_name(*o.domain, key, gpushare::table_access::user);
  demo::remove_on_interrupt(table);
  int rc = 0;
  try {
#ifdef GPUSHARE_HARNESS_CUDA
    if (mode.gpu) run_on_gpu(o, mode.rate, cli.duration_s);
#endif
    if (!mode.gpu) run_simulated(o, cli.duration_s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quickstart: FAILED: %s\n", e.what());
    rc = 1;
  }
  // The table stays in /dev/shm after its sessions leave; remove it (never while a session lives).
  try {
    (void)gpushare::table::remove(key, o);
  } catch (const gpushare::error& e) {
    std::fprintf(stderr, "quickstart: could not remove table '%s': %s\n", table.c_str(), e.what());
  }
  return rc;
}
