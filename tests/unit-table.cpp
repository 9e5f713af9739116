// SPDX-License-Identifier: Apache-2.0
// The table object: naming, modes, the init protocol's bounded waits, and refusal of anything
// that is not a table of this layout (with an error that names the object and how to remove it).
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/stat.h>

#include <cstring>

#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;
namespace d = gpushare::detail;

constexpr std::uint64_t MiB = 1ull << 20;

namespace {
std::string shm_path(const std::string& object_name) { return "/dev/shm" + object_name; }

/// Maps the table object raw, as a rogue or buggy writer would.
struct raw_mapping {
  explicit raw_mapping(const std::string& object_name) {
    fd = ::shm_open(object_name.c_str(), O_RDWR, 0);
    REQUIRE(fd >= 0);
    struct stat st {};
    ::fstat(fd, &st);
    size = static_cast<std::size_t>(st.st_size);
    base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(base != MAP_FAILED);
  }
  ~raw_mapping() {
    ::munmap(base, size);
    ::close(fd);
  }
  d::table_header& header() { return *static_cast<d::table_header*>(base); }
  int fd;
  std::size_t size;
  void* base;
};

/// Opening `t` fails with `code` and a message naming the object and how to remove it.
void check_refused(const test::unique_table& t, errc code, const std::string& fragment) {
  try {
    (void)t.open();
    FAIL("the table should have been refused");
  } catch (const gpushare::error& e) {
    CHECK(e.code() == code);
    const std::string msg = e.what();
    CHECK(msg.find(t.object_name()) != std::string::npos);
    CHECK(msg.find("rm /dev/shm" + t.object_name()) != std::string::npos);
    CHECK(msg.find(fragment) != std::string::npos);
  }
}
} // namespace

TEST_CASE("object names carry domain, owner and key, and bad parts are refused") {
  const std::string user = d::table_object_name("prod", "GPU-1234", table_access::user);
  CHECK(user == "/gpushare.prod.u" + std::to_string(::geteuid()) + ".GPU-1234");
  const std::string group = d::table_object_name("prod", "GPU-1234", table_access::group);
  CHECK(group == "/gpushare.prod.g" + std::to_string(::getegid()) + ".GPU-1234");
  for (const char* bad_key : {"", "a/b", "../x", ".hidden", "key with space"})
    CHECK_THROWS_AS(d::table_object_name("prod", bad_key, table_access::user), gpushare::error);
  CHECK_THROWS_AS(d::table_object_name("prod", std::string(97, 'k'), table_access::user),
                  gpushare::error);
  CHECK_THROWS_AS(d::table_object_name("a/b", "k", table_access::user), gpushare::error);
  CHECK_THROWS_AS(d::table_object_name(std::string(33, 'd'), "k", table_access::user),
                  gpushare::error);
  try {
    session s("bad/key");
    FAIL("expected invalid_argument");
  } catch (const gpushare::error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK(std::string(e.what()).find("bad/key") != std::string::npos);
  }
}

TEST_CASE("tables are created 0600 by default and 0660 only when asked") {
  test::unique_table t("mode", 10 * MiB);
  auto tab = t.open();
  CHECK(tab.created());
  struct stat st {};
  REQUIRE(::stat(shm_path(t.object_name()).c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(tab.snapshot().access_mode == 0600);

  session_options o = t.options();
  o.access = table_access::group;
  auto shared = table::open(t.key(), o);
  const std::string gname = d::table_object_name("gpusharetest", t.key(), table_access::group);
  CHECK(shared.object_name() == gname);
  REQUIRE(::stat(shm_path(gname).c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0660);
  CHECK(shared.snapshot().access_mode == 0660);
  CHECK_FALSE(t.open().created()); // the second open attaches to the existing table
}

TEST_CASE("GPUSHARE_TABLE_MODE=group selects the group table, and a bad value is an env error") {
  test::unique_table t("mode-env", 10 * MiB);
  const pid_t child = test::spawn([&] {
    ::setenv("GPUSHARE_TABLE_MODE", "group", 1);
    auto tab = t.open();
    if (tab.object_name().find(".g") == std::string::npos) return 1;
    ::setenv("GPUSHARE_TABLE_MODE", "0777", 1);
    try {
      (void)t.open();
      return 2;
    } catch (const gpushare::error& e) {
      if (e.code() != errc::invalid_environment) return 3;
      if (std::string(e.what()).find("GPUSHARE_TABLE_MODE") == std::string::npos) return 4;
    }
    ::setenv("GPUSHARE_TABLE_MODE", "user", 1);
    ::setenv("GPUSHARE_MEMORY_LIMIT", "-1", 1);
    try {
      session s(t.key(), t.options());
      return 5;
    } catch (const gpushare::error& e) {
      if (e.code() != errc::invalid_environment) return 6;
      if (std::string(e.what()).find("GPUSHARE_MEMORY_LIMIT") == std::string::npos) return 7;
    }
    return 0;
  });
  CHECK(test::wait_exit(child) == 0);
}

TEST_CASE("a table with bad magic is refused as corrupt, and left alone") {
  test::unique_table t("magic", 10 * MiB);
  (void)t.open();
  {
    raw_mapping m(t.object_name());
    m.header().prefix.magic = 0x1122334455667788ull;
  }
  check_refused(t, errc::table_corrupt, "not a gpushare table");
  struct stat st {};
  CHECK(::stat(shm_path(t.object_name()).c_str(), &st) == 0); // never deleted behind your back
}

TEST_CASE("a table of another layout version is refused as incompatible") {
  test::unique_table t("version", 10 * MiB);
  (void)t.open();
  {
    raw_mapping m(t.object_name());
    m.header().prefix.layout_version = 7;
  }
  check_refused(t, errc::table_incompatible, "layout version 7");
}

TEST_CASE("a truncated table, or one claiming absurd sizes, is refused") {
  SUBCASE("truncated") {
    test::unique_table t("trunc", 10 * MiB);
    (void)t.open();
    const int fd = ::shm_open(t.object_name().c_str(), O_RDWR, 0);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, 4096) == 0);
    ::close(fd);
    check_refused(t, errc::table_corrupt, "truncated");
  }
  SUBCASE("huge slot count") {
    test::unique_table t("slots", 10 * MiB);
    (void)t.open();
    {
      raw_mapping m(t.object_name());
      m.header().prefix.slot_count = 0x7fffffff;
    }
    check_refused(t, errc::table_corrupt, "2147483647 slots");
  }
  SUBCASE("other structure sizes") {
    test::unique_table t("sizes", 10 * MiB);
    (void)t.open();
    {
      raw_mapping m(t.object_name());
      m.header().prefix.slot_size = 4096;
    }
    check_refused(t, errc::table_incompatible, "structure sizes");
  }
}

TEST_CASE("a foreign object under a table's name is refused, not reinitialised") {
  test::unique_table t("foreign", 10 * MiB);
  const int fd = ::shm_open(t.object_name().c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  REQUIRE(fd >= 0);
  std::vector<unsigned char> junk(d::table_size(256));
  for (std::size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<unsigned char>(i * 131 + 7);
  REQUIRE(::write(fd, junk.data(), junk.size()) == static_cast<ssize_t>(junk.size()));
  ::close(fd);
  check_refused(t, errc::table_corrupt, "not a gpushare table");
}

TEST_CASE("a tiny foreign file under a table's name is refused, not taken over") {
  test::unique_table t("tiny", 10 * MiB);
  const int fd = ::shm_open(t.object_name().c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "garbage", 7) == 7);
  ::close(fd);
  check_refused(t, errc::table_corrupt, "not a gpushare table");
  struct stat st {};
  REQUIRE(::stat(shm_path(t.object_name()).c_str(), &st) == 0);
  CHECK(st.st_size == 7); // still there, untouched
}

TEST_CASE("an empty object (creator died before sizing it) is taken over and recreated") {
  test::unique_table t("empty", 10 * MiB);
  const int fd = ::shm_open(t.object_name().c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  REQUIRE(fd >= 0);
  ::close(fd);
  auto tab = t.open(); // waits out the grace period, then recreates
  CHECK(tab.created());
  CHECK(tab.snapshot().capacity == 10 * MiB);
}

TEST_CASE("opening waits for a live creator, boundedly, then reports table_busy") {
  test::unique_table t("busy", 10 * MiB);
  // Play a creator that is alive but never finishes: it holds the init lock, state INIT.
  const int fd = ::shm_open(t.object_name().c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(d::try_lock_byte(fd, d::init_lock_byte) == 0);
  REQUIRE(::posix_fallocate(fd, 0, static_cast<off_t>(d::table_size(256))) == 0);
  {
    raw_mapping m(t.object_name());
    m.header().prefix.init_state.store(d::init_state_initialising);
  }
  session_options o = t.options();
  o.open_timeout = 300ms;
  const auto start = test::now_ns();
  try {
    (void)table::open(t.key(), o);
    FAIL("expected table_busy");
  } catch (const gpushare::error& e) {
    CHECK(e.code() == errc::table_busy);
    CHECK(std::string(e.what()).find("still being initialised") != std::string::npos);
  }
  const auto waited = test::now_ns() - start;
  CHECK(waited >= 250'000'000ull);
  CHECK(waited < 2'000'000'000ull);
  ::close(fd); // the "creator" dies: now the table is taken over
  auto tab = table::open(t.key(), o);
  CHECK(tab.created());
}

TEST_CASE("a failing posix_fallocate gives a clear error and leaves no half-made table") {
  test::unique_table t("fallocate", 10 * MiB);
  // Without root we cannot fill /dev/shm; a file-size limit makes posix_fallocate fail the same
  // way a full tmpfs would (EFBIG here, ENOSPC there), on the same code path.
  const pid_t child = test::spawn([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    try {
      session s(t.key(), t.options());
      return 1;
    } catch (const gpushare::error& e) {
      if (e.code() != errc::system_error && e.code() != errc::no_space) return 2;
      if (std::string(e.what()).find("cannot size table") == std::string::npos &&
          std::string(e.what()).find("no space") == std::string::npos)
        return 3;
    }
    return 0;
  });
  CHECK(test::wait_exit(child) == 0);
  struct stat st {};
  CHECK(::stat(shm_path(t.object_name()).c_str(), &st) != 0); // unlinked on failure
  CHECK(t.open().created());                                  // and a later creator succeeds
}

TEST_CASE("strings read from the table are bounded even when scribbled over") {
  test::unique_table t("scribble", 10 * MiB);
  session s = t.join("victim");
  {
    raw_mapping m(t.object_name());
    auto* slots = reinterpret_cast<d::slot_record*>(&m.header() + 1);
    std::memset(slots[s.id().slot].name, 'A', sizeof slots[0].name); // no terminating NUL
    std::memset(m.header().key, 'K', sizeof m.header().key);
  }
  auto snap = t.open().snapshot();
  REQUIRE(snap.sessions.size() == 1);
  CHECK(snap.sessions[0].name == std::string(d::name_capacity, 'A'));
  CHECK(snap.key.size() == d::key_capacity);
}

TEST_CASE("open_existing never creates a table") {
  test::unique_table t("existing", 10 * MiB);
  try {
    (void)table::open_existing(t.object_name());
    FAIL("expected an error");
  } catch (const gpushare::error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK(std::string(e.what()).find("no table named") != std::string::npos);
  }
  (void)t.open();
  auto tab = table::open_existing(t.object_name());
  CHECK_FALSE(tab.created());
  CHECK(tab.snapshot().capacity == 10 * MiB);
}
