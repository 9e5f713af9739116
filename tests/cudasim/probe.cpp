// SPDX-License-Identifier: Apache-2.0
// A process the simulator tests start (fork and exec, with the environment a test chooses). One
// command per run; it prints "key=value" lines on stdout, then "done".
//
//   probe devices            count, then per device: uuid, name, memory (or the error's name)
//   probe hold <MiB>         cudaSetDevice(0), cudaMalloc <MiB>, prints "held", sleeps until
//                            killed or stdin closes, then exits normally
//   probe run <ms> <kernel_us> <start_unix_ms>
//                            waits until start_unix_ms, runs kernels of kernel_us for ms of
//                            device time on one stream, synchronises; prints wall_ms, switches,
//                            and t0_ns and end_ns (CLOCK_MONOTONIC, the same clock in every
//                            process: when it launched and when its synchronisation returned),
//                            reached_ns and completed_ns (the same clock: when its stream reached
//                            the first kernel and completed the last), and cpu_ms, the process's
//                            CPU time between launch and end
//   probe sticky             launches, synchronises, then tries more calls; prints each result
//   probe allocs <n> <MiB>   n cudaMallocs of MiB each; prints each result
//   probe setdevice          times cudaSetDevice(0): prints set_ms
//   probe named [--model P] NAME...
//                            registers up to 4 kernels under these device names (sim_named.hpp),
//                            with --model declares a by-name model of P lasting 1234 ns; prints
//                            init (cudaSetDevice's result) and ns<i>, each kernel's device time
#include <cuda_runtime_api.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "sim_kernels.hpp"
#include "sim_named.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

std::uint64_t unix_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

/// steady_clock is CLOCK_MONOTONIC on Linux: comparable between processes.
std::uint64_t mono_ns(clock_type::time_point t) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

/// User and system CPU time of the whole process, in milliseconds.
double cpu_ms() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  const auto ms = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3;
  };
  return ms(u.ru_utime) + ms(u.ru_stime);
}

void out(const std::string& key, const std::string& value) {
  std::printf("%s=%s\n", key.c_str(), value.c_str());
  std::fflush(stdout);
}

std::string uuid_text(const cudaUUID_t& u) {
  char text[40];
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  std::snprintf(text, sizeof text,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
  return text;
}

/// `run <ms> <kernel_us> <start_unix_ms>`. Host functions before and after the kernels note
/// when the stream reached them: on the simulator, just before the first kernel reached the
/// device and just after the last one completed.
int run_kernels(char** argv) {
  const std::uint64_t total_ns = std::strtoull(argv[2], nullptr, 10) * 1'000'000;
  const std::uint64_t kernel_ns = std::strtoull(argv[3], nullptr, 10) * 1000;
  const std::uint64_t start = std::strtoull(argv[4], nullptr, 10);
  cudaStream_t s = nullptr;
  if (cudaSetDevice(0) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess) return 1;
  out("ready", "1");
  while (unix_ms() < start) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const double cpu0 = cpu_ms();
  const auto t0 = clock_type::now();
  std::uint64_t reached = 0, completed = 0;
  const cudaHostFn_t stamp = [](void* at) {
    *static_cast<std::uint64_t*>(at) = mono_ns(clock_type::now());
  };
  if (cudaLaunchHostFunc(s, stamp, &reached) != cudaSuccess) return 1;
  for (std::uint64_t done = 0; done < total_ns; done += kernel_ns)
    if (simtest::launch(s, kernel_ns) != cudaSuccess) return 1;
  if (cudaLaunchHostFunc(s, stamp, &completed) != cudaSuccess) return 1;
  if (cudaStreamSynchronize(s) != cudaSuccess) return 1;
  const auto end = clock_type::now();
  const auto wall = std::chrono::duration_cast<std::chrono::milliseconds>(end - t0).count();
  out("wall_ms", std::to_string(wall));
  out("t0_ns", std::to_string(mono_ns(t0)));
  out("end_ns", std::to_string(mono_ns(end)));
  out("reached_ns", std::to_string(reached));
  out("completed_ns", std::to_string(completed));
  out("cpu_ms", std::to_string(cpu_ms() - cpu0));
  out("switches", std::to_string(cudasim::stats().context_switches));
  return 0;
}

/// `named [--model P] NAME...` (see the top of the file).
int run_named(int argc, char** argv) {
  int first = 2;
  if (argc > 3 && std::string(argv[2]) == "--model") {
    const bool declared = cudasim::set_kernel_model_by_name<int, float*>(
        argv[3], [](const cudasimLaunch*) { return 1234ull; });
    out("model", declared ? "1" : "0");
    first = 4;
  }
  void (*const stubs[])(int, float*) = {simtest::named_stub<0>, simtest::named_stub<1>,
                                        simtest::named_stub<2>, simtest::named_stub<3>};
  std::vector<const void*> kernels;
  for (int i = first; i < argc && kernels.size() < 4; ++i)
    kernels.push_back(simtest::register_named(argv[i], stubs[kernels.size()]));
  out("init", cudaGetErrorName(cudaSetDevice(0)));
  float sink = 0;
  for (std::size_t i = 0; i < kernels.size(); ++i)
    out("ns" + std::to_string(i), std::to_string(simtest::timed_launch(kernels[i], 1, &sink)));
  return 0;
}

int run(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "devices") {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    out("count_error", cudaGetErrorName(e));
    out("count", std::to_string(n));
    for (int i = 0; i < n; ++i) {
      cudaDeviceProp p{};
      if (cudaGetDeviceProperties(&p, i) != cudaSuccess) return 1;
      out("uuid" + std::to_string(i), uuid_text(p.uuid));
      out("name" + std::to_string(i), p.name);
      out("memory" + std::to_string(i), std::to_string(p.totalGlobalMem));
    }
  } else if (cmd == "hold" && argc == 3) {
    void* p = nullptr;
    if (cudaSetDevice(0) != cudaSuccess) return 1;
    const cudaError_t e = cudaMalloc(&p, std::strtoull(argv[2], nullptr, 10) << 20);
    out("malloc", cudaGetErrorName(e));
    out("held", "1");
    char c;
    while (::read(STDIN_FILENO, &c, 1) > 0) {
    }
  } else if (cmd == "run" && argc == 5) {
    if (run_kernels(argv) != 0) return 1;
  } else if (cmd == "sticky") {
    cudaStream_t s = nullptr;
    if (cudaStreamCreate(&s) != cudaSuccess) return 1;
    out("launch", cudaGetErrorName(simtest::launch(s, 1000)));
    out("sync", cudaGetErrorName(cudaStreamSynchronize(s)));
    void* p = nullptr;
    out("malloc", cudaGetErrorName(cudaMalloc(&p, 1024)));
    out("last1", cudaGetErrorName(cudaGetLastError()));
    out("last2", cudaGetErrorName(cudaGetLastError()));
  } else if (cmd == "allocs" && argc == 4) {
    const int n = std::atoi(argv[2]);
    const std::size_t bytes = std::strtoull(argv[3], nullptr, 10) << 20;
    for (int i = 0; i < n; ++i) {
      void* p = nullptr;
      out("alloc" + std::to_string(i), cudaGetErrorName(cudaMalloc(&p, bytes)));
    }
  } else if (cmd == "named" && argc > 2) {
    if (run_named(argc, argv) != 0) return 1;
  } else if (cmd == "setdevice") {
    const auto t0 = clock_type::now();
    const cudaError_t e = cudaSetDevice(0);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t0).count();
    out("set", cudaGetErrorName(e));
    out("set_ms", std::to_string(ms));
  } else {
    std::fprintf(stderr, "usage: see the comment at the top of tests/cudasim/probe.cpp\n");
    return 2;
  }
  out("done", "1");
  return 0;
}

} // namespace

int main(int argc, char** argv) { return run(argc, argv); }
