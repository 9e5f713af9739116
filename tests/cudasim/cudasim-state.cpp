// SPDX-License-Identifier: Apache-2.0
// cudasim's state object in /dev/shm and `gpushare clean --cudasim` (docs/cudasim.md, "The state
// object"): a state a running program uses is never removed (without --force); one no program
// uses is; a program that opened the state just before a cleaner removed its name ends up using
// the state the name refers to. The probes are cudasim programs (probe.cpp); this process is not
// one, so it never holds a state itself.
#include <doctest/doctest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "../cli_test_util.hpp"
#include "sim_util.hpp"

using namespace std::chrono_literals;
using cli_test::contains;
using cli_test::run_cli;
using simtest::env_list;
using simtest::fresh_state;
using simtest::probe;

namespace {

bool exists(const fresh_state& st) {
  return ::access(("/dev/shm/" + st.name()).c_str(), F_OK) == 0;
}

/// What `pid`'s descriptor for /dev/shm/<name> links to: "/dev/shm/<name>" while the name is
/// the object's, with " (deleted)" once it was removed; "" when it has none open.
std::string state_link(pid_t pid, const std::string& name) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  std::string found;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return found;
  while (const dirent* e = ::readdir(d)) {
    char target[512];
    const ssize_t n = ::readlink((dir + "/" + e->d_name).c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    const std::string link(target, static_cast<std::size_t>(n));
    if (link == "/dev/shm/" + name || link == "/dev/shm/" + name + " (deleted)") found = link;
  }
  ::closedir(d);
  return found;
}

/// Writes an object /dev/shm/<name> beginning with `magic` and `version` (a fake state).
void write_object(const std::string& name, std::uint64_t magic, std::uint32_t version,
                  std::size_t size = 4096) {
  const int fd = ::shm_open(("/" + name).c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, static_cast<off_t>(size)) == 0);
  if (size >= 12) {
    REQUIRE(::pwrite(fd, &magic, 8, 0) == 8);
    REQUIRE(::pwrite(fd, &version, 4, 8) == 4);
  }
  ::close(fd);
}

constexpr std::uint64_t magic = 0x4355444153494d31ull; // "CUDASIM1", as cudasim writes it

} // namespace

TEST_CASE("clean --cudasim keeps a state a running program uses and removes it once none does") {
  fresh_state st("clean");
  const env_list env{{"CUDASIM_STATE", st.name()}};
  {
    probe holder({"hold", "1"}, env);
    REQUIRE(holder.until("held").at("malloc") == "cudaSuccess");
    auto r = run_cli({"clean", "--cudasim", st.name()});
    CHECK(r.code == 0);
    CHECK(contains(r.out, "kept /dev/shm/" + st.name() + ": a running program uses it\n"));
    CHECK(contains(r.out, "removed 0 of 1 cudasim state\n"));
    CHECK(exists(st));
    // Listing finds it too (it is this user's and starts with cudasim's magic).
    r = run_cli({"clean", "--cudasim", "--dry-run"});
    CHECK(contains(r.out, "kept /dev/shm/" + st.name() + ": a running program uses it\n"));
    holder.close_stdin(); // it exits normally: the lock goes with it
    CHECK(holder.wait() == 0);
  }
  auto r = run_cli({"clean", "--cudasim", "--dry-run", "/dev/shm/" + st.name()});
  CHECK(r.code == 0);
  CHECK(r.out == "would remove /dev/shm/" + st.name() +
                     " (no program uses it)\nwould remove 1 of 1 cudasim state (dry run: nothing "
                     "was removed)\n");
  CHECK(exists(st));
  {
    probe holder({"hold", "1"}, env); // a killed program's lock goes with it too
    REQUIRE(holder.until("held").at("malloc") == "cudaSuccess");
    CHECK(contains(run_cli({"clean", "--cudasim", st.name()}).out, "a running program uses it"));
    holder.kill_now();
    holder.wait();
  }
  r = run_cli({"clean", "--cudasim", st.name()});
  CHECK(r.code == 0);
  CHECK(r.out == "removed /dev/shm/" + st.name() +
                     " (no program uses it)\nremoved 1 of 1 cudasim "
                     "state\n");
  CHECK(!exists(st));
  r = run_cli({"clean", "--cudasim", st.name()});
  CHECK(r.out == "skipped /dev/shm/" + st.name() +
                     ": no such object\nremoved 0 of 0 cudasim "
                     "states\n");
  // The next program makes a new state under the name.
  probe next({"devices"}, env);
  CHECK(next.result().at("count") == "1");
  CHECK(exists(st));
}

TEST_CASE("a program that opened the state just before clean removed it uses the state named") {
  fresh_state st("race");
  env_list env{{"CUDASIM_STATE", st.name()}};
  CHECK(probe({"devices"}, env).result().at("count") == "1"); // the state exists, unused
  env.emplace_back("CUDASIM_OPEN_DELAY_MS", "1500");          // open, wait, then lock
  probe late({"hold", "1"}, env);
  const auto start = std::chrono::steady_clock::now();
  while (state_link(late.pid(), st.name()).empty() &&
         std::chrono::steady_clock::now() - start < 20s)
    std::this_thread::sleep_for(2ms);
  REQUIRE(state_link(late.pid(), st.name()) == "/dev/shm/" + st.name()); // open, not locked yet
  const auto r = run_cli({"clean", "--cudasim", st.name()});
  CHECK(contains(r.out, "removed /dev/shm/" + st.name() + " (no program uses it)\n"));
  CHECK(state_link(late.pid(), st.name()) == "/dev/shm/" + st.name() + " (deleted)");
  REQUIRE(late.until("held").at("malloc") == "cudaSuccess");
  // It noticed, once it held its lock, that the name was gone, and made the state anew.
  CHECK(state_link(late.pid(), st.name()) == "/dev/shm/" + st.name());
  CHECK(exists(st));
  CHECK(contains(run_cli({"clean", "--cudasim", st.name()}).out, "a running program uses it"));
}

TEST_CASE("joins racing repeated cleans always use the state named (seeded)") {
  fresh_state st("storm");
  const env_list env{{"CUDASIM_STATE", st.name()}};
  std::mt19937 rng(0x5eed2411);
  int removals = 0;
  for (int round = 0; round < 12; ++round) {
    // A cleaner runs `clean --cudasim` again and again while a program starts.
    std::atomic<bool> stop{false};
    std::atomic<int> removed{0};
    std::thread cleaner([&] {
      while (!stop.load()) {
        if (contains(run_cli({"clean", "--cudasim", st.name()}).out, "removed /dev/shm/"))
          removed.fetch_add(1);
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 20));
    probe p({"hold", "1"}, env);
    const auto values = p.until("held");
    CHECK(values.count("held") == 1);
    const std::string link = state_link(p.pid(), st.name());
    stop = true;
    cleaner.join();
    removals += removed.load();
    INFO("round " << round);
    CHECK(link == "/dev/shm/" + st.name()); // never a removed object
    CHECK(state_link(p.pid(), st.name()) == "/dev/shm/" + st.name());
    p.close_stdin();
    CHECK(p.wait() == 0);
  }
  MESSAGE("states removed while programs started: " << removals);
}

TEST_CASE(
    "clean --cudasim: --force, other versions, empty objects and objects that are not states") {
  fresh_state old_version("v2"), empty("empty"), other("other"), used("used");
  write_object(old_version.name(), magic, 2);
  write_object(empty.name(), 0, 0, 0);
  write_object(other.name(), 0x1122334455667788ull, 3);
  auto r = run_cli({"clean", "--cudasim", old_version.name(), empty.name(), other.name()});
  CHECK(r.code == 0);
  CHECK(contains(r.out, "kept /dev/shm/" + old_version.name() +
                            ": made by an older cudasim version (state version 2), whose programs "
                            "do not say whether they use it; --force removes it\n"));
  CHECK(contains(r.out, "kept /dev/shm/" + empty.name() +
                            ": empty: a cudasim state whose creator "
                            "died before writing it"));
  CHECK(contains(r.out, "kept /dev/shm/" + other.name() + ": not a cudasim state"));
  CHECK(contains(r.out, "removed 0 of 1 cudasim state\n")); // the empty one may not be one
  // Listing never names what does not start with cudasim's magic.
  r = run_cli({"clean", "--cudasim", "--dry-run"});
  CHECK(contains(r.out, old_version.name()));
  CHECK(!contains(r.out, empty.name()));
  CHECK(!contains(r.out, other.name()));

  r = run_cli({"clean", "--cudasim", "--force", old_version.name(), empty.name(), other.name()});
  CHECK(contains(r.out, "removed /dev/shm/" + old_version.name() +
                            " (--force: made by an older cudasim version)\n"));
  CHECK(contains(r.out, "removed /dev/shm/" + empty.name() +
                            " (--force: an empty state whose creator died)\n"));
  CHECK(contains(r.out, "kept /dev/shm/" + other.name() + ": not a cudasim state"));
  CHECK(!exists(old_version));
  CHECK(!exists(empty));
  CHECK(exists(other));

  // A state of a later version than the first whose programs lock (3) is judged by its lock,
  // whatever its layout: unused, it goes without --force.
  write_object(old_version.name(), magic, 3);
  r = run_cli({"clean", "--cudasim", old_version.name()});
  CHECK(r.out == "removed /dev/shm/" + old_version.name() +
                     " (no program uses it)\nremoved 1 of 1 "
                     "cudasim state\n");
  CHECK(!exists(old_version));

  // --force removes a state in use; its program goes on with the removed one.
  probe holder({"hold", "1"}, {{"CUDASIM_STATE", used.name()}});
  REQUIRE(holder.until("held").at("malloc") == "cudaSuccess");
  r = run_cli({"clean", "--cudasim", "--force", used.name()});
  CHECK(contains(r.out, "removed /dev/shm/" + used.name() +
                            " (--force: a running program uses it and goes on with the removed "
                            "state, no longer shared with programs that start later)\n"));
  CHECK(!exists(used));
  CHECK(state_link(holder.pid(), used.name()) == "/dev/shm/" + used.name() + " (deleted)");

  if (::geteuid() == 0) { // another user's state is kept, even with --force
    write_object(old_version.name(), magic, 3);
    REQUIRE(::chown(("/dev/shm/" + old_version.name()).c_str(), 1000, 1000) == 0);
    r = run_cli({"clean", "--cudasim", "--force", old_version.name()});
    CHECK(contains(r.out, "kept /dev/shm/" + old_version.name() +
                              ": owned by uid 1000 (only its owner removes it)\n"));
    CHECK(exists(old_version));
  }
}

TEST_CASE("clean --cudasim: bad names and options are usage errors") {
  for (const std::string bad : {"a/b", "/dev/shm/", "..", "/"}) {
    const auto r = run_cli({"clean", "--cudasim", bad});
    CAPTURE(bad);
    CHECK(r.code == 2);
    CHECK(contains(r.err, "'" + bad + "' is not a cudasim state name"));
  }
  auto r = run_cli({"clean", "--cudasim", "--all-domains"});
  CHECK(r.code == 2);
  CHECK(contains(r.err, "--cudasim cleans simulated-device states, which belong to no domain"));
  r = run_cli({"clean", "some-name"});
  CHECK(r.code == 2);
  CHECK(contains(r.err, "unexpected argument 'some-name' (names are given only with --cudasim)"));
}

TEST_CASE("a state another user made, or one open to group or others, is refused (issue 42, A5)") {
  fresh_state st("foreign");
  const std::string path = "/dev/shm/" + st.name();
  const env_list env{{"CUDASIM_STATE", st.name()}};
  auto count_error = [&](std::string& text) {
    probe p({"devices"}, env, true);
    const auto r = p.result();
    text = p.text();
    return r.count("count_error") ? r.at("count_error") : std::string("(none)");
  };
  std::string text;
  REQUIRE(count_error(text) == "cudaSuccess"); // creates the state, mode 0600
  struct stat made {};
  REQUIRE(::stat(path.c_str(), &made) == 0);
  CHECK((made.st_mode & 07777u) == 0600u);

  // What another user would make: open to everyone. Refused, with the way out.
  REQUIRE(::chmod(path.c_str(), 0666) == 0);
  CHECK(count_error(text) == "cudaErrorInitializationError");
  CHECK(contains(text, "refusing the shared state " + path + ": it belongs to uid " +
                           std::to_string(::geteuid()) + " with mode 0666"));
  CHECK(contains(text, "set CUDASIM_STATE to another name, or have its owner remove it "
                       "(gpushare clean --cudasim " +
                           st.name() + ")"));
  REQUIRE(::chmod(path.c_str(), 0640) == 0);
  CHECK(count_error(text) == "cudaErrorInitializationError"); // group may read: refused too
  REQUIRE(::chmod(path.c_str(), 0600) == 0);
  CHECK(count_error(text) == "cudaSuccess");

  if (::geteuid() == 0) { // another uid's state, mode 0600: refused, and clean says whose it is
    REQUIRE(::chown(path.c_str(), 1000, 1000) == 0);
    CHECK(count_error(text) == "cudaErrorInitializationError");
    CHECK(contains(text, "it belongs to uid 1000 with mode 0600"));
    REQUIRE(::chown(path.c_str(), 0, 0) == 0); // root's now: uid 1000 may not open it
    const auto r = run_cli({"clean", "--cudasim", st.name()}, 1000);
    CHECK(contains(r.out, "kept " + path +
                              ": owned by uid 0, which this user may not open (only its owner, "
                              "or root, removes it)\n"));
    CHECK(exists(st));
  }
}
