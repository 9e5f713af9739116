// SPDX-License-Identifier: Apache-2.0
// A slot is reused by the next session that claims it: nothing of the previous session (its
// scheduler state, statistics, lease, journal) may reach the new one (issue 23, item 3; the
// structure review's N1: a new session inherited quantum_debt_ns and last_turn_busy).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstring>
#include <thread>
#include <vector>

#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;
namespace d = gpushare::detail;

namespace {
d::table_core map_raw(const test::unique_table& t) {
  return d::table_core(d::mapped_table::open_existing(t.object_name(), 1'000'000'000));
}

/// The bytes of a slot, with the fields that legitimately differ between two joins of the same
/// process with the same options blanked: the generation, the join time, the settings sequence
/// and the futex word (kept monotone across sessions, so no sleeper can miss a bump).
std::vector<unsigned char> comparable_bytes(const d::slot_record& s) {
  std::vector<unsigned char> b(sizeof s);
  std::memcpy(b.data(), static_cast<const void*>(&s), sizeof s);
  auto blank = [&](std::size_t offset, std::size_t size) {
    std::memset(b.data() + offset, 0, size);
  };
  blank(offsetof(d::slot_record, generation), sizeof s.generation);
  blank(offsetof(d::slot_record, joined_unix_ns), sizeof s.joined_unix_ns);
  blank(offsetof(d::slot_record, settings_seq), sizeof s.settings_seq);
  blank(offsetof(d::slot_record, grant_word), sizeof s.grant_word);
  return b;
}
} // namespace

TEST_CASE("a session joining a reused slot starts with no quantum debt and no busy-turn mark") {
  // The review's reproduction: A overruns its quantum while B waits, A leaves, and C (same
  // process, so the same starting slot) joins A's slot.
  test::unique_table t("reuse-debt");
  session_options o = t.options();
  o.quantum = 5ms;
  o.name = std::string("a");
  auto a = std::make_optional<session>(t.key(), o);
  o.name = std::string("b");
  session b(t.key(), o);
  const std::uint32_t slot = a->id().slot;
  auto raw = map_raw(t);
  {
    std::thread tb;
    {
      scoped_kernel ga(*a); // a holds the device
      tb = std::thread([&] { scoped_kernel gb(b); });
      REQUIRE(test::eventually([&] { return raw.header().device_waiters.load() == 1; }));
      std::this_thread::sleep_for(20ms); // a overruns its 5 ms quantum
    }                                    // its exit hands the device to b
    tb.join();
  }
  REQUIRE(raw.slot(slot).compute.quantum_debt_ns == 5'000'000); // a's debt (capped at one quantum)
  REQUIRE(raw.slot(slot).compute.last_turn_busy == 1);
  a.reset(); // a leaves
  o.name = std::string("c");
  session c(t.key(), o);
  REQUIRE(c.id().slot == slot);
  CHECK(raw.slot(slot).compute.quantum_debt_ns ==
        0);                                          // before: 5000000, c's first turn already used
  CHECK(raw.slot(slot).compute.last_turn_busy == 0); // before: 1, a preference c never earned
}

TEST_CASE("a session joining a reused slot finds it exactly as a fresh slot, whatever it held") {
  // The property behind the case above, for every field at once: a join into a slot whose bytes
  // were scribbled (as a previous session, or a stray writer, could leave them) writes the same
  // bytes as a join into a zeroed slot, apart from the fields that must differ.
  test::unique_table t("reuse-bytes");
  session_options o = t.options("same");
  o.share = 3;
  o.priority = priority::high;
  o.quantum = 2ms;
  std::uint32_t slot = 0;
  std::vector<unsigned char> fresh;
  auto keeper = std::make_optional<session>(t.key(), t.options("keeper")); // keeps the table
  auto raw = map_raw(t);
  {
    session s(t.key(), o);
    slot = s.id().slot;
    fresh = comparable_bytes(raw.slot(slot));
  }
  for (const unsigned char junk : {0xFFu, 0xA5u, 0x01u}) {
    CAPTURE(static_cast<int>(junk));
    {
      d::table_core::guard g(raw); // as any writer of the table would, under the lock
      d::slot_record& s = raw.slot(slot);
      REQUIRE(s.state.load() == d::slot_free);
      const std::uint32_t generation = s.generation;
      std::memset(static_cast<void*>(&s), junk, sizeof s);
      s.state.store(d::slot_free);
      s.generation = generation;
    }
    session s(t.key(), o);
    REQUIRE(s.id().slot == slot);
    const std::vector<unsigned char> reused = comparable_bytes(raw.slot(slot));
    std::size_t first_difference = sizeof(d::slot_record);
    for (std::size_t k = 0; k < reused.size(); ++k)
      if (reused[k] != fresh[k]) {
        first_difference = k;
        break;
      }
    CAPTURE(first_difference); // the byte offset of the first field activation did not reset
    CHECK(first_difference == sizeof(d::slot_record));
    CHECK(raw.slot(slot).generation > 0);
  }
}
