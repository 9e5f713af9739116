// SPDX-License-Identifier: Apache-2.0
// Processes as if in separate containers (issue 28, section 3; README "In a cluster"; docs/
// design.md, section 13), simulated with the kernel's own pieces: each "container" is pid 1 of
// a PID namespace of its own, in a mount namespace of its own with a private tmpfs on /dev/shm
// (so nothing is shared through /dev/shm), sees the host's table directory bind-mounted at a path
// of its own, and runs as a uid of its own in the directory's group. They must share one table:
// see each other in snapshots (their pids collide: every one is pid 1), split the device 3:1
// within 2 percentage points, get a SIGKILLed container's memory back within 1 s, and show up
// in `gpushare status --dir` run from the host's namespaces. Needs root (CI's): otherwise the
// cases print the skip marker. CTest label `containers`.
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cli_test_util.hpp"

namespace {

using namespace cli_test;
namespace fs = std::filesystem;

constexpr gid_t shared_group = 4243;
constexpr std::uint64_t MiB = 1ull << 20;

/// What the containers and the host share: anonymous shared memory, inherited through fork.
struct control {
  std::atomic<int> stop{0};
  std::atomic<int> joined{0};
  std::atomic<int> seen[4]{};      ///< sessions each container's snapshot showed
  std::atomic<pid_t> own_pid[4]{}; ///< each container's pid as its session recorded it
  std::atomic<int> got_memory{0};  ///< the survivor's reserve after the kill: 1 ok, 2 timed out
  char error[1024] = {};           ///< what a container's gpushare call threw, if anything
};

/// The host's side of a test: a group-owned setgid table directory outside /dev/shm (the
/// containers hide /dev/shm), and a mount point per container; all removed at the end.
struct host_dirs {
  host_dirs() {
    char buf[] = "/tmp/gpushare-ctr-XXXXXX";
    REQUIRE(::mkdtemp(buf) != nullptr);
    base = buf;
    REQUIRE(::chmod(base.c_str(), 0755) == 0); // the containers' uids pass through it
    tables = base + "/tables";
    REQUIRE(::mkdir(tables.c_str(), 0770) == 0);
    REQUIRE(::chown(tables.c_str(), 0, shared_group) == 0);
    REQUIRE(::chmod(tables.c_str(), 02770) == 0);
  }
  ~host_dirs() {
    std::error_code ec;
    fs::remove_all(base, ec);
  }
  std::string mount_point(int i) const {
    const std::string p = base + "/ctr" + std::to_string(i);
    ::mkdir(p.c_str(), 0755);
    return p;
  }
  std::string base, tables;
};

bool skip_unless_namespaces() {
  if (::geteuid() != 0) {
    std::printf("GPUSHARE_SKIP: needs root to make PID and mount namespaces\n");
    return true;
  }
  const pid_t probe = ::fork();
  if (probe == 0) std::_Exit(::unshare(CLONE_NEWPID | CLONE_NEWNS) == 0 ? 0 : 1);
  if (test::wait_exit(probe) != 0) {
    std::printf("GPUSHARE_SKIP: this machine does not let root make PID and mount namespaces\n");
    return true;
  }
  return false;
}

struct container {
  pid_t pid = -1;  ///< its pid 1, as the host sees it (kill this one)
  pid_t reap = -1; ///< the host-side parent to wait for
};

/// Kills whatever containers are left when a test ends early (a failed REQUIRE).
struct reaper {
  std::vector<container> all;
  ~reaper() {
    for (const container& k : all) {
      ::kill(k.pid, SIGKILL);
      ::kill(k.reap, SIGKILL);
      int status = 0;
      ::waitpid(k.reap, &status, 0);
    }
  }
  const container& add(container k) { return all.emplace_back(k); }
  void reaped(pid_t reap) {
    std::erase_if(all, [&](const container& k) { return k.reap == reap; });
  }
};

/// Runs `fn` in a container, recording what it throws in `c.error` (exit code 9).
std::function<int(const std::string&)> recorded(control& c,
                                                std::function<int(const std::string&)> fn) {
  return [&c, fn](const std::string& dir) {
    try {
      return fn(dir);
    } catch (const std::exception& e) {
      std::snprintf(c.error, sizeof c.error, "%s", e.what());
      return 9;
    }
  };
}

/// Starts `fn(dir)` as pid 1 of new PID and mount namespaces: a private tmpfs on /dev/shm, the
/// host's `tables` bind-mounted at `at` (passed to fn as its table directory), and uid `uid` with
/// primary group `uid` and supplementary group `shared_group`. fn's return is the exit code.
container start_container(const std::string& tables, const std::string& at, uid_t uid,
                          const std::function<int(const std::string&)>& fn) {
  test::shared_block<std::atomic<pid_t>> inner;
  const pid_t mid = ::fork();
  if (mid == 0) {
    if (::unshare(CLONE_NEWPID | CLONE_NEWNS) != 0) std::_Exit(70);
    // (each step's failure is its own exit code, which the host's wait reports)
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) std::_Exit(71);
    if (::mount("tmpfs", "/dev/shm", "tmpfs", 0, "mode=1777") != 0) std::_Exit(72);
    if (::mount(tables.c_str(), at.c_str(), nullptr, MS_BIND, nullptr) != 0) std::_Exit(73);
    const pid_t child = test::spawn([&] {
      const gid_t groups[] = {shared_group};
      if (::setgroups(1, groups) != 0 || ::setresgid(uid, uid, uid) != 0 ||
          ::setresuid(uid, uid, uid) != 0)
        return 74;
      return fn(at);
    });
    inner[0].store(child);
    std::_Exit(test::wait_exit(child));
  }
  REQUIRE(test::eventually([&] { return inner[0].load() != 0; }, 10s));
  return {inner[0].load(), mid};
}

void spin_for(std::uint64_t ns) {
  const std::uint64_t end = test::now_ns() + ns;
  while (test::now_ns() < end) {
  }
}

/// A container's work: join `key` in `dir` as `name` with `share`, reserve `reserve`, report
/// what the snapshot shows, then run 1 ms guards until told to stop.
int busy_member(const std::string& dir, const std::string& domain, int index,
                const std::string& name, std::uint32_t share, std::uint64_t reserve, control& c) {
  // As the downward API sets them in a pod (docs/kubernetes.md): who the session is, since its
  // pid collides with the other container's.
  ::setenv("GPUSHARE_POD_NAME", ("pod-" + name).c_str(), 1);
  ::setenv("GPUSHARE_POD_NAMESPACE", "team-a", 1);
  ::setenv("GPUSHARE_CONTAINER_NAME", "worker", 1);
  session_options o;
  o.directory = dir;
  o.domain = domain;
  o.name = name;
  o.share = share;
  o.capacity = 100 * MiB;
  session s("GPU-ctr", o);
  reservation r = s.reserve(reserve, 0ms);
  c.own_pid[index] = s.info().pid;
  c.joined++;
  while (c.joined.load() < 2 && !c.stop.load()) std::this_thread::sleep_for(1ms);
  c.seen[index] = static_cast<int>(s.snapshot().sessions.size());
  while (!c.stop.load()) {
    scoped_kernel k(s);
    spin_for(1'000'000);
  }
  return 0;
}

/// Device time per session name in the host's view of the table.
std::map<std::string, double> device_time(const std::string& object_name) {
  std::map<std::string, double> m;
  for (const auto& s : table::open_existing(object_name, 1000ms).snapshot().sessions)
    m[s.name] = static_cast<double>(s.device_ns);
  return m;
}

} // namespace

/// Waits for `pred`; if it does not hold, says what the containers reported before failing.
bool waited_for(const std::function<bool()>& pred, const control& c, reaper& r) {
  if (test::eventually(pred, 20s)) return true;
  MESSAGE("a container reported: " << c.error);
  for (const container& k : r.all) {
    int status = 0;
    if (::waitpid(k.reap, &status, WNOHANG) == k.reap) {
      MESSAGE("container " << k.reap << " ended with " << test::exit_code_of(status));
      r.reaped(k.reap);
      break;
    }
  }
  return false;
}

TEST_CASE("containers: separate PID and mount namespaces share a bind-mounted table directory") {
  if (skip_unless_namespaces()) return;
  host_dirs dirs;
  const std::string domain = "ctr" + std::to_string(::getpid());
  test::shared_block<control> c;
  reaper r;
  r.add(start_container(dirs.tables, dirs.mount_point(0), 1000, recorded(c[0], [&](const auto& d) {
                          return busy_member(d, domain, 0, "three", 3, 40 * MiB, c[0]);
                        })));
  r.add(start_container(dirs.tables, dirs.mount_point(1), 1001, recorded(c[0], [&](const auto& d) {
                          return busy_member(d, domain, 1, "one", 1, 40 * MiB, c[0]);
                        })));
  REQUIRE(waited_for([&] { return c[0].seen[0] != 0 && c[0].seen[1] != 0; }, c[0], r));
  CHECK(c[0].seen[0] == 2);
  CHECK(c[0].seen[1] == 2);
  CHECK(c[0].own_pid[0] == 1); // each is pid 1 of its own namespace: pids collide
  CHECK(c[0].own_pid[1] == 1);
  // The host sees one table file, of the directory's group, with both sessions.
  const auto tables = list_tables_in(dirs.tables, domain);
  REQUIRE(tables.size() == 1);
  CHECK(tables[0].group);
  CHECK(tables[0].owner_id == shared_group);
  const cli_result st = run_cli({"status", "--dir", dirs.tables, "--domain", domain, "--json"});
  CHECK(st.code == 0);
  const json doc = parse_json(st.out);
  const json& t = table_of(doc, "GPU-ctr");
  for (const char* name : {"three", "one"}) {
    const json& s = session_of(t, name);
    CHECK(s["reserved_bytes"].u64() == 40 * MiB);
    CHECK(s["pid"].u64() == 1);
    CHECK(s["identity"]["pod"].str() == std::string("pod-") + name);
    CHECK(s["identity"]["namespace"].str() == "team-a");
    CHECK(s["identity"]["container"].str() == "worker");
  }
  const cli_result text = run_cli({"status", "--dir", dirs.tables, "--domain", domain});
  CHECK(contains(text.out, "team-a/pod-three/worker"));
  CHECK(contains(text.out, "team-a/pod-one/worker"));
  // 3:1 over a steady-state window.
  std::this_thread::sleep_for(300ms);
  const auto before = device_time(tables[0].object_name);
  std::this_thread::sleep_for(3000ms);
  const auto after = device_time(tables[0].object_name);
  const double three = after.at("three") - before.at("three");
  const double one = after.at("one") - before.at("one");
  const double split = three / (three + one);
  MESSAGE("3:1 across containers: " << split * 100 << "% / " << (1 - split) * 100 << "%");
  CHECK(std::abs(split - 0.75) <= 0.02);
  c[0].stop = 1;
  for (const container& k : std::vector<container>(r.all)) {
    CHECK(test::wait_exit(k.reap) == 0);
    r.reaped(k.reap);
  }
}

TEST_CASE("containers: a SIGKILLed container's reservation comes back to another within 1 s") {
  if (skip_unless_namespaces()) return;
  host_dirs dirs;
  const std::string domain = "ctrk" + std::to_string(::getpid());
  test::shared_block<control> c;
  test::shared_block<std::atomic<int>> ready;
  reaper r;
  auto options = [&](const std::string& d, const char* name) {
    session_options o;
    o.directory = d;
    o.domain = domain;
    o.name = name;
    o.capacity = 100 * MiB;
    return o;
  };
  const container victim = r.add(start_container(dirs.tables, dirs.mount_point(0), 1000,
                                                 recorded(c[0], [&](const std::string& d) -> int {
                                                   session s("GPU-ctr", options(d, "victim"));
                                                   reservation res = s.reserve(80 * MiB, 0ms);
                                                   c[0].joined++;
                                                   for (;;) ::pause();
                                                 })));
  REQUIRE(waited_for([&] { return c[0].joined.load() == 1; }, c[0], r));
  const container survivor = r.add(start_container(
      dirs.tables, dirs.mount_point(1), 1001, recorded(c[0], [&](const std::string& d) {
        session s("GPU-ctr", options(d, "survivor"));
        if (s.try_reserve(80 * MiB)) return 5; // the victim holds 80 of 100 MiB
        ready[0] = 1;
        while (ready[0].load() != 2) std::this_thread::sleep_for(1ms);
        try {
          reservation res = s.reserve(80 * MiB, 1000ms); // the kill happened just before
          c[0].got_memory = 1;
        } catch (const gpushare::error&) {
          c[0].got_memory = 2;
        }
        return 0;
      })));
  REQUIRE(waited_for([&] { return ready[0].load() == 1; }, c[0], r));
  CHECK(::kill(victim.pid, SIGKILL) == 0);
  CHECK(test::wait_exit(victim.reap) == 128 + SIGKILL);
  r.reaped(victim.reap);
  ready[0] = 2;
  CHECK(test::wait_exit(survivor.reap) == 0);
  r.reaped(survivor.reap);
  CHECK(c[0].got_memory == 1);
}
