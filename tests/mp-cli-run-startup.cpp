// SPDX-License-Identifier: Apache-2.0
// `gpushare run --serialize-startup` and `--engine`: programs started by two runners never start
// while the other is still starting; a runner whose program is not ready keeps the lock (the
// other times out, naming it) until it is ready or its runner dies; the engine's flags for the
// budget are appended to the command, and a missing input is named.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_test_util.hpp"
#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;
using namespace cli_test;

namespace {

/// A domain and a key of the test's own; tables created with a capacity of 1 GiB.
struct fixture {
  test_domain d;
  std::string key = std::string("GPU-runsu-").append(std::to_string(::getpid()));
  env_vars env() const { return {"GPUSHARE_DOMAIN=" + d.name(), "GPUSHARE_CAPACITY=1GiB"}; }
  cli_result run(const std::vector<std::string>& args) const { return run_cli_env(env(), args); }
  running_cli start(const std::vector<std::string>& args) const {
    return start_cli(args, keep_uid, env());
  }
  std::vector<std::string> with(std::vector<std::string> flags,
                                const std::vector<std::string>& command) const {
    std::vector<std::string> out = {"run", "--key", key};
    out.insert(out.end(), flags.begin(), flags.end());
    out.push_back("--");
    out.insert(out.end(), command.begin(), command.end());
    return out;
  }
  std::string file(const std::string& what) const {
    return "/tmp/gpushare-mp-runsu-" + d.name() + "-" + what;
  }
  /// Whether a live session of the table holds the start-up lock.
  bool lock_held() const {
    try {
      const table_snapshot t =
          table::open(key, open_mode::open_existing, d.options("observer")).snapshot();
      for (const session_info& s : t.sessions)
        if (s.holds_startup) return true;
    } catch (const gpushare::error& e) {
      if (e.code() != errc::no_such_table) throw;
    }
    return false;
  }
};

std::uint64_t read_number(const std::string& path) {
  std::ifstream in(path);
  std::uint64_t v = 0;
  in >> v;
  return v;
}

template <class Pred> bool eventually(Pred pred, std::chrono::milliseconds limit = 20s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

/// A program that writes the time it started (ns) to `<p>.start`, starts for 0.3 s, writes the
/// time it is ready to `<p>.ready`, then creates the file `<p>` (its --ready-when) and runs on.
std::vector<std::string> starting_program(const std::string& p) {
  return {"sh", "-c",
          "date +%s%N > " + p + ".start; sleep 0.3; date +%s%N > " + p + ".ready; touch " + p +
              "; sleep 0.2"};
}

} // namespace

TEST_CASE("run --serialize-startup: two programs never start at the same time") {
  fixture f;
  const std::string a = f.file("a"), b = f.file("b");
  running_cli ra = f.start(f.with({"--memory", "64MiB", "--name", "engine-a", "--serialize-startup",
                                   "--ready-when", "file:" + a},
                                  starting_program(a)));
  running_cli rb = f.start(f.with({"--memory", "64MiB", "--name", "engine-b", "--serialize-startup",
                                   "--ready-when", "file:" + b},
                                  starting_program(b)));
  const cli_result res_a = finish_cli(ra), res_b = finish_cli(rb);
  CHECK(res_a.code == 0);
  CHECK(res_b.code == 0);
  const std::uint64_t a0 = read_number(a + ".start"), a1 = read_number(a + ".ready");
  const std::uint64_t b0 = read_number(b + ".start"), b1 = read_number(b + ".ready");
  for (const std::string& p : {a, b})
    for (const char* s : {"", ".start", ".ready"}) ::unlink((p + s).c_str());
  REQUIRE(a0 > 0);
  REQUIRE(b0 > 0);
  // Whichever started first was ready before the other started.
  if (a0 < b0)
    CHECK(b0 >= a1);
  else
    CHECK(a0 >= b1);
  CHECK(!f.lock_held());
}

TEST_CASE("run --serialize-startup: a program not yet ready keeps the lock until its runner dies") {
  fixture f;
  const std::string never = f.file("never");
  running_cli holder = f.start(f.with({"--memory", "64MiB", "--name", "slow-engine",
                                       "--serialize-startup", "--ready-when", "file:" + never},
                                      {"sleep", "60"}));
  REQUIRE(eventually([&] { return f.lock_held(); }));
  const std::string ran = f.file("ran");
  const cli_result late = f.run(f.with({"--memory", "64MiB", "--serialize-startup", "--ready-when",
                                        "file:" + ran, "--timeout", "300ms"},
                                       {"touch", ran}));
  CHECK(late.code == 125);
  CHECK(contains(late.err, "start-up lock"));
  CHECK(contains(late.err, "'slow-engine' (pid " + std::to_string(holder.pid)));
  CHECK(contains(late.err, "the program was not started"));
  CHECK(::access(ran.c_str(), F_OK) != 0);
  // The holder's runner dies: its program goes with it, and the lock with its session.
  REQUIRE(::kill(holder.pid, SIGKILL) == 0);
  (void)finish_cli(holder);
  const cli_result next = f.run(f.with({"--memory", "64MiB", "--serialize-startup", "--ready-when",
                                        "file:" + ran, "--timeout", "20s"},
                                       {"touch", ran}));
  ::unlink(ran.c_str());
  CHECK(next.code == 0);
  CHECK(contains(next.err, "the program is ready after"));
  CHECK(!f.lock_held());
}

TEST_CASE("run --serialize-startup needs --ready-when") {
  fixture f;
  const cli_result r = f.run(f.with({"--memory", "64MiB", "--serialize-startup"}, {"true"}));
  CHECK(r.code == 2);
  CHECK(contains(r.err, "--serialize-startup needs --ready-when"));
}

TEST_CASE("run --engine: the engine's flags for the budget are appended to the command") {
  fixture f;
  // 256 MiB of a 1 GiB table: KV = 256 - 100 - 20 - 10 - 6 = 120 MiB; utilization 0.25.
  const std::vector<std::string> show = {"sh", "-c", "echo \"$*\"", "engine"};
  const cli_result v =
      f.run(f.with({"--memory", "256MiB", "--engine",
                    "vllm,weights=100MiB,activation_peak=20MiB,cuda_graphs=10MiB,margin=6MiB"},
                   show));
  CHECK(v.code == 0);
  CHECK(v.out == "--kv-cache-memory-bytes 125829120 --gpu-memory-utilization 0.2500\n");
  const cli_result eager =
      f.run(f.with({"--memory", "256MiB", "--dry-run", "--engine",
                    "vllm,weights=100MiB,activation_peak=20MiB,enforce_eager=true,margin=6MiB"},
                   {"vllm", "serve", "m"}));
  CHECK(eager.code == 0);
  CHECK(contains(eager.out,
                 "exec vllm serve m --kv-cache-memory-bytes 136314880 --gpu-memory-utilization "
                 "0.2500\n"));
  // SGLang: what it must leave free of 800 MiB at start is 800 - (256 - 20 - 10 - 6) = 580 MiB.
  const cli_result s = f.run(
      f.with({"--memory", "256MiB", "--engine",
              "sglang,weights=100MiB,free_at_start=800MiB,activation_peak=20MiB,cuda_graphs=10MiB,"
              "margin=6MiB,kv_bytes_per_token=1MiB"},
             show));
  CHECK(s.code == 0);
  CHECK(contains(s.out, "--mem-fraction-static 0.275000 --max-total-tokens 120\n"));
}

TEST_CASE("run --engine: a missing input or an unknown one is named") {
  fixture f;
  const cli_result missing =
      f.run(f.with({"--memory", "256MiB", "--engine", "vllm,weights=100MiB"}, {"true"}));
  CHECK(missing.code == 125);
  CHECK(contains(missing.err, "activation_peak"));
  CHECK(contains(missing.err, "margin"));
  const cli_result unknown =
      f.run(f.with({"--memory", "256MiB", "--engine", "vllm,weight=1GiB"}, {"true"}));
  CHECK(unknown.code == 2);
  CHECK(contains(unknown.err, "unknown input \"weight\""));
  const cli_result engine = f.run(f.with({"--memory", "256MiB", "--engine", "tgi"}, {"true"}));
  CHECK(engine.code == 2);
  CHECK(contains(engine.err, "unknown engine \"tgi\""));
  const cli_result too_big =
      f.run(f.with({"--memory", "256MiB", "--engine",
                    "vllm,weights=200MiB,activation_peak=50MiB,cuda_graphs=10MiB,margin=6MiB"},
                   {"true"}));
  CHECK(too_big.code == 125);
  CHECK(contains(too_big.err, "leaves no KV cache"));
}
