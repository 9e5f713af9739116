// SPDX-License-Identifier: Apache-2.0
// A table in ordinary memory for the scheduler's rule tests (unit-scheduler-rules,
// unit-scheduler-gpu): sessions join through the library's own join_slot(), and a holder is set
// as the scheduler would have left it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <gpushare/detail/layout.hpp>
#include <gpushare/detail/slot.hpp>
#include <gpushare/options.hpp>

namespace sched_test {

struct fake_table {
  explicit fake_table(std::uint32_t n = 4)
      : header(std::make_unique<gpushare::detail::table_header>()), slots(n) {}
  gpushare::detail::table_view view() {
    return {header.get(), slots.data(), static_cast<std::uint32_t>(slots.size())};
  }
  /// Slot `i` joins with `priority`, share 1, a 5 ms quantum and no compute limit.
  gpushare::detail::slot_record& join(std::uint32_t i, int priority = gpushare::priority::normal) {
    gpushare::detail::slot_settings st{};
    st.priority = priority;
    st.share = 1;
    st.quantum_ns = 5'000'000;
    st.compute_limit_ppm = 1'000'000;
    gpushare::detail::join_slot(view(), i, {}, st); // the library's own join
    return slots[i];
  }
  /// Slot `i` holds the device since `since`, started, between guards since `idle_since`.
  void hold(std::uint32_t i, std::uint64_t since, std::uint64_t idle_since) {
    header->holder = i + 1;
    header->holder_generation = slots[i].generation;
    header->holder_since_ns = header->quantum_start_ns = since;
    header->holder_idle_since_ns = idle_since;
    header->holder_started = 1;
  }
  std::unique_ptr<gpushare::detail::table_header> header;
  std::vector<gpushare::detail::slot_record> slots;
};

} // namespace sched_test
