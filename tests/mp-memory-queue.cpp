// SPDX-License-Identifier: Apache-2.0
// The memory waiters' order across processes (docs/design.md section 8, "Waiters' order";
// detail/memory_queue.hpp): a reserve that began waiting first is served first, a later and
// smaller one does not take what comes back before it; a waiter killed while it waits, or
// stopped (SIGSTOP) for longer than queue_stale_ns, holds nobody back.
#include <doctest/doctest.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <optional>

#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;

namespace {
constexpr std::uint64_t MiB = 1ull << 20;

/// What the waiters record (shared memory): when each got its memory (test::now_ns(), 0: not
/// yet), and that each has begun to wait.
struct record {
  std::atomic<std::uint64_t> granted_ns[2];
  std::atomic<int> waiting[2];
};

/// A child process whose session reserves `bytes` (waiting up to 30 s), records when it got
/// them in `r.granted_ns[who]`, then holds them until killed.
pid_t waiter(const test::unique_table& t, test::shared_block<record>& r, int who,
             std::uint64_t bytes) {
  return test::spawn([&t, &r, who, bytes] {
    session s = t.join(who == 0 ? "large" : "small");
    r[0].waiting[who] = 1;
    auto mine = s.reserve(bytes, 30s);
    r[0].granted_ns[who] = test::now_ns();
    ::pause();
    return 0;
  });
}

/// Waits until the table counts `n` reserves waiting for memory.
bool waiters_counted(const test::unique_table& t, std::uint32_t n) {
  return test::eventually([&] {
    std::uint32_t waiting = 0;
    for (const session_info& i : t.open().snapshot().sessions) waiting += i.waiting_for_memory;
    return waiting == n;
  });
}

/// Kills and reaps the children when the test ends, however it ends.
struct children {
  std::vector<pid_t> pids;
  ~children() {
    for (const pid_t p : pids) {
      ::kill(p, SIGCONT);
      ::kill(p, SIGKILL);
      test::wait_exit(p);
    }
  }
};
} // namespace

TEST_CASE("a reserve that waits first is served first: a smaller later one does not take what "
          "comes back before it") {
  test::unique_table t("queue-order", 1000 * MiB);
  session holder = t.join("holder");
  std::optional<reservation> held = holder.reserve(900 * MiB, 0ms);
  auto rest = std::make_optional<reservation>(holder.reserve(100 * MiB, 0ms));
  test::shared_block<record> r;
  children kids;
  kids.pids.push_back(waiter(t, r, 0, 500 * MiB)); // the large reserve, first
  REQUIRE(waiters_counted(t, 1));
  kids.pids.push_back(waiter(t, r, 1, 100 * MiB)); // the small one, after it
  REQUIRE(waiters_counted(t, 2));
  rest.reset(); // 100 MiB come back: enough for the small one, not for the large one
  std::this_thread::sleep_for(300ms);    // both have looked (each looks at least every 100 ms)
  CHECK(r[0].granted_ns[1].load() == 0); // before: the small one took them at once
  CHECK(r[0].granted_ns[0].load() == 0);
  const std::uint64_t released = test::now_ns();
  held.reset(); // 900 MiB more: room for both, in either order
  REQUIRE(test::eventually([&] { return r[0].granted_ns[1].load() != 0; }));
  REQUIRE(test::eventually([&] { return r[0].granted_ns[0].load() != 0; }));
  CHECK(r[0].granted_ns[1].load() >= released); // the small one got nothing before
  CHECK(t.open().snapshot().queue_holds > 0);
}

TEST_CASE("a waiter killed while it waits, or stopped past queue_stale_ns, holds nobody back") {
  test::unique_table t("queue-kill-stop", 1000 * MiB);
  session holder = t.join("holder");
  std::optional<reservation> held = holder.reserve(900 * MiB, 0ms);
  auto rest = std::make_optional<reservation>(holder.reserve(100 * MiB, 0ms));
  test::shared_block<record> r;
  children kids;
  SUBCASE("killed") {
    const pid_t large = waiter(t, r, 0, 500 * MiB);
    kids.pids.push_back(large);
    REQUIRE(waiters_counted(t, 1));
    kids.pids.push_back(waiter(t, r, 1, 100 * MiB));
    REQUIRE(waiters_counted(t, 2));
    rest.reset();
    ::kill(large, SIGKILL); // its slot is reclaimed at the small one's next look for the dead
    const auto start = test::now_ns();
    REQUIRE(test::eventually([&] { return r[0].granted_ns[1].load() != 0; }, 5000ms));
    MESSAGE("the small reserve got its memory " << (r[0].granted_ns[1] - start) / 1'000'000
                                                << " ms after the large one's waiter died");
  }
  SUBCASE("stopped") {
    const pid_t large = waiter(t, r, 0, 500 * MiB);
    kids.pids.push_back(large);
    REQUIRE(waiters_counted(t, 1));
    kids.pids.push_back(waiter(t, r, 1, 100 * MiB));
    REQUIRE(waiters_counted(t, 2));
    REQUIRE(test::stop_process(large));
    const auto start = test::now_ns();
    rest.reset();
    REQUIRE(test::eventually([&] { return r[0].granted_ns[1].load() != 0; }, 10000ms));
    const std::uint64_t waited = r[0].granted_ns[1] - start;
    MESSAGE("the small reserve got its memory " << waited / 1'000'000
                                                << " ms after the large one's waiter stopped");
    // It was held while the stopped one could still have been looking, and not for good.
    CHECK(waited + 150'000'000 >= detail::queue_stale_ns);
    ::kill(large, SIGCONT);
    held.reset(); // the large one, continued, gets its memory
    CHECK(test::eventually([&] { return r[0].granted_ns[0].load() != 0; }, 5000ms));
  }
}
