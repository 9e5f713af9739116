// SPDX-License-Identifier: Apache-2.0
// Tables in a table directory (issue 28, sections 1 and 2; docs/design.md, "Table directories"):
// processes that name one directory share its table with the same protocols as in /dev/shm
// (a SIGKILLed member's memory comes back), directories that cannot hold tables are refused with
// what to do, and several uids in one group share a setgid directory's table while a process
// outside the group is refused with the directory and the group to join. The CLI's --dir and
// GPUSHARE_DIR list and clean the directory's tables. The cases that switch uids need root
// (CI's); without it they print the skip marker.
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_test_util.hpp"

namespace {

using namespace cli_test;
namespace fs = std::filesystem;
using gpushare::errc;

constexpr gid_t shared_group = 4242;
constexpr std::uint64_t MiB = 1ull << 20;

/// A table directory of one's own under `base`, removed with its files at the end.
struct temp_dir {
  explicit temp_dir(const char* base = "/dev/shm") {
    std::string pattern = std::string(base) + "/gpushare-dirtest-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    REQUIRE(::mkdtemp(buf.data()) != nullptr);
    path = buf.data();
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  std::string file(const std::string& name) const { return path + "/" + name; }
  std::string path;
};

std::string unique_domain() {
  static int n = 0;
  return "dirtest" + std::to_string(::getpid()) + "-" + std::to_string(n++);
}

session_options dir_options(const std::string& dir, const std::string& domain,
                            const std::string& name) {
  session_options o;
  o.directory = dir;
  o.domain = domain;
  o.name = name;
  o.capacity = 100 * MiB;
  return o;
}

bool skip_unless_root() {
  if (::geteuid() == 0) return false;
  std::printf("GPUSHARE_SKIP: needs root to run children as other uids in one group\n");
  return true;
}

/// In a forked child: become `uid` with primary group `uid` and supplementary `groups`, for good.
bool become(uid_t uid, std::vector<gid_t> groups) {
  return ::setgroups(groups.size(), groups.empty() ? nullptr : groups.data()) == 0 &&
         ::setresgid(uid, uid, uid) == 0 && ::setresuid(uid, uid, uid) == 0;
}

/// The error a child's join of `key` with `o` raised, as "<code>|<message>" (empty: joined).
std::string join_error_in_child(const std::string& key, const session_options& o, uid_t uid = 0,
                                std::vector<gid_t> groups = {}) {
  test::shared_block<char> text(2048);
  const int rc = test::wait_exit(test::spawn([&] {
    if (uid != 0 && !become(uid, groups)) return 3;
    try {
      session s(key, o);
    } catch (const gpushare::error& e) {
      std::snprintf(&text[0], 2048, "%s|%s", gpushare::to_string(e.code()), e.what());
    }
    return 0;
  }));
  REQUIRE(rc == 0);
  return std::string(&text[0]);
}

} // namespace

TEST_CASE("dir: processes share a table in a directory and a killed one's memory comes back") {
  temp_dir dir;
  const std::string domain = unique_domain(), key = "GPU-dir-1";
  const pid_t a = test::spawn_holding([&](const std::function<void()>& hold) {
    session s(key, dir_options(dir.path, domain, "holder-a"));
    reservation r = s.reserve(60 * MiB, 0ms);
    hold();
  });
  const std::string file =
      dir.file("gpushare." + domain + ".u" + std::to_string(::geteuid()) + "." + key);
  CHECK(fs::is_regular_file(file));
  CHECK_FALSE(
      fs::exists("/dev/shm/gpushare." + domain + ".u" + std::to_string(::geteuid()) + "." + key));
  const auto listed = list_tables_in(dir.path);
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].object_name == file);
  CHECK(listed[0].path == file);
  CHECK(listed[0].domain == domain);
  CHECK(list_tables_in(dir.path + "//", domain).size() == 1);
  {
    session b(key, dir_options(dir.path, domain, "joiner-b"));
    CHECK(b.table_name() == file);
    const table_snapshot snap = b.snapshot();
    REQUIRE(snap.sessions.size() == 2);
    CHECK(test::sum_reserved(snap) == 60 * MiB);
    CHECK_FALSE(b.try_reserve(60 * MiB).has_value());
    CHECK(table::open_existing(file, 1000ms).snapshot().sessions.size() == 2);
    kill_holder(a);
    // The waiter reclaims the dead session (its OFD lock went with it) and gets its memory.
    reservation r = b.reserve(60 * MiB, 1000ms);
    CHECK(r.size() == 60 * MiB);
    CHECK(b.snapshot().sessions.size() == 1);
  }
  CHECK(table::remove(key, dir_options(dir.path, domain, "x")).status == removal_status::removed);
  CHECK_FALSE(fs::exists(file));
}

TEST_CASE("dir: GPUSHARE_DIR puts a process's table there and the CLI finds it with --dir") {
  temp_dir dir;
  const std::string domain = unique_domain(), key = "GPU-dir-env";
  const pid_t a = test::spawn_holding([&](const std::function<void()>& hold) {
    ::setenv("GPUSHARE_DIR", (dir.path + "/").c_str(), 1);
    session_options o;
    o.domain = domain;
    o.name = "from-env";
    session s(key, o);
    reservation r = s.reserve(3 * MiB, 0ms);
    hold();
  });
  const auto listed = list_tables_in(dir.path, domain);
  REQUIRE(listed.size() == 1);
  const cli_result flag = run_cli({"status", "--dir", dir.path, "--domain", domain, "--json"});
  CHECK(flag.code == 0);
  const json doc = parse_json(flag.out);
  const json& t = table_of(doc, key);
  CHECK(t["object_name"].str() == listed[0].object_name);
  CHECK(session_of(t, "from-env")["reserved_bytes"].u64() == 3 * MiB);
  const cli_result env = run_cli_env({"GPUSHARE_DIR=" + dir.path}, {"status", "--domain", domain});
  CHECK(env.code == 0);
  CHECK(contains(env.out, "from-env"));
  CHECK(contains(env.out, listed[0].object_name));
  const cli_result shm = run_cli({"status", "--domain", domain});
  CHECK(contains(shm.out, "has no tables"));
  CHECK_FALSE(contains(shm.out, "from-env"));
  const cli_result none = run_cli({"status", "--dir", dir.path, "--domain", domain + "x"});
  CHECK(contains(none.out, "has no tables in " + dir.path));
  const cli_result rel = run_cli({"status", "--dir", "relative/dir"});
  CHECK(rel.code == 2);
  CHECK(contains(rel.err, "--dir"));
  CHECK(contains(rel.err, "not an absolute path"));
  const cli_result missing = run_cli({"status", "--dir", dir.path + "/missing"});
  CHECK(missing.code == 1);
  CHECK(contains(missing.err, "does not exist"));
  // clean keeps the live table, then removes it once its session is gone.
  CHECK(contains(run_cli({"clean", "--dir", dir.path, "--domain", domain}).out, "kept"));
  kill_holder(a);
  const cli_result clean = run_cli({"clean", "--dir", dir.path, "--domain", domain});
  CHECK(clean.code == 0);
  CHECK(contains(clean.out, "removed " + listed[0].object_name));
  CHECK(list_tables_in(dir.path).empty());
}

TEST_CASE("dir: a directory that cannot hold tables is refused with what to do") {
  temp_dir dir;
  const std::string domain = unique_domain();
  auto join = [&](const std::string& d) {
    return join_error_in_child("GPU-bad", dir_options(d, domain, "bad"));
  };
  const std::string missing = join(dir.path + "/missing");
  CHECK(missing.rfind("bad_directory|", 0) == 0);
  CHECK(contains(missing, "does not exist"));
  CHECK(contains(missing, "mkdir -m 2770"));
  const std::string file = dir.file("plain-file");
  std::fclose(std::fopen(file.c_str(), "w"));
  CHECK(contains(join(file), "is not a directory"));
  const std::string open = dir.file("open");
  REQUIRE(::mkdir(open.c_str(), 0700) == 0);
  for (mode_t bad : {0777u, 02777u, 03777u, 0773u}) {
    CAPTURE(bad);
    REQUIRE(::chmod(open.c_str(), bad) == 0);
    const std::string e = join(open);
    CHECK(e.rfind("bad_directory|", 0) == 0);
    CHECK(contains(e, "chmod o-w"));
  }
  REQUIRE(::chmod(open.c_str(), 01777) == 0); // sticky, as /dev/shm: owners alone may unlink
  CHECK(join(open).empty());
  CHECK(join(dir.path).empty());
}

TEST_CASE("dir: a symbolic link at a table's name is refused and its target untouched") {
  temp_dir dir;
  const std::string domain = unique_domain(), key = "GPU-link";
  const std::string target = dir.file("target");
  std::FILE* f = std::fopen(target.c_str(), "w");
  std::fputs("precious", f);
  std::fclose(f);
  const std::string name = "gpushare." + domain + ".u" + std::to_string(::geteuid()) + "." + key;
  REQUIRE(::symlink(target.c_str(), dir.file(name).c_str()) == 0);
  const std::string e = join_error_in_child(key, dir_options(dir.path, domain, "l"));
  CHECK(e.rfind("permission_denied|", 0) == 0);
  CHECK(contains(e, "symbolic link"));
  CHECK(fs::file_size(target) == 8);
  CHECK(fs::is_symlink(dir.file(name)));
}

TEST_CASE("dir: uids of one group share a setgid directory's table and others are refused") {
  if (skip_unless_root()) return;
  temp_dir dir;
  REQUIRE(::chown(dir.path.c_str(), 0, shared_group) == 0);
  REQUIRE(::chmod(dir.path.c_str(), 02770) == 0);
  const std::string domain = unique_domain(), key = "GPU-group";
  session_options o = dir_options(dir.path, domain, "uid1000"); // group mode: the setgid default
  const pid_t first = test::spawn_holding([&](const std::function<void()>& hold) {
    if (!become(1000, {shared_group})) std::_Exit(3);
    session s(key, o);
    reservation r = s.reserve(70 * MiB, 0ms);
    hold();
  });
  const std::string file = dir.file("gpushare." + domain + ".g4242." + key);
  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  CHECK(st.st_uid == 1000);
  CHECK(st.st_gid == shared_group);
  CHECK((st.st_mode & 07777u) == 0660u);
  test::shared_block<int> seen(2);
  const int second = test::wait_exit(test::spawn([&] {
    if (!become(1001, {shared_group})) return 3;
    session s(key, dir_options(dir.path, domain, "uid1001"));
    seen[0] = static_cast<int>(s.snapshot().sessions.size());
    seen[1] = s.try_reserve(70 * MiB).has_value() ? 1 : 0; // 70 of 100 MiB are uid 1000's
    return 0;
  }));
  CHECK(second == 0);
  CHECK(seen[0] == 2);
  CHECK(seen[1] == 0);
  const std::string outsider = join_error_in_child(key, o, 1002);
  CHECK(outsider.rfind("permission_denied|", 0) == 0);
  CHECK(contains(outsider, dir.path));
  CHECK(contains(outsider, "supplementalGroups: [4242]"));
  const cli_result status = run_cli({"status", "--dir", dir.path, "--domain", domain});
  CHECK(contains(status.out, "uid1000"));
  kill_holder(first);
  // A member of another uid takes the dead member's memory back within a second.
  const int third = test::wait_exit(test::spawn([&] {
    if (!become(1001, {shared_group})) return 3;
    session s(key, dir_options(dir.path, domain, "uid1001"));
    reservation r = s.reserve(70 * MiB, 1000ms);
    return r.size() == 70 * MiB ? 0 : 4;
  }));
  CHECK(third == 0);
}

TEST_CASE("dir: a group-mode table in a plain group directory takes the directory's group") {
  if (skip_unless_root()) return;
  temp_dir dir;
  REQUIRE(::chown(dir.path.c_str(), 0, shared_group) == 0);
  REQUIRE(::chmod(dir.path.c_str(), 0770) == 0); // no setgid: the creator's file is re-grouped
  const std::string domain = unique_domain(), key = "GPU-regroup";
  session_options o = dir_options(dir.path, domain, "member");
  o.access = table_access::group;
  CHECK(join_error_in_child(key, o, 1000, {shared_group}).empty());
  struct stat st {};
  const std::string file = dir.file("gpushare." + domain + ".g4242." + key);
  REQUIRE(::stat(file.c_str(), &st) == 0);
  CHECK(st.st_gid == shared_group);
  CHECK(join_error_in_child(key, o, 1001, {shared_group}).empty()); // the other member opens it
  // A member may clean the group's unused table from a directory without the sticky bit.
  const int cleaned = test::wait_exit(test::spawn([&] {
    if (!become(1001, {shared_group})) return 3;
    return table::remove(key, o).status == removal_status::removed ? 0 : 4;
  }));
  CHECK(cleaned == 0);
  CHECK_FALSE(fs::exists(file));
}
