// SPDX-License-Identifier: Apache-2.0
// Memory budgets: a table's capacity, a session's guarantee and limit, reserve() that waits and
// try_reserve() that does not. Two sessions in one process stand for two programs.
#include <chrono>
#include <cstdio>

#include <gpushare/gpushare.hpp>

int main() {
  using namespace std::chrono_literals;
  constexpr std::uint64_t GiB = 1ull << 30;
  const char* key = "example-memory"; // the table's key; a CUDA program uses the GPU's UUID

  gpushare::session_options trainer_options;
  trainer_options.name = "trainer";
  trainer_options.capacity = 8 * GiB; // the table's size, set by whoever creates it
  trainer_options.memory_guarantee = gpushare::memory_amount::of_bytes(2 * GiB);
  gpushare::session trainer(key, trainer_options);

  gpushare::session_options server_options;
  server_options.name = "server";
  server_options.memory_limit = gpushare::memory_amount::of_ppm(500'000); // 50% of the capacity
  gpushare::session server(key, server_options);

  // The trainer's guarantee stays free for it: the server can take at most 8 - 2 = 6 GiB, and
  // its own limit is 4 GiB.
  auto cache = server.reserve(3 * GiB, 1s);
  std::printf("server reserved %s\n", gpushare::format_bytes(cache.size()).c_str());
  try {
    auto more = server.reserve(2 * GiB, 1s); // 5 GiB would pass its 4 GiB limit: never fits
  } catch (const gpushare::error& e) {       // so it throws at once, without waiting
    std::printf("server: %s\n", gpushare::to_string(e.code()));
  }

  auto weights = trainer.reserve(2 * GiB, 1s); // within its guarantee: never waits for the server
  if (!trainer.try_reserve(4 * GiB))           // 8 - 3 - 2 = 3 GiB are free: no room now
    std::printf("trainer: no room for 4 GiB now; try_reserve() did not wait\n");

  cache.release(); // released: the bytes are free for the table's other sessions
  auto activations = trainer.reserve(4 * GiB, 1s);
  for (const auto& s : trainer.snapshot().sessions)
    std::printf("%-8s holds %s (limit %s, guarantee %s)\n", s.name.c_str(),
                gpushare::format_bytes(s.reserved).c_str(),
                gpushare::format_capacity(s.memory_limit).c_str(),
                gpushare::format_bytes(s.memory_guarantee).c_str());

  activations.release();
  weights.release();
  trainer.leave();
  server.leave();
  gpushare::table::remove(key, trainer_options); // the last one out removes the table
}
