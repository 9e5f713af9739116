// SPDX-License-Identifier: Apache-2.0
// `gpushare run`: the environment the program is started with. The budget goes to it as GPUSHARE_*
// variables (with --library: a program that opens its own session) and as PyTorch's allocator
// configuration (with --pytorch: per_process_memory_fraction, PyTorch 2.11 and later), merged
// into what the environment already says.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gpushare/types.hpp>

#include "cli_format.hpp"

extern char** environ; // POSIX: the process's environment

namespace gpushare::cli {

/// A variable added to (or replaced in) the program's environment.
struct env_var {
  std::string name, value;
  friend bool operator==(const env_var&, const env_var&) = default;
};

/// `budget` / `total` as PyTorch reads a fraction: six decimals, rounded down so that the
/// program's cap never exceeds the budget, at most 1 ("0.250000").
inline std::string fraction_text(std::uint64_t budget, std::uint64_t total) {
  __extension__ using u128 = unsigned __int128; // __extension__: no -Wpedantic warning
  std::uint64_t ppm = 1'000'000;
  if (total > 0 && budget < total)
    ppm = static_cast<std::uint64_t>(static_cast<u128>(budget) * 1'000'000u / total);
  std::string frac = std::to_string(1'000'000 + ppm % 1'000'000).substr(1);
  return std::to_string(ppm / 1'000'000) + "." + frac;
}

/// The entries of a PyTorch allocator configuration ("k:v,k:v"), split at the commas that are not
/// inside brackets (roundup_power2_divisions:[256:1,512:2] is one entry), each trimmed.
inline std::vector<std::string> alloc_conf_entries(std::string_view conf) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  const auto flush = [&] {
    const auto b = cur.find_first_not_of(" \t");
    if (b != std::string::npos) out.push_back(cur.substr(b, cur.find_last_not_of(" \t") - b + 1));
    cur.clear();
  };
  for (const char c : conf) {
    if (c == '[') ++depth;
    if (c == ']' && depth > 0) --depth;
    if (c == ',' && depth == 0) {
      flush();
      continue;
    }
    cur.push_back(c);
  }
  flush();
  return out;
}

/// `conf` with `key:value` set: an entry for `key` already there is replaced, every other entry
/// is kept as it was, and the new entry comes last.
inline std::string merge_alloc_conf(std::string_view conf, std::string_view key,
                                    std::string_view value) {
  std::string out;
  for (const std::string& e : alloc_conf_entries(conf)) {
    const std::string_view name = std::string_view(e).substr(0, e.find(':'));
    if (name.substr(0, name.find_last_not_of(" \t") + 1) == key) continue;
    out += e + ",";
  }
  return out.append(key).append(":").append(value);
}

/// What `gpushare run` passes to the program, and how it holds the budget.
struct run_budget {
  std::string key;
  /// false: the runner reserves the budget itself for the program's lifetime (a program that does
  /// not use gpushare); true (--library): the runner reserves nothing and passes the budget as
  /// GPUSHARE_MEMORY_LIMIT to a program whose own session reserves it.
  bool library = false;
  std::optional<std::uint64_t> budget_bytes; ///< the budget resolved (nullopt: unknown yet)
  std::optional<std::uint64_t> card_total;   ///< the card's memory, for the fraction
  std::string card_total_source;             ///< "--card-memory", "the table's capacity"
  bool pytorch = false;                      ///< --pytorch: set PYTORCH_ALLOC_CONF
  /// Settings given on the command line, as given ("20GiB", "high"), each passed with
  /// --library as the variable a session reads: {"GPUSHARE_MEMORY_LIMIT", "20GiB"}, ...
  std::vector<env_var> settings;
};

/// The variables to add to the program's environment, given the runner's own (`env`): with
/// --library, GPUSHARE_KEY and the settings; with --pytorch, PYTORCH_ALLOC_CONF (and
/// PYTORCH_CUDA_ALLOC_CONF where that is set already, since older PyTorch reads only it).
/// Needs budget_bytes and card_total when pytorch is set.
inline std::vector<env_var> budget_environment(const run_budget& b, const env_lookup& env) {
  std::vector<env_var> out;
  if (b.library) {
    out.push_back({"GPUSHARE_KEY", b.key});
    out.insert(out.end(), b.settings.begin(), b.settings.end());
  }
  if (b.pytorch && b.budget_bytes && b.card_total) {
    const std::string f = fraction_text(*b.budget_bytes, *b.card_total);
    for (const char* var : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}) {
      const auto old = env(var);
      if (old || std::string_view(var) == "PYTORCH_ALLOC_CONF")
        out.push_back({var, merge_alloc_conf(old.value_or(""), "per_process_memory_fraction", f)});
    }
  }
  return out;
}

/// The process's environment with `added` set ("NAME=value" each), for execve.
inline std::vector<std::string> child_environment(const std::vector<env_var>& added) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const env_var& v : added) replaced = replaced || v.name == name;
    if (!replaced) out.emplace_back(entry);
  }
  for (const env_var& v : added) out.push_back(v.name + "=" + v.value);
  return out;
}

/// A word as a POSIX shell reads it back: 'it''s' -> 'it'\''s'; plain words stay bare.
inline std::string shell_quote(std::string_view w) {
  const bool plain =
      !w.empty() && w.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP"
                                        "QRSTUVWXYZ0123456789_-./:=,+@%") == std::string_view::npos;
  if (plain) return std::string(w);
  std::string out = "'";
  for (const char c : w) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// What --dry-run prints: the variables added, one a line, then the command.
inline std::string dry_run_text(const std::vector<env_var>& added,
                                const std::vector<std::string>& command) {
  std::string out;
  for (const env_var& v : added)
    out.append("env ").append(v.name).append("=").append(shell_quote(v.value)).append("\n");
  out += "exec";
  for (const std::string& w : command) out.append(" ").append(shell_quote(w));
  return out + "\n";
}

} // namespace gpushare::cli
