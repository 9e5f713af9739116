// SPDX-License-Identifier: Apache-2.0
// Memory given back when asked: a low-priority session keeps a cache in a reclaimable
// reservation; when a high-priority session's reserve waits for memory, the cache's handler is
// asked for what it lacks and gives it back. Nobody is killed: without a handler the reserve
// would wait. Two sessions in one process stand for two programs.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include <gpushare/gpushare.hpp>

int main() {
  using namespace std::chrono_literals;
  constexpr std::uint64_t GiB = 1ull << 30;
  const char* key = "example-reclaim"; // the table's key; a CUDA program uses the GPU's UUID

  gpushare::session_options cache_options;
  cache_options.name = "cache";
  cache_options.capacity = 8 * GiB; // the table's size, set by whoever creates it
  cache_options.priority = gpushare::priority::low;
  gpushare::session cache_owner(key, cache_options);

  // 6 GiB of cache the program can rebuild later: reclaimable.
  auto cache = cache_owner.reserve_reclaimable(6 * GiB, 1s);
  cache_owner.on_reclaim([&cache](std::uint64_t asked) {
    const std::uint64_t give = std::min(asked, cache.size());
    // A real program frees `give` bytes of device memory here (drops cache entries), then:
    cache.shrink(give);
    std::printf("cache: asked for %s, gave it back\n", gpushare::format_bytes(asked).c_str());
    return give;
  });
  cache_owner.watch_reclaim(); // answer at once, on a thread of its own

  gpushare::session_options server_options;
  server_options.name = "server";
  server_options.priority = gpushare::priority::high;
  gpushare::session server(key, server_options);

  // 8 - 6 = 2 GiB are free; 5 GiB must wait until the cache gives 3 GiB back.
  const auto start = std::chrono::steady_clock::now();
  auto weights = server.reserve(5 * GiB, 10s);
  const auto waited = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::steady_clock::now() - start);
  std::printf("server reserved %s after %lld us\n", gpushare::format_bytes(weights.size()).c_str(),
              static_cast<long long>(waited.count()));
  for (const auto& s : server.snapshot().sessions)
    std::printf("%-6s holds %s, %s of it reclaimable; answered %llu request(s)\n", s.name.c_str(),
                gpushare::format_bytes(s.reserved).c_str(),
                gpushare::format_bytes(s.reclaim.reclaimable).c_str(),
                static_cast<unsigned long long>(s.reclaim.answered));

  weights.release();
  server.leave();
  cache_owner.leave(); // stops the watcher
  gpushare::table::remove(key, cache_options);
  return cache.size() == 3 * GiB ? 0 : 1; // the cache kept what was not asked for
}
