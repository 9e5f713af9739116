// SPDX-License-Identifier: Apache-2.0
// The CUDA layer after a device fault (issue 25, item 1). A kernel fault leaves a sticky error:
// "any further CUDA work will return the same error" (driver_types.h:913-914, on
// cudaErrorLaunchFailure), cudaEventQuery and cudaEventElapsedTime included. The completion of a
// guarded region caught by the fault cannot be known then: it must not be accounted as done, and
// its guard must not keep the GPU. The fault is injected by the simulated runtime
// (CUDASIM_STICKY_AT_LAUNCH), in a process of its own; on a real runtime the test is skipped.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include <gpushare/cuda.hpp>

#include "cuda_test_util.hpp"
#include "kernels.hpp"

namespace gc = gpushare::cuda;

namespace {

using cutest::gate;
using cutest::stream;

/// Checks in the child process: prints each failed one, counts them.
struct child_checks {
  int failed = 0;
  void operator()(bool ok, const char* what) {
    if (ok) return;
    ++failed;
    std::printf("child: FAILED %s\n", what);
    std::fflush(stdout);
  }
};

/// Runs the good region (launch 1) and the region that faults (launch 2) in session `s`; the
/// gate holds the faulting kernel back until its guard has ended, so that the region is in
/// flight, its stop event recorded behind the fault. Returns the session's device time before
/// the fault.
std::uint64_t good_then_faulting_region(gc::device_session& s, cudaStream_t st,
                                        child_checks& expect) {
  {
    gc::scoped_kernel guard(s, st);
    expect(gpushare_test::launch_spin(st, 5'000'000) == cudaSuccess, "launch 1");
  }
  s.synchronize();
  const std::uint64_t before = s.info().device_ns;
  expect(before >= 5'000'000, "the good region is accounted");
  gate g;
  {
    gc::scoped_kernel guard(s, st);
    expect(cudaLaunchHostFunc(st, gate::wait, &g) == cudaSuccess, "the gate");
    expect(gpushare_test::launch_spin(st, 50'000'000) == cudaSuccess, "launch 2 (faults later)");
  }
  expect(s.shared_state()->regions_in_flight() == 1, "the faulting region is in flight");
  g.release();
  expect(cudaStreamSynchronize(st) == cudaErrorLaunchFailure, "the application sees the fault");
  return before;
}

} // namespace

TEST_CASE("a guarded region caught by a device fault is not accounted and its guard holds "
          "nothing") {
  CUTEST_REQUIRE_CUDASIM();
  if (!cutest::in_child()) {
    // The child exits with 42 when every check there held (0 would also be a filter that matched
    // nothing).
    CHECK(cutest::run_in_child("a guarded region caught by a device fault*",
                               {{"CUDASIM_STICKY_AT_LAUNCH", "2"}}) == 42);
    return;
  }
  child_checks expect;
  { // (a scope, so the session and the table are cleaned up before the exit)
    cutest::private_domain d("faultregion");
    gc::device_options o = cutest::no_overhead();
    o.max_in_flight = std::chrono::seconds(10); // the faulting region stays in flight at its end
    gc::device_session s(0, d.options(), o);
    d.uses(s.device().uuid);
    stream st;
    const std::uint64_t before = good_then_faulting_region(s, st.s, expect);
    // What leave() and a handover do first: a bounded drain. The stop event's query returns the
    // sticky error, so the region's completion is unknown: no device time, its events dropped.
    gc::detail::device_state& state = *s.shared_state();
    expect(state.drain_regions(gc::detail::wait_limit::drain_timeout) == 0,
           "no device time for the faulted region");
    expect(state.regions_in_flight() == 0, "nothing left in flight");
    expect(s.statistics().unknown_regions == 1, "the region counted as unknown");
    expect(s.info().device_ns == before, "the session's device time unchanged");
    expect(s.info().active_guards == 0, "no guard open after the faulted one");
    // A new guard cannot start: it reports CUDA's sticky error, and releases the GPU again.
    try {
      gc::scoped_kernel guard(s, st.s);
      expect(false, "a guard started after the fault");
    } catch (const gpushare::error& e) {
      const std::string what = e.what();
      std::printf("child: the guard after the fault threw: %s\n", what.c_str());
      expect(e.code() == gpushare::errc::cuda_error, "errc::cuda_error");
      expect(what.find("cudaErrorLaunchFailure") != std::string::npos, "names the sticky error");
    }
    expect(s.info().active_guards == 0, "the failed guard holds nothing");
    expect(gc::detail::guards_on_this_thread == 0, "no guard counted on this thread");
    expect(cudaGetLastError() == cudaErrorLaunchFailure, "the thread's error is the fault's");
    s.leave(); // waits for nothing more: the faulted region is gone
    expect(s.statistics().unknown_regions == 1, "leave() found nothing else");
  }
  std::fflush(stdout);
  ::_exit(expect.failed == 0 ? 42 : 1);
}
