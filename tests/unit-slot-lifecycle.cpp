// SPDX-License-Identifier: Apache-2.0
// The slot lifecycle and the memory- and device-waiter counts as pure functions (detail/slot.hpp,
// detail/budget.hpp, the scheduler's waiter functions), driven by a seeded random sequence of
// joins, reservations, waits, ends, reclaims, repairs and capacity changes on an unmapped table.
// After every step the header's derived totals must equal what the slots say, a freed slot must
// count nowhere, and a joined slot must start clean: the properties every process relies on.
#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gpushare/detail/slot.hpp>
#include <gpushare/detail/snapshot.hpp>
#include <gpushare/types.hpp>

namespace d = gpushare::detail;

namespace {
constexpr std::uint64_t mib = 1ull << 20;

struct fake_table {
  explicit fake_table(std::uint32_t n, std::uint64_t capacity)
      : header(std::make_unique<d::table_header>()), slots(n) {
    header->capacity = capacity;
  }
  d::table_view view() {
    return {header.get(), slots.data(), static_cast<std::uint32_t>(slots.size())};
  }
  bool active(std::uint32_t i) const {
    return slots[i].state.load(std::memory_order_relaxed) == d::slot_active;
  }
  std::unique_ptr<d::table_header> header;
  std::vector<d::slot_record> slots;
};

/// The header's derived figures must be what the active slots add up to.
void check_totals(fake_table& t, std::uint64_t step) {
  std::uint64_t reserved = 0, committed = 0, device_waiters = 0;
  std::uint32_t live = 0, memory_waiters = 0;
  for (std::uint32_t i = 0; i < t.slots.size(); ++i) {
    const d::slot_record& s = t.slots[i];
    if (!t.active(i)) {
      CHECK_MESSAGE(s.memory.waiting == 0, "step " << step << ": free slot " << i);
      CHECK_MESSAGE(s.compute.wants_device == 0, "step " << step << ": free slot " << i);
      continue;
    }
    ++live;
    reserved += s.memory.reserved;
    committed += d::commitment(s);
    memory_waiters += s.memory.waiting;
    device_waiters += s.compute.wants_device;
  }
  const d::table_header& h = *t.header;
  CHECK_MESSAGE(h.reserved_total == reserved, "step " << step);
  CHECK_MESSAGE(h.committed_total == committed, "step " << step);
  CHECK_MESSAGE(h.live_sessions == live, "step " << step);
  CHECK_MESSAGE(h.memory_waiters == memory_waiters, "step " << step);
  CHECK_MESSAGE(h.device_waiters.load() == device_waiters, "step " << step);
}

/// A slot just joined holds its identity, its settings and its guarantee, and nothing else of
/// whatever was there before.
void check_fresh(const fake_table& t, std::uint32_t i, const d::slot_settings& st) {
  const d::slot_record& s = t.slots[i];
  CHECK(s.settings.priority == st.priority);
  CHECK(s.settings.share == st.share);
  CHECK(s.settings.memory_guarantee == st.memory_guarantee);
  CHECK(s.memory.reserved == 0);
  CHECK(s.memory.external == 0);
  CHECK(s.memory.waiting == 0);
  CHECK(s.stats.reservations_granted == 0);
  CHECK(s.stats.guards == 0);
  CHECK(s.stats.reserve_waits == 0);
  CHECK(s.compute.wants_device == 0);
  CHECK(s.compute.quantum_debt_ns == 0);
  CHECK(s.compute.last_turn_busy == 0);
  CHECK(s.lease.load() == 0);
  CHECK(s.journal_exits.load() == 0);
}

struct walker {
  fake_table& t;
  std::mt19937_64& rng;
  std::vector<std::uint32_t> generation; // the last generation each slot had
  std::uint64_t now = 1'000'000;

  std::uint64_t pick(std::uint64_t n) { return rng() % n; }

  void join(std::uint32_t i) {
    d::slot_settings st{};
    st.priority = static_cast<int>(pick(4));
    st.share = 1 + static_cast<std::uint32_t>(pick(8));
    st.quantum_ns = 5'000'000;
    st.compute_limit_ppm = 1'000'000;
    st.memory_limit = t.header->capacity;
    st.memory_guarantee = pick(3) == 0 ? pick(64) * mib : 0;
    if (!d::join_fits(*t.header, st.memory_guarantee)) return;
    const std::string name = std::string("s").append(std::to_string(pick(1000)));
    gpushare::platform_identity id; // half the sessions say who they belong to
    if (pick(2) == 0) {
      id.pod = name;
      id.slurm_job_id = static_cast<std::uint32_t>(pick(5));
    }
    const std::uint32_t g = d::join_slot(t.view(), i, {1234, 1, 2, name, &id}, st);
    CHECK(g == generation[i] + 1); // (slot, generation) never names an earlier session
    generation[i] = g;
    check_fresh(t, i, st);
    CHECK(std::string(t.slots[i].name) == name);
    CHECK(d::read_platform(t.slots[i].platform) == id); // never the previous session's
  }

  void use(std::uint32_t i) {
    d::table_header& h = *t.header;
    d::slot_record& s = t.slots[i];
    switch (pick(8)) {
    case 0:
    case 1:
      if (const std::uint64_t b = pick(128) * mib;
          d::check_grow(h, s, b) == d::budget_verdict::granted)
        d::apply_grow(h, s, b);
      break;
    case 2: d::apply_shrink(h, s, pick(128) * mib); break;
    case 3:
      d::set_usage(h, s, s.memory.reserved, pick(64) * mib, s.settings.memory_guarantee);
      break;
    case 4: d::add_memory_waiter(h, s); break;
    case 5: d::remove_memory_waiters(h, s, static_cast<std::uint32_t>(pick(3))); break;
    case 6:
      if (s.memory.waiting > 0) d::memory_wait_ended(h, s, pick(1000));
      break;
    default: d::add_waiter(t.view(), i, now); break;
    }
  }

  void step(std::uint64_t k) {
    now += pick(1'000'000);
    const auto i = static_cast<std::uint32_t>(pick(t.slots.size()));
    const std::uint64_t what = pick(100);
    if (!t.active(i)) {
      if (what < 60) join(i);
    } else if (what < 75) {
      use(i);
    } else if (what < 82) {
      (void)d::end_slot(t.view(), i, now);
    } else if (what < 88) {
      const std::uint64_t before = t.header->sessions_reclaimed;
      (void)d::reclaim_slot(t.view(), i, now);
      CHECK(t.header->sessions_reclaimed == before + 1);
    } else if (what < 92) {
      // A lock owner died: every slot the dice call dead is freed, the totals rebuilt.
      const std::uint64_t dead_mask = rng();
      (void)d::repair_slots(
          t.view(), d::nobody, [&](std::uint32_t j) { return (dead_mask >> j & 1) == 0; }, now);
    } else if (what < 96) {
      if (const std::uint64_t c = (256 + pick(1024)) * mib; c >= t.header->committed_total)
        d::set_capacity(t.view(), c);
    } else {
      use(i);
    }
    check_totals(t, k);
  }
};
} // namespace

TEST_CASE("seeded random walks of the slot lifecycle keep every derived total equal to the slots") {
  for (std::uint64_t seed = 1; seed <= 24; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    fake_table t(8, 512 * mib);
    walker w{t, rng, std::vector<std::uint32_t>(8, 0)};
    for (std::uint64_t k = 0; k < 3000; ++k) w.step(k);
  }
}

TEST_CASE("a slot ended with memory waiters and device waiters counts nowhere afterwards") {
  fake_table t(4, 1024 * mib);
  d::slot_settings st{};
  st.share = 1;
  st.memory_limit = 1024 * mib;
  st.memory_guarantee = 100 * mib;
  REQUIRE(d::join_slot(t.view(), 2, {}, st) == 1);
  d::apply_grow(*t.header, t.slots[2], 300 * mib);
  d::add_memory_waiter(*t.header, t.slots[2]);
  d::add_memory_waiter(*t.header, t.slots[2]);
  d::add_waiter(t.view(), 2, 5);
  CHECK(t.header->memory_waiters == 2);
  CHECK(t.header->committed_total == 300 * mib);
  (void)d::end_slot(t.view(), 2, 10);
  CHECK(t.header->memory_waiters == 0);
  CHECK(t.header->committed_total == 0);
  CHECK(t.header->reserved_total == 0);
  CHECK(t.header->live_sessions == 0);
  CHECK(t.header->device_waiters.load() == 0);
  CHECK(t.slots[2].memory.waiting == 0);
  // Rejoined: a new generation, nothing inherited.
  CHECK(d::join_slot(t.view(), 2, {}, st) == 2);
  check_fresh(t, 2, st);
  CHECK(t.header->committed_total == 100 * mib);
}
