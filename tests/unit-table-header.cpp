// SPDX-License-Identifier: Apache-2.0
// validate_table_header() on a copy of a real table's bytes (the check mapped tables and
// copy_snapshot share): garbage after a sound prefix is reported as a damaged table, not as a
// creator in another time namespace (issue 42, A6), while a real offset still is one.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#include <gpushare/detail/object_header.hpp>
#include <gpushare/gpushare.hpp>

#include "test_util.hpp"

namespace {
namespace d = gpushare::detail;

/// The bytes of table `t` (a live session keeps it).
std::vector<std::byte> table_bytes(const test::unique_table& t) {
  const std::string path = gpushare::table_file(t.object_name());
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  std::vector<std::byte> bytes;
  const off_t size = ::lseek(fd, 0, SEEK_END);
  REQUIRE(size > 0);
  bytes.resize(static_cast<std::size_t>(size));
  REQUIRE(::pread(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
  ::close(fd);
  return bytes;
}

/// What validate_table_header says of `bytes`: the code, or errc{} when it passes.
gpushare::errc judge(std::vector<std::byte> bytes, std::string* what = nullptr) {
  alignas(64) static std::byte header[sizeof(d::table_header)];
  std::memcpy(header, bytes.data(), sizeof header);
  try {
    d::validate_table_header(*reinterpret_cast<const d::table_header*>(header), bytes.size(),
                             "test", "");
  } catch (const gpushare::error& e) {
    if (what) *what = e.what();
    return e.code();
  }
  return gpushare::errc{};
}

} // namespace

TEST_CASE("garbage after a table header's prefix is a damaged table, not a time namespace") {
  test::unique_table t("header-garbage", 64ull << 20);
  gpushare::session s = t.join("s");
  const std::vector<std::byte> sound = table_bytes(t);
  CHECK(judge(sound) == gpushare::errc{});

  std::string what;
  std::vector<std::byte> a = sound; // what the report showed: the rest of the header overwritten
  std::memset(a.data() + sizeof(d::table_prefix), 0x41,
              sizeof(d::table_header) - sizeof(d::table_prefix));
  CHECK(judge(a, &what) == gpushare::errc::table_corrupt);
  CHECK(what.find("has garbage in its header") != std::string::npos);
  CHECK(what.find("time namespace can have") != std::string::npos);

  // Seeded random garbage over every byte after the prefix: always corrupt, never a namespace.
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200; ++i) {
    std::vector<std::byte> g = sound;
    for (std::size_t b = sizeof(d::table_prefix); b < sizeof(d::table_header); ++b)
      g[b] = static_cast<std::byte>(rng());
    CAPTURE(i);
    CHECK(judge(g) == gpushare::errc::table_corrupt);
  }
}

TEST_CASE("a possible clock offset in a sound header is still a time namespace") {
  test::unique_table t("header-offset", 64ull << 20);
  gpushare::session s = t.join("s");
  const std::vector<std::byte> sound = table_bytes(t);
  const std::size_t at = offsetof(d::table_header, monotonic_offset_ns);
  for (const std::int64_t offset :
       std::initializer_list<std::int64_t>{1'000'000'000'000, -1'000'000, 86'400'000'000'000'000}) {
    CAPTURE(offset);
    std::vector<std::byte> b = sound;
    std::memcpy(b.data() + at, &offset, sizeof offset);
    std::string what;
    CHECK(judge(b, &what) == gpushare::errc::table_incompatible);
    CHECK(what.find("time namespace whose monotonic clock is offset") != std::string::npos);
  }
  // Beyond what Linux allows, or below 0 on the host's clock: damage.
  const auto host_now = static_cast<std::int64_t>(d::monotonic_ns()) - d::monotonic_offset_ns();
  for (const std::int64_t offset : std::initializer_list<std::int64_t>{
           INT64_MAX, 4'611'686'019'000'000'000, -host_now - 1'000'000'000, INT64_MIN}) {
    CAPTURE(offset);
    std::vector<std::byte> b = sound;
    std::memcpy(b.data() + at, &offset, sizeof offset);
    CHECK(judge(b) == gpushare::errc::table_corrupt);
  }
  CHECK(d::possible_monotonic_offset(0));
  CHECK(d::possible_monotonic_offset(-host_now / 2));
}
