// SPDX-License-Identifier: Apache-2.0
// Session groups (detail/group.hpp) as pure functions of the table state: the group's memory
// limit over its members' commitments, with a seeded random property check, and the group's
// compute share as one virtual time that every member of a class advances together.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gpushare/detail/group.hpp>
#include <gpushare/detail/scheduler.hpp>
#include <gpushare/detail/slot.hpp>

namespace d = gpushare::detail;
using d::budget_verdict;

namespace {
constexpr std::uint64_t MiB = 1ull << 20;

d::slot_group group_of(const std::string& name, std::uint64_t limit, std::uint32_t share = 1) {
  d::slot_group g{};
  std::memcpy(g.name, name.data(), std::min(name.size(), d::group_capacity - 1));
  g.memory_limit = limit;
  g.share = share;
  return g;
}

/// A heap-allocated table state of `n` slots (the layout is the shared one, unmapped).
struct fake_table {
  explicit fake_table(std::uint64_t capacity, std::uint32_t n = 8)
      : header(std::make_unique<d::table_header>()), slots(n) {
    header->capacity = capacity;
  }
  d::slot_record& join(std::uint32_t i, const d::slot_group& g, std::uint64_t guarantee = 0,
                       int priority = 5, std::uint32_t share = 1) {
    d::slot_settings st{};
    st.priority = priority;
    st.share = share;
    st.memory_limit = UINT64_MAX;
    st.memory_guarantee = guarantee;
    st.quantum_ns = 5'000'000;
    d::join_slot(view(), i, {}, st, g); // the library's own join
    return slots[i];
  }
  d::table_view view() {
    return {header.get(), slots.data(), static_cast<std::uint32_t>(slots.size())};
  }
  std::unique_ptr<d::table_header> header;
  std::vector<d::slot_record> slots;
};
} // namespace

TEST_CASE("group: members share one memory limit; outsiders and the table keep theirs") {
  fake_table t(1000 * MiB);
  const auto g = group_of("pod-a", 100 * MiB);
  auto& a = t.join(0, g);
  auto& b = t.join(1, g);
  auto& c = t.join(2, {}); // no group
  CHECK(d::has_group(a));
  CHECK(d::group_name(b) == "pod-a");
  CHECK_FALSE(d::has_group(c));
  CHECK(d::check_grow_in(t.view(), 0, 70 * MiB) == budget_verdict::granted);
  d::apply_grow(*t.header, a, 70 * MiB);
  // b may take only what a leaves of the group's limit; waiting can help (a may release).
  CHECK(d::check_grow_in(t.view(), 1, 30 * MiB) == budget_verdict::granted);
  CHECK(d::check_grow_in(t.view(), 1, 31 * MiB) == budget_verdict::not_now);
  // More than the whole group's limit by itself: never.
  CHECK(d::check_grow_in(t.view(), 1, 101 * MiB) == budget_verdict::over_group_limit);
  // The outsider is bound by the table only.
  CHECK(d::check_grow_in(t.view(), 2, 900 * MiB) == budget_verdict::granted);
  // The member's own limit still counts first.
  b.settings.memory_limit = 20 * MiB;
  CHECK(d::check_grow_in(t.view(), 1, 25 * MiB) == budget_verdict::over_limit);
  CHECK(d::group_committed(t.view(), "pod-a") == 70 * MiB);
  // A freed member stops counting at once: nothing to repair.
  d::end_slot(t.view(), 0, 0);
  CHECK(d::group_committed(t.view(), "pod-a") == 0);
  CHECK(d::check_grow_in(t.view(), 1, 20 * MiB) == budget_verdict::granted);
}

TEST_CASE("group: a guarantee counts in the group's commitments and is always honoured") {
  fake_table t(1000 * MiB);
  const auto g = group_of("job-7", 100 * MiB);
  auto& a = t.join(0, g, 40 * MiB);
  CHECK(d::group_committed(t.view(), "job-7") == 40 * MiB);
  CHECK(d::group_join_fits(t.view(), "job-7", 100 * MiB, 60 * MiB));
  CHECK_FALSE(d::group_join_fits(t.view(), "job-7", 100 * MiB, 61 * MiB));
  CHECK(d::group_join_fits(t.view(), "job-7", 100 * MiB, 0)); // no guarantee: never refused
  auto& b = t.join(1, g);
  // b may not take a's guaranteed 40 MiB ...
  CHECK(d::check_grow_in(t.view(), 1, 61 * MiB) == budget_verdict::not_now);
  d::apply_grow(*t.header, b, 60 * MiB);
  // ... so a can still grow to its guarantee.
  CHECK(d::check_grow_in(t.view(), 0, 40 * MiB) == budget_verdict::granted);
  CHECK(d::check_grow_in(t.view(), 0, 41 * MiB) == budget_verdict::not_now);
  CHECK(d::group_guarantee_fits(t.view(), 0, 40 * MiB));
  CHECK_FALSE(d::group_guarantee_fits(t.view(), 0, 41 * MiB));
  CHECK(d::group_guarantee_fits(t.view(), 0, 10 * MiB)); // lowering: always
  (void)a;
}

TEST_CASE("group: other groups and names that share a prefix are separate") {
  fake_table t(1000 * MiB);
  auto& a = t.join(0, group_of("a", 50 * MiB));
  t.join(1, group_of("ab", 50 * MiB));
  d::apply_grow(*t.header, a, 50 * MiB);
  CHECK(d::check_grow_in(t.view(), 1, 50 * MiB) == budget_verdict::granted);
  CHECK(d::check_grow_in(t.view(), 0, 1) == budget_verdict::over_group_limit); // a alone fills it
  CHECK(d::find_group_member(t.view(), "ab") == 1);
  CHECK(d::find_group_member(t.view(), "ab", 1) == -1);
  CHECK(d::find_group_member(t.view(), "") == -1);
}

TEST_CASE("group random operations: limits hold and every guarantee stays reachable") {
  // Sessions in three groups (and none) join, reserve, release and leave at random; after every
  // step each group's commitments fit its limit, the table's fit its capacity, and every member
  // can grow to its guarantee at once.
  for (std::uint32_t seed = 1; seed <= 200; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    auto pick = [&](std::uint64_t n) { return rng() % n; };
    const std::uint64_t capacity = (200 + pick(800)) * MiB;
    fake_table t(capacity, 12);
    const std::string names[] = {"", "g1", "g2", "g3"};
    const std::uint64_t limits[] = {0, (50 + pick(200)) * MiB, (50 + pick(200)) * MiB,
                                    d::unlimited_group_memory};
    for (int step = 0; step < 400; ++step) {
      const std::uint32_t i = static_cast<std::uint32_t>(pick(12));
      d::slot_record& s = t.slots[i];
      const bool active = s.state.load() == d::slot_active;
      const std::uint64_t op = pick(10);
      if (!active) {
        const std::size_t gi = pick(4);
        const auto g = gi == 0 ? d::slot_group{} : group_of(names[gi], limits[gi]);
        const std::uint64_t guarantee = pick(3) == 0 ? pick(60) * MiB : 0;
        if (d::join_fits(*t.header, guarantee) &&
            (gi == 0 || (guarantee <= limits[gi] &&
                         d::group_join_fits(t.view(), names[gi], limits[gi], guarantee))))
          t.join(i, g, guarantee);
      } else if (op < 6) {
        const std::uint64_t bytes = (1 + pick(80)) * MiB;
        if (d::check_grow_in(t.view(), i, bytes) == budget_verdict::granted)
          d::apply_grow(*t.header, s, bytes);
      } else if (op < 9) {
        d::apply_shrink(*t.header, s, pick(s.memory.reserved + 1));
      } else {
        d::end_slot(t.view(), i, 0);
      }
      CHECK(t.header->committed_total <= capacity);
      for (std::size_t gi = 1; gi < 4; ++gi)
        CHECK(d::group_committed(t.view(), names[gi]) <= limits[gi]);
      for (std::uint32_t j = 0; j < 12; ++j) {
        const d::slot_record& m = t.slots[j];
        if (m.state.load() != d::slot_active || m.memory.reserved >= m.settings.memory_guarantee)
          continue;
        CHECK(d::check_grow_in(t.view(), j, m.settings.memory_guarantee - m.memory.reserved) ==
              budget_verdict::granted);
      }
    }
  }
}

TEST_CASE("group: device time of one member advances every member of its class at the share") {
  fake_table t(1000 * MiB);
  const auto g = group_of("ranks", UINT64_MAX, 4);
  auto& a = t.join(0, g);
  auto& b = t.join(1, g);
  auto& c = t.join(2, g, 0, 3);     // same group, lower class
  auto& o = t.join(3, {}, 0, 5, 4); // an outsider of share 4
  CHECK(d::effective_share(a) == 4);
  d::account_device_time(t.view(), a, 8'000'000, true, 0);
  CHECK(a.compute.vtime == 2'000'000'000); // 8 ms * 1000 / 4
  CHECK(b.compute.vtime == a.compute.vtime);
  CHECK(c.compute.vtime == 0); // another class: its own clock
  CHECK(o.compute.vtime == 0);
  CHECK(a.stats.device_ns == 8'000'000);
  CHECK(b.stats.device_ns == 0); // the time is a's; only the virtual time is the group's
  // A newcomer of the group starts level with its furthest member of the class, not behind.
  auto& n = t.join(4, g);
  CHECK(n.compute.vtime == a.compute.vtime);
  // The outsider of equal share is charged as one session; the group as one too.
  d::account_device_time(t.view(), o, 8'000'000, true, 0);
  CHECK(o.compute.vtime == a.compute.vtime);
}
