// SPDX-License-Identifier: Apache-2.0
// The quick start of README.md, line for line (the test examples/quickstart/matches-readme
// compares them): join a table, reserve memory, configure, look at the table.
// clang-format off
#include <gpushare/gpushare.hpp>
#include <chrono>
#include <cstdio>

int main() {
  using namespace std::chrono_literals;
  constexpr std::uint64_t GiB = 1ull << 30;
  gpushare::session_options o;        // fields left unset come from GPUSHARE_*, then defaults
  o.name = "trainer";
  o.memory_guarantee = gpushare::memory_amount::of_bytes(1 * GiB);
  o.capacity = 8 * GiB;               // used only by the process that creates the table
  gpushare::session s("GPU-8f1e", o); // joins the table of key "GPU-8f1e", creating it if needed
  auto weights = s.reserve(2 * GiB, 10s); // waits up to 10 s for room, else throws errc::timeout
  if (auto extra = s.try_reserve(1 * GiB)) { /* room now; released at the end of this scope */ }
  gpushare::settings_change c;
  c.memory_limit = gpushare::memory_amount::of_ppm(500'000); // 50% of the capacity
  s.configure(c);
  auto t = gpushare::table::open("GPU-8f1e", gpushare::open_mode::open_existing);
  for (const auto& i : t.snapshot().sessions)
    std::printf("%s holds %llu bytes\n", i.name.c_str(), (unsigned long long)i.reserved);
} // the reservation is released, then the session leaves the table
