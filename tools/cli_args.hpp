// SPDX-License-Identifier: Apache-2.0
// Command-line parsing for the gpushare tool: flags of one subcommand, and the values they take.
// Every mistake becomes a usage_error, which main() reports with the usage and exit code 2.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gpushare/detail/join_notices.hpp>
#include <gpushare/error.hpp>
#include <gpushare/options.hpp>

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

/// Edit distance between `a` and `b` (insertions, deletions, substitutions and swaps of two
/// neighbouring characters count 1 each: "stauts" is 1 from "status"): the library's, which also
/// names the nearest GPUSHARE_* variable to a misspelt one.
using detail::edit_distance;

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

/// A time interval: plain seconds ("0.2", "2") or a number with a unit ns, us, ms or s ("200ms").
/// Returns nanoseconds; `min_ns` .. `max_ns` inclusive.
inline std::uint64_t parse_interval_ns(std::string_view flag, std::string_view s,
                                       std::uint64_t min_ns, std::uint64_t max_ns) {
  static constexpr detail::value_kind kind{
      "interval", "seconds (\"0.5\", \"2\") or a number with a unit ns, us, ms or s (\"200ms\")"};
  const auto fail = [&](const std::string& why) -> std::uint64_t {
    throw usage_error(std::string(flag) + ": invalid interval " + detail::quote(s) + ": " + why);
  };
  detail::decimal d;
  try {
    d = detail::parse_decimal(kind, s, s);
  } catch (const gpushare::error& e) {
    throw usage_error(std::string(flag) + ": " + e.what());
  }
  const std::string_view unit = s.substr(d.length);
  std::uint64_t per = 0;
  if (unit.empty() || detail::iequals(unit, "s"))
    per = 1'000'000'000;
  else if (detail::iequals(unit, "ms"))
    per = 1'000'000;
  else if (detail::iequals(unit, "us"))
    per = 1'000;
  else if (detail::iequals(unit, "ns"))
    per = 1;
  else
    return fail("unknown unit " + detail::quote(unit) + " (use s, ms, us or ns)");
  const auto out_of_range = [&] {
    return fail("it must be from " + seconds_text(min_ns) + " to " + seconds_text(max_ns));
  };
  if (d.whole > max_ns / per) return out_of_range();
  const std::uint64_t ns = d.whole * per + static_cast<std::uint64_t>(d.micros) * per / 1'000'000;
  if (ns < min_ns || ns > max_ns) return out_of_range();
  return ns;
}

/// A whole number from `min` to `max`.
inline std::uint64_t parse_count(std::string_view flag, std::string_view s, std::uint64_t min,
                                 std::uint64_t max) {
  static constexpr detail::value_kind kind{"number", "a whole number"};
  std::optional<std::uint64_t> v;
  try {
    v = detail::parse_digits(kind, s);
  } catch (const gpushare::error& e) {
    throw usage_error(std::string(flag) + ": " + e.what());
  }
  if (!v || *v < min || *v > max)
    throw usage_error(std::string(flag) + ": " + detail::quote(s) + " is out of range (" +
                      std::to_string(min) + " to " + std::to_string(max) + ")");
  return *v;
}

/// The domains a command looks at: one domain, or every domain.
struct domain_choice {
  std::optional<std::string> name; ///< nullopt: every domain
  bool from_environment = false;   ///< `name` came from GPUSHARE_DOMAIN, not from --domain

  /// `domain "x"`, with ` (from GPUSHARE_DOMAIN)` when it came from there; "every domain".
  std::string text() const {
    if (!name) return "every domain";
    return "domain " + detail::quote(*name) +
           (from_environment ? std::string(" (from GPUSHARE_DOMAIN)") : std::string());
  }
};

/// The domain a command is limited to, as a session picks its own: --domain D, else the
/// GPUSHARE_DOMAIN variable (checked as a session checks it), else every domain. --all-domains
/// looks at every domain whatever GPUSHARE_DOMAIN says. A bad value is a usage_error.
inline domain_choice domain_option(const parsed_args& a,
                                   const env_lookup& env = process_environment) {
  const auto d = a.value("--domain");
  if (d && a.has("--all-domains")) throw usage_error("give --domain or --all-domains, not both");
  domain_choice c;
  if (d) {
    parse_value("--domain", *d, [](std::string_view s) {
      detail::validate_domain(s);
      return 0;
    });
    c.name = d;
    return c;
  }
  if (a.has("--all-domains")) return c;
  const auto from_env = env("GPUSHARE_DOMAIN");
  if (!from_env) return c;
  try {
    c.name = detail::parse_env_value("GPUSHARE_DOMAIN", detail::domain_forms, *from_env,
                                     [](std::string_view s) {
                                       detail::validate_domain(s);
                                       return std::string(s);
                                     });
  } catch (const gpushare::error& e) {
    if (e.code() != errc::invalid_environment) throw;
    throw usage_error(std::string(e.what()) + " (or override it with --domain D or --all-domains)");
  }
  c.from_environment = true;
  return c;
}

} // namespace gpushare::cli
