// SPDX-License-Identifier: Apache-2.0
// Table directories as pure functions (detail/table_dir.hpp, detail/object_name.hpp): how a path
// is normalised or refused, which filesystems are refused, how names in a directory are built and
// read back, and GPUSHARE_DIR's resolution (with the setgid default of the table mode). The
// directory checks on disk and tables in directories across processes are in mp-cli-dir.cpp.
#include <doctest/doctest.h>

#include <random>
#include <string>

#include <gpushare/discovery.hpp>
#include <gpushare/gpushare.hpp>
#include <gpushare/text.hpp>

#include "test_util.hpp"

namespace {
namespace gd = gpushare::detail;
using gpushare::errc;

std::optional<errc> code_of(const std::function<void()>& f) {
  const auto e = test::thrown(f);
  return e ? std::optional<errc>(e->code()) : std::nullopt;
}
} // namespace

TEST_CASE("table dir: a path is normalised or refused with what is wrong") {
  CHECK(gd::normalize_table_dir("") == "");
  CHECK(gd::normalize_table_dir("/dev/shm") == "");
  CHECK(gd::normalize_table_dir("/dev/shm/") == "");
  CHECK(gd::normalize_table_dir("//dev//shm//") == "");
  CHECK(gd::normalize_table_dir("/run/gpushare") == "/run/gpushare");
  CHECK(gd::normalize_table_dir("/run//gpushare///GPU-1/") == "/run/gpushare/GPU-1");
  CHECK(gd::normalize_table_dir("/dev/shm/sub") == "/dev/shm/sub");
  for (const char* bad : {"run/gpushare", "./x", "/a/../b", "/a/./b", "/", "///", "/a/.."}) {
    CAPTURE(bad);
    const auto e = test::thrown([&] { (void)gd::normalize_table_dir(bad); });
    REQUIRE(e);
    CHECK(e->code() == errc::invalid_argument);
    CHECK(std::string(e->what()).find(std::string("'") + bad + "'") != std::string::npos);
  }
  CHECK(std::string(test::thrown([] { (void)gd::normalize_table_dir("x"); })->what())
            .find("not an absolute path") != std::string::npos);
  CHECK(std::string(test::thrown([] { (void)gd::normalize_table_dir("/a/../b"); })->what())
            .find("'..' component") != std::string::npos);
}

TEST_CASE("table dir: random paths normalise to a fixed point or are refused") {
  std::mt19937 rng(2811);
  const std::string alphabet = "/./ab-";
  for (int i = 0; i < 5000; ++i) {
    std::string p;
    const int n = 1 + static_cast<int>(rng() % 14);
    for (int j = 0; j < n; ++j) p += alphabet[rng() % alphabet.size()];
    CAPTURE(p);
    std::string out;
    try {
      out = gd::normalize_table_dir(p);
    } catch (const gpushare::error& e) {
      CHECK(e.code() == errc::invalid_argument);
      continue;
    }
    if (out.empty()) continue; // /dev/shm
    CHECK(out.front() == '/');
    CHECK(out.back() != '/');
    CHECK(out.find("//") == std::string::npos);
    CHECK(out.find("/./") == std::string::npos);
    CHECK(out.find("/../") == std::string::npos);
    CHECK(gd::normalize_table_dir(out) == out); // idempotent
  }
}

TEST_CASE("table dir: network and FUSE filesystems are named and refused, local ones pass") {
  CHECK(std::string(gd::unsupported_filesystem(0x6969)) == "nfs");
  CHECK(std::string(gd::unsupported_filesystem(0xFF534D42)) == "cifs");
  CHECK(std::string(gd::unsupported_filesystem(0xFE534D42)) == "smb2");
  CHECK(std::string(gd::unsupported_filesystem(0x00C36400)) == "ceph");
  CHECK(std::string(gd::unsupported_filesystem(0x0BD00BD0)) == "lustre");
  CHECK(std::string(gd::unsupported_filesystem(0x65735546)).rfind("fuse", 0) == 0);
  CHECK(std::string(gd::unsupported_filesystem(0x01021997)) == "9p");
  for (std::int64_t local : {0x01021994ll /* tmpfs */, 0xEF53ll /* ext4 */, 0x58465342ll /* xfs */,
                             0x9123683Ell /* btrfs */, 0x794C7630ll /* overlay */})
    CHECK(gd::unsupported_filesystem(local) == nullptr);
}

TEST_CASE("table dir: names in a directory carry the path and read back as in /dev/shm") {
  gd::table_dir d;
  d.path = "/run/gpushare/GPU-1";
  d.gid = 4242;
  const std::string user = gd::table_object_name(d, "dom", "GPU-1", gpushare::table_access::user);
  CHECK(user == "/run/gpushare/GPU-1/gpushare.dom.u" + std::to_string(::geteuid()) + ".GPU-1");
  const std::string group = gd::table_object_name(d, "dom", "k", gpushare::table_access::group);
  CHECK(group == "/run/gpushare/GPU-1/gpushare.dom.g4242.k"); // the directory's group
  CHECK(gd::table_object_name(gd::table_dir{}, "dom", "k", gpushare::table_access::group) ==
        "/gpushare.dom.g" + std::to_string(::getegid()) + ".k"); // /dev/shm: the caller's
  CHECK(gd::name_is_path(group));
  CHECK_FALSE(gd::name_is_path("/gpushare.dom.u0.k"));
  CHECK(gd::object_path(group) == group);
  CHECK(gd::object_path("/gpushare.dom.u0.k") == "/dev/shm/gpushare.dom.u0.k");
  CHECK(gd::object_dir(group) == "/run/gpushare/GPU-1");
  CHECK(gd::object_dir("/gpushare.dom.u0.k") == "/dev/shm");
  CHECK(gd::name_has_owner(group, 'g', 4242));
  CHECK_FALSE(gd::name_has_owner(group, 'g', 4243));
  CHECK_FALSE(gd::name_has_owner("/run/gpushare.x/other.dom.g4242.k", 'g', 4242));
  const auto e = gpushare::parse_table_file_name("gpushare.dom.g4242.k");
  REQUIRE(e);
  const auto in_dir = gd::read_table_file_name(
      "gpushare.dom.g4242.k", [](auto, auto) { return true; }, "/run/gpushare/GPU-1");
  REQUIRE(in_dir);
  CHECK(in_dir->object_name == group);
  CHECK(in_dir->path == group);
  CHECK(in_dir->group);
  CHECK(in_dir->owner_id == 4242);
  CHECK(e->object_name == "/gpushare.dom.g4242.k");
  CHECK(e->path == "/dev/shm/gpushare.dom.g4242.k");
}

TEST_CASE("table dir: a table's name given to open it is made canonical or refused") {
  CHECK(gd::canonical_object_name("/gpushare.d.u0.k") == "/gpushare.d.u0.k");
  CHECK(gd::canonical_object_name("/dev/shm/gpushare.d.u0.k") == "/gpushare.d.u0.k");
  CHECK(gd::canonical_object_name("/run/g/gpushare.d.u0.k") == "/run/g/gpushare.d.u0.k");
  for (const char* bad : {"", "gpushare.d.u0.k", "/etc/passwd", "/run/g/other", "/gpushare.",
                          "/run//g/gpushare.d.u0.k", "/run/../gpushare.d.u0.k"}) {
    CAPTURE(bad);
    CHECK(code_of([&] { (void)gd::canonical_object_name(bad); }) == errc::invalid_argument);
  }
  // Nothing but a table's name is ever unlinked by name.
  CHECK(code_of([] { (void)gpushare::remove_table_forcibly("/etc/hostname"); }) ==
        errc::invalid_argument);
}

TEST_CASE("table dir: GPUSHARE_DIR resolves as the other settings, in code over environment") {
  using test::fake_env;
  gpushare::session_options o;
  CHECK(gpushare::resolve_options(o, fake_env({})).directory == "");
  CHECK(gpushare::resolve_options(o, fake_env({{"GPUSHARE_DIR", "/run//x/"}})).directory ==
        "/run/x");
  CHECK(gpushare::resolve_options(o, fake_env({{"GPUSHARE_DIR", "/dev/shm"}})).directory == "");
  const auto rel = test::thrown([&] {
    (void)gpushare::resolve_options(o, fake_env({{"GPUSHARE_DIR", "run/x"}}));
  });
  REQUIRE(rel);
  CHECK(rel->code() == errc::invalid_environment);
  CHECK(std::string(rel->what()).find("GPUSHARE_DIR") != std::string::npos);
  CHECK(code_of([&] {
          (void)gpushare::resolve_options(o, fake_env({{"GPUSHARE_DIR", ""}}));
        }) == errc::invalid_environment);
  o.directory = "/srv//y";
  CHECK(gpushare::resolve_options(o, fake_env({{"GPUSHARE_DIR", "/run/x"}})).directory == "/srv/y");
  o.directory = "srv";
  CHECK(code_of([&] { (void)gpushare::resolve_options(o, fake_env({})); }) ==
        errc::invalid_argument);
}

TEST_CASE("table dir: the table mode defaults to group in a setgid directory only") {
  using test::fake_env;
  char plain[] = "/tmp/gpushare-unit-dir-XXXXXX";
  REQUIRE(::mkdtemp(plain) != nullptr);
  gpushare::session_options o;
  o.directory = plain;
  CHECK(gpushare::resolve_options(o, fake_env({})).access == gpushare::table_access::user);
  REQUIRE(::chmod(plain, 02770) == 0);
  CHECK(gpushare::resolve_options(o, fake_env({})).access == gpushare::table_access::group);
  CHECK(gpushare::resolve_options(o, fake_env({{"GPUSHARE_TABLE_MODE", "user"}})).access ==
        gpushare::table_access::user); // said explicitly: as said
  o.directory = std::string(plain) + "/missing";
  CHECK(gpushare::resolve_options(o, fake_env({})).access == gpushare::table_access::user);
  ::rmdir(plain);
}
