// SPDX-License-Identifier: Apache-2.0
// Draining at a guard's exit (issue 41, item 1; include/gpushare/detail/guard.hpp, "Draining at
// the exit"): an exit that hands the device over first waits for the session's regions still in
// flight, while its guard still counts as running, so the next holder never starts behind them.
// The decision is the exit's own, under the lock that makes it: a waiter that arrives after the
// guard's end began (the race of the earlier rule, decided before the exit) is covered too. Each
// test parks the exiting thread at a crash point inside the window, lets the waiter in, and
// checks at the waiter's grant that the holder's work had finished (a host function after it
// sets a flag). On a GPU and on the simulated runtime (label cudasim).
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string_view>
#include <thread>

#include <gpushare/cuda.hpp>

#include "cuda_test_util.hpp"
#include "kernels.hpp"
#include "parking.hpp"

namespace gc = gpushare::cuda;
using namespace std::chrono_literals;

namespace {

using cutest::no_overhead;
using cutest::parking;
using cutest::stream;

void CUDART_CB set_flag(void* flag) { static_cast<std::atomic<bool>*>(flag)->store(true); }

/// Guards of 0.2 ms kernels until the session has a short average region (so that a long one
/// stays in flight past its guard: the allowance is 2 ms of average regions).
void warm_up(gc::device_session& s, cudaStream_t st) {
  for (int i = 0; i < 20; ++i) {
    gc::scoped_kernel g(s, st);
    REQUIRE(gpushare_test::launch_spin(st, 200'000) == cudaSuccess);
  }
  s.synchronize();
}

/// What finished_at_grant saw.
struct grant_seen {
  bool finished = false;    ///< a's work had finished when b got the device
  std::uint64_t drains = 0; ///< drains a made on its way out
};

/// Holder `a` (normal class) ends a guard around 50 ms of work and is parked at `park_at` on
/// its way out; `b` (high class) asks for the device after the guard's end began, or, with
/// `waiter_first`, before it (then the park is inside the exit's drain).
grant_seen finished_at_grant(gc::device_session& a, gc::device_session& b, const char* park_at,
                             bool waiter_first = false) {
  stream sa, sb;
  const std::uint64_t drains_before = a.statistics().drains;
  std::atomic<bool> a_done{false}, done_at_grant{false}, in_guard{false}, b_waits{false};
  std::thread holder([&] {
    parking::arm(park_at, std::this_thread::get_id());
    gc::scoped_kernel g(a, sa.s);
    CHECK(gpushare_test::launch_spin(sa.s, 50'000'000) == cudaSuccess);
    CHECK(cudaLaunchHostFunc(sa.s, &set_flag, &a_done) == cudaSuccess);
    in_guard = true;
    while (waiter_first && !b_waits.load()) std::this_thread::sleep_for(1ms);
  });
  std::thread waiter;
  const auto start_waiter = [&] {
    waiter = std::thread([&] {
      gc::scoped_kernel g(b, sb.s);
      done_at_grant = a_done.load();
    });
    while (b.info().waiting_for_device == 0) std::this_thread::sleep_for(1ms);
  };
  if (waiter_first) {
    while (!in_guard.load()) std::this_thread::sleep_for(1ms);
    start_waiter();
    b_waits = true;
    REQUIRE(parking::wait_parked(30s));
  } else {
    REQUIRE(parking::wait_parked(30s));
    start_waiter();
  }
  CHECK(b.info().guards == 0); // not granted while a's guard still runs (or drains)
  CHECK(b.info().waiting_for_device == 1);
  parking::release();
  holder.join();
  waiter.join();
  parking::disarm();
  const grant_seen seen{done_at_grant.load(), a.statistics().drains - drains_before};
  a.synchronize();
  CHECK(a_done.load());
  return seen;
}

} // namespace

TEST_CASE("a lease guard's exit drains its queued work before it hands the device to a waiter "
          "that came after the guard's end began") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("drainlease");
  gc::device_session a(0, d.options("low"), no_overhead());
  d.uses(a.device().uuid);
  gc::device_session b(0, d.options("high", gpushare::priority::high), no_overhead());
  stream st;
  warm_up(a, st.s); // a now holds the device on its lease
  const std::uint64_t on_lease = a.info().guards_on_lease;
  // Parked after the exit's check that it is still joined, before its lease update: the earlier
  // rule had decided "no drain" before this point (nobody waited), and handed the device over
  // with the 50 ms still queued.
  const grant_seen seen = finished_at_grant(a, b, "lease.exit.checked");
  CHECK(seen.finished);
  CHECK(seen.drains == 1);
  CHECK(a.info().guards_on_lease == on_lease + 1); // entered on the lease, settled on its way out
  CHECK(b.info().guards == 1);
}

TEST_CASE("a locked guard's exit decides to drain under its own lock and the waiter is not "
          "granted the device before the drain ends") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("drainlocked");
  gpushare::session_options oa = d.options("low");
  oa.compute_limit_ppm = 999'999; // no lease: every guard enters and exits the locked way
  gc::device_session a(0, oa, no_overhead());
  d.uses(a.device().uuid);
  gc::device_session b(0, d.options("high", gpushare::priority::high), no_overhead());
  stream st;
  warm_up(a, st.s);
  CHECK(a.info().guards_on_lease == 0);
  // b waits before a's guard ends; a is parked at the drain itself (its exit saw the handover
  // due with work in flight, changed nothing, unlocked and drains): b is not granted meanwhile,
  // and is granted only after the work finished.
  const grant_seen seen = finished_at_grant(a, b, "guard.exit.drain", true);
  CHECK(seen.finished);
  CHECK(seen.drains == 1);
  CHECK(b.info().guards == 1);
}

TEST_CASE("an exit that hands nothing over does not drain: the work stays queued") {
  CUTEST_REQUIRE_GPU();
  cutest::private_domain d("drainnone");
  gc::device_session a(0, d.options("alone"), no_overhead());
  d.uses(a.device().uuid);
  stream st;
  warm_up(a, st.s);
  const std::uint64_t drains = a.statistics().drains;
  {
    gc::scoped_kernel g(a, st.s);
    REQUIRE(gpushare_test::launch_spin(st.s, 20'000'000) == cudaSuccess);
  }
  CHECK(a.shared_state()->regions_in_flight() == 1); // nobody waits: left queued
  CHECK(a.statistics().drains == drains);
  a.synchronize();
}
