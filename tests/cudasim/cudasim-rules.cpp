// SPDX-License-Identifier: Apache-2.0
// The simulated CUDA runtime's own tests (tools/cudasim/, docs/cudasim.md): one or more per
// modelled rule. They run only on the simulator (label cudasim). Each CTest test is a process
// of its own on a fresh simulated device state; rules that need another configuration (device
// count, MIG, fault injection) or other processes use the probe (probe.cpp).
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "sim_kernels.hpp"
#include "sim_nvml.hpp"
#include "sim_util.hpp"

using namespace std::chrono_literals;
using simtest::env_list;
using simtest::fresh_state;
using simtest::nvml;
using simtest::probe;

namespace {

constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t ms = 1'000'000; // nanoseconds

std::uint64_t context_bytes() { return 500 * MiB; } // the default CUDASIM_CONTEXT_BYTES

} // namespace

TEST_CASE("the simulator is the runtime these tests run on") {
  fresh_state st("active");
  st.use_here();
  REQUIRE_MESSAGE(cudasim::active(), "run with LD_LIBRARY_PATH=<build>/tools/cudasim/lib");
  int runtime = 0;
  CHECK(cudaRuntimeGetVersion(&runtime) == cudaSuccess);
  CHECK(runtime == 13000);
}

// --- devices ---------------------------------------------------------------------------

TEST_CASE("devices come from CUDASIM_DEVICES and CUDASIM_MEMORY, each with its own UUID") {
  fresh_state st("devices");
  auto r = probe({"devices"}, {{"CUDASIM_STATE", st.name()},
                               {"CUDASIM_DEVICES", "3"},
                               {"CUDASIM_MEMORY", "16GiB"},
                               {"CUDASIM_NAME", "Test GPU"}})
               .result();
  CHECK(r.at("count") == "3");
  CHECK(r.at("memory0") == std::to_string(16ull << 30));
  CHECK(r.at("name2") == "Test GPU");
  CHECK(r.at("uuid0") != r.at("uuid1"));
  CHECK(r.at("uuid1") != r.at("uuid2"));
}

TEST_CASE("no device: CUDASIM_DEVICES=0 and an empty CUDA_VISIBLE_DEVICES give cudaErrorNoDevice") {
  fresh_state a("nodev0"), b("nodevcvd");
  auto r0 = probe({"devices"}, {{"CUDASIM_STATE", a.name()}, {"CUDASIM_DEVICES", "0"}}).result();
  CHECK(r0.at("count_error") == "cudaErrorNoDevice");
  CHECK(r0.at("count") == "0");
  auto r1 =
      probe({"devices"}, {{"CUDASIM_STATE", b.name()}, {"CUDA_VISIBLE_DEVICES", ""}}).result();
  CHECK(r1.at("count_error") == "cudaErrorNoDevice");
}

TEST_CASE("CUDA_VISIBLE_DEVICES selects by index and by UUID, and stops at an invalid entry") {
  fresh_state st("cvd");
  const env_list base{{"CUDASIM_STATE", st.name()}, {"CUDASIM_DEVICES", "3"}};
  auto all = probe({"devices"}, base).result();
  env_list e = base;
  e.emplace_back("CUDA_VISIBLE_DEVICES", "2,0");
  auto r = probe({"devices"}, e).result();
  CHECK(r.at("count") == "2");
  CHECK(r.at("uuid0") == all.at("uuid2"));
  CHECK(r.at("uuid1") == all.at("uuid0"));
  e.back().second = "GPU-" + all.at("uuid1");
  r = probe({"devices"}, e).result();
  CHECK(r.at("count") == "1");
  CHECK(r.at("uuid0") == all.at("uuid1"));
  e.back().second = "GPU-" + all.at("uuid2").substr(0, 8); // a unique prefix is enough
  r = probe({"devices"}, e).result();
  CHECK(r.at("uuid0") == all.at("uuid2"));
  e.back().second = "1,7,0"; // 7 does not exist: it and everything after it are hidden
  r = probe({"devices"}, e).result();
  CHECK(r.at("count") == "1");
  CHECK(r.at("uuid0") == all.at("uuid1"));
  e.back().second = "0,1,0"; // a device listed twice: none visible
  r = probe({"devices"}, e).result();
  CHECK(r.at("count_error") == "cudaErrorNoDevice");
}

TEST_CASE("a bad CUDASIM_ variable fails initialisation and says which") {
  fresh_state st("badenv");
  auto r = probe({"devices"}, {{"CUDASIM_STATE", st.name()}, {"CUDASIM_MEMORY", "lots"}}).result();
  CHECK(r.at("count_error") == "cudaErrorInitializationError");
}

// --- contexts and memory ------------------------------------------------------------------

TEST_CASE("cudaSetDevice creates the primary context, which costs device memory, and cudaGetDevice "
          "does not") {
  fresh_state st("ctx");
  st.use_here();
  int device = -1;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  CHECK(device == 0);
  nvml ml;
  void* d = ml.device(0);
  CHECK(ml.used_by(d, ::getpid()) == 0);
  void* get = nullptr;
  void* state = nullptr;
  REQUIRE(cudaGetDriverEntryPointByVersion("cuDeviceGet", &get, 12000, cudaEnableDefault,
                                           nullptr) == cudaSuccess);
  REQUIRE(cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &state, 12000,
                                           cudaEnableDefault, nullptr) == cudaSuccess);
  unsigned flags = 0;
  int active = -1;
  REQUIRE(reinterpret_cast<int (*)(int, unsigned*, int*)>(state)(0, &flags, &active) == 0);
  CHECK(active == 0);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  REQUIRE(reinterpret_cast<int (*)(int, unsigned*, int*)>(state)(0, &flags, &active) == 0);
  CHECK(active == 1);
  CHECK(ml.used_by(d, ::getpid()) == context_bytes());
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 64 * MiB) == cudaSuccess);
  CHECK(ml.used_by(d, ::getpid()) == context_bytes() + 64 * MiB);
  size_t free = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free, &total) == cudaSuccess);
  CHECK(total - free == ml.mem(d).used);
  REQUIRE(cudaFree(p) == cudaSuccess);
  CHECK(ml.used_by(d, ::getpid()) == context_bytes());
}

TEST_CASE("the runtime's device follows the driver's current context, with none current it is "
          "device 0, and no context is created") {
  fresh_state st("ctxcurrent");
  st.use_here();
  ::setenv("CUDASIM_DEVICES", "2", 1);
  void* get = nullptr;
  void* set = nullptr;
  void* state = nullptr;
  REQUIRE(cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &get, 12000, cudaEnableDefault,
                                           nullptr) == cudaSuccess);
  REQUIRE(cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &set, 12000, cudaEnableDefault,
                                           nullptr) == cudaSuccess);
  REQUIRE(cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &state, 12000,
                                           cudaEnableDefault, nullptr) == cudaSuccess);
  const auto get_current = reinterpret_cast<int (*)(void**)>(get);
  const auto set_current = reinterpret_cast<int (*)(void*)>(set);
  const auto active = [&](int device) {
    unsigned flags = 0;
    int a = -1;
    REQUIRE(reinterpret_cast<int (*)(int, unsigned*, int*)>(state)(device, &flags, &a) == 0);
    return a;
  };
  void* ctx = reinterpret_cast<void*>(1);
  REQUIRE(get_current(&ctx) == 0);
  CHECK(ctx == nullptr); // a thread that never chose a device has no context
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  void* one = nullptr;
  REQUIRE(get_current(&one) == 0);
  CHECK(one != nullptr);
  REQUIRE(set_current(nullptr) == 0);
  REQUIRE(get_current(&ctx) == 0);
  CHECK(ctx == nullptr);
  int device = -1;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  CHECK(device == 0);
  CHECK(active(0) == 0); // neither cuCtxSetCurrent(NULL) nor cudaGetDevice created one
  REQUIRE(set_current(one) == 0);
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  CHECK(device == 1);
  CHECK(active(0) == 0);
}

TEST_CASE("allocation beyond the device's memory fails with cudaErrorMemoryAllocation") {
  fresh_state st("oom");
  st.use_here();
  ::setenv("CUDASIM_MEMORY", "1GiB", 1);
  void* p = nullptr;
  CHECK(cudaMalloc(&p, 600 * MiB) == cudaErrorMemoryAllocation); // 500 MiB context + 600 MiB
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaSuccess); // not sticky: read once
  CHECK(cudaMalloc(&p, 400 * MiB) == cudaSuccess);
  CHECK(cudaFree(p) == cudaSuccess);
}

TEST_CASE("a killed process's memory is freed after the teardown delay, an exiting one's at once") {
  fresh_state st("reclaim");
  st.use_here();
  ::setenv("CUDASIM_TEARDOWN_MS", "400", 1); // the state's creator sets it for all processes
  nvml ml;
  void* d = ml.device(0);
  const env_list env{{"CUDASIM_STATE", st.name()}};
  {
    probe holder({"hold", "256"}, env);
    CHECK(holder.until("held").at("malloc") == "cudaSuccess");
    CHECK(ml.used_by(d, holder.pid()) == context_bytes() + 256 * MiB);
    const pid_t pid = holder.pid();
    holder.kill_now();
    holder.wait();
    const auto killed = std::chrono::steady_clock::now();
    // The driver frees a killed process's memory some time after its files close.
    CHECK(ml.used_by(d, pid) == context_bytes() + 256 * MiB);
    while (ml.used_by(d, pid) != 0 && std::chrono::steady_clock::now() - killed < 10s)
      std::this_thread::sleep_for(10ms);
    CHECK(ml.used_by(d, pid) == 0);
    CHECK(std::chrono::steady_clock::now() - killed >= 390ms); // not before the delay
  }
  {
    probe holder({"hold", "128"}, env);
    holder.until("held");
    const pid_t pid = holder.pid();
    holder.close_stdin(); // it exits normally
    CHECK(holder.wait() == 0);
    CHECK(ml.used_by(d, pid) == 0);
  }
}

TEST_CASE(
    "fault injection: allocations fail after N calls or N bytes, and context creation is slow") {
  fresh_state a("faultcalls"), b("faultbytes"), c("slowctx");
  auto r = probe({"allocs", "3", "1"},
                 {{"CUDASIM_STATE", a.name()}, {"CUDASIM_FAIL_ALLOC_AFTER_CALLS", "2"}})
               .result();
  CHECK(r.at("alloc0") == "cudaSuccess");
  CHECK(r.at("alloc1") == "cudaSuccess");
  CHECK(r.at("alloc2") == "cudaErrorMemoryAllocation");
  r = probe({"allocs", "3", "4"},
            {{"CUDASIM_STATE", b.name()}, {"CUDASIM_FAIL_ALLOC_AFTER_BYTES", "10MiB"}})
          .result();
  CHECK(r.at("alloc1") == "cudaSuccess");
  CHECK(r.at("alloc2") == "cudaErrorMemoryAllocation");
  r = probe({"setdevice"}, {{"CUDASIM_STATE", c.name()}, {"CUDASIM_CONTEXT_DELAY_MS", "300"}})
          .result();
  CHECK(r.at("set") == "cudaSuccess");
  CHECK(std::stoi(r.at("set_ms")) >= 300);
}

TEST_CASE("a sticky error: the next synchronisation reports it, cudaGetLastError reports it once") {
  fresh_state st("sticky");
  auto r =
      probe({"sticky"}, {{"CUDASIM_STATE", st.name()}, {"CUDASIM_STICKY_AT_LAUNCH", "1"}}).result();
  CHECK(r.at("launch") == "cudaSuccess"); // reported asynchronously, as a kernel fault is
  CHECK(r.at("sync") == "cudaErrorLaunchFailure");
  CHECK(r.at("malloc") == "cudaErrorLaunchFailure");
  CHECK(r.at("last1") == "cudaErrorLaunchFailure");
  CHECK(r.at("last2") == "cudaSuccess"); // observed on an H200 (driver 580, CUDA 13.0)
}

TEST_CASE("a forked child of a process that initialised CUDA gets cudaErrorInitializationError") {
  fresh_state st("fork");
  st.use_here();
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    int n = 0;
    void* p = nullptr;
    const bool ok = cudaGetDeviceCount(&n) == cudaErrorInitializationError &&
                    cudaMalloc(&p, 1024) == cudaErrorInitializationError;
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  int n = 0;
  CHECK(cudaGetDeviceCount(&n) == cudaSuccess); // the parent is unaffected
}

// --- streams and time slices ----------------------------------------------------------------

TEST_CASE("a stream runs its work in order, asynchronously to the host") {
  fresh_state st("fifo");
  st.use_here();
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  int counter = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) REQUIRE(simtest::launch_count(s, 20 * ms, &counter) == cudaSuccess);
  CHECK(std::chrono::steady_clock::now() - t0 < 50ms); // launches return before the work runs
  CHECK(cudaStreamQuery(s) == cudaErrorNotReady);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(std::chrono::steady_clock::now() - t0 >= 100ms); // 5 x 20 ms, one after another
  CHECK(counter == 5);
  CHECK(cudaStreamQuery(s) == cudaSuccess);
  CHECK(cudaStreamDestroy(s) == cudaSuccess);
  CHECK(cudaStreamDestroy(s) == cudaErrorInvalidResourceHandle);
}

TEST_CASE("the legacy default stream waits for blocking streams, a non-blocking stream does not") {
  fresh_state st("legacy");
  st.use_here();
  cudaStream_t blocking = nullptr, nonblocking = nullptr;
  REQUIRE(cudaStreamCreate(&blocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking) == cudaSuccess);
  int on_legacy = 0;
  REQUIRE(simtest::launch(blocking, 150 * ms) == cudaSuccess);
  REQUIRE(simtest::launch_count(nullptr, 1000, &on_legacy) == cudaSuccess);
  std::this_thread::sleep_for(50ms);
  CHECK(on_legacy == 0); // queued behind the blocking stream's kernel
  REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
  CHECK(on_legacy == 1);

  int on_nonblocking = 0;
  REQUIRE(simtest::launch(nullptr, 150 * ms) == cudaSuccess);
  REQUIRE(simtest::launch_count(nonblocking, 1000, &on_nonblocking) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(nonblocking) == cudaSuccess);
  CHECK(on_nonblocking == 1);
  CHECK(cudaStreamQuery(nullptr) == cudaErrorNotReady); // the legacy stream's kernel still runs
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
}

TEST_CASE("two processes on one device are time-sliced: together they take as long as both") {
  fresh_state st("slices");
  const env_list env{{"CUDASIM_STATE", st.name()}};
  const std::string start = std::to_string(simtest::unix_ms() + 1500);
  probe a({"run", "200", "5000", start}, env), b({"run", "200", "5000", start}, env);
  const auto ra = a.result();
  const auto rb = b.result();
  // One context runs at a time: 400 ms of device work cannot end in less than 400 ms, so the
  // later process needs at least ~400 ms, and each was switched out at least once.
  CHECK(std::max(std::stoi(ra.at("wall_ms")), std::stoi(rb.at("wall_ms"))) >= 390);
  CHECK(std::stoi(ra.at("wall_ms")) >= 200);
  CHECK(std::stoi(rb.at("wall_ms")) >= 200);
  CHECK(std::stoull(ra.at("switches")) + std::stoull(rb.at("switches")) >= 2);
}

TEST_CASE("per-thread default streams are distinct per thread and synchronise with the legacy "
          "stream") {
  fresh_state st("ptds");
  st.use_here();
  int on_per_thread = 0;
  REQUIRE(simtest::launch(nullptr, 120 * ms) == cudaSuccess); // legacy stream
  REQUIRE(simtest::launch_count(cudaStreamPerThread, 1000, &on_per_thread) == cudaSuccess);
  std::this_thread::sleep_for(40ms);
  CHECK(on_per_thread == 0); // a blocking stream: it waits for the legacy stream
  REQUIRE(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess);
  CHECK(on_per_thread == 1);
  // Another thread's per-thread stream is another stream: it does not wait for this one's.
  REQUIRE(simtest::launch(cudaStreamPerThread, 150 * ms) == cudaSuccess);
  int other = 0;
  std::thread([&] {
    cudaStream_t mine = nullptr;
    (void)cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking);
    (void)simtest::launch_count(mine, 1000, &other);
    (void)cudaStreamSynchronize(mine);
  }).join();
  CHECK(other == 1);
  CHECK(cudaStreamQuery(cudaStreamPerThread) == cudaErrorNotReady);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
}

// --- events ---------------------------------------------------------------------------------

TEST_CASE("events: completion, elapsed time and their documented errors") {
  fresh_state st("events");
  st.use_here();
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  cudaEvent_t a = nullptr, b = nullptr, untimed = nullptr;
  REQUIRE(cudaEventCreate(&a) == cudaSuccess);
  REQUIRE(cudaEventCreate(&b) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming) == cudaSuccess);
  CHECK(cudaEventQuery(a) == cudaSuccess); // never recorded: complete
  float t = 0;
  CHECK(cudaEventElapsedTime(&t, a, b) == cudaErrorInvalidResourceHandle); // never recorded
  REQUIRE(cudaEventRecord(a, s) == cudaSuccess);
  REQUIRE(simtest::launch(s, 60 * ms) == cudaSuccess);
  REQUIRE(cudaEventRecord(b, s) == cudaSuccess);
  REQUIRE(cudaEventRecord(untimed, s) == cudaSuccess);
  CHECK(cudaEventQuery(b) == cudaErrorNotReady);
  CHECK(cudaEventElapsedTime(&t, a, b) == cudaErrorNotReady);
  CHECK(cudaGetLastError() == cudaErrorNotReady);
  REQUIRE(cudaEventSynchronize(untimed) == cudaSuccess);
  CHECK(cudaEventQuery(b) == cudaSuccess);
  REQUIRE(cudaEventElapsedTime(&t, a, b) == cudaSuccess);
  CHECK(t >= 59.0f); // the kernel's 60 ms of device time lie between the two
  CHECK(cudaEventElapsedTime(&t, a, untimed) == cudaErrorInvalidResourceHandle);
  CHECK(cudaEventCreateWithFlags(&untimed, 0x100) == cudaErrorInvalidValue);
  CHECK(cudaEventDestroy(a) == cudaSuccess);
  CHECK(cudaEventQuery(a) == cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
}

TEST_CASE("waiting on an event spins unless it was made with cudaEventBlockingSync") {
  fresh_state st("blocking");
  st.use_here();
  cudaEvent_t spin = nullptr, block = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&spin, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&block, cudaEventBlockingSync | cudaEventDisableTiming) ==
          cudaSuccess);
  const cudasimStats before = cudasim::stats();
  REQUIRE(simtest::launch(nullptr, 50 * ms) == cudaSuccess);
  REQUIRE(cudaEventRecord(spin, nullptr) == cudaSuccess);
  REQUIRE(cudaEventSynchronize(spin) == cudaSuccess);
  const cudasimStats mid = cudasim::stats();
  REQUIRE(simtest::launch(nullptr, 50 * ms) == cudaSuccess);
  REQUIRE(cudaEventRecord(block, nullptr) == cudaSuccess);
  REQUIRE(cudaEventSynchronize(block) == cudaSuccess);
  const cudasimStats after = cudasim::stats();
  CHECK(mid.spin_wait_ns - before.spin_wait_ns >= 40 * ms);
  CHECK(mid.blocking_wait_ns == before.blocking_wait_ns);
  CHECK(after.blocking_wait_ns - mid.blocking_wait_ns >= 40 * ms);
  CHECK(after.spin_wait_ns == mid.spin_wait_ns);
  CHECK(cudasim::api_calls("cudaEventSynchronize") == 2);
}

// --- stream capture and graphs --------------------------------------------------------------

TEST_CASE("global capture: an unsafe call from another thread fails and invalidates the capture") {
  fresh_state st("capglobal");
  st.use_here();
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(simtest::launch(s, 1 * ms) == cudaSuccess);
  cudaError_t other = cudaSuccess;
  std::thread([&] {
    void* p = nullptr;
    other = cudaMalloc(&p, 1024);
  }).join();
  CHECK(other == cudaErrorStreamCaptureUnsupported);
  CHECK(cudaDeviceSynchronize() == cudaErrorStreamCaptureUnsupported);
  cudaStreamCaptureStatus status{};
  REQUIRE(cudaStreamIsCapturing(s, &status) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusInvalidated);
  cudaGraph_t g = nullptr;
  CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);
  CHECK(g == nullptr);
  (void)cudaGetLastError();
}

TEST_CASE(
    "thread-local capture ignores other threads, and relaxed mode allows the capturing thread") {
  fresh_state st("caplocal");
  st.use_here();
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  cudaError_t other = cudaErrorUnknown;
  void* p = nullptr;
  std::thread([&] { other = cudaMalloc(&p, 1024); }).join();
  CHECK(other == cudaSuccess);
  cudaEvent_t e = nullptr;
  REQUIRE(cudaEventCreate(&e) == cudaSuccess);
  // The capturing thread itself may make an unsafe call only in relaxed mode.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  REQUIRE(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
  CHECK(mode == cudaStreamCaptureModeGlobal); // the default
  CHECK(cudaEventQuery(e) == cudaSuccess);
  REQUIRE(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
  CHECK(cudaEventQuery(e) == cudaErrorStreamCaptureUnsupported);
  cudaGraph_t g = nullptr;
  CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);
  CHECK(cudaFree(p) == cudaSuccess);
  (void)cudaGetLastError();
}

TEST_CASE("capture: captured events, synchronising the capturing stream, and the legacy stream") {
  fresh_state st("caprules");
  st.use_here();
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess); // a blocking stream
  cudaEvent_t e = nullptr;
  REQUIRE(cudaEventCreate(&e) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  REQUIRE(cudaEventRecord(e, s) == cudaSuccess);
  CHECK(cudaEventQuery(e) == cudaErrorCapturedEvent);
  CHECK(cudaEventSynchronize(e) == cudaErrorCapturedEvent);
  // The legacy stream while a blocking stream captures: an implicit dependency, refused. Asking
  // whether it captures is refused too, but does not invalidate the capture.
  cudaStreamCaptureStatus status{};
  CHECK(cudaStreamIsCapturing(nullptr, &status) == cudaErrorStreamCaptureImplicit);
  REQUIRE(cudaStreamIsCapturing(s, &status) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusActive);
  CHECK(simtest::launch(nullptr, 1000) == cudaErrorStreamCaptureImplicit);
  REQUIRE(cudaStreamIsCapturing(s, &status) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusInvalidated);
  CHECK(cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported);
  // Once invalidated, work for the stream fails until the capture ends.
  CHECK(simtest::launch(s, 1000) == cudaErrorStreamCaptureInvalidated);
  cudaGraph_t g = nullptr;
  CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);
  REQUIRE(cudaEventRecord(e, s) == cudaSuccess); // recorded outside a capture again: usable
  CHECK(cudaEventSynchronize(e) == cudaSuccess);
  (void)cudaGetLastError();
}

TEST_CASE("a captured graph replays its kernels and its memory nodes charge at launch") {
  fresh_state st("graphs");
  st.use_here();
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  nvml ml;
  void* d = ml.device(0);
  int counter = 0;
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(cudaMallocAsync(&p, 64 * MiB, s) == cudaSuccess);
  CHECK(p != nullptr);
  REQUIRE(simtest::launch_count(s, 30 * ms, &counter) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  size_t nodes = 0;
  REQUIRE(cudaGraphGetNodes(g, nullptr, &nodes) == cudaSuccess);
  CHECK(nodes == 3);   // alloc, kernel, free
  CHECK(counter == 0); // captured, not run
  const auto before = ml.used_by(d, ::getpid());
  cudaGraphExec_t x = nullptr;
  REQUIRE(cudaGraphInstantiate(&x, g, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(x, s) == cudaSuccess);
  CHECK(ml.used_by(d, ::getpid()) == before + 64 * MiB); // charged while the replay runs
  REQUIRE(cudaGraphLaunch(x, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(counter == 2);
  // The free node ended the allocation, but the graph memory pool keeps the memory until
  // cudaDeviceGraphMemTrim (cudasim-capture.cpp has the graph pool's rules).
  CHECK(ml.used_by(d, ::getpid()) == before + 64 * MiB);
  CHECK(cudaDeviceGraphMemTrim(0) == cudaSuccess);
  CHECK(ml.used_by(d, ::getpid()) == before);
  CHECK(cudaGraphExecDestroy(x) == cudaSuccess);
  CHECK(cudaGraphDestroy(g) == cudaSuccess);
}

// --- stream-ordered pools -------------------------------------------------------------------

TEST_CASE("stream-ordered pools: reserved vs used, release threshold at synchronisation, trim") {
  fresh_state st("pools");
  st.use_here();
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  cudaMemPool_t pool = nullptr;
  REQUIRE(cudaDeviceGetMemPool(&pool, 0) == cudaSuccess);
  auto attr = [&](cudaMemPoolAttr a) {
    std::uint64_t v = 0;
    REQUIRE(cudaMemPoolGetAttribute(pool, a, &v) == cudaSuccess);
    return v;
  };
  void* p = nullptr;
  REQUIRE(cudaMallocAsync(&p, 10 * MiB, s) == cudaSuccess);
  CHECK(attr(cudaMemPoolAttrUsedMemCurrent) == 10 * MiB);
  CHECK(attr(cudaMemPoolAttrReservedMemCurrent) >= 10 * MiB);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(attr(cudaMemPoolAttrUsedMemCurrent) == 0);
  CHECK(attr(cudaMemPoolAttrReservedMemCurrent) == 0); // threshold 0: released at the sync
  std::uint64_t threshold = 64 * MiB;
  REQUIRE(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold) ==
          cudaSuccess);
  REQUIRE(cudaMallocAsync(&p, 10 * MiB, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(attr(cudaMemPoolAttrReservedMemCurrent) >= 10 * MiB); // kept: under the threshold
  REQUIRE(cudaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(attr(cudaMemPoolAttrReservedMemCurrent) == 0);
}

TEST_CASE("cudaFree of a stream-ordered allocation does not wait for the stream") {
  fresh_state st("freeasync");
  st.use_here();
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(cudaMallocAsync(&p, 1 * MiB, s) == cudaSuccess);
  REQUIRE(simtest::launch(s, 150 * ms) == cudaSuccess);
  REQUIRE(cudaFree(p) == cudaSuccess);
  CHECK(cudaStreamQuery(s) == cudaErrorNotReady); // the kernel that may use p still runs
  // cudaFree of cudaMalloc memory, by contrast, synchronises the device first.
  void* q = nullptr;
  REQUIRE(cudaMalloc(&q, 1 * MiB) == cudaSuccess);
  REQUIRE(cudaFree(q) == cudaSuccess);
  CHECK(cudaStreamQuery(s) == cudaSuccess);
}

TEST_CASE("kernel models run in stream order, after the copies before them") {
  fresh_state st("order");
  st.use_here();
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  int* counter = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&counter), sizeof(int)) == cudaSuccess);
  const int forty = 40;
  REQUIRE(cudaMemcpyAsync(counter, &forty, sizeof forty, cudaMemcpyHostToDevice, s) == cudaSuccess);
  REQUIRE(simtest::launch_count(s, 1000, counter) == cudaSuccess);
  REQUIRE(simtest::launch_count(s, 1000, counter) == cudaSuccess);
  int host = 0;
  REQUIRE(cudaMemcpy(&host, counter, sizeof host, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(host == 42); // cudaMemcpy on the legacy stream waited for the blocking stream
  REQUIRE(cudaFree(counter) == cudaSuccess);
}
