// SPDX-License-Identifier: Apache-2.0
// A process the CUDA tests start (fork + exec, never a bare fork: a CUDA context does not survive
// fork). One mode per run; it prints one result line on stdout.
//
//   cuda_worker nodevice
//       opens a device session; prints "no_device <message>" and exits 0 if that fails with
//       errc::no_device, else exits 1.
//   cuda_worker hold <domain> <capacity> <bytes>
//       mallocs <bytes> through a device session (table capacity <capacity> if it creates the
//       table), prints "held", then sleeps until killed.
//   cuda_worker try <domain> <capacity> <bytes> <timeout_ms>
//       mallocs <bytes> waiting up to <timeout_ms>; prints "ok" (exit 0) or "error <errc>
//       <message>" (exit 2).
//   cuda_worker spin <domain> <share> <start_unix_ms> <end_unix_ms> <kernel_us>
//       from start to end: guarded kernels of <kernel_us> each, yield between them; prints
//       "device_ns <n> guards <g>" for the whole run.
//   cuda_worker overhead <domain> <device> <start_unix_ms> <until_unix_ms>
//       at start_unix_ms, opens a device session on <device> (its context overhead measured);
//       prints "overhead <bytes> <method>", keeps the session until until_unix_ms, exits 0.
//   cuda_worker mark <domain> <kernel_ms> <delay_ms>
//       opens a high-priority device session, runs 20 guards of 100 us kernels (a short average
//       region), prints "ready", sleeps <delay_ms>, then runs one guard around a <kernel_ms>
//       kernel, which its end leaves in flight and marks in the table; prints "marked <regions
//       in flight> <host functions launched by that guard>", then sleeps until killed (the work
//       is never waited for).
//   cuda_worker identity <domain>
//       opens a device session on device 0; prints "uuid <device_info::uuid>", "key <the table
//       snapshot's key>", "table <table name>", "nvml_knows <0|1>" (NVML finds the device by
//       that UUID) and "nvml <UUID of every GPU NVML lists and of its MIG devices,
//       comma-separated>"; removes the table, exits 0.
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <gpushare/cuda.hpp>

#include "../kernels.hpp"
#include "../nvml_util.hpp"

namespace {

std::uint64_t unix_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

gpushare::cuda::device_session open(const std::string& domain, std::uint64_t capacity,
                                    std::uint32_t share = 1) {
  gpushare::session_options o;
  o.domain = domain;
  o.name = "worker-" + std::to_string(::getpid());
  if (capacity) o.capacity = capacity;
  o.share = share;
  return gpushare::cuda::device_session(0, o);
}

int run(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "nodevice") {
    try {
      gpushare::cuda::device_session s(0);
    } catch (const gpushare::error& e) {
      std::printf("%s %s\n", e.code() == gpushare::errc::no_device ? "no_device" : "other",
                  e.what());
      return e.code() == gpushare::errc::no_device ? 0 : 1;
    }
    std::printf("opened\n");
    return 1;
  }
  if (mode == "hold" && argc == 5) {
    auto s = open(argv[2], std::strtoull(argv[3], nullptr, 10));
    void* p = s.malloc(std::strtoull(argv[4], nullptr, 10));
    (void)p;
    std::printf("held\n");
    std::fflush(stdout);
    for (;;) ::pause();
  }
  if (mode == "try" && argc == 6) {
    gpushare::session_options o;
    o.domain = argv[2];
    o.capacity = std::strtoull(argv[3], nullptr, 10);
    gpushare::cuda::device_options d;
    d.allocation_timeout = std::chrono::milliseconds(std::strtoull(argv[5], nullptr, 10));
    gpushare::cuda::device_session s(0, o, d);
    try {
      void* p = s.malloc(std::strtoull(argv[4], nullptr, 10));
      s.free(p);
      std::printf("ok\n");
      return 0;
    } catch (const gpushare::error& e) {
      std::printf("error %d %s\n", static_cast<int>(e.code()), e.what());
      return 2;
    }
  }
  if (mode == "spin" && argc == 7) {
    auto s = open(argv[2], 0, static_cast<std::uint32_t>(std::strtoul(argv[3], nullptr, 10)));
    const std::uint64_t start = std::strtoull(argv[4], nullptr, 10);
    const std::uint64_t end = std::strtoull(argv[5], nullptr, 10);
    const std::uint64_t kernel_ns = std::strtoull(argv[6], nullptr, 10) * 1000;
    cudaStream_t stream = nullptr;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 3;
    while (unix_ms() < start) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const std::uint64_t before = s.info().device_ns;
    while (unix_ms() < end) {
      {
        gpushare::cuda::scoped_kernel guard(s, stream);
        if (gpushare_test::launch_spin(stream, kernel_ns) != cudaSuccess) return 3;
      }
      s.yield();
    }
    s.synchronize();
    const auto i = s.info();
    std::printf("device_ns %llu guards %llu\n",
                static_cast<unsigned long long>(i.device_ns - before),
                static_cast<unsigned long long>(i.guards));
    cudaStreamDestroy(stream);
    return 0;
  }
  if (mode == "mark" && argc == 5) {
    gpushare::session_options o;
    o.domain = argv[2];
    o.name = "mark-" + std::to_string(::getpid());
    o.priority = gpushare::priority::high;
    gpushare::cuda::device_options d;
    d.context_overhead = 0;
    gpushare::cuda::device_session s(0, o, d);
    cudaStream_t stream = nullptr;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 3;
    for (int i = 0; i < 20; ++i) {
      gpushare::cuda::scoped_kernel g(s, stream);
      if (gpushare_test::launch_spin(stream, 100'000) != cudaSuccess) return 3;
    }
    s.synchronize();
    std::printf("ready\n");
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::strtoull(argv[4], nullptr, 10)));
    const std::uint64_t before = s.statistics().mark_host_functions;
    {
      gpushare::cuda::scoped_kernel g(s, stream);
      if (gpushare_test::launch_spin(stream, std::strtoull(argv[3], nullptr, 10) * 1'000'000) !=
          cudaSuccess)
        return 3;
    }
    std::printf("marked %zu %llu\n", s.shared_state()->regions_in_flight(),
                static_cast<unsigned long long>(s.statistics().mark_host_functions - before));
    std::fflush(stdout);
    for (;;) ::pause();
  }
  if (mode == "overhead" && argc == 6) {
    const int device = std::atoi(argv[3]);
    const std::uint64_t start = std::strtoull(argv[4], nullptr, 10);
    const std::uint64_t until = std::strtoull(argv[5], nullptr, 10);
    (void)gpushare::cuda::describe_device(device); // CUDA and NVML loaded before the start
    while (unix_ms() < start) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    gpushare::session_options o;
    o.domain = argv[2];
    o.name = "overhead-" + std::to_string(::getpid());
    gpushare::cuda::device_session s(device, o);
    std::printf("overhead %llu %s\n", static_cast<unsigned long long>(s.context_overhead()),
                s.overhead_method());
    std::fflush(stdout);
    while (unix_ms() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return 0;
  }
  if (mode == "identity" && argc == 3) {
    gpushare::session_options o;
    o.domain = argv[2];
    gpushare::cuda::device_options d;
    d.context_overhead = 0;
    std::string table;
    {
      gpushare::cuda::device_session s(0, o, d);
      table = s.table_name();
      std::printf("uuid %s\nkey %s\ntable %s\n", s.device().uuid.c_str(), s.snapshot().key.c_str(),
                  table.c_str());
      const cutest::nvml ml;
      std::printf("nvml_knows %d\n", ml.knows(s.device().uuid) ? 1 : 0);
      std::string all;
      for (const std::string& u : ml.uuids()) all += (all.empty() ? "" : ",") + u;
      std::printf("nvml %s\n", all.c_str());
    }
    ::shm_unlink(table.c_str());
    return 0;
  }
  std::fprintf(stderr, "cuda_worker: bad arguments\n");
  return 64;
}

} // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::printf("exception %s\n", e.what());
    return 4;
  }
}
