// SPDX-License-Identifier: Apache-2.0
// Observing a table from outside: open an existing table without joining it, take a snapshot and
// print what each session holds and uses (what `gpushare status` shows).
#include <cstdio>

#include <gpushare/gpushare.hpp>

namespace {

void print(const gpushare::table_snapshot& t) {
  std::printf("table %s (%s): capacity %s, reserved %s, available %s\n", t.key.c_str(),
              t.object_name.c_str(), gpushare::format_capacity(t.capacity).c_str(),
              gpushare::format_bytes(t.reserved_total).c_str(),
              gpushare::format_capacity(t.available).c_str());
  for (const auto& s : t.sessions)
    std::printf("  %-8s pid %d, %s: reserved %s, peak %s, %llu guards\n", s.name.c_str(), s.pid,
                s.state(), gpushare::format_bytes(s.reserved).c_str(),
                gpushare::format_bytes(s.peak).c_str(), static_cast<unsigned long long>(s.guards));
}

} // namespace

int main() {
  constexpr std::uint64_t GiB = 1ull << 30;
  const char* key = "example-observe";

  // Something to observe: a session holding 1 GiB (normally another program).
  gpushare::session_options o;
  o.name = "worker";
  o.capacity = 4 * GiB;
  gpushare::session worker(key, o);
  auto held = worker.reserve(1 * GiB);

  // An observer opens the table only if it exists (errc::no_such_table otherwise), never creating
  // it, and takes no slot: the table does not count it as a session.
  try {
    auto t = gpushare::table::open(key, gpushare::open_mode::open_existing, o);
    print(t.snapshot());
  } catch (const gpushare::error& e) {
    std::fprintf(stderr, "cannot observe: %s\n", e.what());
    return 1;
  }

  held.release();
  worker.leave();
  gpushare::table::remove(key, o);
}
