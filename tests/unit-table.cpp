// SPDX-License-Identifier: Apache-2.0
// The table object: naming, modes, the init protocol's bounded waits, and refusal of anything
// that is not a table of this layout (with an error that names the object and how to remove it).
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <string_view>
#include <vector>

#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;
namespace d = gpushare::detail;

constexpr std::uint64_t MiB = 1ull << 20;

namespace {
std::string shm_path(const std::string& object_name) { return "/dev/shm" + object_name; }

/// "'/dev/shm/<name>'", as messages name the object (appended: see test::numbered()).
std::string quoted_path(const std::string& object_name) {
  std::string q = "'";
  q += shm_path(object_name);
  q += '\'';
  return q;
}

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

/// The three ways into a table: each must refuse a foreign object and never delete it.
enum class entry { join, open, open_existing };
constexpr entry all_entries[] = {entry::join, entry::open, entry::open_existing};

const char* entry_name(entry e) {
  switch (e) {
  case entry::join: return "session join";
  case entry::open: return "table::open";
  case entry::open_existing: return "table::open_existing";
  }
  return "?";
}

/// Opens `t` through `e` and returns the capacity of the table it got (throws what `e` throws).
std::uint64_t open_via(const test::unique_table& t, entry e) {
  switch (e) {
  case entry::join: return t.join("probe").snapshot().capacity;
  case entry::open: return t.open().snapshot().capacity;
  case entry::open_existing: return table::open_existing(t.object_name()).snapshot().capacity;
  }
  return 0;
}

/// `n` bytes of a pattern no table starts with.
std::vector<unsigned char> junk(std::size_t n) {
  std::vector<unsigned char> bytes(n);
  for (std::size_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>(i * 131 + 7);
  return bytes;
}

/// Our creation prefix (as a creator writes it first), cut or padded with zeros to `n` bytes.
std::vector<unsigned char> creation_prefix_then_zeros(std::size_t n,
                                                      std::uint32_t slot_count = 256) {
  const d::prefix_bytes prefix = d::creation_prefix(slot_count);
  std::vector<unsigned char> bytes(n);
  std::copy_n(prefix.begin(), std::min(n, prefix.size()), bytes.begin());
  return bytes;
}

/// A prefix with our magic and sizes but the given init state, followed by zeros.
std::vector<unsigned char> prefix_with_state(std::uint32_t state, std::size_t n) {
  d::prefix_fields f = d::decode_prefix(d::creation_prefix(256));
  f.init_state = state;
  const d::prefix_bytes prefix = d::encode_prefix(f);
  std::vector<unsigned char> bytes(n);
  std::copy(prefix.begin(), prefix.end(), bytes.begin());
  return bytes;
}

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
  auto shared = table::open(t.key(), gpushare::open_mode::open_or_create, o);
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
    m.header().prefix.layout_version = gpushare::table_layout_version + 1;
  }
  check_refused(
      t, errc::table_incompatible,
      std::string("layout version ").append(std::to_string(gpushare::table_layout_version + 1)));
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
  REQUIRE(test::place_object(t.object_name(), junk(d::table_size(256))));
  check_refused(t, errc::table_corrupt, "not a gpushare table");
}

// Nothing gpushare cannot prove to be its own abandoned creation is ever deleted
// (docs/design.md, section 4). Each size class of object, through each entry point: refused with
// table_corrupt at once, with a message naming /dev/shm/<name> and how to remove it, and left in
// place byte for byte.
TEST_CASE("anything not provably our abandoned creation is refused and never deleted") {
  const std::size_t full = d::table_size(256);
  const std::size_t prefix = sizeof(d::table_prefix);
  struct object_case {
    const char* what;
    std::vector<unsigned char> bytes;
  };
  const std::vector<object_case> cases = {
      {"1 byte", junk(1)},
      {"7 bytes of text", {'g', 'a', 'r', 'b', 'a', 'g', 'e'}},
      {"39 bytes: our prefix without its last byte", creation_prefix_then_zeros(prefix - 1)},
      {"40 zero bytes", std::vector<unsigned char>(prefix)},
      {"40 foreign bytes", junk(prefix)},
      {"4096 zero bytes", std::vector<unsigned char>(4096)},
      {"our prefix at 4096 bytes", creation_prefix_then_zeros(4096)},
      {"our prefix, one byte short of the table size", creation_prefix_then_zeros(full - 1)},
      {"table size, zero-filled", std::vector<unsigned char>(full)},
      {"table size, foreign bytes", junk(full)},
      {"table size, our magic but state fresh", prefix_with_state(d::init_state_fresh, full)},
      {"table size, our magic but an unknown state", prefix_with_state(0x12345678u, full)},
      {"our prefix claiming 0 slots", creation_prefix_then_zeros(prefix, 0)},
      {"our prefix, one byte more than the table size", creation_prefix_then_zeros(full + 1)},
      {"larger than any table, zero-filled",
       std::vector<unsigned char>(d::table_size(d::max_slot_count) + 4096)},
  };
  for (const object_case& c : cases) {
    for (const entry e : all_entries) {
      CAPTURE(c.what);
      CAPTURE(entry_name(e));
      test::unique_table t("refuse", 10 * MiB);
      REQUIRE(test::place_object(t.object_name(), c.bytes));
      const auto start = test::now_ns();
      const std::optional<gpushare::error> err = test::thrown([&] { (void)open_via(t, e); });
      REQUIRE(err.has_value());
      CHECK(err->code() == errc::table_corrupt);
      const std::string msg = err->what();
      CHECK(msg.find(quoted_path(t.object_name())) != std::string::npos);
      CHECK(msg.find("not a gpushare table") != std::string::npos);
      CHECK(msg.find("rm " + shm_path(t.object_name())) != std::string::npos);
      CHECK(test::now_ns() - start < d::abandon_grace_ns); // refused at once, not after a wait
      const auto after = test::object_bytes(t.object_name());
      REQUIRE(after.has_value()); // never deleted
      CHECK(*after == c.bytes);   // nor changed
    }
  }
}

TEST_CASE("an unfinished table of another layout version is refused as incompatible, kept") {
  d::prefix_fields f = d::decode_prefix(d::creation_prefix(256));
  f.layout_version = gpushare::table_layout_version + 1;
  const d::prefix_bytes prefix = d::encode_prefix(f);
  const std::vector<unsigned char> bytes(prefix.begin(), prefix.end());
  for (const entry e : all_entries) {
    CAPTURE(entry_name(e));
    test::unique_table t("other-layout", 10 * MiB);
    REQUIRE(test::place_object(t.object_name(), bytes));
    const std::optional<gpushare::error> err = test::thrown([&] { (void)open_via(t, e); });
    REQUIRE(err.has_value());
    CHECK(err->code() == errc::table_incompatible);
    CHECK(std::string(err->what()).find(shm_path(t.object_name())) != std::string::npos);
    CHECK(std::string(err->what())
              .find("layout version " + std::to_string(gpushare::table_layout_version + 1)) !=
          std::string::npos);
    CHECK(test::object_bytes(t.object_name()) == bytes);
  }
}

// A 0-byte object is what shm_open(O_CREAT) leaves before our creator writes its prefix. Once
// its init lock has been free for the grace period it is taken as our abandoned creation: join
// and table::open recreate it; open_existing reports it and leaves it in place.
TEST_CASE("an empty object (creator died before writing) is recreated, open_existing keeps it") {
  for (const entry e : all_entries) {
    CAPTURE(entry_name(e));
    test::unique_table t("empty", 10 * MiB);
    REQUIRE(test::place_object(t.object_name(), {}));
    const auto start = test::now_ns();
    if (e == entry::open_existing) {
      const std::optional<gpushare::error> err = test::thrown([&] { (void)open_via(t, e); });
      REQUIRE(err.has_value());
      CHECK(err->code() == errc::no_such_table);
      const std::string msg = err->what();
      CHECK(msg.find(quoted_path(t.object_name())) != std::string::npos);
      CHECK(msg.find("abandoned") != std::string::npos);
      CHECK(msg.find("left in place") != std::string::npos);
      CHECK(test::now_ns() - start >= d::abandon_grace_ns); // judged only after the grace
      CHECK(test::object_bytes(t.object_name()) == std::vector<unsigned char>{}); // still there
      CHECK(t.open().created()); // and still recoverable
    } else {
      CHECK(open_via(t, e) == 10 * MiB); // waits out the grace period, then recreates
      CHECK(test::now_ns() - start >= d::abandon_grace_ns);
      CHECK(test::object_bytes(t.object_name())->size() == d::table_size(256));
    }
  }
}

TEST_CASE("an empty object whose init lock is held is waited for, not taken over") {
  test::unique_table t("empty-locked", 10 * MiB);
  const int fd = ::shm_open(t.object_name().c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(d::try_lock_byte(fd, d::init_lock_byte) == 0); // a creator, alive, not yet sizing
  session_options o = t.options();
  o.open_timeout = 300ms;
  const std::optional<gpushare::error> err =
      test::thrown([&] { (void)table::open(t.key(), gpushare::open_mode::open_or_create, o); });
  REQUIRE(err.has_value());
  CHECK(err->code() == errc::table_busy);
  CHECK(test::object_bytes(t.object_name()) == std::vector<unsigned char>{});
  ::close(fd);
}

TEST_CASE("a creator killed at each step of creating is recovered, never by open_existing") {
  for (const char* point :
       {"create.locked", "create.prefixed", "create.sized", "create.initialising"}) {
    for (const entry e : all_entries) {
      CAPTURE(point);
      CAPTURE(entry_name(e));
      test::unique_table t("killed-creator", 10 * MiB);
      const pid_t creator = test::spawn([&] {
        test::die_at(point);
        (void)t.open();
        return 42;
      });
      REQUIRE(test::wait_exit(creator) == 128 + SIGKILL);
      const auto left = test::object_bytes(t.object_name());
      REQUIRE(left.has_value());
      const std::string_view p(point);
      CHECK(left->size() == (p == "create.locked"     ? 0
                             : p == "create.prefixed" ? sizeof(d::table_prefix)
                                                      : d::table_size(256)));
      if (e == entry::open_existing) {
        const std::optional<gpushare::error> err = test::thrown([&] { (void)open_via(t, e); });
        REQUIRE(err.has_value());
        CHECK(err->code() == errc::no_such_table);
        CHECK(std::string(err->what()).find(shm_path(t.object_name())) != std::string::npos);
        CHECK(test::object_bytes(t.object_name()) == left); // left in place, unchanged
      }
      // Join and table::open recover it (and so does anything after open_existing reported it).
      const entry recover = e == entry::open_existing ? entry::open : e;
      CHECK(open_via(t, recover) == 10 * MiB);
      CHECK(test::object_bytes(t.object_name())->size() == d::table_size(256));
    }
  }
}

TEST_CASE("an opener that read the size before the creator grew the object gets the ready table") {
  // The creator stops after writing its 40-byte prefix; the opener reads that size, then waits
  // (in a test hook) until the creator has finished. It must not judge the ready table by the
  // stale 40 bytes ("truncated").
  test::unique_table t("stale-size", 10 * MiB);
  test::shared_block<std::atomic<int>> step(3); // creator prefixed, opener sized, creator done
  static std::atomic<int>* steps = nullptr;
  steps = step.get();
  const pid_t creator = test::spawn([&] {
    d::crash_point_hook = [](const char* where) {
      if (std::string_view(where) != "create.prefixed") return;
      steps[0] = 1;
      while (steps[1].load() == 0) ::usleep(100);
    };
    const bool created = t.open().created();
    steps[2] = 1;
    return created ? 0 : 1;
  });
  REQUIRE(test::eventually([&] { return step[0].load() == 1; }));
  const pid_t opener = test::spawn([&] {
    d::crash_point_hook = [](const char* where) {
      if (std::string_view(where) != "attach.stat" || steps[1].exchange(1) != 0) return;
      while (steps[2].load() == 0) ::usleep(100); // the size we read is now stale
    };
    try {
      return t.open().snapshot().capacity == 10 * MiB ? 0 : 2;
    } catch (const gpushare::error& e) {
      std::fprintf(stderr, "opener: %s\n", e.what());
      return 3;
    }
  });
  CHECK(test::wait_exit(opener) == 0);
  CHECK(test::wait_exit(creator) == 0);
  CHECK(step[1].load() == 1); // the opener did read the size while it was 40 bytes
}

TEST_CASE("gpushare clean's removal removes an abandoned creation (not in a dry run), never a "
          "foreign object") {
  test::unique_table t("clean-abandoned", 10 * MiB);
  REQUIRE(test::place_object(t.object_name(), creation_prefix_then_zeros(d::table_size(256))));
  removal_options dry;
  dry.dry_run = true;
  CHECK(remove_unused_table(t.object_name(), dry).status == removal_status::would_remove);
  CHECK(test::object_bytes(t.object_name()).has_value()); // a dry run removes nothing
  CHECK(remove_unused_table(t.object_name()).status == removal_status::gone);
  CHECK_FALSE(test::object_bytes(t.object_name()).has_value());

  test::unique_table f("clean-foreign", 10 * MiB);
  const std::vector<unsigned char> zeros(4096);
  REQUIRE(test::place_object(f.object_name(), zeros));
  for (const bool dry_run : {true, false}) {
    removal_options o;
    o.dry_run = dry_run;
    const std::optional<gpushare::error> err =
        test::thrown([&] { (void)remove_unused_table(f.object_name(), o); });
    REQUIRE(err.has_value());
    CHECK(err->code() == errc::table_corrupt);
    CHECK(test::object_bytes(f.object_name()) == zeros);
  }
}

TEST_CASE("opening waits for a live creator, boundedly, then reports table_busy") {
  test::unique_table t("busy", 10 * MiB);
  // Play a creator that is alive but never finishes: it holds the init lock, state INIT.
  const int fd = ::shm_open(t.object_name().c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(d::try_lock_byte(fd, d::init_lock_byte) == 0);
  const d::prefix_bytes prefix = d::creation_prefix(256);
  REQUIRE(::pwrite(fd, prefix.data(), prefix.size(), 0) == static_cast<ssize_t>(prefix.size()));
  REQUIRE(::posix_fallocate(fd, 0, static_cast<off_t>(d::table_size(256))) == 0);
  session_options o = t.options();
  o.open_timeout = 300ms;
  const auto start = test::now_ns();
  try {
    (void)table::open(t.key(), gpushare::open_mode::open_or_create, o);
    FAIL("expected table_busy");
  } catch (const gpushare::error& e) {
    CHECK(e.code() == errc::table_busy);
    CHECK(std::string(e.what()).find("still being initialised") != std::string::npos);
  }
  const auto waited = test::now_ns() - start;
  CHECK(waited >= 250'000'000ull);
  CHECK(waited < 2'000'000'000ull);
  ::close(fd); // the "creator" dies: now the table is taken over
  auto tab = table::open(t.key(), gpushare::open_mode::open_or_create, o);
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

TEST_CASE("table::open creates only with open_mode::open_or_create") {
  test::unique_table t("mode-open", 10 * MiB);
  // open_existing on a missing table: no_such_table, and nothing is left behind.
  const std::optional<gpushare::error> err = test::thrown(
      [&] { (void)table::open(t.key(), gpushare::open_mode::open_existing, t.options()); });
  REQUIRE(err.has_value());
  CHECK(err->code() == errc::no_such_table);
  CHECK(std::string(err->what()).find(t.object_name()) != std::string::npos);
  struct stat st {};
  CHECK(::stat(shm_path(t.object_name()).c_str(), &st) != 0);
  // open_or_create creates it, with the options' capacity.
  auto created = table::open(t.key(), gpushare::open_mode::open_or_create, t.options());
  CHECK(created.created());
  CHECK(created.snapshot().capacity == 10 * MiB);
  // Now open_existing finds it, and a capacity asked for by an opener changes nothing.
  session_options bigger = t.options();
  bigger.capacity = 20 * MiB;
  auto existing = table::open(t.key(), gpushare::open_mode::open_existing, bigger);
  CHECK_FALSE(existing.created());
  CHECK(existing.object_name() == t.object_name());
  CHECK(existing.snapshot().capacity == 10 * MiB);
}

TEST_CASE("table::remove removes an unused table and never one a live session uses") {
  test::unique_table t("remove", 10 * MiB);
  struct stat st {};
  // No table: gone, nothing thrown.
  CHECK(table::remove(t.key(), t.options()).status == removal_status::gone);
  {
    session s = t.join("user");
    const removal_result busy = table::remove(t.key(), t.options());
    CHECK(busy.status == removal_status::in_use);
    CHECK(busy.live_sessions == 1);
    CHECK(::stat(shm_path(t.object_name()).c_str(), &st) == 0); // still there
    CHECK(t.open().snapshot().sessions.size() == 1);            // and the session with it
  }
  // The session left: the table is unused now and goes.
  const removal_result done = table::remove(t.key(), t.options());
  CHECK(done.status == removal_status::removed);
  CHECK(::stat(shm_path(t.object_name()).c_str(), &st) != 0);
  // Another domain's options name another object: this one is not touched.
  (void)t.open();
  session_options other = t.options();
  other.domain = "gpusharetest2";
  CHECK(table::remove(t.key(), other).status == removal_status::gone);
  CHECK(::stat(shm_path(t.object_name()).c_str(), &st) == 0);
}

TEST_CASE("open_existing never creates a table") {
  test::unique_table t("existing", 10 * MiB);
  try {
    (void)table::open_existing(t.object_name());
    FAIL("expected an error");
  } catch (const gpushare::error& e) {
    CHECK(e.code() == errc::no_such_table);
    CHECK(std::string(e.what()).find("no table named") != std::string::npos);
  }
  (void)t.open();
  auto tab = table::open_existing(t.object_name());
  CHECK_FALSE(tab.created());
  CHECK(tab.snapshot().capacity == 10 * MiB);
}
