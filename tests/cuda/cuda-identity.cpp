// SPDX-License-Identifier: Apache-2.0
// Which device a session uses and what it charges for it (issue 17): a session on a device other
// than 0; the calling thread's device and contexts left as they were (no context created on a
// device the thread never used); allocation failures described with the session's device; the
// context overhead measured per process, under concurrent context creation, and charged once per
// process and table; MIG instances named MIG-... as NVML names them; a cluster scheduler's
// per-device limits (CUDA_DEVICE_MEMORY_LIMIT_<n>) read for the session's own device. Tests that
// need two devices skip on a machine with one; on the simulator (label cudasim) the CTest
// environment gives two.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gpushare/cuda.hpp>

#include "cuda_test_util.hpp"
#include "kernels.hpp"
#include "nvml_util.hpp"

namespace gc = gpushare::cuda;
using namespace std::chrono_literals;

namespace {

using cutest::stream;

constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t GiB = 1ull << 30;

/// The simulator's context size (CUDASIM_CONTEXT_BYTES, 500 MiB unless the environment says).
std::uint64_t sim_context_bytes() {
  const char* v = std::getenv("CUDASIM_CONTEXT_BYTES");
  return v ? gpushare::parse_memory_amount(v).value : 500 * MiB;
}

unsigned my_pid() { return static_cast<unsigned>(::getpid()); }

/// Without two CUDA devices: the skip marker, and false.
bool two_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    (void)cudaGetLastError();
    std::printf("GPUSHARE_SKIP: needs 2 CUDA devices, this process sees %d\n", n);
    std::fflush(stdout);
    return false;
  }
  return true;
}

/// Whether this process has a primary context on `ordinal` (the driver's
/// cuDevicePrimaryCtxGetState); creates none.
bool has_context(int ordinal) {
  const auto active = gc::detail::primary_context_active(ordinal);
  REQUIRE(active.has_value());
  return *active;
}

/// The sum of the live sessions' external usage in a table snapshot.
std::uint64_t external_sum(const gpushare::table_snapshot& t) {
  std::uint64_t sum = 0;
  for (const auto& s : t.sessions) sum += s.external;
  return sum;
}

} // namespace

TEST_CASE("a thread that never chose a device uses a session on device 1 and no context appears "
          "on device 0") {
  CUTEST_REQUIRE_GPU();
  if (!two_devices()) return;
  int before = -1;
  REQUIRE(cudaGetDevice(&before) == cudaSuccess); // creates no context
  REQUIRE_FALSE(has_context(0));
  const std::string uuid0 = gc::describe_device(0).uuid;
  cutest::private_domain d("scope");
  {
    gc::device_session s(1, d.options());
    d.uses(s.device().uuid);
    void* p = s.malloc(64 * MiB);
    REQUIRE(p != nullptr);
    (void)s.snapshot();
    s.free(p);
  }
  CHECK(has_context(1));
  CHECK_FALSE(has_context(0)); // cudaSetDevice(0) at the end of a scope would have created it
  const cutest::nvml ml;
  if (ml.ok()) CHECK_FALSE(ml.used_by(uuid0, my_pid()).has_value()); // NVML: nothing of ours
  int after = -1;
  REQUIRE(cudaGetDevice(&after) == cudaSuccess);
  CHECK(after == before);

  // A thread whose device is 0 (with its context) gets device 0 and the same context back.
  // (No REQUIRE in another thread: its exception would end the program.)
  std::thread([&] {
    CHECK(cudaSetDevice(0) == cudaSuccess);
    gc::device_session s(1, d.options("other"));
    void* p = s.malloc(MiB);
    s.free(p);
    int now = -1;
    CHECK(cudaGetDevice(&now) == cudaSuccess);
    CHECK(now == 0);
  }).join();
}

TEST_CASE("a session on device 1 of 2 works end to end: malloc, guard, accounting") {
  CUTEST_REQUIRE_GPU();
  if (!two_devices()) return;
  const gc::device_info dev0 = gc::describe_device(0), dev1 = gc::describe_device(1);
  REQUIRE(dev0.uuid != dev1.uuid);
  cutest::private_domain d("dev1");
  gc::device_session s(1, d.options());
  d.uses(s.device().uuid);
  CHECK(s.device().ordinal == 1);
  CHECK(s.device().uuid == dev1.uuid);
  CHECK(s.table_name().find(dev1.uuid) != std::string::npos);
  CHECK(s.info().external == s.context_overhead());
  if (cudasim::active()) CHECK(s.context_overhead() == sim_context_bytes());

  void* p = s.malloc(32 * MiB);
  REQUIRE(p != nullptr);
  CHECK(s.info().reserved == 32 * MiB);
  const cutest::nvml ml;
  if (ml.ok() && cudasim::active()) // on device 1, not 0 (a real GPU rounds and adds more)
    CHECK(ml.used_by(dev1.uuid, my_pid()) == sim_context_bytes() + 32 * MiB);

  // Kernels on a stream of device 1, guarded and timed by events on device 1.
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  {
    stream st;
    for (int i = 0; i < 3; ++i) {
      gc::scoped_kernel guard(s, st.s);
      REQUIRE(gpushare_test::launch_spin(st.s, 5'000'000) == cudaSuccess);
    }
    s.synchronize();
  }
  const auto i = s.info();
  CHECK(i.guards == 3);
  CHECK(i.device_ns >= 14'000'000);

  const auto snap = s.snapshot();
  CHECK(snap.key == dev1.uuid);
  CHECK(snap.device_total == dev1.total_memory);
  CHECK(snap.device_free > 0);
  CHECK(snap.device_free < dev1.total_memory);
  CHECK(snap.reserved_total == 32 * MiB);
  s.free(p);
  CHECK(s.info().reserved == 0);
  CHECK_FALSE(has_context(0));
}

TEST_CASE("a session on device 1 takes the cluster scheduler's limits for device 1, not 0") {
  // docs/cluster-env.md: device_session sets session_options::device_ordinal to its device.
  CUTEST_REQUIRE_GPU();
  if (!two_devices()) return;
  cutest::private_domain d("hami1"), d0("hami0"); // one table each
  ::setenv("CUDA_DEVICE_MEMORY_LIMIT_0", "1g", 1);
  ::setenv("CUDA_DEVICE_MEMORY_LIMIT_1", "3g", 1);
  ::setenv("CUDA_DEVICE_SM_LIMIT_1", "40", 1);
  std::optional<gc::device_session> s1, s0;
  try {
    s1.emplace(1, d.options());
    d.uses(s1->device().uuid);
    s0.emplace(0, d0.options());
    d0.uses(s0->device().uuid);
  } catch (...) {
    for (const char* v :
         {"CUDA_DEVICE_MEMORY_LIMIT_0", "CUDA_DEVICE_MEMORY_LIMIT_1", "CUDA_DEVICE_SM_LIMIT_1"})
      ::unsetenv(v);
    throw;
  }
  for (const char* v :
       {"CUDA_DEVICE_MEMORY_LIMIT_0", "CUDA_DEVICE_MEMORY_LIMIT_1", "CUDA_DEVICE_SM_LIMIT_1"})
    ::unsetenv(v);
  CHECK(s1->info().memory_limit == 3 * GiB);
  CHECK(s1->info().compute_limit_ppm == 400'000u);
  CHECK(s0->info().memory_limit == 1 * GiB);
  CHECK(s0->info().compute_limit_ppm == 1'000'000u); // no SM limit for device 0
}

TEST_CASE("an allocation that fails on device 1 describes device 1's memory, not the thread's "
          "device") {
  CUTEST_REQUIRE_GPU();
  if (!two_devices()) return;
  const std::string uuid1 = gc::describe_device(1).uuid;
  cutest::private_domain d("oomdev1");
  auto opts = d.options();
  opts.capacity = 1ull << 50; // the budget allows 1 PiB; the device cannot
  gc::device_session s(1, opts, cutest::no_overhead());
  d.uses(s.device().uuid);
  void* held = s.malloc(GiB); // device 1 now uses more than device 0 would
  REQUIRE(held != nullptr);
  std::string message;
  try {
    (void)s.malloc(1ull << 49);
    FAIL("a 512 TiB cudaMalloc succeeded");
  } catch (const gpushare::error& e) {
    CHECK(e.code() == gpushare::errc::cuda_error);
    message = e.what();
  }
  // Device 1's memory as a thread of its own sees it.
  std::size_t free = 0, total = 0;
  std::thread([&] {
    CHECK(cudaSetDevice(1) == cudaSuccess);
    CHECK(cudaMemGetInfo(&free, &total) == cudaSuccess);
  }).join();
  CAPTURE(message);
  CHECK(message.find("the device has " + gpushare::format_bytes(free) + " free of " +
                     gpushare::format_bytes(total)) != std::string::npos);
  CHECK_FALSE(has_context(0)); // asking device 0 would have created a context there
  s.free(held);
}

// cudaEventRecord: "\p event and \p stream must be on the same CUDA context."
// (cuda_runtime_api.h:2804; cudaErrorInvalidResourceHandle is among its results.) A guard's
// events are made on the session's device, so a guard on another device's stream cannot start.
TEST_CASE("a guard on a stream of another device fails with a message that says so, and holds "
          "nothing") {
  CUTEST_REQUIRE_GPU();
  if (!two_devices()) return;
  cutest::private_domain d("wrongdev");
  gc::device_session s(1, d.options(), cutest::no_overhead());
  d.uses(s.device().uuid);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  stream on0;                                          // a stream of device 0
  for (cudaStream_t wrong : {on0.s, cudaStream_t{}}) { // and device 0's legacy default stream
    std::string message;
    try {
      gc::scoped_kernel guard(s, wrong);
      FAIL("a guard of a device 1 session started on a stream of device 0");
    } catch (const gpushare::error& e) {
      CHECK(e.code() == gpushare::errc::cuda_error);
      message = e.what();
    }
    CAPTURE(message);
    CHECK(message.find("is the stream on the session's device?") != std::string::npos);
    CHECK(message.find("cudaErrorInvalidResourceHandle") != std::string::npos);
    CHECK(s.info().active_guards == 0);            // the GPU is not held by the failed guard
    CHECK(gc::detail::guards_on_this_thread == 0); // allocations are not refused as "in a guard"
    // The failed record is a hot-path call made directly: its error is left for the application
    // to see, like the exception (docs/design.md, "The application's errors").
    CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
  }
  // The session still works with a stream of its own device.
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  {
    stream on1;
    {
      gc::scoped_kernel guard(s, on1.s);
      REQUIRE(gpushare_test::launch_spin(on1.s, 2'000'000) == cudaSuccess);
    }
    s.synchronize();
  }
  CHECK(s.info().device_ns >= 2'000'000);
  CHECK(s.statistics().unknown_regions == 0);
}

TEST_CASE(
    "two device sessions on one device in one process charge its context once, and the second "
    "carries it when the first closes") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("once");
  std::optional<gc::device_session> first;
  first.emplace(0, d.options("first"));
  d.uses(first->device().uuid);
  const std::uint64_t overhead = first->context_overhead();
  const std::string method = first->overhead_method();
  CAPTURE(method);
  CHECK(overhead > 0);
  if (cudasim::active()) {
    CHECK(method == "measured (per process)");
    CHECK(overhead == sim_context_bytes());
  }
  gc::device_session second(0, d.options("second"));
  // The same context: the same figure, found by the first session's measurement.
  CHECK(second.context_overhead() == overhead);
  CHECK(std::string(second.overhead_method()) == method);
  CHECK(first->info().external == overhead);
  CHECK(second.info().external == 0);
  CHECK(external_sum(second.snapshot()) == overhead);

  second.set_external_usage(10 * MiB); // its own extra usage counts at once
  CHECK(second.info().external == 10 * MiB);
  CHECK(external_sum(second.snapshot()) == overhead + 10 * MiB);

  first.reset(); // the carrier leaves: the second takes the charge over
  CHECK(second.info().external == overhead + 10 * MiB);
  CHECK(external_sum(second.snapshot()) == overhead + 10 * MiB);

  gc::device_session third(0, d.options("third"));
  CHECK(third.info().external == 0);
  CHECK(external_sum(third.snapshot()) == overhead + 10 * MiB);
  second.set_external_usage(0);
  CHECK(external_sum(third.snapshot()) == overhead);
}

TEST_CASE("processes creating their contexts at the same moment each measure only their own") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("concurrent");
  {
    gc::device_options o;
    o.context_overhead = 0;
    gc::device_session creator(0, d.options("creator"), o); // creates the domain's table
    d.uses(creator.device().uuid);
  }
  // Context creation takes 300 ms on the simulator (CUDASIM_CONTEXT_DELAY_MS), so all four
  // processes read the device's free memory before any context exists and after all of them:
  // a device-wide before/after figure would be up to four contexts.
  const std::vector<std::pair<std::string, std::string>> env{{"CUDASIM_CONTEXT_DELAY_MS", "300"}};
  const std::uint64_t start = cutest::unix_ms() + 2000;
  const std::uint64_t until = start + 4000;
  std::vector<std::unique_ptr<cutest::helper>> workers;
  for (int i = 0; i < 4; ++i)
    workers.push_back(std::make_unique<cutest::helper>(
        std::vector<std::string>{"overhead", d.name(), "0", std::to_string(start),
                                 std::to_string(until)},
        env));
  std::vector<unsigned long long> figures;
  for (auto& w : workers) {
    const std::string line = w->read_line(30s);
    CAPTURE(line);
    unsigned long long bytes = 0;
    char method[64] = {};
    REQUIRE(std::sscanf(line.c_str(), "overhead %llu %63[^\n]", &bytes, method) == 2);
    CHECK(std::string(method) == "measured (per process)");
    figures.push_back(bytes);
  }
  for (auto& w : workers) CHECK(w->wait() == 0);
  for (const unsigned long long f : figures) {
    CAPTURE(f);
    if (cudasim::active())
      CHECK(f == sim_context_bytes());
    else // a real GPU: the same context size in each process, give or take
      CHECK((f > 0 && f * 2 < figures.front() * 3 && f * 3 > figures.front() * 2));
  }
}

TEST_CASE("NVML's 32-byte process records (R535-era drivers) are read at their own stride") {
  CUTEST_REQUIRE_GPU();
  if (!cudasim::active()) {
    std::printf("GPUSHARE_SKIP: the record layout is chosen on the simulated runtime "
                "(CUDASIM_NVML_PROCESS_RECORD); a GPU's driver writes its own\n");
    return;
  }
  cutest::private_domain d("record32");
  gc::device_options o;
  o.context_overhead = 0;
  gc::device_session first(0, d.options("first"), o); // this process's context: a record first
  d.uses(first.device().uuid);
  const std::uint64_t start = cutest::unix_ms() + 300;
  cutest::helper worker(
      {"overhead", d.name(), "0", std::to_string(start), std::to_string(start + 2000)},
      {{"CUDASIM_NVML_PROCESS_RECORD", "32"}});
  const std::string line = worker.read_line(30s);
  CAPTURE(line);
  unsigned long long bytes = 0;
  char method[64] = {};
  REQUIRE(std::sscanf(line.c_str(), "overhead %llu %63[^\n]", &bytes, method) == 2);
  CHECK(std::string(method) == "measured (per process)"); // not misread, so not the fallback
  CHECK(bytes == sim_context_bytes());
  // The worker's record is not NVML's first: read at a 24-byte stride, it would be misplaced.
  const cutest::nvml ml;
  REQUIRE(ml.ok());
  const auto pids = ml.pids(first.device().uuid);
  REQUIRE(pids.size() >= 2);
  CHECK(pids.front() != static_cast<unsigned>(worker.pid()));
  CHECK(worker.wait() == 0);
}

namespace {

/// A worker's output lines ("<key> <value>") on a simulated state of its own with `mig` MIG
/// instances: "identity <domain>" by default. The state's UUIDs depend on its name alone, so
/// each run sees the same devices.
std::map<std::string, std::string> on_simulator(const std::string& domain, int mig,
                                                std::vector<std::string> args = {}) {
  const std::string state =
      "gpushare-ctest-identity-" + std::to_string(::getpid()) + "-mig" + std::to_string(mig);
  ::shm_unlink(("/" + state).c_str());
  if (args.empty()) args = {"identity", domain};
  std::map<std::string, std::string> out;
  {
    cutest::helper h(
        args,
        {{"CUDASIM_STATE", state}, {"CUDASIM_DEVICES", "1"}, {"CUDASIM_MIG", std::to_string(mig)}});
    for (std::string line = h.read_line(); !line.empty(); line = h.read_line()) {
      const auto space = line.find(' ');
      out[line.substr(0, space)] = space == std::string::npos ? "" : line.substr(space + 1);
    }
    CHECK(h.wait() == 0);
  }
  ::shm_unlink(("/" + state).c_str());
  return out;
}

bool listed(const std::string& all, const std::string& uuid) {
  return ("," + all + ",").find("," + uuid + ",") != std::string::npos;
}

} // namespace

TEST_CASE("in MIG mode the UUID is the instance's MIG-..., as NVML writes it, and keys the table") {
  CUTEST_REQUIRE_GPU();
  if (!cudasim::active()) {
    std::printf("GPUSHARE_SKIP: MIG mode is chosen on the simulated runtime (CUDASIM_MIG); this "
                "GPU's mode is what it is\n");
    return;
  }
  cutest::private_domain d("mig");
  auto r = on_simulator(d.name(), 2);
  CAPTURE(r["uuid"]);
  CAPTURE(r["nvml"]);
  CHECK(r["uuid"].rfind("MIG-", 0) == 0);
  CHECK(r["uuid"].size() == 40);
  CHECK(r["nvml_knows"] == "1");
  CHECK(listed(r["nvml"], r["uuid"]));
  CHECK(r["key"] == r["uuid"]);
  CHECK(r["table"].find(r["uuid"]) != std::string::npos);
  // NVML's figures for the instance (its MIG device handle, found by that UUID) measure the
  // context overhead, as on a whole GPU.
  const std::string now = std::to_string(cutest::unix_ms());
  auto m = on_simulator(d.name(), 2, {"overhead", d.name(), "0", now, now});
  d.uses(r["uuid"]);
  CHECK(m["overhead"] == std::to_string(sim_context_bytes()) + " measured (per process)");

  auto g = on_simulator(d.name(), 0); // MIG off: the GPU's own UUID
  CAPTURE(g["uuid"]);
  CHECK(g["uuid"].rfind("GPU-", 0) == 0);
  CHECK(g["nvml_knows"] == "1");
  CHECK(listed(g["nvml"], g["uuid"]));
  CHECK(g["key"] == g["uuid"]);
}

TEST_CASE("without MIG the UUID is GPU-..., as NVML writes it") {
  CUTEST_REQUIRE_GPU();
  const gc::device_info dev = gc::describe_device(0);
  const cutest::nvml ml;
  if (!ml.ok()) {
    std::printf("GPUSHARE_SKIP: NVML is not available\n");
    return;
  }
  CAPTURE(dev.uuid);
  CHECK(ml.knows(dev.uuid)); // NVML finds the device by the text gpushare names its table with
  if (cudasim::active()) CHECK(dev.uuid.rfind("GPU-", 0) == 0);
}
