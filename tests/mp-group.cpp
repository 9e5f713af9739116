// SPDX-License-Identifier: Apache-2.0
// Session groups across processes (session_options::group, GPUSHARE_GROUP; detail/group.hpp):
// members of one group share one memory limit while outsiders keep the table's; a member killed
// with SIGKILL gives the group its memory back; a joiner must agree with the members' settings;
// a guarantee must fit the group; and many processes of several groups reserving at random never
// take a group past its limit.
#include <doctest/doctest.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;

constexpr std::uint64_t MiB = 1ull << 20;

namespace {
bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

session_options member(const test::unique_table& t, const std::string& name,
                       const std::string& group, std::optional<std::uint64_t> limit = {},
                       std::optional<std::uint32_t> share = {}) {
  session_options o = t.options(name);
  o.group = group;
  if (limit) o.group_memory_limit = memory_amount::of_bytes(*limit);
  o.group_share = share;
  return o;
}

const session_info& info_of(const table_snapshot& s, const std::string& name) {
  for (const auto& i : s.sessions)
    if (i.name == name) return i;
  FAIL("no session named " << name);
  return s.sessions.front();
}
} // namespace

TEST_CASE("group: members share one memory limit, and a killed member's part comes back") {
  test::unique_table t("mp-group", 1024 * MiB);
  test::shared_block<std::atomic<int>> ready(1);
  const pid_t a = test::spawn([&] {
    session s(t.key(), member(t, "member-a", "pod-a", 100 * MiB, 2));
    auto r = s.reserve(70 * MiB, 0ms);
    ready[0] = 1;
    std::this_thread::sleep_for(60s); // killed by the test long before
    return 0;
  });
  REQUIRE(test::eventually([&] { return ready[0].load() == 1; }));
  session b(t.key(), member(t, "member-b", "pod-a")); // adopts the group's limit and share
  session outsider(t.key(), t.options("outsider"));
  const table_snapshot snap = b.snapshot();
  CHECK(info_of(snap, "member-b").group == "pod-a");
  CHECK(info_of(snap, "member-b").group_memory_limit == 100 * MiB);
  CHECK(info_of(snap, "member-b").group_share == 2);
  CHECK(info_of(snap, "outsider").group.empty());
  CHECK_FALSE(b.try_reserve(31 * MiB).has_value()); // 70 + 31 > 100: the group is full
  auto small = b.try_reserve(30 * MiB);
  CHECK(small.has_value());
  auto big = outsider.try_reserve(900 * MiB); // the table has room: outsiders are not bound
  CHECK(big.has_value());
  // More than the group's whole limit by itself: never, at once, with the group in the message.
  const auto never = test::thrown([&] { (void)b.reserve(101 * MiB, 10s); });
  REQUIRE(never.has_value());
  CHECK(never->code() == errc::over_limit);
  CHECK(contains(never->what(), "group 'pod-a'"));
  CHECK(contains(never->what(), "100.00 MiB"));
  // A waiting member is served when the member holding the group's memory is killed.
  small.reset();
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    auto r = b.reserve(60 * MiB, 10s);
    got = true;
  });
  std::this_thread::sleep_for(100ms);
  CHECK_FALSE(got.load());
  CHECK(test::kill_and_wait(a) == 128 + SIGKILL);
  waiter.join();
  CHECK(got.load());
  CHECK(info_of(b.snapshot(), "member-b").group_memory_limit == 100 * MiB);
}

TEST_CASE("group: a joiner with other settings than the members' is refused, naming them") {
  test::unique_table t("mp-group-settings", 1024 * MiB);
  session first(t.key(), member(t, "first", "job-42", 200 * MiB, 3));
  const auto share =
      test::thrown([&] { session s(t.key(), member(t, "second", "job-42", {}, 4)); });
  REQUIRE(share.has_value());
  CHECK(share->code() == errc::invalid_argument);
  CHECK(contains(share->what(), "group share of 4"));
  CHECK(contains(share->what(), "session 'first'"));
  CHECK(contains(share->what(), "joined with 3"));
  const auto limit =
      test::thrown([&] { session s(t.key(), member(t, "second", "job-42", 300 * MiB)); });
  REQUIRE(limit.has_value());
  CHECK(limit->code() == errc::invalid_argument);
  CHECK(contains(limit->what(), "300.00 MiB"));
  CHECK(contains(limit->what(), "200.00 MiB"));
  // The same values, or none, are accepted.
  session same(t.key(), member(t, "same", "job-42", 200 * MiB, 3));
  session quiet(t.key(), member(t, "quiet", "job-42"));
  CHECK(info_of(quiet.snapshot(), "quiet").group_share == 3);
  // Once every member has left, the group starts afresh with the next joiner's settings.
  {
    session other(t.key(), member(t, "other", "job-43", 10 * MiB));
    CHECK(info_of(other.snapshot(), "other").group_memory_limit == 10 * MiB);
  }
  session again(t.key(), member(t, "again", "job-43", 20 * MiB));
  CHECK(info_of(again.snapshot(), "again").group_memory_limit == 20 * MiB);
}

TEST_CASE("group: a member's guarantee must fit the group's limit and its members' commitments") {
  test::unique_table t("mp-group-guarantee", 1024 * MiB);
  session_options o = member(t, "big", "g", 100 * MiB);
  o.memory_guarantee = memory_amount::of_bytes(150 * MiB);
  const auto over = test::thrown([&] { session s(t.key(), o); });
  REQUIRE(over.has_value());
  CHECK(over->code() == errc::invalid_argument);
  CHECK(contains(over->what(), "exceeds the group's memory limit"));
  session_options g60 = member(t, "g60", "g", 100 * MiB);
  g60.memory_guarantee = memory_amount::of_bytes(60 * MiB);
  session holder(t.key(), g60);
  session_options g50 = member(t, "g50", "g");
  g50.memory_guarantee = memory_amount::of_bytes(50 * MiB);
  const auto full = test::thrown([&] { session s(t.key(), g50); });
  REQUIRE(full.has_value());
  CHECK(full->code() == errc::guarantee_unavailable);
  CHECK(contains(full->what(), "within the group"));
  // The guaranteed member can always reach its guarantee, whatever the others take.
  session other(t.key(), member(t, "other", "g"));
  auto r = other.try_reserve(40 * MiB);
  CHECK(r.has_value());
  CHECK_FALSE(other.try_reserve(1 * MiB).has_value());
  CHECK(holder.try_reserve(60 * MiB).has_value());
}

TEST_CASE("group: processes of three groups reserving at random never exceed a group's limit") {
  constexpr int workers = 9;
  constexpr std::uint64_t limit = 64 * MiB;
  test::unique_table t("mp-group-random", 1024 * MiB);
  // Per group: what its processes believe they hold together, and the worst excess seen.
  test::shared_block<std::atomic<std::int64_t>> held(3), worst(3), grants(1), started(1);
  for (int g = 0; g < 3; ++g) worst[static_cast<std::size_t>(g)] = INT64_MIN;
  std::vector<pid_t> pids;
  for (int w = 0; w < workers; ++w)
    pids.push_back(test::spawn([&, w] {
      const std::size_t g = static_cast<std::size_t>(w % 3);
      session s(t.key(), member(t, "w" + std::to_string(w), "grp" + std::to_string(g), limit));
      started[0]++;
      while (started[0].load() < workers) std::this_thread::yield();
      std::uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<unsigned>(w + 1);
      std::vector<std::pair<reservation, std::uint64_t>> mine;
      const auto end = test::now_ns() + 1'000'000'000ull;
      while (test::now_ns() < end) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const std::uint64_t bytes = (1 + x % 24) * MiB;
        if (mine.size() < 4 && x % 3 != 0) {
          std::optional<reservation> r;
          try {
            r = s.try_reserve(bytes);
          } catch (const error& e) { // more than the group's limit with what it holds itself
            if (e.code() != errc::over_limit) throw;
          }
          if (r) {
            const std::int64_t now = held[g] += static_cast<std::int64_t>(bytes);
            std::int64_t cur = worst[g].load();
            while (now > cur && !worst[g].compare_exchange_weak(cur, now)) {
            }
            grants[0]++;
            mine.emplace_back(std::move(*r), bytes);
          }
        } else if (!mine.empty()) {
          held[g] -= static_cast<std::int64_t>(mine.back().second); // before the release
          mine.pop_back();
        }
      }
      for (auto& [r, bytes] : mine) held[g] -= static_cast<std::int64_t>(bytes);
      mine.clear();
      return 0;
    }));
  for (pid_t p : pids) CHECK(test::wait_exit(p) == 0);
  CHECK(grants[0].load() > 0);
  for (std::size_t g = 0; g < 3; ++g) {
    CAPTURE(g);
    CHECK(worst[g].load() <= static_cast<std::int64_t>(limit));
    CHECK(worst[g].load() > 0);
  }
}
