// SPDX-License-Identifier: Apache-2.0
// Tables across users: a default (0600) table cannot be opened by another uid, with an error that
// says what to do; a group-mode (0660) table is shared by the group. The other user is `nobody`
// (uid/gid 65534), reached with setuid in a forked child, so these tests need root; without root
// they print the skip marker CTest reports as skipped.
#include <grp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include <doctest/doctest.h>

#include "test_util.hpp"

namespace {

constexpr uid_t nobody_uid = 65534;
constexpr gid_t nobody_gid = 65534;

bool skip_unless_root() {
  if (::geteuid() == 0) return false;
  std::printf("GPUSHARE_SKIP: needs root to run a child as uid %u\n", nobody_uid);
  return true;
}

/// In a forked child: become nobody for good (groups, gid, then uid).
bool become_nobody() {
  return ::setgroups(0, nullptr) == 0 && ::setgid(nobody_gid) == 0 && ::setuid(nobody_uid) == 0 &&
         ::geteuid() == nobody_uid;
}

struct outcome {
  int code = -1; ///< errc of the error caught, 0 for success
  char message[512] = {};
};

void record(outcome& o, const gpushare::error& e) {
  o.code = static_cast<int>(e.code());
  std::snprintf(o.message, sizeof o.message, "%s", e.what());
}

} // namespace

TEST_CASE("a default-mode table cannot be opened by another user, and the error says why") {
  if (skip_unless_root()) return;
  test::unique_table t("perm-user", 1 << 20);
  auto owner = t.join("owner");
  auto r = owner.reserve(4096);
  test::shared_block<outcome> out(2);
  const std::string object = t.object_name(); // root's name (it carries the uid)
  const pid_t child = test::spawn([&] {
    if (!become_nobody()) return 3;
    try { // opening root's table by its name, as `gpushare status` would
      (void)gpushare::table::open_existing(object);
      out[0].code = 0;
    } catch (const gpushare::error& e) {
      record(out[0], e);
    }
    return 0;
  });
  REQUIRE(test::wait_exit(child) == 0);
  INFO(out[0].message);
  CHECK(out[0].code == static_cast<int>(gpushare::errc::permission_denied));
  const std::string m = out[0].message;
  CHECK(m.find(object) != std::string::npos);
  CHECK(m.find("belongs to another user or group") != std::string::npos);
  CHECK(m.find("GPUSHARE_TABLE_MODE=group") != std::string::npos);
  // The owner's session and reservation are untouched.
  const auto snap = t.open().snapshot();
  REQUIRE(snap.sessions.size() == 1);
  CHECK(snap.sessions[0].name == "owner");
  CHECK(snap.reserved_total == 4096);
}

TEST_CASE("another user joining with the same key gets a table of its own, not the owner's") {
  if (skip_unless_root()) return;
  test::unique_table t("perm-own", 1 << 20);
  auto owner = t.join("owner");
  test::shared_block<outcome> out(1);
  test::shared_block<char> name(256);
  const pid_t child = test::spawn([&] {
    if (!become_nobody()) return 3;
    try {
      gpushare::session s(t.key(), t.options("nobody"));
      std::snprintf(name.get(), 256, "%s", s.table_name().c_str());
      out[0].code = 0;
      ::shm_unlink(s.table_name().c_str());
    } catch (const gpushare::error& e) {
      record(out[0], e);
    }
    return 0;
  });
  REQUIRE(test::wait_exit(child) == 0);
  CHECK(out[0].code == 0);
  CHECK(std::string(name.get()).find(".u65534.") != std::string::npos);
  CHECK(t.open().snapshot().sessions.size() == 1); // only the owner in the owner's table
}

TEST_CASE("a group-mode table is shared with another user of the group") {
  if (skip_unless_root()) return;
  const std::string key = "perm-group-" + std::to_string(::getpid());
  gpushare::session_options o;
  o.domain = "gpusharetest";
  o.access = gpushare::table_access::group;
  o.capacity = 1 << 20;
  o.name = "owner";
  // Create it as a member of nobody's group (the name carries the effective gid).
  REQUIRE(::setegid(nobody_gid) == 0);
  std::optional<gpushare::session> owner;
  try {
    owner.emplace(key, o);
  } catch (...) {
    (void)::setegid(0);
    throw;
  }
  REQUIRE(::setegid(0) == 0);
  const std::string object = owner->table_name();
  CHECK(object.find(".g65534.") != std::string::npos);

  test::shared_block<outcome> out(1);
  test::shared_block<std::atomic<int>> step(2);
  const pid_t child = test::spawn([&] {
    if (!become_nobody()) return 3;
    try {
      gpushare::session_options c = o;
      c.name = "member";
      gpushare::session s(key, c);
      auto r = s.reserve(8192);
      out[0].code = 0;
      step[0] = 1;
      while (step[1].load() == 0) ::usleep(1000); // stay joined until the parent looked
    } catch (const gpushare::error& e) {
      record(out[0], e);
      step[0] = 1;
    }
    return 0;
  });
  REQUIRE(test::eventually([&] { return step[0].load() == 1; }, std::chrono::seconds(10)));
  CHECK(out[0].code == 0);
  const auto snap = owner->snapshot();
  CHECK(snap.sessions.size() == 2);
  CHECK(snap.reserved_total == 8192);
  step[1] = 1;
  CHECK(test::wait_exit(child) == 0);
  CHECK(owner->snapshot().reserved_total == 0);
  owner.reset();
  ::shm_unlink(object.c_str());
}

TEST_CASE("only a table's owner (or root) may evict a session: a group member may not") {
  if (skip_unless_root()) return;
  const std::string key = "perm-evict-" + std::to_string(::getpid());
  gpushare::session_options o;
  o.domain = "gpusharetest";
  o.access = gpushare::table_access::group;
  o.capacity = 1 << 20;
  o.name = "owner";
  REQUIRE(::setegid(nobody_gid) == 0); // a table of nobody's group, owned by root
  std::optional<gpushare::session> owner;
  try {
    owner.emplace(key, o);
  } catch (...) {
    (void)::setegid(0);
    throw;
  }
  REQUIRE(::setegid(0) == 0);
  const std::string object = owner->table_name();
  const gpushare::session_id id = owner->id();
  test::shared_block<outcome> out(1);
  const pid_t child = test::spawn([&] {
    if (!become_nobody()) return 3;
    try {
      auto t = gpushare::table::open_existing(object); // a group member may open it...
      (void)t.evict(id);                               // ...but not evict
      out[0].code = 0;
    } catch (const gpushare::error& e) {
      record(out[0], e);
    }
    return 0;
  });
  CHECK(test::wait_exit(child) == 0);
  CHECK(out[0].code == static_cast<int>(gpushare::errc::permission_denied));
  const std::string message = out[0].message;
  CAPTURE(message);
  CHECK(message.find("only the owner") != std::string::npos);
  CHECK(owner->joined());
  // The owner (root here) may.
  auto t = gpushare::table::open_existing(object);
  CHECK(t.evict(id).name == "owner");
  CHECK(t.snapshot().evictions == 1);
  owner->leave();
  ::shm_unlink(object.c_str());
}
