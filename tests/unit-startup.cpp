// SPDX-License-Identifier: Apache-2.0
// The start-up lock as pure functions (detail/startup.hpp, with detail/slot.hpp's ends), driven
// by a seeded random sequence of joins, waits, takes, ready()s (current and stale), leaves,
// deaths (reclaims), evictions and lock repairs on an unmapped table. After every step: at most
// one holder, and only a live one; every release bumped the wake word (no waiter sleeps through
// it); the waiter count is what the live slots say; a free lock with waiters is taken by the
// first that tries (no lost waiter).
#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include <gpushare/detail/slot.hpp>
#include <gpushare/detail/startup.hpp>

namespace d = gpushare::detail;

namespace {

struct fake_table {
  explicit fake_table(std::uint32_t n)
      : header(std::make_unique<d::table_header>()), slots(n), waiting(n, false) {
    header->capacity = 1ull << 40;
  }
  d::table_view view() {
    return {header.get(), slots.data(), static_cast<std::uint32_t>(slots.size())};
  }
  bool active(std::uint32_t i) const {
    return slots[i].state.load(std::memory_order_relaxed) == d::slot_active;
  }
  std::uint64_t word(std::uint32_t i) const { return d::startup_word(i, slots[i].generation); }
  std::unique_ptr<d::table_header> header;
  std::vector<d::slot_record> slots;
  std::vector<bool> waiting; ///< the model: slot i has a thread waiting
};

struct run {
  fake_table& t;
  std::mt19937_64& rng;
  std::uint64_t now = 1'000'000;
  std::vector<std::uint64_t> old_words; ///< words of sessions that have ended

  std::uint32_t pick(std::uint32_t n) { return static_cast<std::uint32_t>(rng() % n); }
  std::uint64_t owner() const { return t.header->startup_owner.load(); }

  void join(std::uint32_t i) {
    d::slot_settings st{};
    st.share = 1;
    st.quantum_ns = 5'000'000;
    st.compute_limit_ppm = 1'000'000;
    st.memory_limit = t.header->capacity;
    d::join_slot(t.view(), i, {}, st);
    t.waiting[i] = false;
  }
  void want(std::uint32_t i) { // a thread starts waiting, as wait_startup() counts it
    if (t.waiting[i] || owner() == t.word(i)) return;
    t.waiting[i] = true;
    ++t.slots[i].startup_waiting;
  }
  void try_take(std::uint32_t i) {
    if (!t.waiting[i]) return;
    const bool free = owner() == 0;
    ++now;
    const bool got = d::try_take_startup(t.view(), i, now, now);
    CHECK(got == free); // the lock goes to whoever tries while it is free
    if (got) {
      t.waiting[i] = false;
      --t.slots[i].startup_waiting;
    }
  }
  void ready(std::uint32_t i) {
    const std::uint32_t before = t.header->startup_wake.load();
    const bool held = owner() == t.word(i);
    CHECK(d::release_startup(*t.header, t.word(i)) == held);
    CHECK(t.header->startup_wake.load() == before + (held ? 1u : 0u));
  }
  void stale_ready() { // a hold of an ended session must not release its slot's new session
    if (old_words.empty()) return;
    const std::uint64_t w = old_words[pick(static_cast<std::uint32_t>(old_words.size()))];
    const std::uint64_t before = owner();
    CHECK_FALSE(d::release_startup(*t.header, w));
    CHECK(owner() == before);
  }
  void end(std::uint32_t i, bool reclaim) { // leave, evict, or a peer reclaims the dead
    const std::uint32_t before = t.header->startup_wake.load();
    const bool held = owner() == t.word(i);
    old_words.push_back(t.word(i));
    if (reclaim)
      d::reclaim_slot(t.view(), i, ++now);
    else
      d::end_slot(t.view(), i, ++now);
    t.waiting[i] = false;
    CHECK(t.header->startup_wake.load() == before + (held ? 1u : 0u));
    CHECK(owner() != old_words.back());
  }
  void repair() { // a lock owner died mid-update: every dead slot is freed at once
    std::vector<bool> dead(t.slots.size());
    for (std::uint32_t i = 0; i < t.slots.size(); ++i) dead[i] = t.active(i) && pick(3) == 0;
    const std::uint32_t before = t.header->startup_wake.load();
    const std::uint64_t w = owner();
    bool holder_dies = false;
    for (std::uint32_t i = 0; i < t.slots.size(); ++i)
      if (dead[i]) {
        holder_dies = holder_dies || w == t.word(i);
        old_words.push_back(t.word(i));
        t.waiting[i] = false;
      }
    d::repair_slots(
        t.view(), d::nobody, [&](std::uint32_t i) { return !dead[i]; }, ++now);
    CHECK(t.header->startup_wake.load() == before + (holder_dies ? 1u : 0u));
  }

  void check(std::uint64_t step) {
    const std::uint64_t w = owner();
    std::uint32_t waiters = 0, model = 0;
    for (std::uint32_t i = 0; i < t.slots.size(); ++i) {
      if (!t.active(i)) continue;
      waiters += t.slots[i].startup_waiting;
      model += t.waiting[i] ? 1 : 0;
    }
    CHECK_MESSAGE(d::startup_waiters(t.view()) == waiters, "step " << step);
    CHECK_MESSAGE(waiters == model, "step " << step);
    if (w == 0) return;
    const std::int64_t i = d::startup_word_slot(t.view(), w);
    REQUIRE_MESSAGE(i != d::nobody, "step " << step);
    const auto u = static_cast<std::uint32_t>(i);
    CHECK_MESSAGE(t.active(u), "step " << step << ": the holder is not a live session");
    CHECK_MESSAGE(t.word(u) == w, "step " << step << ": the holder's generation is stale");
    CHECK_MESSAGE(!t.waiting[u], "step " << step << ": the holder still counts as waiting");
  }

  void step() {
    const std::uint32_t i = pick(static_cast<std::uint32_t>(t.slots.size()));
    if (!t.active(i)) return join(i);
    switch (pick(9)) {
    case 0:
    case 1: return want(i);
    case 2:
    case 3: return try_take(i);
    case 4: return ready(i);
    case 5: return stale_ready();
    case 6: return end(i, false);
    case 7: return end(i, true);
    default: return pick(4) == 0 ? repair() : try_take(i);
    }
  }
};

} // namespace

TEST_CASE("random takes, ready()s, ends and repairs keep one live holder and lose no waiter") {
  for (std::uint64_t seed : {1ull, 27ull, 20261127ull}) {
    std::mt19937_64 rng(seed);
    fake_table t(8);
    run r{t, rng, 1'000'000, {}};
    std::uint64_t holds_seen = 0;
    for (std::uint64_t s = 0; s < 20000; ++s) {
      r.step();
      holds_seen += r.owner() != 0 ? 1 : 0;
      r.check(s);
      // No lost waiter: with the lock free, the first waiter that tries gets it.
      if (r.owner() == 0)
        for (std::uint32_t i = 0; i < t.slots.size(); ++i)
          if (t.active(i) && t.waiting[i]) {
            r.try_take(i);
            CHECK(r.owner() == t.word(i));
            break;
          }
    }
    CHECK(t.header->startup_takes > 500); // the sequence exercised the lock (about 900)
    CHECK(holds_seen > 1000);
  }
}

TEST_CASE("a stale owner word (its slot freed without a release) reads as free and is freed") {
  fake_table t(4);
  std::mt19937_64 rng(1);
  run r{t, rng, 1'000'000, {}};
  r.join(1);
  REQUIRE(d::try_take_startup(t.view(), 1, 5, 6));
  CHECK(t.header->startup_since_ns.load() == 5);
  CHECK(t.header->startup_since_unix_ns.load() == 6);
  t.slots[1].state.store(d::slot_free); // as a repair that ran before this version would leave it
  const std::uint32_t before = t.header->startup_wake.load();
  CHECK(d::startup_holder(t.view()) == d::nobody);
  CHECK(r.owner() == 0);
  CHECK(t.header->startup_wake.load() == before + 1);
  r.join(2);
  CHECK(d::try_take_startup(t.view(), 2, 7, 8));
  CHECK(d::startup_holder(t.view()) == 2);
}
