// SPDX-License-Identifier: Apache-2.0
// The layout of the shared state object (shared.hpp), private to shared.cpp (the object, its
// contexts and memory) and slices.cpp (time slices). Its first two fields are state_id.hpp's;
// any change of the layout changes state_version.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

#include "shared.hpp"

namespace cudasim {

enum ctx_state : std::int32_t { ctx_free = 0, ctx_live = 1, ctx_dead = 2 };

struct shared::layout {
  std::uint64_t magic;
  std::uint32_t version;
  std::atomic<std::uint32_t> ready;
  pthread_mutex_t lock;
  std::int32_t units;
  std::int32_t gpus;
  std::int32_t mig;
  std::uint64_t total[max_units];
  std::uint64_t slice_ns;    // the creator's CUDASIM_SLICE_US: one value for all processes
  std::uint64_t teardown_ns; // the creator's CUDASIM_TEARDOWN_MS
  std::uint64_t last_sweep;
  /// A device's schedule (slices.cpp). Times are CLOCK_MONOTONIC ns; the schedule is computed
  /// up to `clock` by whichever process looks first, so it does not depend on when the
  /// processes' threads happen to run.
  struct device {
    std::int32_t owner;        // context slot holding the device, -1 when no context has work
    std::uint32_t generation;  // futex word: changes with every change of the schedule
    std::uint64_t owned_since; // when the owner got the device
    std::uint64_t slice_end;   // when the owner's slice ends, if another context has work
    std::uint64_t clock;       // the schedule is computed up to this time
  } dev[max_units];
  struct context {
    std::int32_t state;
    std::int32_t pid;
    std::uint64_t started;
    std::int32_t unit;
    std::uint64_t bytes;
    std::uint64_t dead_since;
    std::uint64_t device_ns; // time it has held the device (for the owner: until owned_since)
    std::uint64_t need_ns;   // the device_ns at which its last running kernel completes
    std::uint64_t switches;  // times the device passed to it or from it
  } ctx[max_contexts];
};

class shared::guard {
public:
  explicit guard(layout* l) : l_(l) {
    const int rc = ::pthread_mutex_lock(&l_->lock);
    if (rc == EOWNERDEAD) ::pthread_mutex_consistent(&l_->lock);
  }
  ~guard() { ::pthread_mutex_unlock(&l_->lock); }
  guard(const guard&) = delete;
  guard& operator=(const guard&) = delete;

private:
  layout* l_;
};

} // namespace cudasim
