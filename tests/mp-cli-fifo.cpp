// SPDX-License-Identifier: Apache-2.0
// A FIFO swapped in under a table's name stalls no reader (issue 42, A1), and a symbolic link
// named like a table is no table (A6). The listing checks that
// a `gpushare.*` entry is a regular file; another user (or a member of a group table directory)
// can then exchange a FIFO and the table file (renameat2 RENAME_EXCHANGE) before the reader opens
// the name, and an open without O_NONBLOCK waits for a writer that never comes: root's `status`,
// `top`, `metrics` and the exporter's workers hung. The crash points "snapshot.open" and
// "open_existing.open" (just before each open) let the test make the swap land in that window
// every time, in a child that must end within 10 s.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <stdio.h> // renameat2
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>

#include <gpushare/discovery.hpp>
#include <gpushare/gpushare.hpp>

#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;

namespace {

// What the hook swaps (set before the fork; the hook runs in the child).
std::string swap_table_path;
std::string swap_fifo_path;
const char* swap_at = nullptr;
bool swapped = false;

bool swap_names(const std::string& a, const std::string& b) {
  return ::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0;
}

void swap_hook(const char* where) {
  if (swapped || std::string(where) != swap_at) return;
  swapped = swap_names(swap_fifo_path, swap_table_path);
}

/// A live table of a domain of its own, and a FIFO beside it in /dev/shm (not a table name).
struct fifo_fixture {
  test::temp_domain d{"fifo-"};
  session s{"GPU-fifo-0", d.options("victim", 64ull << 20)};
  std::string table_path = d.path("GPU-fifo-0");
  std::string fifo_path = "/dev/shm/gpushare-test-fifo-" + std::to_string(::getpid());
  fifo_fixture() {
    ::unlink(fifo_path.c_str());
    REQUIRE(::mkfifo(fifo_path.c_str(), 0600) == 0);
    swap_table_path = table_path;
    swap_fifo_path = fifo_path;
  }
  ~fifo_fixture() {
    // The child swapped in its own view of the directory, which is ours: swap back if the FIFO
    // sits under the table's name, so that the table's session leaves it normally.
    struct stat st {};
    if (::stat(table_path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode))
      (void)swap_names(fifo_path, table_path);
    ::unlink(fifo_path.c_str());
  }
  bool fifo_under_table_name() const {
    struct stat st {};
    return ::stat(table_path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
  }
};

/// Runs `fn` in a child with the swap hook set at `where`; returns its exit code, or -1 if it
/// had not ended within 10 s (it hung in the open).
int run_with_swap(const char* where, const std::function<int()>& fn) {
  swap_at = where;
  const pid_t pid = test::spawn([&] {
    swapped = false;
    detail::crash_point_hook = swap_hook;
    const int rc = fn();
    return swapped ? rc : 90; // 90: the swap never happened
  });
  return test::wait_exit_within(pid, 10s);
}

bool says(const error& e, errc code, const std::string& part) {
  return e.code() == code && std::string(e.what()).find(part) != std::string::npos;
}

} // namespace

TEST_CASE("a FIFO swapped in between the listing and the open: read_unlocked fails at once") {
  fifo_fixture f;
  const int rc = run_with_swap("snapshot.open", [&] {
    const auto tables = list_tables(f.d.name()); // lists the table: a regular file still
    if (tables.size() != 1) return 2;
    try {
      (void)table::read_unlocked(tables[0].object_name, 1s);
    } catch (const error& e) {
      std::printf("read_unlocked: %s\n", e.what());
      return says(e, errc::table_corrupt, "is not a regular file") ? 0 : 3;
    }
    return 4; // read a FIFO as a table
  });
  CHECK(rc == 0); // -1: hung in the open (before the fix)
  CHECK(f.fifo_under_table_name());
}

TEST_CASE("a FIFO swapped in before an observer's open_existing: refused at once") {
  fifo_fixture f;
  const std::string name = f.d.object_name("GPU-fifo-0");
  const int rc = run_with_swap("open_existing.open", [&] {
    try {
      (void)detail::mapped_table::open_existing(
          name, 1'000'000'000, detail::abandoned_creation::keep, detail::open_intent::observer);
    } catch (const error& e) {
      std::printf("open_existing: %s\n", e.what());
      return says(e, errc::permission_denied, "not a regular file") ? 0 : 3;
    }
    return 4;
  });
  CHECK(rc == 0);
  CHECK(f.fifo_under_table_name());
}

TEST_CASE("status, metrics and set with a FIFO under a table's name end at once") {
  fifo_fixture f;
  // A second table of the domain stays readable beside the swapped one.
  session other("GPU-fifo-1", f.d.options("bystander", 64ull << 20));
  REQUIRE(swap_names(f.fifo_path, f.table_path));
  const auto tool = [&](const std::string& args) {
    // `timeout` turns a hang into exit code 124.
    return test::run_command("timeout 20 env -u GPUSHARE_DOMAIN " + std::string(GPUSHARE_CLI_PATH) +
                             " " + args + " --domain " + f.d.name() + " 2>&1");
  };
  const auto status = tool("status");
  CHECK(status.exit_code == 0);
  CHECK(status.output.find("bystander") != std::string::npos);
  CHECK(status.output.find("victim") == std::string::npos); // its table is not a table now
  const auto metrics = tool("metrics");
  CHECK(metrics.exit_code == 0);
  CHECK(metrics.output.find("bystander") != std::string::npos);
  const auto set = tool("set victim --share 2");
  CHECK(set.exit_code != 124);
  CHECK(set.exit_code != 0);                      // no such session: its table is a FIFO now
  REQUIRE(swap_names(f.fifo_path, f.table_path)); // back, for the sessions to leave normally
  CHECK(!f.fifo_under_table_name());
}

TEST_CASE("a symbolic link named like a table is neither listed nor judged by its target") {
  // (issue 42, A6: root's `clean --force` judged a member's link by its target's owner and
  // removed the link.) The listing reads the name itself (lstat): a link is not a table.
  test::temp_domain d("fifo-");
  session s("GPU-link-0", d.options("real", 64ull << 20));
  const std::string target = "/dev/shm/gpushare-test-target-" + std::to_string(::getpid());
  const std::string link = d.path("GPU-link-1");
  {
    const int fd = ::open(target.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    ::close(fd);
  }
  REQUIRE(::symlink(target.c_str(), link.c_str()) == 0);
  const auto tables = list_tables(d.name());
  REQUIRE(tables.size() == 1);
  CHECK(tables[0].object_name == d.object_name("GPU-link-0"));
  const auto clean = test::run_command("env -u GPUSHARE_DOMAIN " + std::string(GPUSHARE_CLI_PATH) +
                                       " clean --force --domain " + d.name() + " 2>&1");
  CHECK(clean.exit_code == 0);
  struct stat st {};
  CHECK(::lstat(link.c_str(), &st) == 0); // the link stays
  CHECK(S_ISLNK(st.st_mode));
  CHECK(::stat(target.c_str(), &st) == 0);
  ::unlink(link.c_str());
  ::unlink(target.c_str());
}
