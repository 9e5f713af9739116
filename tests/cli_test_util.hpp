// SPDX-License-Identifier: Apache-2.0
// Running the gpushare command-line tool from a test (the mp-cli-* tests, cudasim-state): a domain
// of one's own, the tool's exit code, stdout and stderr, the JSON reader for `status --json`, and
// children that hold a session. The tool's path comes from GPUSHARE_CLI_PATH (tests/CMakeLists.txt
// defines it for the tests that run it).
#pragma once

#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <gpushare/discovery.hpp>

#include "test_util.hpp"

namespace cli_test {

using namespace gpushare;
using namespace std::chrono_literals;

/// A domain of one's own ("cli-<pid>-<n>"): its tables are removed when it goes out of scope.
struct test_domain : test::temp_domain {
  test_domain() : temp_domain("cli-") {}
};

// ------------------------------------------------------------------------------------------------
// Running the tool (with the one process runner, tests/support/process.hpp).
// ------------------------------------------------------------------------------------------------
using cli_result = test::process_result;
using running_cli = test::running_process;
using test::keep_uid;

/// Environment variables to set for the tool ("NAME=value"). GPUSHARE_DOMAIN is never inherited
/// from the test's own environment: a test that wants it sets it here.
using env_vars = std::vector<std::string>;

/// Starts the tool with `args`; its stdout and stderr go to the returned pipes. With `as_uid`,
/// the child drops to that uid (and gid) before exec.
inline running_cli start_cli(const std::vector<std::string>& args, uid_t as_uid = keep_uid,
                             const env_vars& env = {}) {
  std::vector<std::string> words = {GPUSHARE_CLI_PATH};
  words.insert(words.end(), args.begin(), args.end());
  test::process_options opts;
  opts.env = env;
  opts.unset = {"GPUSHARE_DOMAIN"};
  opts.as_uid = as_uid;
  return test::start_process(words, opts);
}

/// Reads both pipes to their end, then waits for the tool.
inline cli_result finish_cli(running_cli r) { return test::finish_process(r); }

inline cli_result run_cli(const std::vector<std::string>& args, uid_t as_uid = keep_uid) {
  return finish_cli(start_cli(args, as_uid));
}

/// The tool run with environment variables `env` ("NAME=value") added.
inline cli_result run_cli_env(const env_vars& env, const std::vector<std::string>& args) {
  return finish_cli(start_cli(args, keep_uid, env));
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

using test::json;
using test::parse_json;

/// The table of `key` in a status document.
inline const json& table_of(const json& doc, const std::string& key) {
  for (const auto& t : doc["tables"].items)
    if (t["key"].str() == key) return t;
  throw std::runtime_error("no table with key " + key);
}

/// The session named `name` in a table of a status document.
inline const json& session_of(const json& table, const std::string& name) {
  for (const auto& s : table["sessions"].items)
    if (s["name"].str() == name) return s;
  throw std::runtime_error("no session named " + name);
}

/// Runs a forked child that joins `key` as `name`, reserves `reserve` bytes, then waits to be
/// killed. Returns once the child has joined.
inline pid_t spawn_holder(const test_domain& d, const std::string& key, const std::string& name,
                          std::uint64_t reserve = 0, std::uint64_t capacity = 0) {
  return test::spawn_holding([&](const std::function<void()>& hold) {
    session s(key, d.options(name, capacity));
    std::optional<reservation> r;
    if (reserve > 0) r = s.reserve(reserve, 0ms);
    hold();
  });
}

/// Kills a holder and waits for it.
inline void kill_holder(pid_t pid) { CHECK(test::kill_and_wait(pid) == 128 + SIGKILL); }

/// Forked children killed and reaped when the test case ends, even when a REQUIRE failed (a
/// child left running would keep the test's output pipe open and stall CTest).
struct children {
  std::vector<pid_t> pids;
  /// Kills `pid` now (checking it was still running) and forgets it.
  void kill(pid_t pid) {
    kill_holder(pid);
    std::erase(pids, pid);
  }
  children() = default;
  children(const children&) = delete;
  children& operator=(const children&) = delete;
  ~children() {
    for (const pid_t p : pids) test::kill_and_wait(p);
  }
};

} // namespace cli_test
