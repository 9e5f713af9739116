// SPDX-License-Identifier: Apache-2.0
// Tables across users (issue 14, sections 1 and 3; docs/design.md, section 1, "Threat model"):
// an object planted under another user's table name, or one whose owner, mode or link count does
// not fit its access mode, is refused with permission_denied; root's read-only commands delete
// nothing; `clean` removes only the caller's objects, and root with --force only another user's
// verified unused tables. Children drop to uids 1000, 1001 and 65534 with
// setgroups/setresgid/setresuid, so these tests need root; without root they print the skip
// marker CTest reports as skipped.
#include <grp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <gpushare/discovery.hpp>

#include "test_util.hpp"

namespace {

namespace gd = gpushare::detail;

constexpr uid_t victim = 1000;
constexpr uid_t other = 1001;
constexpr uid_t nobody = 65534;

bool skip_unless_root() {
  if (::geteuid() == 0) return false;
  std::printf("GPUSHARE_SKIP: needs root to run children as uids 1000, 1001 and 65534\n");
  return true;
}

/// In a forked child: become `uid` (gid `gid`, supplementary groups `groups`) for good.
bool become(uid_t uid, gid_t gid, std::vector<gid_t> groups = {}) {
  return ::setgroups(groups.size(), groups.empty() ? nullptr : groups.data()) == 0 &&
         ::setresgid(gid, gid, gid) == 0 && ::setresuid(uid, uid, uid) == 0 && ::geteuid() == uid &&
         ::getegid() == gid;
}

/// Runs `fn` in a child that is `uid` (with gid `gid`); returns its exit code.
int run_as(uid_t uid, gid_t gid, const std::function<int()>& fn, std::vector<gid_t> groups = {}) {
  return test::wait_exit(test::spawn([&] {
    if (!become(uid, gid, groups)) return 3;
    return fn();
  }));
}

struct outcome {
  int code = -1; ///< errc of the error caught, 0 for success
  char message[1024] = {};
};

void record(outcome& o, const gpushare::error& e) {
  o.code = static_cast<int>(e.code());
  std::snprintf(o.message, sizeof o.message, "%s", e.what());
}

/// A domain of its own for one test ("trust<pid>-<n>"); every object of it is removed at the end.
struct test_domain : test::temp_domain {
  test_domain() : temp_domain("trust") {}
  std::string object(const std::string& owner, const std::string& key) const {
    return "/gpushare." + name() + "." + owner + "." + key;
  }
  gpushare::session_options options(gpushare::table_access a = gpushare::table_access::user) const {
    gpushare::session_options o =
        temp_domain::options(std::string("s") + std::to_string(::getpid()), 1 << 20);
    o.access = a;
    return o;
  }
};

std::string path_of(const std::string& object) { return "/dev/shm" + object; }

struct stat stat_of(const std::string& object) {
  struct stat st {};
  ::stat(path_of(object).c_str(), &st);
  return st;
}

/// In a child of `uid`: joins `key` of `d` with `access` and records the outcome.
outcome join_as(uid_t uid, gid_t gid, const test_domain& d, const std::string& key,
                gpushare::table_access access = gpushare::table_access::user,
                std::vector<gid_t> groups = {}) {
  test::shared_block<outcome> out(1);
  const int rc = run_as(
      uid, gid,
      [&] {
        try {
          gpushare::session s(key, d.options(access));
          out[0].code = 0;
        } catch (const gpushare::error& e) {
          record(out[0], e);
        }
        return 0;
      },
      groups);
  REQUIRE(rc == 0);
  return out[0];
}

/// As `uid`: creates a valid table of its own for `key` of `d` (mode `access`) and returns its
/// bytes (left in place under its own name).
std::vector<unsigned char> make_table_as(uid_t uid, const test_domain& d, const std::string& key,
                                         gpushare::table_access access) {
  REQUIRE(run_as(uid, uid, [&] {
            (void)gpushare::table::open(key, gpushare::open_mode::open_or_create,
                                        d.options(access));
            return 0;
          }) == 0);
  std::string owner = access == gpushare::table_access::group ? "g" : "u";
  owner += std::to_string(uid); // appended: see options()
  const std::string own = d.object(owner, key);
  auto bytes = test::object_bytes(own);
  REQUIRE(bytes.has_value());
  REQUIRE(bytes->size() > 4096);
  return *bytes;
}

/// As `uid`: creates `object` holding `bytes` with mode `mode` (fchmod, so umask is no matter).
bool plant_as(uid_t uid, gid_t gid, const std::string& object,
              const std::vector<unsigned char>& bytes, mode_t mode) {
  return run_as(uid, gid, [&] {
           if (!test::place_object(object, bytes)) return 4;
           return ::chmod(path_of(object).c_str(), mode) == 0 ? 0 : 5;
         }) == 0;
}

std::string cli(const std::string& args) {
  return test::run_command(std::string(GPUSHARE_CLI_PATH) + " " + args + " 2>&1").output;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("a table uid 65534 hard-linked under uid 1000's name, mode 0666, is refused") {
  if (skip_unless_root()) return;
  test_domain d;
  (void)make_table_as(nobody, d, "GPU-victim", gpushare::table_access::user);
  const std::string own = d.object("u65534", "GPU-victim");
  const std::string planted = d.object("u1000", "GPU-victim");
  REQUIRE(run_as(nobody, nobody, [&] {
            if (::link(path_of(own).c_str(), path_of(planted).c_str()) != 0) return 4;
            return ::chmod(path_of(planted).c_str(), 0666) == 0 ? 0 : 5;
          }) == 0);
  REQUIRE(stat_of(planted).st_nlink == 2);

  const outcome o = join_as(victim, victim, d, "GPU-victim");
  INFO(o.message);
  CHECK(o.code == static_cast<int>(gpushare::errc::permission_denied));
  const std::string m = o.message;
  CHECK(contains(m, planted));
  CHECK(contains(m, "uid 65534, gid 65534, mode 0666, 2 links"));
  CHECK(contains(m, "the name is taken by uid 65534"));
  CHECK(contains(m, "GPUSHARE_DOMAIN"));
  CHECK(contains(m, "ask root"));
  CHECK_FALSE(contains(m, "rm /dev/shm"));
}

TEST_CASE("a table uid 65534 created under uid 1000's exact name, mode 0666, is refused") {
  if (skip_unless_root()) return;
  test_domain d;
  const auto bytes = make_table_as(nobody, d, "GPU-victim", gpushare::table_access::user);
  const std::string planted = d.object("u1000", "GPU-victim");
  REQUIRE(plant_as(nobody, nobody, planted, bytes, 0666));
  REQUIRE(stat_of(planted).st_nlink == 1);

  const outcome o = join_as(victim, victim, d, "GPU-victim");
  INFO(o.message);
  CHECK(o.code == static_cast<int>(gpushare::errc::permission_denied));
  CHECK(contains(o.message, "uid 65534, gid 65534, mode 0666, 1 link"));
  CHECK(contains(o.message, "the name is taken by uid 65534"));
  // The planted object is left as it is (the victim could not remove it anyway).
  CHECK(test::object_bytes(planted) == bytes);

  // The same object at mode 0600: the victim cannot even open it, and is told who took the name.
  REQUIRE(::chmod(path_of(planted).c_str(), 0600) == 0);
  const outcome closed = join_as(victim, victim, d, "GPU-victim");
  INFO(closed.message);
  CHECK(closed.code == static_cast<int>(gpushare::errc::permission_denied));
  CHECK(contains(closed.message, "the name is taken by uid 65534"));
}

TEST_CASE("an own table with group or other permission bits (0644) is refused") {
  if (skip_unless_root()) return;
  test_domain d;
  (void)make_table_as(victim, d, "GPU-loose", gpushare::table_access::user);
  const std::string object = d.object("u1000", "GPU-loose");
  REQUIRE(::chmod(path_of(object).c_str(), 0644) == 0);
  const outcome o = join_as(victim, victim, d, "GPU-loose");
  INFO(o.message);
  CHECK(o.code == static_cast<int>(gpushare::errc::permission_denied));
  CHECK(contains(o.message, "uid 1000, gid 1000, mode 0644, 1 link"));
  // open_existing (what the CLI's `set` uses) refuses it too.
  test::shared_block<outcome> out(1);
  REQUIRE(run_as(victim, victim, [&] {
            try {
              (void)gpushare::table::open_existing(object);
              out[0].code = 0;
            } catch (const gpushare::error& e) {
              record(out[0], e);
            }
            return 0;
          }) == 0);
  CHECK(out[0].code == static_cast<int>(gpushare::errc::permission_denied));
  // Back at 0600 it is the owner's table again.
  REQUIRE(::chmod(path_of(object).c_str(), 0600) == 0);
  CHECK(join_as(victim, victim, d, "GPU-loose").code == 0);
}

TEST_CASE("an own table with a second link is refused") {
  if (skip_unless_root()) return;
  test_domain d;
  (void)make_table_as(victim, d, "GPU-linked", gpushare::table_access::user);
  const std::string object = d.object("u1000", "GPU-linked");
  const std::string alias = d.object("u1000", "GPU-alias");
  REQUIRE(::link(path_of(object).c_str(), path_of(alias).c_str()) == 0);
  REQUIRE(stat_of(object).st_nlink == 2);
  const outcome o = join_as(victim, victim, d, "GPU-linked");
  INFO(o.message);
  CHECK(o.code == static_cast<int>(gpushare::errc::permission_denied));
  CHECK(contains(o.message, "mode 0600, 2 links"));
  CHECK(contains(o.message, "one link"));
}

TEST_CASE("a group-mode table whose group is not the one in its name is refused") {
  if (skip_unless_root()) return;
  test_domain d;
  const auto bytes = make_table_as(nobody, d, "GPU-group", gpushare::table_access::group);
  const std::string planted = d.object("g1000", "GPU-group");
  // uid 65534's object at the name of group 1000, mode 0660: it can open it only as a member of
  // group 65534 (uid 1001 here, with 65534 as a supplementary group).
  REQUIRE(plant_as(nobody, nobody, planted, bytes, 0660));
  const outcome member =
      join_as(other, victim, d, "GPU-group", gpushare::table_access::group, {victim, nobody});
  INFO(member.message);
  CHECK(member.code == static_cast<int>(gpushare::errc::permission_denied));
  CHECK(contains(member.message, "uid 65534, gid 65534, mode 0660"));
  CHECK(contains(member.message, "the name is taken by uid 65534"));
  // At 0666 anyone can open it: still refused, for uid 1000 of group 1000.
  REQUIRE(::chmod(path_of(planted).c_str(), 0666) == 0);
  const outcome o = join_as(victim, victim, d, "GPU-group", gpushare::table_access::group);
  INFO(o.message);
  CHECK(o.code == static_cast<int>(gpushare::errc::permission_denied));
  CHECK(contains(o.message, "gid 65534, mode 0666"));
  CHECK(test::object_bytes(planted) == bytes);
}

TEST_CASE("root observes another user's table read-only, and refuses one planted under a name") {
  if (skip_unless_root()) return;
  test_domain d;
  (void)make_table_as(victim, d, "GPU-seen", gpushare::table_access::user);
  const std::string object = d.object("u1000", "GPU-seen");
  // As a participant, root does not take part in uid 1000's table.
  const auto refused =
      test::thrown([&] { (void)gd::mapped_table::open_existing(object, 1'000'000'000); });
  REQUIRE(refused.has_value());
  CHECK(refused->code() == gpushare::errc::permission_denied);
  // As an observer it reads it, through a read-only mapping.
  auto m = gd::mapped_table::open_existing(object, 1'000'000'000, gd::abandoned_creation::keep,
                                           gd::open_intent::observer);
  CHECK(m.intent() == gd::open_intent::observer);
  CHECK(gd::read_bounded(m.view().header->domain, gd::domain_capacity) == d.name());
  CHECK(m.view().header->capacity == 1u << 20);
  const pid_t writer = test::spawn([&] {
    ::signal(SIGSEGV, SIG_DFL);    // not doctest's handler: just die of it
    m.view().header->capacity = 1; // must fault: the mapping is PROT_READ
    return 0;
  });
  CHECK(test::wait_exit(writer) == 128 + SIGSEGV);
  CHECK(m.view().header->capacity == 1u << 20);
  // uid 65534's object under uid 1000's name is refused to the observer too.
  const auto bytes = make_table_as(nobody, d, "GPU-fake", gpushare::table_access::user);
  const std::string planted = d.object("u1000", "GPU-fake");
  REQUIRE(plant_as(nobody, nobody, planted, bytes, 0600));
  const auto fake = test::thrown([&] {
    (void)gd::mapped_table::open_existing(planted, 1'000'000'000, gd::abandoned_creation::keep,
                                          gd::open_intent::observer);
  });
  REQUIRE(fake.has_value());
  CHECK(fake->code() == gpushare::errc::permission_denied);
  CHECK(contains(fake->what(), "the name is taken by uid 65534"));
}

namespace {

/// uid 1000's junk in `d`: 4 KiB of zeros, 0 bytes, and gpushare's creation prefix alone (what a
/// creator that died half-way leaves), each mode 0600.
std::vector<std::pair<std::string, std::vector<unsigned char>>> plant_junk(const test_domain& d) {
  const auto prefix = gd::creation_prefix(gd::default_slot_count);
  std::vector<std::pair<std::string, std::vector<unsigned char>>> junk = {
      {d.object("u1000", "mydata"), std::vector<unsigned char>(4096, 0)},
      {d.object("u1000", "empty"), {}},
      {d.object("u1000", "half"), std::vector<unsigned char>(prefix.begin(), prefix.end())},
  };
  for (const auto& [object, bytes] : junk) REQUIRE(plant_as(victim, victim, object, bytes, 0600));
  ::usleep(300'000); // well past the abandon grace period: each looks abandoned
  return junk;
}

void check_junk_intact(
    const std::vector<std::pair<std::string, std::vector<unsigned char>>>& junk) {
  for (const auto& [object, bytes] : junk) {
    INFO(object);
    const auto now = test::object_bytes(object);
    REQUIRE(now.has_value());
    CHECK(*now == bytes);
    CHECK(stat_of(object).st_uid == victim);
  }
}

} // namespace

TEST_CASE("root's status, metrics and set on another user's junk delete nothing") {
  if (skip_unless_root()) return;
  test_domain d;
  const auto junk = plant_junk(d);
  const std::string status = cli("status --domain " + d.name());
  INFO(status);
  check_junk_intact(junk);
  (void)cli("status --json --domain " + d.name());
  check_junk_intact(junk);
  (void)cli("metrics --domain " + d.name());
  check_junk_intact(junk);
  (void)cli("set somebody --domain " + d.name() + " --share 2");
  check_junk_intact(junk);
  // The library's open_existing, as participant and as observer, never removes either.
  for (const auto& [object, bytes] : junk) {
    (void)test::thrown([&] { (void)gd::mapped_table::open_existing(object, 300'000'000); });
    (void)test::thrown([&] {
      (void)gd::mapped_table::open_existing(object, 300'000'000, gd::abandoned_creation::remove,
                                            gd::open_intent::observer);
    });
  }
  check_junk_intact(junk);
}

TEST_CASE("root's clean removes no other user's object without --force") {
  if (skip_unless_root()) return;
  test_domain d;
  const auto junk = plant_junk(d);
  (void)make_table_as(victim, d, "GPU-unused", gpushare::table_access::user);
  const std::string unused = d.object("u1000", "GPU-unused");
  const std::string dry = cli("clean --dry-run --domain " + d.name());
  const std::string out = cli("clean --domain " + d.name());
  INFO(out);
  check_junk_intact(junk);
  CHECK(test::object_bytes(unused).has_value());
  CHECK(contains(out, "kept " + unused + ": owned by uid 1000"));
  CHECK(contains(out, "removed 0 of 4 tables"));
  CHECK(contains(dry, "would remove 0 of 4 tables"));
}

TEST_CASE("root's clean --force removes only another user's verified unused table") {
  if (skip_unless_root()) return;
  test_domain d;
  const auto junk = plant_junk(d);
  (void)make_table_as(victim, d, "GPU-unused", gpushare::table_access::user);
  const std::string unused = d.object("u1000", "GPU-unused");
  // A table of uid 1000 with a live session.
  test::shared_block<std::atomic<int>> step(2);
  const pid_t live = test::spawn([&] {
    if (!become(victim, victim)) return 3;
    gpushare::session s("GPU-live", d.options());
    step[0] = 1;
    while (step[1].load() == 0) ::usleep(1000);
    return 0;
  });
  REQUIRE(test::eventually([&] { return step[0].load() == 1; }));
  const std::string in_use = d.object("u1000", "GPU-live");
  // uid 65534's valid, unused table planted under uid 1000's name: not what its name says.
  const auto bytes = make_table_as(nobody, d, "GPU-other", gpushare::table_access::user);
  const std::string planted = d.object("u1000", "GPU-other");
  REQUIRE(plant_as(nobody, nobody, planted, bytes, 0600));

  const std::string out = cli("clean --force --domain " + d.name());
  INFO(out);
  CHECK_FALSE(test::object_bytes(unused).has_value());
  CHECK(contains(out, "removed " + unused + " (no live sessions)"));
  check_junk_intact(junk);
  CHECK(test::object_bytes(in_use).has_value());
  CHECK(contains(out, "kept " + in_use + ": 1 live session"));
  CHECK(test::object_bytes(planted) == bytes);
  // uid 65534's own table (its name says u65534) is unused and verified: removed.
  CHECK_FALSE(test::object_bytes(d.object("u65534", "GPU-other")).has_value());
  step[1] = 1;
  CHECK(test::wait_exit(live) == 0);
}

TEST_CASE("a user's clean removes its own abandoned creations, never another user's objects") {
  if (skip_unless_root()) return;
  test_domain d;
  const auto junk = plant_junk(d); // uid 1000's
  const auto prefix = gd::creation_prefix(gd::default_slot_count);
  const std::string mine = d.object("u1001", "half");
  REQUIRE(
      plant_as(other, other, mine, std::vector<unsigned char>(prefix.begin(), prefix.end()), 0600));
  ::usleep(300'000);
  test::shared_block<char> out(8192);
  REQUIRE(run_as(other, other, [&] {
            const std::string r = cli("clean --force --domain " + d.name());
            std::snprintf(out.get(), 8192, "%s", r.c_str());
            return 0;
          }) == 0);
  INFO(out.get());
  CHECK_FALSE(test::object_bytes(mine).has_value());
  check_junk_intact(junk);
  CHECK(contains(out.get(), "kept " + junk[0].first + ": owned by uid 1000"));
}
