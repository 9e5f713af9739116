// SPDX-License-Identifier: Apache-2.0
// A table's capacity and memory amounts in messages (issue 24, item 2): GPUSHARE_CAPACITY, a
// fraction that meets an unlimited capacity (refused: a limit in name only), one word for
// unlimited, amounts shown as given and as read, and changing the capacity of a live table
// (table::configure_defaults), whose budget invariant a seeded random run checks.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gpushare/gpushare.hpp>

#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;

namespace {
constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t GiB = 1ull << 30;

std::string message_of(const std::function<void()>& f, errc want) {
  const std::optional<error> e = test::thrown(f);
  REQUIRE(e.has_value());
  CHECK(e->code() == want);
  return e->what();
}
bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}
} // namespace

TEST_CASE("GPUSHARE_CAPACITY gives the capacity of a table this process creates") {
  CHECK(resolve_options({}, test::fake_env({{"GPUSHARE_CAPACITY", "80GiB"}})).capacity == 80 * GiB);
  CHECK(resolve_options({}, test::fake_env({{"GPUSHARE_CAPACITY", "4gb"}})).capacity ==
        4'000'000'000ull);
  for (const char* unlimited : {"unlimited", "UNLIMITED", "0"})
    CHECK(resolve_options({}, test::fake_env({{"GPUSHARE_CAPACITY", unlimited}})).capacity ==
          unlimited_memory);
  CHECK(resolve_options({}, test::fake_env({})).capacity == unlimited_memory);
  session_options in_code;
  in_code.capacity = 8 * GiB; // code wins over the environment
  CHECK(resolve_options(in_code, test::fake_env({{"GPUSHARE_CAPACITY", "80GiB"}})).capacity ==
        8 * GiB);
  const std::string pct = message_of(
      [] {
        (void)resolve_options({}, test::fake_env({{"GPUSHARE_CAPACITY", "50%"}}));
      },
      errc::invalid_environment);
  CHECK(has(pct, "GPUSHARE_CAPACITY"));
  CHECK(has(pct, "a percentage is not accepted"));
  CHECK(has(message_of(
                [] {
                  (void)resolve_options({}, test::fake_env({{"GPUSHARE_CAPACITY", "lots"}}));
                },
                errc::invalid_environment),
            "\"unlimited\""));
}

TEST_CASE("a fraction of an unlimited capacity is refused, naming the ways to a capacity") {
  test::unique_table t("fraction"); // created without a capacity: unlimited
  session_options o = t.options("pct");
  o.memory_limit = memory_amount::of_ppm(200'000);
  const std::string why = message_of([&] { session s(t.key(), o); }, errc::invalid_argument);
  CHECK(has(why, "session 'pct': a memory limit of 20% is a fraction of the table's capacity"));
  CHECK(has(why, "has an unlimited capacity"));
  CHECK(has(why, "GPUSHARE_CAPACITY"));
  CHECK(has(why, "gpushare set --table-default --capacity"));
  CHECK(has(why, "device_session"));
  CHECK_FALSE(has(why, "EiB capacity"));
  o.memory_limit.reset();
  o.memory_guarantee = memory_amount::of_ppm(100'000);
  CHECK(has(message_of([&] { session s(t.key(), o); }, errc::invalid_argument),
            "a memory guarantee of 10%"));
  // 0% and 100% mean the same whatever the capacity.
  o.memory_guarantee = memory_amount::of_ppm(0);
  o.memory_limit = memory_amount::of_ppm(1'000'000);
  session full(t.key(), o);
  CHECK(full.info().memory_limit == unlimited_memory);
  // Changing a live session's limit to a fraction is refused alike.
  settings_change c;
  c.memory_limit = memory_amount::of_ppm(500'000);
  CHECK(has(message_of([&] { full.configure(c); }, errc::invalid_argument), "unlimited capacity"));
  // With a capacity the fraction resolves.
  auto tab = t.open();
  table_defaults d;
  d.capacity = 1 * GiB;
  tab.configure_defaults(d);
  full.configure(c);
  CHECK(full.info().memory_limit == 512 * MiB);
}

TEST_CASE("a capacity change: up wakes waiters, down never below what is committed") {
  test::unique_table t("resize", 8 * MiB);
  session a = t.join("a"); // no limit: its limit is the capacity, and follows it
  session_options bo = t.options("b");
  bo.memory_limit = memory_amount::of_bytes(6 * MiB);
  session b(t.key(), bo);
  auto held = a.reserve(6 * MiB, 0ms);
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    auto r = b.reserve(5 * MiB, 10s); // does not fit in 8 MiB next to 6 MiB
    got = true;
  });
  std::this_thread::sleep_for(100ms);
  CHECK_FALSE(got.load());
  auto tab = t.open();
  table_defaults d;
  d.capacity = 16 * MiB;
  tab.configure_defaults(d);
  CHECK(test::eventually([&] { return got.load(); }, 2000ms)); // woken by the change
  waiter.join();
  CHECK(a.info().memory_limit == 16 * MiB); // followed the capacity
  CHECK(b.info().memory_limit == 6 * MiB);  // its own limit stays
  CHECK(tab.snapshot().capacity == 16 * MiB);
  // Down: not below the 6 MiB still held.
  d.capacity = 5 * MiB;
  const std::string why = message_of([&] { tab.configure_defaults(d); }, errc::invalid_argument);
  CHECK(has(why, "cannot go down to 5.00 MiB: its live sessions have committed 6.00 MiB"));
  CHECK(tab.snapshot().capacity == 16 * MiB); // unchanged
  d.capacity = 6 * MiB;                       // exactly what is committed: allowed
  tab.configure_defaults(d);
  CHECK(tab.snapshot().capacity == 6 * MiB);
  CHECK(a.info().memory_limit == 6 * MiB);
  CHECK_FALSE(b.try_reserve(1).has_value()); // full
  d.capacity = 0;                            // unlimited
  tab.configure_defaults(d);
  CHECK(tab.snapshot().capacity == unlimited_memory);
  CHECK(b.try_reserve(1 * MiB).has_value());
}

TEST_CASE("messages say unlimited, never 8.00 EiB, for an unlimited capacity") {
  test::unique_table t("word");
  session first = t.join("first"); // creates the table, unlimited
  session_options o = t.options("asks");
  o.capacity = 4 * GiB;
  int code = -1;
  const std::string notice = test::child_stderr([&] { session second(t.key(), o); }, &code);
  CHECK(code == 0);
  CAPTURE(notice);
  // The table keeps its capacity, and the notice says which, in the tool's word.
  CHECK(has(notice, "asked for a table capacity of 4.00 GiB, but table '" + t.object_name() +
                        "' already existed with a capacity of unlimited"));
  CHECK_FALSE(has(notice, "EiB"));
  CHECK(format_capacity(unlimited_memory) == "unlimited");
  CHECK(format_capacity(4 * GiB) == "4.00 GiB");
  // What is available in an unlimited table is unlimited too, whatever is committed (it was
  // 2^63 - committed, which showed as "8.00 EiB" in the examples and `gpushare run`'s wait).
  auto r = first.reserve(3 * MiB, 0ms);
  const table_snapshot snap = t.open().snapshot();
  CHECK(snap.committed_total == 3 * MiB);
  CHECK(snap.available == unlimited_memory);
  CHECK(format_capacity(snap.available) == "unlimited");
}

TEST_CASE("a limited table's available memory is its capacity less what is committed") {
  test::unique_table t("avail");
  session_options o = t.options("one");
  o.capacity = 64 * MiB;
  session s(t.key(), o);
  auto r = s.reserve(24 * MiB, 0ms);
  CHECK(t.open().snapshot().available == 40 * MiB);
}

TEST_CASE("seeded random reservations and capacity changes keep committed <= capacity") {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 g(seed);
    test::unique_table t("random", 64 * MiB);
    std::vector<session> sessions;
    // Appended, not "s" + std::to_string(k): GCC 12 at -O3 reports a false -Wrestrict in
    // operator+(const char*, string&&), which -Werror makes fatal in the Release build.
    for (int k = 0; k < 3; ++k)
      sessions.push_back(t.join(std::string("s").append(std::to_string(k))));
    std::vector<reservation> held;
    auto tab = t.open();
    for (int step = 0; step < 200; ++step) {
      const table_snapshot before = tab.snapshot();
      switch (g() % 3) {
      case 0: {
        const std::uint64_t bytes = (1 + g() % 16) * MiB;
        session& s = sessions[g() % 3];
        // Over its limit (which followed a lowered capacity) or the whole capacity: refused.
        if (const auto e = test::thrown([&] {
              if (auto r = s.try_reserve(bytes)) held.push_back(std::move(*r));
            }))
          CHECK((e->code() == errc::over_limit || e->code() == errc::exceeds_capacity));
        break;
      }
      case 1:
        if (!held.empty()) held.erase(held.begin() + static_cast<long>(g() % held.size()));
        break;
      default: {
        table_defaults d;
        d.capacity = (g() % 96) * MiB; // 0: unlimited
        const auto e = test::thrown([&] { tab.configure_defaults(d); });
        const std::uint64_t want = *d.capacity == 0 ? unlimited_memory : *d.capacity;
        CHECK(e.has_value() == (want < before.committed_total)); // refused exactly then
        CHECK(tab.snapshot().capacity == (e ? before.capacity : want));
      }
      }
      const table_snapshot now = tab.snapshot();
      CHECK(now.committed_total <= now.capacity);
      std::uint64_t sum = 0;
      for (const auto& i : now.sessions) {
        sum += i.reserved;
        CHECK(i.reserved <= i.memory_limit);
      }
      CHECK(sum == now.committed_total); // no guarantees, no external usage here
    }
  }
}

namespace {
/// Sets an environment variable for the life of the object.
struct scoped_env {
  scoped_env(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~scoped_env() { ::unsetenv(name_); }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;
  const char* name_;
};
} // namespace

TEST_CASE("an amount from the environment is shown as given and as read") {
  test::unique_table t("given", 8 * GiB);
  {
    const scoped_env limit("GPUSHARE_MEMORY_LIMIT", "4gb");
    session s = t.join("decimal");
    CHECK(s.info().memory_limit == 4'000'000'000ull);
    const std::string over =
        message_of([&] { auto r = s.reserve(4 * GiB, 0ms); }, errc::over_limit);
    CHECK(has(over, "would exceed its memory limit of 3.72 GiB (GPUSHARE_MEMORY_LIMIT=4gb, read "
                    "as 4000000000 bytes; K, M, G and T (with or without B) are powers of 1000, "
                    "KiB, MiB, GiB and TiB powers of 1024)"));
    // Once the limit is changed, the old form is not shown with it.
    settings_change c;
    c.memory_limit = memory_amount::of_bytes(1 * GiB);
    s.configure(c);
    const std::string changed =
        message_of([&] { auto r = s.reserve(2 * GiB, 0ms); }, errc::over_limit);
    CHECK(has(changed, "memory limit of 1.00 GiB (reserved"));
    CHECK_FALSE(has(changed, "4gb"));
  }
  {
    const scoped_env limit("GPUSHARE_MEMORY_LIMIT", "2GiB");
    const scoped_env guarantee("GPUSHARE_MEMORY_GUARANTEE", "3gb");
    const std::string why =
        message_of([&] { session s = t.join("both"); }, errc::invalid_environment);
    CHECK(has(why, "the memory guarantee 2.79 GiB (GPUSHARE_MEMORY_GUARANTEE=3gb, read as "
                   "3000000000 bytes; K, M"));
    CHECK(has(why, "is greater than the memory limit 2.00 GiB (GPUSHARE_MEMORY_LIMIT=2GiB, read "
                   "as 2147483648 bytes)"));
  }
  {
    const scoped_env limit("GPUSHARE_MEMORY_LIMIT", "10%");
    const scoped_env guarantee("GPUSHARE_MEMORY_GUARANTEE", "1GB");
    const std::string why =
        message_of([&] { session s = t.join("mixed"); }, errc::invalid_argument); // at join
    CHECK(has(why, "memory guarantee 953.67 MiB (GPUSHARE_MEMORY_GUARANTEE=1GB, read as "
                   "1000000000 bytes"));
    CHECK(has(why, "is greater than the memory limit 819.19 MiB (GPUSHARE_MEMORY_LIMIT=10%, read "
                   "as 858993459 bytes)"));
  }
  CHECK(detail::amount_read_as("", 5).empty());
  CHECK(detail::amount_read_as("GPUSHARE_X=512MiB", 512 * MiB) ==
        " (GPUSHARE_X=512MiB, read as 536870912 bytes)");
}
