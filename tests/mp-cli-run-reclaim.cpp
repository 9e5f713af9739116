// SPDX-License-Identifier: Apache-2.0
// `gpushare run --reclaimable SIZE --on-reclaim CMD --on-restore CMD` (docs/cli.md, "run";
// docs/design.md section 15): an unmodified program of a low class whose "sleep endpoint" is a
// shell command. A reserve of a higher class makes the runner run the command and give the memory
// back; once nobody waits, the runner takes it again and runs the restore command. A command
// that fails keeps the memory with the program. The programs and hooks are /bin/sh scripts.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_test_util.hpp"
#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;
using namespace cli_test;

namespace {

constexpr std::uint64_t MiB = 1ull << 20;

/// A domain and a key of the test's own; tables created with a capacity of 1 GiB.
struct fixture {
  test_domain d;
  std::string key = std::string("GPU-reclaim-").append(std::to_string(::getpid()));
  env_vars env() const { return {"GPUSHARE_DOMAIN=" + d.name(), "GPUSHARE_CAPACITY=1GiB"}; }
  std::string file(const std::string& what) const {
    return "/tmp/gpushare-mp-run-reclaim-" + d.name() + "-" + what;
  }
  /// The runner of a low-class "engine" holding 800 MiB, 600 MiB of it reclaimable, that waits
  /// for the file "go".
  running_cli start_engine(const std::string& on_reclaim, const std::string& on_restore) const {
    std::vector<std::string> args = {"run",     "--key",         key,      "--memory",
                                     "800MiB",  "--priority",    "low",    "--name",
                                     "engine",  "--reclaimable", "600MiB", "--on-reclaim",
                                     on_reclaim};
    if (!on_restore.empty()) args.insert(args.end(), {"--on-restore", on_restore});
    args.insert(
        args.end(),
        {"--", "sh", "-c",
         std::string("while [ ! -e ").append(file("go")).append(" ]; do sleep 0.02; done")});
    return start_cli(args, keep_uid, env());
  }
  std::optional<session_info> engine() const {
    try {
      for (const auto& s :
           table::open(key, open_mode::open_existing, d.options("observer")).snapshot().sessions)
        if (s.name == "engine") return s;
    } catch (const gpushare::error& e) {
      if (e.code() != errc::no_such_table) throw;
    }
    return std::nullopt;
  }
  session_options urgent(std::chrono::milliseconds deadline = 2000ms) const {
    session_options o = d.options("urgent");
    o.priority = priority::high;
    o.reclaim_deadline = deadline;
    return o;
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

} // namespace

TEST_CASE("run --reclaimable: a higher class's reserve makes the runner run --on-reclaim and give "
          "the memory back, and --on-restore takes it again once nobody waits") {
  fixture f;
  const std::string slept = f.file("slept"), woke = f.file("woke");
  running_cli r =
      f.start_engine("echo $GPUSHARE_RECLAIM_BYTES $GPUSHARE_RECLAIMABLE_BYTES > " + slept,
                     "echo $GPUSHARE_RESTORE_BYTES > " + woke);
  REQUIRE(test::eventually([&] {
    const auto e = f.engine();
    return e && e->reserved == 800 * MiB;
  }));
  CHECK(f.engine()->reclaim.reclaimable == 600 * MiB);
  {
    session urgent(f.key, f.urgent());
    reservation got = urgent.reserve(600 * MiB, 20s); // 376 MiB more than the table has free
    CHECK(got.size() == 600 * MiB);
    CHECK(read_file(slept) == std::to_string(376 * MiB) + " " + std::to_string(600 * MiB) + "\n");
    const auto e = f.engine();
    REQUIRE(e.has_value());
    CHECK(e->reserved == 200 * MiB); // the fixed part stays
    CHECK(test::eventually([&] { return f.engine()->reclaim.given == 600 * MiB; }));
  } // released, and nobody waits: the runner takes the 600 MiB again and runs --on-restore
  CHECK(test::eventually([&] {
    const auto e = f.engine();
    return e && e->reserved == 800 * MiB && read_file(woke) == std::to_string(600 * MiB) + "\n";
  }));
  CHECK(f.engine()->reclaim.reclaimable == 600 * MiB);
  std::ofstream(f.file("go")).put('x');
  const cli_result res = finish_cli(r);
  CHECK(res.code == 0);
  CHECK(contains(res.err, "gave back 600.00 MiB (asked for 376.00 MiB) after --on-reclaim"));
  CHECK(contains(res.err, "took back 600.00 MiB after --on-restore"));
  for (const auto& p : {slept, woke, f.file("go")}) ::unlink(p.c_str());
}

TEST_CASE("run --reclaimable: an --on-reclaim that fails keeps the memory with the program and "
          "the waiter skips it") {
  fixture f;
  running_cli r = f.start_engine("exit 3", "");
  REQUIRE(test::eventually([&] {
    const auto e = f.engine();
    return e && e->reserved == 800 * MiB;
  }));
  {
    session urgent(f.key, f.urgent(300ms));
    const auto e = test::thrown([&] { (void)urgent.reserve(600 * MiB, 1500ms); });
    CHECK((e && e->code() == errc::timeout));
    const auto engine = f.engine();
    REQUIRE(engine.has_value());
    CHECK(engine->reserved == 800 * MiB);
    CHECK(engine->reclaim.answered >= 1);
    CHECK(engine->reclaim.given == 0);
  }
  std::ofstream(f.file("go")).put('x');
  const cli_result res = finish_cli(r);
  CHECK(res.code == 0);
  CHECK(contains(res.err, "--on-reclaim failed (it exited with 3): the program keeps its 600.00 "
                          "MiB"));
  // An answer that gave nothing is not asked again at once: the command ran once, not at every
  // look of the waiter.
  std::size_t runs = 0;
  for (std::size_t at = 0; (at = res.err.find("--on-reclaim failed", at)) != std::string::npos;
       ++at)
    ++runs;
  CHECK(runs == 1);
  ::unlink(f.file("go").c_str());
}

TEST_CASE("run --reclaimable: usage errors name the flag") {
  fixture f;
  const auto run = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = {"run", "--key", f.key, "--memory", "800MiB"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--", "true"});
    return run_cli_env(f.env(), args);
  };
  auto r = run({"--on-reclaim", "true"});
  CHECK(r.code == 2);
  CHECK(contains(r.err, "--on-reclaim and --on-restore need --reclaimable SIZE"));
  r = run({"--reclaimable", "100MiB"});
  CHECK(r.code == 2);
  CHECK(contains(r.err, "--reclaimable needs --on-reclaim CMD"));
  r = run({"--reclaimable", "900MiB", "--on-reclaim", "true"});
  CHECK(r.code == 2);
  CHECK(contains(r.err, "--reclaimable 900MiB is more than the budget, --memory 800MiB"));
  r = run({"--reclaimable", "100MiB", "--on-reclaim", "true", "--library"});
  CHECK(r.code == 2);
  CHECK(contains(r.err, "with --library the program's own session gives memory back"));
  r = run({"--reclaimable", "lots", "--on-reclaim", "true"});
  CHECK(r.code == 2);
  CHECK(contains(r.err, "--reclaimable"));
}
