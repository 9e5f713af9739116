// SPDX-License-Identifier: Apache-2.0
// Command-line parsing for the gpushare tool: flags of one subcommand, and the values they take.
// Every mistake becomes a usage_error, which main() reports with the usage and exit code 2.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gpushare/error.hpp>
#include <gpushare/options.hpp>
#include <gpushare/text.hpp>

#include "cli_errors.hpp"
#include "cli_format.hpp"

namespace gpushare::cli {

/// One flag a subcommand accepts: "--name", with a value ("--name V" or "--name=V") or without.
struct flag_spec {
  std::string_view name; ///< with its leading "--"
  bool takes_value = false;
};

/// A parsed command line: the flags given (in order, each at most once) and the positionals.
struct parsed_args {
  std::vector<std::pair<std::string, std::string>> flags; ///< flag name -> value ("" if none)
  std::vector<std::string> positionals;
  bool help = false; ///< -h or --help was given

  bool has(std::string_view flag) const {
    for (const auto& f : flags)
      if (f.first == flag) return true;
    return false;
  }
  std::optional<std::string> value(std::string_view flag) const {
    for (const auto& f : flags)
      if (f.first == flag) return f.second;
    return std::nullopt;
  }
};

/// The candidate the user most likely meant by `word`, if one is close enough: the only candidate
/// that `word` begins ("stat" -> "status"), else the nearest by edit_distance, at most 1 away for
/// a word of up to 4 characters and at most 2 for a longer one. Leading dashes are ignored, so
/// "-domain" and "--domian" both find "--domain". nullopt when nothing is close.
inline std::optional<std::string_view> nearest(std::string_view word,
                                               std::span<const std::string_view> candidates) {
  const auto bare = [](std::string_view s) {
    return s.substr(std::min(s.find_first_not_of('-'), s.size()));
  };
  const std::string_view w = bare(word);
  if (w.empty()) return std::nullopt;
  std::optional<std::string_view> prefix_of;
  int prefixes = 0;
  for (const std::string_view c : candidates)
    if (bare(c).starts_with(w)) {
      prefix_of = c;
      ++prefixes;
    }
  if (prefixes == 1) return prefix_of;
  const std::size_t limit = w.size() <= 4 ? 1 : 2;
  std::optional<std::string_view> best;
  std::size_t best_distance = limit + 1;
  for (const std::string_view c : candidates) {
    const std::size_t distance = edit_distance(w, bare(c));
    if (distance < best_distance) {
      best = c;
      best_distance = distance;
    }
  }
  return best;
}

/// "; did you mean 'status'?" when a candidate is close to `word`; "" otherwise.
inline std::string did_you_mean(std::string_view word,
                                std::span<const std::string_view> candidates) {
  const auto n = nearest(word, candidates);
  return n ? "; did you mean '" + std::string(*n) + "'?" : std::string();
}

/// Parses `args` (the words after the subcommand) against `specs`. "--" ends the flags; every word
/// after it is a positional. At most `max_positionals` positionals are accepted.
inline parsed_args parse_command_line(std::span<const std::string> args,
                                      std::span<const flag_spec> specs,
                                      std::size_t max_positionals) {
  parsed_args out;
  bool only_positionals = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (only_positionals || word.empty() || word[0] != '-' || word == "-") {
      if (out.positionals.size() == max_positionals)
        throw usage_error(max_positionals == 0 ? "unexpected argument '" + word + "'"
                                               : "unexpected extra argument '" + word + "'");
      out.positionals.push_back(word);
      continue;
    }
    if (word == "--") {
      only_positionals = true;
      continue;
    }
    if (word == "-h" || word == "--help") {
      out.help = true;
      continue;
    }
    const std::size_t eq = word.find('=');
    const std::string name = word.substr(0, eq);
    const flag_spec* spec = nullptr;
    for (const auto& s : specs)
      if (s.name == name) spec = &s;
    if (spec == nullptr || name.size() < 3 || name[1] != '-') {
      std::vector<std::string_view> known = {"--help"};
      for (const auto& s : specs) known.push_back(s.name);
      throw usage_error("unknown option '" + name + "'" + did_you_mean(name, known));
    }
    if (out.has(name)) throw usage_error("option " + name + " is given more than once");
    std::string value;
    if (spec->takes_value) {
      if (eq != std::string::npos) {
        value = word.substr(eq + 1);
      } else if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
        value = args[++i];
      } else {
        throw usage_error("option " + name + " needs a value");
      }
      if (value.empty()) throw usage_error("option " + name + " needs a non-empty value");
    } else if (eq != std::string::npos) {
      throw usage_error("option " + name + " takes no value");
    }
    out.flags.emplace_back(name, std::move(value));
  }
  return out;
}

/// Runs `parse(value)`; a gpushare parser's invalid_argument becomes a usage_error naming `flag`.
template <class Parse>
auto parse_value(std::string_view flag, const std::string& value, Parse parse) {
  try {
    return parse(std::string_view(value));
  } catch (const gpushare::error& e) {
    if (e.code() != errc::invalid_argument) throw;
    throw usage_error(std::string(flag) + ": " + e.what());
  }
}

/// Nanoseconds as seconds: "0.2 s", "3600 s".
inline std::string seconds_text(std::uint64_t ns) { return fixed_decimal(ns, 9) + " s"; }

/// The --interval of `status`: from 0 (one reading, no wait) to 1min.
inline constexpr duration_option status_interval{
    "interval", 0, 60'000'000'000, false, 0, {}, 1'000'000'000, "\"0.5\", \"2\", \"200ms\""};
/// The --interval of `top`: from 10ms to 1h.
inline constexpr duration_option top_interval{
    "interval", 10'000'000, 3'600'000'000'000, false,
    0,          {},         1'000'000'000,     "\"0.5\", \"2\", \"2min\""};

/// A time interval as every gpushare duration is read (parse_duration), where a number alone
/// counts seconds ("0.2", "2", "200ms", "2min"); nanoseconds in `o`'s range, else a usage_error
/// naming `flag`.
inline std::uint64_t parse_interval_ns(std::string_view flag, const std::string& s,
                                       const duration_option& o) {
  return parse_value(flag, s, [&](std::string_view v) { return parse_duration(v, o); });
}

/// A whole number from `min` to `max`.
inline std::uint64_t parse_count(std::string_view flag, std::string_view s, std::uint64_t min,
                                 std::uint64_t max) {
  const auto invalid = [&](const char* why) {
    throw usage_error(std::string(flag) + ": invalid number " + quote(s) + ": " + why +
                      "; expected a whole number");
  };
  if (s.empty()) invalid("the value is empty");
  if (s[0] == '-' || s[0] == '+') invalid("a sign is not allowed");
  if (!std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    invalid("it is not a whole number");
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || v < min || v > max)
    throw usage_error(std::string(flag) + ": " + quote(s) + " is out of range (" +
                      std::to_string(min) + " to " + std::to_string(max) + ")");
  return v;
}

/// The tables a command looks at: those of one table directory, of one domain or of every domain.
struct domain_choice {
  std::optional<std::string> name; ///< nullopt: every domain
  bool from_environment = false;   ///< `name` came from GPUSHARE_DOMAIN, not from --domain
  std::string dir;                 ///< the table directory, normalised; "" for /dev/shm

  /// The table directory as a user names it: "/dev/shm" for the default.
  std::string dir_text() const { return dir.empty() ? std::string("/dev/shm") : dir; }

  /// `domain "x"`, with ` (from GPUSHARE_DOMAIN)` when it came from there; "every domain".
  std::string text() const {
    if (!name) return "every domain";
    return "domain " + quote(*name) +
           (from_environment ? std::string(" (from GPUSHARE_DOMAIN)") : std::string());
  }
};

/// The domain a command is limited to, as a session picks its own: --domain D, else the
/// GPUSHARE_DOMAIN variable (checked as a session checks it), else every domain. --all-domains
/// looks at every domain whatever GPUSHARE_DOMAIN says. A bad value is a usage_error.
/// The table directory a command looks in, as a session picks its own: --dir DIR, else the
/// GPUSHARE_DIR variable, else /dev/shm (""). A malformed path is a usage_error.
inline std::string dir_option(const parsed_args& a, const env_lookup& env = process_environment) {
  const auto d = a.value("--dir");
  const auto from_env = d ? std::nullopt : env("GPUSHARE_DIR");
  if (!d && !from_env) return {};
  try {
    return normalize_table_dir(d ? *d : *from_env);
  } catch (const gpushare::error& e) {
    throw usage_error(std::string(d ? "--dir: " : "GPUSHARE_DIR: ") + e.what());
  }
}

inline domain_choice domain_option(const parsed_args& a,
                                   const env_lookup& env = process_environment) {
  const auto d = a.value("--domain");
  if (d && a.has("--all-domains")) throw usage_error("give --domain or --all-domains, not both");
  domain_choice c;
  c.dir = dir_option(a, env);
  if (d) {
    parse_value("--domain", *d, [](std::string_view s) {
      validate_domain(s);
      return 0;
    });
    c.name = d;
    return c;
  }
  if (a.has("--all-domains")) return c;
  const auto from_env = env("GPUSHARE_DOMAIN");
  if (!from_env) return c;
  try {
    c.name = domain_from_environment(env);
  } catch (const gpushare::error& e) {
    if (e.code() != errc::invalid_environment) throw;
    throw usage_error(std::string(e.what()) + " (or override it with --domain D or --all-domains)");
  }
  c.from_environment = true;
  return c;
}

} // namespace gpushare::cli
