// SPDX-License-Identifier: Apache-2.0
// `gpushare run`: its command line, `gpushare run [options] -- COMMAND [ARGS...]`, read into a
// run_request. Every mistake is a usage_error naming the flag (exit code 2).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <gpushare/error.hpp>
#include <gpushare/options.hpp>
#include <gpushare/text.hpp>

#include "cli_args.hpp"
#include "cli_errors.hpp"
#include "cli_run_engine.hpp"
#include "cli_run_env.hpp"
#include "cli_run_ready.hpp"
#include "cli_run_reclaim.hpp"

namespace gpushare::cli {

/// Everything `gpushare run` was asked to do.
struct run_request {
  std::string key;
  session_options options;  ///< the runner's session (name, priority, share, limit, guarantee)
  memory_amount memory;     ///< the budget, as read
  std::string memory_given; ///< the budget as given: "20GiB"
  run_budget budget;        ///< what the program is told (resolved later)
  bool library = false, pytorch = false, dry_run = false;
  std::optional<std::uint64_t> card_memory;
  std::uint64_t timeout_ns = UINT64_MAX; ///< UINT64_MAX: wait for the budget without end
  std::optional<ready_condition> ready;
  std::uint64_t startup_timeout_ns = 600'000'000'000;
  bool serialize_startup = false;          ///< hold the table's start-up lock until ready
  std::optional<engine_spec> engine;       ///< --engine: append the engine's flags for the budget
  std::optional<run_reclaim_spec> reclaim; ///< --reclaimable: gives memory back when asked
  std::vector<std::string> command;
};

/// --timeout: how long to wait for the budget; "none" (the default) waits without end.
inline constexpr duration_option run_timeout{"--timeout",        0,
                                             86'400'000'000'000, true,
                                             UINT64_MAX,         "wait without end",
                                             1'000'000'000,      "\"30s\", \"5min\", \"none\""};
/// --startup-timeout: how long to wait for --ready-when (default 10 min).
inline constexpr duration_option run_startup_timeout{
    "--startup-timeout", 0, 86'400'000'000'000, false, 0, {}, 1'000'000'000, "\"90s\", \"10min\""};

inline constexpr flag_spec run_flags[] = {{"--key", true},         {"--memory", true},
                                          {"--guarantee", true},   {"--priority", true},
                                          {"--share", true},       {"--name", true},
                                          {"--timeout", true},     {"--library", false},
                                          {"--pytorch", false},    {"--card-memory", true},
                                          {"--ready-when", true},  {"--startup-timeout", true},
                                          {"--dry-run", false},    {"--serialize-startup", false},
                                          {"--engine", true},      {"--dir", true},
                                          {"--reclaimable", true}, {"--on-reclaim", true},
                                          {"--on-restore", true}};

/// A session name from the program's path: its last component, printable ASCII only, at most 63
/// characters ("python3" for /usr/bin/python3).
inline std::string name_from_command(const std::string& program) {
  std::string name = program.substr(program.find_last_of('/') + 1);
  for (char& c : name)
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  name = name.substr(0, 63);
  return name.empty() ? std::string("gpushare-run") : name;
}

/// The flags before "--" and the command after it; usage_error when either is missing.
inline std::pair<parsed_args, std::vector<std::string>>
split_run_command_line(std::span<const std::string> args) {
  std::size_t dash = 0;
  while (dash < args.size() && args[dash] != "--") ++dash;
  parsed_args a = parse_command_line(args.subspan(0, dash), run_flags, args.size());
  if (a.help) return {a, {}};
  if (!a.positionals.empty())
    throw usage_error("unexpected argument '" + a.positionals[0] +
                      "' before '--': put the program and its arguments after '--' (gpushare run "
                      "[options] -- COMMAND [ARGS...])");
  if (dash == args.size())
    throw usage_error("no command: give the program after '--', e.g. gpushare run --key GPU-... "
                      "--memory 20GiB -- python3 train.py");
  if (dash + 1 == args.size()) throw usage_error("no command after '--'");
  return {a, std::vector<std::string>(args.begin() + static_cast<std::ptrdiff_t>(dash) + 1,
                                      args.end())};
}

/// The key: --key, else GPUSHARE_KEY.
inline std::string run_key(const parsed_args& a, const env_lookup& env) {
  if (auto k = a.value("--key")) return *k;
  if (auto k = env("GPUSHARE_KEY")) {
    if (k->empty()) throw usage_error("GPUSHARE_KEY is set but empty; give --key or a value");
    return *k;
  }
  throw usage_error("which table? give --key GPU-... (the GPU's UUID, as `nvidia-smi -L` prints "
                    "it) or set GPUSHARE_KEY");
}

/// The budget: --memory, else GPUSHARE_MEMORY_LIMIT.
inline void run_memory(const parsed_args& a, const env_lookup& env, run_request& r) {
  if (auto m = a.value("--memory")) {
    r.memory = parse_value("--memory", *m, parse_memory_amount);
    r.memory_given = *m;
  } else if (auto v = env("GPUSHARE_MEMORY_LIMIT")) {
    r.memory = parse_value("GPUSHARE_MEMORY_LIMIT", *v, parse_memory_amount);
    r.memory_given = *v;
  } else {
    throw usage_error("--memory is missing: how much memory may the program use? e.g. --memory "
                      "20GiB (or set GPUSHARE_MEMORY_LIMIT)");
  }
  r.options.memory_limit = r.memory;
  r.budget.settings.push_back({"GPUSHARE_MEMORY_LIMIT", r.memory_given});
}

/// The session's settings from the flags (each also passed on with --library).
inline void run_settings(const parsed_args& a, run_request& r) {
  if (auto v = a.value("--guarantee")) {
    r.options.memory_guarantee = parse_value("--guarantee", *v, parse_memory_amount);
    r.budget.settings.push_back({"GPUSHARE_MEMORY_GUARANTEE", *v});
  }
  if (auto v = a.value("--priority")) {
    r.options.priority = parse_value("--priority", *v, parse_priority);
    r.budget.settings.push_back({"GPUSHARE_PRIORITY", *v});
  }
  if (auto v = a.value("--share")) {
    r.options.share = parse_value("--share", *v, parse_share);
    r.budget.settings.push_back({"GPUSHARE_SHARE", *v});
  }
  if (auto v = a.value("--dir")) { // else GPUSHARE_DIR, as a session reads it
    r.options.directory = parse_value("--dir", *v, [](std::string_view d) {
      const std::string n = normalize_table_dir(d);
      return n.empty() ? std::string("/dev/shm") : n;
    });
    r.budget.settings.push_back({"GPUSHARE_DIR", *r.options.directory});
  }
  if (auto v = a.value("--name")) {
    r.options.name = *v;
    r.budget.settings.push_back({"GPUSHARE_NAME", *v});
  } else if (!process_environment("GPUSHARE_NAME")) {
    r.options.name = name_from_command(r.command[0]); // else GPUSHARE_NAME, as a session reads it
  }
  try { // the name, the guarantee against the limit, and the GPUSHARE_* the session will read
    (void)resolve_options(r.options);
  } catch (const gpushare::error& e) {
    // A bad GPUSHARE_* in the environment is not a bad command line (issue 42, B8): it stays
    // the library's error, and `gpushare run` fails with 125 (run_run).
    if (e.code() != errc::invalid_argument) throw;
    throw usage_error(e.what());
  }
}

/// --ready-when, --startup-timeout and --serialize-startup.
inline void run_readiness(const parsed_args& a, run_request& r) {
  if (auto v = a.value("--ready-when")) r.ready = parse_ready_when(*v);
  r.serialize_startup = a.has("--serialize-startup");
  if (r.serialize_startup && !r.ready)
    throw usage_error("--serialize-startup needs --ready-when: the start-up lock is released "
                      "when the program is ready (port:N, log:REGEX or file:PATH)");
  if (auto v = a.value("--startup-timeout")) {
    if (!r.ready) throw usage_error("--startup-timeout needs --ready-when: ready when what?");
    r.startup_timeout_ns = parse_interval_ns("--startup-timeout", *v, run_startup_timeout);
  }
}

/// --reclaimable SIZE, --on-reclaim CMD and --on-restore CMD: each needs the others it depends on.
inline void run_reclaim_flags(const parsed_args& a, run_request& r) {
  const auto size = a.value("--reclaimable");
  const auto on_reclaim = a.value("--on-reclaim");
  const auto on_restore = a.value("--on-restore");
  if (!size && !on_reclaim && !on_restore) return;
  if (!size)
    throw usage_error("--on-reclaim and --on-restore need --reclaimable SIZE: how much of the "
                      "budget does the program give back when asked? e.g. --reclaimable 12GiB");
  if (!on_reclaim)
    throw usage_error("--reclaimable needs --on-reclaim CMD: the command that makes the program "
                      "free that memory (e.g. an engine's sleep endpoint: --on-reclaim 'curl -X "
                      "POST localhost:8000/sleep?level=1')");
  if (r.library)
    throw usage_error("--reclaimable is for a program the runner holds the budget for; with "
                      "--library the program's own session gives memory back "
                      "(session::on_reclaim, or Session.on_reclaim in Python)");
  run_reclaim_spec spec;
  spec.bytes = parse_value("--reclaimable", *size, parse_capacity);
  if (spec.bytes == 0 || spec.bytes >= unlimited_memory)
    throw usage_error("--reclaimable: give the bytes the program gives back, e.g. 12GiB");
  if (r.memory.kind == memory_amount::unit::bytes && spec.bytes > r.memory.value)
    throw usage_error("--reclaimable " + *size + " is more than the budget, --memory " +
                      r.memory_given + ": it is the part of the budget the program gives back");
  spec.given = *size;
  spec.on_reclaim = *on_reclaim;
  if (spec.on_reclaim.empty()) throw usage_error("--on-reclaim: the command is empty");
  if (on_restore) {
    spec.on_restore = *on_restore;
    if (spec.on_restore.empty()) throw usage_error("--on-restore: the command is empty");
  }
  r.reclaim = std::move(spec);
}

/// Reads `gpushare run`'s command line; nullopt for --help.
inline std::optional<run_request> parse_run_request(std::span<const std::string> args,
                                                    const env_lookup& env) {
  auto [a, command] = split_run_command_line(args);
  if (a.help) return std::nullopt;
  run_request r;
  r.command = std::move(command);
  r.key = run_key(a, env);
  run_memory(a, env, r);
  run_settings(a, r);
  r.library = a.has("--library");
  r.pytorch = a.has("--pytorch");
  r.dry_run = a.has("--dry-run");
  if (auto v = a.value("--card-memory")) {
    r.card_memory = parse_value("--card-memory", *v, parse_capacity);
    if (*r.card_memory == 0 || *r.card_memory >= unlimited_memory)
      throw usage_error("--card-memory: give the card's memory in bytes, e.g. 80GiB");
  }
  if (auto v = a.value("--timeout")) r.timeout_ns = parse_interval_ns("--timeout", *v, run_timeout);
  if (r.library && a.has("--timeout") && !a.has("--serialize-startup"))
    throw usage_error("--timeout is the runner's wait for the budget (and for the start-up lock "
                      "with --serialize-startup), and with --library the program reserves the "
                      "budget itself (GPUSHARE_ALLOC_TIMEOUT or its own timeout)");
  run_readiness(a, r);
  if (auto v = a.value("--engine")) r.engine = parse_engine_spec(*v);
  run_reclaim_flags(a, r);
  r.budget.key = r.key;
  r.budget.library = r.library;
  r.budget.pytorch = r.pytorch;
  return r;
}

} // namespace gpushare::cli
