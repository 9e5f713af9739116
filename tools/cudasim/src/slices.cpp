// SPDX-License-Identifier: Apache-2.0
// Time slices between the contexts of a device (docs/cudasim.md, "Time slices").
//
// One context holds a device at a time. A kernel's device time advances only while its context
// holds the device; kernels of the holder (on any of its streams) advance together. A context
// wants the device while one of its kernels has device time left. While others want it too, the
// holder keeps it for one slice (CUDASIM_SLICE_US) and it passes to the next context that wants
// it, in slot order (round robin); a holder without rivals keeps it, and its slice starts when a
// rival arrives. When the holder's last kernel completes, the device passes on at once.
//
// The schedule is a function of the kernels' arrivals and lengths alone: every thread that looks
// (under the state's lock) first computes it up to the present (schedule()), so the moments of
// hand-over are the exact slice ends and completions even when the thread that would have
// noticed them runs late. Threads wait on the device's futex word, with a deadline at the next
// moment that concerns them (their kernel's completion, the holder's slice end); every change of
// the schedule wakes them. A stopped process's kernels keep running in its turns, as on a GPU; a
// dead process's context gives up the device when its death is noticed.
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

#include "shared_layout.hpp"

namespace cudasim {

namespace {

constexpr std::uint64_t never = UINT64_MAX;
/// The longest a thread sleeps without looking again: a safety net, as it is woken at changes.
constexpr std::uint64_t max_wait_ns = 50'000'000;

/// Sleeps until *word differs from `expected`, a wake-up, or CLOCK_MONOTONIC time `until` (ns).
void futex_wait_until(std::uint32_t* word, std::uint32_t expected, std::uint64_t until) {
  const timespec ts{static_cast<time_t>(until / 1'000'000'000),
                    static_cast<long>(until % 1'000'000'000)};
  // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline (shared, not private: the word
  // is in memory other processes map).
  ::syscall(SYS_futex, word, FUTEX_WAIT_BITSET, expected, &ts, nullptr, FUTEX_BITSET_MATCH_ANY);
}

void futex_wake(std::uint32_t* word) {
  ::syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

} // namespace

std::uint64_t shared::held(int slot, std::uint64_t t) const {
  const auto& x = base_->ctx[slot];
  const auto& d = base_->dev[x.unit];
  return x.device_ns + (d.owner == slot && t > d.owned_since ? t - d.owned_since : 0);
}

bool shared::others_want(int unit, int slot) const {
  for (int i = 0; i < max_contexts; ++i) {
    const auto& x = base_->ctx[i];
    if (i != slot && x.state == ctx_live && x.unit == unit && x.need_ns > x.device_ns) return true;
  }
  return false;
}

int shared::next_wanting(int unit, int after) const {
  for (int k = 1; k <= max_contexts; ++k) {
    const int i = (after + k + max_contexts) % max_contexts;
    const auto& x = base_->ctx[i];
    if (x.state == ctx_live && x.unit == unit && x.need_ns > x.device_ns) return i;
  }
  return -1;
}

void shared::hand_over(int unit, std::uint64_t at) {
  auto& d = base_->dev[unit];
  const int from = d.owner;
  auto& x = base_->ctx[from];
  if (at > d.owned_since) x.device_ns += at - d.owned_since;
  const int to = next_wanting(unit, from);
  if (to >= 0 && to != from && x.state == ctx_live) {
    ++x.switches;
    ++base_->ctx[to].switches;
  }
  d.owner = to;
  d.owned_since = at;
  d.slice_end = at + base_->slice_ns;
  ++d.generation;
  futex_wake(&d.generation);
}

std::uint64_t shared::schedule(int unit, std::uint64_t t) {
  auto& d = base_->dev[unit];
  for (;;) {
    if (d.owner < 0) break;
    const auto& x = base_->ctx[d.owner];
    // When the holder's turn ends: at once for a context that ended, else when its kernels
    // complete, or at its slice's end if another context wants the device.
    std::uint64_t end = std::max(d.owned_since, d.clock);
    if (x.state == ctx_live && x.unit == unit) {
      end = d.owned_since + (x.need_ns > x.device_ns ? x.need_ns - x.device_ns : 0);
      if (others_want(unit, d.owner)) end = std::min(end, d.slice_end);
    }
    if (end > t) {
      d.clock = std::max(d.clock, t);
      return end;
    }
    hand_over(unit, end);
  }
  d.clock = std::max(d.clock, t);
  return never;
}

void shared::arrive(int unit, int slot, std::uint64_t t, std::uint64_t target) {
  auto& d = base_->dev[unit];
  auto& x = base_->ctx[slot];
  const bool wanted = x.need_ns > held(slot, t);
  const bool alone = d.owner >= 0 && !others_want(unit, d.owner);
  x.need_ns = std::max(x.need_ns, target);
  if (d.owner < 0) {
    d.owner = slot; // an idle device: it starts at once
    d.owned_since = t;
    d.slice_end = t + base_->slice_ns;
  } else if (d.owner != slot && !wanted && alone) {
    d.slice_end = t + base_->slice_ns; // the holder's first rival: its slice starts now
  } else {
    return; // nobody's next moment changed
  }
  ++d.generation;
  futex_wake(&d.generation);
}

void shared::execute(int unit, int slot, std::uint64_t ns) {
  if (ns == 0) return;
  layout* l = base_;
  auto& d = l->dev[unit];
  auto& me = l->ctx[slot];
  std::uint64_t target = 0; // the context's held time at which this kernel completes
  {
    guard g(l);
    const std::uint64_t t = now_ns();
    sweep(t);
    if (me.state != ctx_live) return; // the process is closing its contexts (exit)
    schedule(unit, t);
    target = held(slot, t) + ns;
    arrive(unit, slot, t, target);
  }
  for (;;) {
    std::uint64_t until = 0;
    std::uint32_t generation = 0;
    {
      guard g(l);
      const std::uint64_t t = now_ns();
      sweep(t);
      until = schedule(unit, t);
      if (held(slot, t) >= target || me.state != ctx_live) return;
      if (d.owner == slot) until = std::min(until, d.owned_since + (target - me.device_ns));
      until = std::min(until, t + max_wait_ns);
      generation = d.generation;
    }
    futex_wait_until(&d.generation, generation, until);
  }
}

std::uint64_t shared::switches(int slot) {
  guard g(base_);
  return base_->ctx[slot].switches;
}

} // namespace cudasim
