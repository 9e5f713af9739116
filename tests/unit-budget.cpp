// SPDX-License-Identifier: Apache-2.0
// Budget arithmetic as pure functions of the table state: no processes, no shared memory.
#include <doctest/doctest.h>

#include <cstddef>
#include <memory>
#include <vector>

#include <gpushare/detail/budget.hpp>
#include <gpushare/detail/slot.hpp>

namespace d = gpushare::detail;

namespace {
constexpr std::uint64_t MiB = 1ull << 20;

/// A heap-allocated table state of `n` slots (the layout is the shared one, unmapped).
struct fake_table {
  explicit fake_table(std::uint64_t capacity, std::uint32_t n = 4)
      : header(std::make_unique<d::table_header>()), slots(n) {
    header->capacity = capacity;
    for (auto& s : slots) s.settings.memory_limit = UINT64_MAX;
  }
  d::slot_record& join(std::uint32_t i, std::uint64_t guarantee = 0,
                       std::uint64_t limit = UINT64_MAX) {
    d::slot_settings st{};
    st.share = 1;
    st.memory_limit = limit;
    st.memory_guarantee = guarantee;
    d::join_slot(view(), i, {}, st); // the library's own join
    return slots[i];
  }
  d::table_view view() {
    return {header.get(), slots.data(), static_cast<std::uint32_t>(slots.size())};
  }
  std::unique_ptr<d::table_header> header;
  std::vector<d::slot_record> slots;
};
} // namespace

TEST_CASE("commitment is the larger of use and guarantee, saturating") {
  CHECK(d::commitment(10, 5, 0) == 15);
  CHECK(d::commitment(10, 5, 40) == 40);
  CHECK(d::commitment(UINT64_MAX, 5, 0) == UINT64_MAX);
  CHECK(d::sat_sub(3, 5) == 0);
  CHECK(d::sat_add(UINT64_MAX - 1, 5) == UINT64_MAX);
}

TEST_CASE("check_grow: granted, not now, over the limit, over the capacity") {
  fake_table t(100 * MiB);
  auto& a = t.join(0, 0, 60 * MiB);
  auto& b = t.join(1, 30 * MiB);
  CHECK(t.header->committed_total == 30 * MiB);
  CHECK(d::check_grow(*t.header, a, 60 * MiB) == d::budget_verdict::granted);
  CHECK(d::check_grow(*t.header, a, 61 * MiB) == d::budget_verdict::over_limit);
  CHECK(d::check_grow(*t.header, a, 101 * MiB) == d::budget_verdict::exceeds_capacity);
  d::apply_grow(*t.header, a, 60 * MiB);
  CHECK(t.header->committed_total == 90 * MiB);
  // b grows inside its guarantee although only 10 MiB are uncommitted
  CHECK(d::check_grow(*t.header, b, 30 * MiB) == d::budget_verdict::granted);
  d::apply_grow(*t.header, b, 30 * MiB);
  CHECK(t.header->committed_total == 90 * MiB);
  CHECK(d::check_grow(*t.header, b, 10 * MiB) == d::budget_verdict::granted);
  CHECK(d::check_grow(*t.header, b, 10 * MiB + 1) == d::budget_verdict::not_now);
  d::apply_shrink(*t.header, a, 60 * MiB);
  CHECK(d::check_grow(*t.header, b, 70 * MiB) == d::budget_verdict::granted);
  CHECK(t.header->reserved_total == 30 * MiB);
}

TEST_CASE("shrinking more than is held clamps at zero: totals never underflow") {
  fake_table t(100 * MiB);
  auto& a = t.join(0);
  d::apply_grow(*t.header, a, 10 * MiB);
  d::apply_shrink(*t.header, a, 50 * MiB);
  CHECK(a.memory.reserved == 0);
  CHECK(t.header->reserved_total == 0);
  CHECK(t.header->committed_total == 0);
  t.header->reserved_total = 0; // even with totals already wrong, no wrap to 2^64
  a.memory.reserved = 5;
  d::apply_shrink(*t.header, a, 5);
  CHECK(t.header->reserved_total == 0);
}

TEST_CASE("guarantee_fits counts every other session's commitment") {
  fake_table t(100 * MiB);
  auto& a = t.join(0, 70 * MiB);
  auto& b = t.join(1);
  CHECK(d::guarantee_fits(*t.header, b, 30 * MiB));
  CHECK_FALSE(d::guarantee_fits(*t.header, b, 30 * MiB + 1));
  CHECK(d::guarantee_fits(*t.header, a, 100 * MiB)); // its own old guarantee is not counted twice
}

TEST_CASE("clear_slot and recompute_totals agree with the slots") {
  fake_table t(100 * MiB);
  auto& a = t.join(0, 20 * MiB);
  auto& b = t.join(1);
  d::apply_grow(*t.header, a, 5 * MiB);
  d::apply_grow(*t.header, b, 40 * MiB);
  b.memory.external = 0;
  d::set_usage(*t.header, b, b.memory.reserved, 7 * MiB, 0);
  b.memory.waiting = 2;
  t.header->memory_waiters = 2;
  CHECK(t.header->committed_total == 20 * MiB + 47 * MiB);
  // Corrupt the totals, as a holder killed mid-update would, then rebuild them.
  t.header->reserved_total = 12345;
  t.header->committed_total = 1;
  t.header->live_sessions = 9;
  d::recompute_totals(t.view());
  CHECK(t.header->reserved_total == 45 * MiB);
  CHECK(t.header->committed_total == 67 * MiB);
  CHECK(t.header->live_sessions == 2);
  CHECK(t.header->memory_waiters == 2);
  d::clear_slot(*t.header, b);
  CHECK(b.state.load() == d::slot_free);
  CHECK(t.header->reserved_total == 5 * MiB);
  CHECK(t.header->committed_total == 20 * MiB);
  CHECK(t.header->live_sessions == 1);
  CHECK(t.header->memory_waiters == 0);
}

TEST_CASE("the layout is what every process expects") {
  CHECK(sizeof(d::slot_record) == 1216);
  CHECK(offsetof(d::table_prefix, init_state) == 12);
  CHECK(d::table_size(256) == sizeof(d::table_header) + 256 * 1216);
  CHECK(d::default_slot_count >= 256);
  CHECK(d::slot_lock_byte(0) != d::init_lock_byte);
}

TEST_CASE(
    "guarantee_fits: a change that does not increase commitment fits an overcommitted table") {
  // Issue 13, item 8: external usage (reported, not reserved) can overcommit the table; joining
  // with guarantee 0 or lowering a guarantee was then refused.
  fake_table t(10 * MiB);
  auto& big = t.join(0, 4 * MiB);
  d::set_usage(*t.header, big, 0, 12 * MiB, 4 * MiB);
  CHECK(t.header->committed_total == 12 * MiB); // over the capacity
  auto& fresh = t.slots[1];                     // a free slot about to join
  CHECK(d::guarantee_fits(*t.header, fresh, 0));
  CHECK_FALSE(d::guarantee_fits(*t.header, fresh, 1));
  CHECK(d::guarantee_fits(*t.header, big, 0));        // lowered
  CHECK(d::guarantee_fits(*t.header, big, 12 * MiB)); // raised within its use: adds nothing
  CHECK_FALSE(d::guarantee_fits(*t.header, big, 12 * MiB + 1));
}
