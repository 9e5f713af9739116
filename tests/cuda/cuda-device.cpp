// SPDX-License-Identifier: Apache-2.0
// The CUDA layer on a real GPU: device sessions, event-timed stream guards, budgeted allocation,
// across processes. Without a GPU every test that needs one prints the skip marker (CTest reports
// it skipped, not passed); the no-GPU error path runs everywhere.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include <gpushare/cuda.hpp>

#include "cuda_test_util.hpp"
#include "kernels.hpp"

namespace gc = gpushare::cuda;
using namespace std::chrono_literals;

namespace {

using cutest::no_overhead;
using cutest::stream;

constexpr std::uint64_t MiB = 1ull << 20;

} // namespace

TEST_CASE("a process that sees no GPU gets errc::no_device with CUDA's reason") {
  // CUDA_VISIBLE_DEVICES="" hides every GPU from the helper; on a machine without a GPU or
  // driver the result is the same error code for another reason.
  cutest::helper h({"nodevice"}, {{"CUDA_VISIBLE_DEVICES", ""}});
  const std::string line = h.read_line();
  CHECK(h.wait() == 0);
  CAPTURE(line);
  if (gc::detail::find_nvidia_driver().present) // a driver, every GPU hidden (or a driver too old)
    CHECK((line.rfind("no_device no CUDA device available: cudaErrorNoDevice", 0) == 0 ||
           line.rfind("no_device the NVIDIA driver ", 0) == 0));
  else // no NVIDIA driver: not a driver to upgrade
    CHECK(line.rfind("no_device no NVIDIA driver or GPU found (cudaError", 0) == 0);
  CHECK(line.find("from cudaGetDeviceCount") != std::string::npos);
}

TEST_CASE("without a GPU, device_count and device_session fail cleanly with errc::no_device") {
  if (cutest::gpu_available()) {
    std::printf("GPUSHARE_SKIP: this machine has a GPU; the no-GPU path is covered by the "
                "CUDA_VISIBLE_DEVICES test\n");
    return;
  }
  try {
    (void)gc::device_count();
    FAIL("device_count() did not throw");
  } catch (const gpushare::error& e) {
    CHECK(e.code() == gpushare::errc::no_device);
    const std::string what = e.what();
    CAPTURE(what);
    if (gc::detail::find_nvidia_driver().present)
      CHECK((what.rfind("no CUDA device available: cudaError", 0) == 0 ||
             what.rfind("the NVIDIA driver ", 0) == 0));
    else
      CHECK(what.rfind("no NVIDIA driver or GPU found (cudaError", 0) == 0);
  }
  CHECK_THROWS_AS(gc::device_session(0), gpushare::error);
  try {
    gc::device_session s(0);
  } catch (const gpushare::error& e) {
    CHECK(e.code() == gpushare::errc::no_device);
  }
}

TEST_CASE("the device session joins the table named by the GPU's UUID with capacity from memory") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("uuid");
  gc::device_session s(0, d.options(), no_overhead());
  d.uses(s.device().uuid);
  CHECK(s.device().uuid.rfind("GPU-", 0) == 0);
  CHECK(s.device().uuid.size() == 40);
  CHECK(s.table_name().find(s.device().uuid) != std::string::npos);
  const auto snap = s.snapshot();
  CHECK(snap.key == s.device().uuid);
  std::size_t free = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free, &total) == cudaSuccess);
  CHECK(snap.device_total == total);
  CHECK(snap.device_free > 0);
  CHECK(snap.device_free <= total);
  CHECK(!snap.device_name.empty());
  const std::uint64_t headroom =
      std::max<std::uint64_t>(gpushare::memory_amount::of_ppm(20'000).resolve(total), 256 * MiB);
  CHECK(snap.capacity == total - headroom);
}

TEST_CASE("the context overhead is counted as the session's external usage") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("ovh");
  {
    gc::device_session s(0, d.options());
    d.uses(s.device().uuid);
    const std::string method = s.overhead_method();
    CHECK((method == "measured (per process)" || method == "measured (device delta)" ||
           method == "estimated"));
    CHECK(s.info().external == s.context_overhead());
    std::printf("context overhead: %llu bytes (%s)\n",
                static_cast<unsigned long long>(s.context_overhead()), method.c_str());
    s.set_external_usage(10 * MiB);
    CHECK(s.info().external == s.context_overhead() + 10 * MiB);
  }
  ::setenv("GPUSHARE_CONTEXT_OVERHEAD", "100MiB", 1);
  gc::device_session s(0, d.options());
  ::unsetenv("GPUSHARE_CONTEXT_OVERHEAD");
  CHECK(std::string(s.overhead_method()) == "configured");
  CHECK(s.context_overhead() == 100 * MiB);
  CHECK(s.info().external == 100 * MiB);
}

TEST_CASE("guarded kernels are timed by CUDA events, not by the host") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("time");
  gc::device_session s(0, d.options(), no_overhead());
  d.uses(s.device().uuid);
  stream st;
  const auto host_start = std::chrono::steady_clock::now();
  std::uint64_t host_in_guards = 0;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    gc::scoped_kernel guard(s, st.s);
    REQUIRE(gpushare_test::launch_spin(st.s, 20'000'000) == cudaSuccess);
    host_in_guards += static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count());
  }
  s.synchronize();
  const auto info = s.info();
  const std::uint64_t wall =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now() - host_start)
                                     .count());
  CHECK(info.guards == 5);
  // 5 x 20 ms kernels: the accounted time is the GPU's, whatever the launches cost the host.
  CHECK(info.device_ns >= 95'000'000);
  CHECK(info.device_ns <= wall + 1'000'000);
  std::printf("5 x 20 ms guarded kernels: device time %.2f ms, host time inside guards %.2f ms\n",
              static_cast<double>(info.device_ns) / 1e6, static_cast<double>(host_in_guards) / 1e6);
}

TEST_CASE("in-flight guarded work is bounded when nobody waits") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("inflight");
  gc::device_options o = no_overhead();
  o.max_in_flight = 2ms;
  gc::device_session s(0, d.options(), o);
  d.uses(s.device().uuid);
  stream st;
  for (int i = 0; i < 20; ++i) {
    gc::scoped_kernel guard(s, st.s);
    REQUIRE(gpushare_test::launch_spin(st.s, 1'000'000) == cudaSuccess);
  }
  // 1 ms regions with a 2 ms allowance: at most 2 regions may still be queued.
  CHECK(s.shared_state()->regions_in_flight() <= 2);
  const auto avg = s.shared_state()->average_region_ns();
  CHECK(avg >= 900'000);
  CHECK(avg <= 5'000'000);
  s.synchronize();
  CHECK(s.shared_state()->regions_in_flight() == 0);
  CHECK(s.info().device_ns >= 19'000'000);
}

TEST_CASE("a CUDA Graph launched inside a guard is timed, and capture is left alone") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("graph");
  gc::device_session s(0, d.options(), no_overhead());
  d.uses(s.device().uuid);
  stream st;
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  {
    gc::scoped_kernel capture_guard(s, st.s); // capturing: records nothing into the graph
    REQUIRE(gpushare_test::launch_spin(st.s, 10'000'000) == cudaSuccess);
  }
  REQUIRE(cudaStreamEndCapture(st.s, &graph) == cudaSuccess);
  std::size_t nodes = 0;
  REQUIRE(cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess);
  CHECK(nodes == 1); // the kernel only: the guard added no event nodes
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  const std::uint64_t before = s.info().device_ns;
  for (int i = 0; i < 3; ++i) {
    gc::scoped_kernel guard(s, st.s);
    REQUIRE(cudaGraphLaunch(exec, st.s) == cudaSuccess);
  }
  s.synchronize();
  CHECK(s.info().device_ns - before >= 28'000'000);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST_CASE("malloc charges the budget and an over-limit request names session, limit and size") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("limit");
  auto opts = d.options("limited");
  opts.memory_limit = gpushare::memory_amount::of_bytes(64 * MiB);
  gc::device_session s(0, opts, no_overhead());
  d.uses(s.device().uuid);
  void* a = s.malloc(48 * MiB);
  REQUIRE(a != nullptr);
  CHECK(s.info().reserved == 48 * MiB);
  try {
    (void)s.malloc(32 * MiB);
    FAIL("an allocation over the limit succeeded");
  } catch (const gpushare::error& e) {
    CHECK(e.code() == gpushare::errc::over_limit);
    const std::string m = e.what();
    CHECK(m.find("'limited'") != std::string::npos);
    CHECK(m.find("64.00 MiB") != std::string::npos);
    CHECK(m.find("32.00 MiB") != std::string::npos);
  }
  CHECK(s.info().reserved == 48 * MiB); // the refused request left nothing behind
  s.free(a);
  CHECK(s.info().reserved == 0);
  CHECK_THROWS_AS(s.free(a), gpushare::error); // freed already
  void* b = s.malloc(64 * MiB);
  CHECK(b != nullptr);
  s.free(b);
  CHECK(s.malloc(0) == nullptr);
}

TEST_CASE("a failing cudaMalloc rolls its reservation back") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("rollback");
  auto opts = d.options();
  opts.capacity = 1ull << 50; // the budget allows 1 PiB; the device cannot
  gc::device_session s(0, opts, no_overhead());
  d.uses(s.device().uuid);
  try {
    (void)s.malloc(1ull << 49);
    FAIL("a 512 TiB cudaMalloc succeeded");
  } catch (const gpushare::error& e) {
    CHECK(e.code() == gpushare::errc::cuda_error);
    CHECK(std::string(e.what()).find("cudaMalloc of 512.00 TiB") != std::string::npos);
  }
  CHECK(s.info().reserved == 0);
  CHECK(cudaGetLastError() == cudaSuccess); // the error was consumed, not left behind
}

TEST_CASE("stream-ordered allocation is charged, and the free returns its bytes once executed") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("async");
  gc::device_session s(0, d.options(), no_overhead());
  d.uses(s.device().uuid);
  stream st;
  void* p = s.malloc_async(32 * MiB, st.s);
  REQUIRE(p != nullptr);
  CHECK(s.info().reserved == 32 * MiB);
  REQUIRE(gpushare_test::launch_spin(st.s, 50'000'000) == cudaSuccess); // the free waits behind it
  s.free_async(p, st.s);
  CHECK(s.info().reserved == 32 * MiB); // not executed yet: still charged
  s.synchronize();
  CHECK(s.info().reserved == 0);
}

// A stream-ordered free that a poll found complete (cuEventQuery) is not yet "observed on the
// host" (cudaMemPoolTrimTo's note): on an H200 (CUDA 13.0) the pool kept its memory reserved
// through synchronize()'s trim, and the budget kept it charged, until the layer synchronised
// the free's event to make the pool observe it.
TEST_CASE("a stream-ordered free seen complete by a poll returns its bytes at synchronize()") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("polled");
  gc::device_session s(0, d.options(), no_overhead());
  d.uses(s.device().uuid);
  stream st;
  void* p = s.malloc_async(4 * MiB, st.s);
  s.free_async(p, st.s);
  std::this_thread::sleep_for(50ms); // the free runs
  void* q = s.malloc(MiB);           // its charge polls the free: complete
  s.free(q);
  s.synchronize();
  CHECK(s.info().reserved == 0);
  CHECK(s.statistics().pool_bytes_held == 0);
}

TEST_CASE("memory_resource charges allocations to the session and refuses odd alignments") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("mr");
  gc::device_session s(0, d.options(), no_overhead());
  d.uses(s.device().uuid);
  gc::memory_resource mr(s);
  gc::memory_resource copy = mr;
  CHECK(mr == copy);
  void* p = mr.allocate(8 * MiB);
  CHECK(s.info().reserved == 8 * MiB);
  copy.deallocate(p, 8 * MiB);
  CHECK(s.info().reserved == 0);
  CHECK_THROWS_AS((void)mr.allocate(1024, 512), gpushare::error);
  CHECK_THROWS_AS((void)mr.allocate(1024, 3), gpushare::error);
  stream st;
  void* q = mr.allocate_async(4 * MiB, 256, st.s);
  CHECK(s.info().reserved == 4 * MiB);
  mr.deallocate_async(q, 4 * MiB, 256, st.s);
  s.synchronize();
  CHECK(s.info().reserved == 0);
}

TEST_CASE("budgets stop over-allocation across processes, and a killed holder's bytes return") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("xproc");
  auto opts = d.options("parent");
  opts.capacity = 1024 * MiB;
  gc::device_session s(0, opts, no_overhead());
  d.uses(s.device().uuid);
  const std::vector<std::pair<std::string, std::string>> env{{"GPUSHARE_CONTEXT_OVERHEAD", "0"}};
  cutest::helper holder({"hold", d.name(), "0", std::to_string(700 * MiB)}, env);
  REQUIRE(holder.read_line() == "held");
  CHECK(s.snapshot().reserved_total == 700 * MiB);

  // Another process wanting 700 MiB gets gpushare's timeout, not a CUDA out-of-memory.
  cutest::helper other({"try", d.name(), "0", std::to_string(700 * MiB), "200"}, env);
  const std::string line = other.read_line();
  CHECK(other.wait() == 2);
  CHECK(line.find("error " + std::to_string(static_cast<int>(gpushare::errc::timeout))) == 0);

  // The holder dies without freeing: its reservation is reclaimed and the memory is usable.
  holder.kill_now();
  CHECK(holder.wait() == 128 + SIGKILL);
  cutest::helper after({"try", d.name(), "0", std::to_string(700 * MiB), "10000"}, env);
  CHECK(after.read_line() == "ok");
  CHECK(after.wait() == 0);
  CHECK(s.snapshot().reserved_total == 0);
}

TEST_CASE("two processes with shares 3:1 running real kernels get about 3:1 of the GPU time") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("share");
  {
    gc::device_session creator(0, d.options(), no_overhead()); // creates the domain's table
    d.uses(creator.device().uuid);
  }
  const std::uint64_t start = cutest::unix_ms() + 3000; // after both helpers opened their session
  const std::uint64_t end = start + 4000;
  cutest::helper a({"spin", d.name(), "3", std::to_string(start), std::to_string(end), "2000"});
  cutest::helper b({"spin", d.name(), "1", std::to_string(start), std::to_string(end), "2000"});
  const std::string la = a.read_line(30s), lb = b.read_line(30s);
  CHECK(a.wait() == 0);
  CHECK(b.wait() == 0);
  unsigned long long na = 0, nb = 0, ga = 0, gb = 0;
  REQUIRE(std::sscanf(la.c_str(), "device_ns %llu guards %llu", &na, &ga) == 2);
  REQUIRE(std::sscanf(lb.c_str(), "device_ns %llu guards %llu", &nb, &gb) == 2);
  const double fraction = static_cast<double>(na) / static_cast<double>(na + nb);
  std::printf("shares 3:1 on the GPU: %.1f%% / %.1f%% of %.2f s of guarded GPU time\n",
              100 * fraction, 100 * (1 - fraction), static_cast<double>(na + nb) / 1e9);
  CHECK(fraction >= 0.70);
  CHECK(fraction <= 0.80);
  // The GPU stayed busy. On cudasim a kernel is queued only when its process gets a CPU to launch
  // it, so on a loaded machine (CI next to builds: 3.04 s of 4 s was seen) the simulated device
  // idles in gaps no scheduler decision made; the bound there is looser.
  const double busy = cudasim::active() ? 0.6 : 0.8;
  CHECK(static_cast<double>(na + nb) >= busy * 4e9);
}
