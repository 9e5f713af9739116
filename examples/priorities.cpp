// SPDX-License-Identifier: Apache-2.0
// Compute arbitration: a priority class, a share, a compute limit, guards around the work that
// occupies the device, and yield() at iteration boundaries. Two threads of one process stand for
// two programs; each "kernel" is a sleep.
#include <chrono>
#include <cstdio>
#include <thread>

#include <gpushare/gpushare.hpp>

namespace {

constexpr const char* key = "example-priorities";

// Runs `steps` iterations of `kernel` under a guard, yielding between them.
void run(gpushare::session& s, int steps, std::chrono::milliseconds kernel) {
  for (int step = 0; step < steps; ++step) {
    {
      gpushare::scoped_kernel guard(s); // waits until the table says this session may run
      std::this_thread::sleep_for(kernel);
    }          // the guard's time is accounted to the session here
    s.yield(); // a cheap moment to hand the device to a waiting peer
  }
}

} // namespace

int main() {
  gpushare::session_options training;
  training.name = "training";
  training.priority = gpushare::priority::low; // gives way to any waiting normal or high session
  training.share = 3;                          // 3x the device time of a share-1 low peer
  training.compute_limit_ppm = 700'000;        // never more than 70% of the device
  gpushare::session trainer(key, training);

  gpushare::session_options inference;
  inference.name = "inference";
  inference.priority = gpushare::priority::high; // runs first whenever it waits
  gpushare::session server(key, inference);

  std::thread t([&] { run(trainer, 40, std::chrono::milliseconds(5)); });
  std::thread i([&] { run(server, 20, std::chrono::milliseconds(1)); });
  t.join();
  i.join();

  for (const auto& s : trainer.snapshot().sessions)
    std::printf("%-9s priority %d, share %u, limit %s: %llu guards, %.1f ms on the device, "
                "waited %.1f ms\n",
                s.name.c_str(), s.priority, s.share,
                gpushare::format_percent(s.compute_limit_ppm).c_str(),
                static_cast<unsigned long long>(s.guards), static_cast<double>(s.device_ns) / 1e6,
                static_cast<double>(s.device_wait_ns) / 1e6);

  trainer.leave();
  server.leave();
  gpushare::table::remove(key, training);
}
