// SPDX-License-Identifier: Apache-2.0
// The command line of the demos and the GPU benchmark: each option is declared once, in a table
// of option<C> (flag, value, help, range, default by mode, JSON key), and that table drives the
// parser, the usage text, the settings line a run prints and the JSON it writes. --help prints
// the usage and exits 0; a bad flag or value prints what was wrong (and the usage, or a hint to
// run --help) to stderr and exits 2.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <json_writer.hpp>

namespace demo {

/// Where an option's value goes in the settings struct C, and so what kind of value it takes.
template <class C>
using option_field = std::variant<bool C::*, int C::*, double C::*, std::string C::*,
                                  std::vector<int> C::*, std::vector<std::string> C::*>;

/// A default that depends on how the program runs: on a GPU, simulated, or with --quick. The
/// field holds 0 until resolve_defaults() fills it in (a value given on the command line stays).
struct mode_default {
  double gpu = 0;
  double simulated = 0;
  std::optional<double> quick; ///< with --quick, on either (none: --quick changes nothing)
};

/// One option, declared once: option(flag, value name, field, help), then what applies of
/// .json(key), .range(lo, hi), .noun(what), .words(noun, choices), .by_mode(gpu, simulated[,
/// quick]). option::setting(field) declares a setting that is not on the command line (JSON only).
template <class C> struct option {
  std::string_view flag;       ///< "--phase-seconds"; "" for a setting not on the command line
  std::string_view value_name; ///< "S", "N", "LIST", "PATH"; "" for a switch
  option_field<C> field;       ///< what it sets
  std::string_view help;       ///< the usage text; numbers get their default appended
  std::string_view json_key;   ///< its key in the JSON's settings; "" for none
  double lo = 0, hi = 0;       ///< the accepted range of a number, or of each number of a list
  std::string_view what;       ///< what a value is, for messages ("number of seconds", "scenario")
  std::span<const std::string_view> choices; ///< a word list's accepted words (empty: any)
  std::optional<mode_default> mode;          ///< a default that depends on the mode

  constexpr option(std::string_view f, std::string_view v, option_field<C> target,
                   std::string_view text)
      : flag(f), value_name(v), field(target), help(text) {}
  static constexpr option setting(option_field<C> target) { return option("", "", target, ""); }

  constexpr option json(std::string_view key) const {
    return with([&](option& o) { o.json_key = key; });
  }
  constexpr option range(double from, double to) const {
    return with([&](option& o) { o.lo = from, o.hi = to; });
  }
  constexpr option noun(std::string_view n) const {
    return with([&](option& o) { o.what = n; });
  }
  constexpr option words(std::string_view n, std::span<const std::string_view> allowed) const {
    return with([&](option& o) { o.what = n, o.choices = allowed; });
  }
  constexpr option by_mode(double gpu, double simulated, std::optional<double> quick = {}) const {
    return with([&](option& o) { o.mode = mode_default{gpu, simulated, quick}; });
  }

private:
  template <class F> constexpr option with(F change) const {
    option o = *this;
    change(o);
    return o;
  }
};

/// A program's command line: its options, and how it answers a bad one.
template <class C> struct command_line {
  std::string_view summary; ///< under the usage line of --help
  std::span<const option<C>> options;
  bool list_options_in_usage =
      true;                         ///< "usage: p [--duration SECONDS] ..." or "usage: p [options]"
  bool full_usage_on_error = false; ///< the whole usage after an error, or a hint to run --help
};

namespace options_detail {

inline std::string number_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');) parts.push_back(part);
  if (!s.empty() && s.back() == ',') parts.emplace_back();
  return parts;
}

inline std::optional<double> to_number(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end == nullptr || *end != '\0' || !std::isfinite(v)) return std::nullopt;
  return v;
}

inline std::optional<int> to_integer(const std::string& s) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || end == nullptr || *end != '\0' || v < -1'000'000'000 || v > 1'000'000'000)
    return std::nullopt;
  return static_cast<int>(v);
}

template <class C> std::string flag_and_value(const option<C>& o) {
  std::string s(o.flag);
  if (!o.value_name.empty()) s += " " + std::string(o.value_name);
  return s;
}

/// The default a number option shows in the usage: by mode, or the field's initial value.
template <class C> std::string shown_default(const option<C>& o, const C& initial) {
  if (o.mode) {
    std::string s =
        "GPU " + number_text(o.mode->gpu) + ", simulated " + number_text(o.mode->simulated);
    if (o.mode->quick) s += ", --quick " + number_text(*o.mode->quick);
    return " (" + s + ")";
  }
  if (const auto d = std::get_if<double C::*>(&o.field))
    return " (default " + number_text(initial.*(*d)) + ")";
  if (const auto i = std::get_if<int C::*>(&o.field))
    return " (default " + std::to_string(initial.*(*i)) + ")";
  return "";
}

template <class C> std::string usage_line(const command_line<C>& cl, const char* program) {
  std::string s = std::string("usage: ") + program;
  if (!cl.list_options_in_usage) return s + " [options]";
  for (const option<C>& o : cl.options)
    if (!o.flag.empty()) s += " [" + flag_and_value(o) + "]";
  return s + " [--help]";
}

} // namespace options_detail

/// The --help text: the usage line, the summary, one line per option with its default.
template <class C>
void print_usage(std::FILE* to, const command_line<C>& cl, const char* program, const C& initial) {
  namespace d = options_detail;
  std::size_t width = std::string_view("--help").size();
  for (const option<C>& o : cl.options) width = std::max(width, d::flag_and_value(o).size());
  std::fprintf(to, "%s\n%.*s\n", d::usage_line(cl, program).c_str(),
               static_cast<int>(cl.summary.size()), cl.summary.data());
  for (const option<C>& o : cl.options) {
    if (o.flag.empty()) continue;
    const std::string text = std::string(o.help) + d::shown_default(o, initial);
    std::fprintf(to, "  %-*s  %s\n", static_cast<int>(width), d::flag_and_value(o).c_str(),
                 text.c_str());
  }
  std::fprintf(to, "  %-*s  %s\n", static_cast<int>(width), "--help", "show this text");
}

/// Refuses the command line: "<program>: <why>", then the usage or a hint; exits 2.
template <class C>
[[noreturn]] void refuse(const command_line<C>& cl, const char* program, const std::string& why) {
  std::fprintf(stderr, "%s: %s\n", program, why.c_str());
  if (cl.full_usage_on_error)
    print_usage(stderr, cl, program, C{});
  else
    std::fprintf(stderr, "%s\nrun '%s --help' for the options\n",
                 options_detail::usage_line(cl, program).c_str(), program);
  std::exit(2);
}

namespace options_detail {

/// Sets the field of `o` in `c` from `v` (a switch: v is nullopt), or says why not.
template <class C>
std::optional<std::string> assign(const option<C>& o, C& c, const std::optional<std::string>& v) {
  const std::string flag(o.flag), noun = o.what.empty() ? "" : std::string(o.what);
  if (const auto b = std::get_if<bool C::*>(&o.field)) {
    if (v) return flag + " takes no value";
    c.*(*b) = true;
  } else if (const auto d = std::get_if<double C::*>(&o.field)) {
    const auto n = to_number(*v);
    if (!n || *n < o.lo || *n > o.hi)
      return flag + " must be a " + (noun.empty() ? "number" : noun) + " from " +
             number_text(o.lo) + " to " + number_text(o.hi) + ", not '" + *v + "'";
    c.*(*d) = *n;
  } else if (const auto i = std::get_if<int C::*>(&o.field)) {
    const auto n = to_integer(*v);
    if (!n || *n < o.lo || *n > o.hi)
      return flag + " must be an integer from " + number_text(o.lo) + " to " + number_text(o.hi) +
             ", not '" + *v + "'";
    c.*(*i) = *n;
  } else if (const auto s = std::get_if<std::string C::*>(&o.field)) {
    if (v->empty()) return flag + " needs a " + noun;
    c.*(*s) = *v;
  } else if (const auto ns = std::get_if<std::vector<int> C::*>(&o.field)) {
    (c.*(*ns)).clear();
    for (const std::string& e : split(*v)) {
      const auto n = to_integer(e);
      if (!n || *n < o.lo || *n > o.hi)
        return flag + ": each entry must be an integer from " + number_text(o.lo) + " to " +
               number_text(o.hi) + ", not '" + e + "'";
      (c.*(*ns)).push_back(*n);
    }
    if ((c.*(*ns)).empty()) return flag + " needs at least one " + noun;
  } else if (const auto ws = std::get_if<std::vector<std::string> C::*>(&o.field)) {
    auto& words = c.*(*ws);
    words.clear();
    for (const std::string& e : split(*v)) {
      if (!o.choices.empty() &&
          std::find(o.choices.begin(), o.choices.end(), e) == o.choices.end()) {
        std::string all;
        for (const std::string_view w : o.choices) all += (all.empty() ? "" : ",") + std::string(w);
        return flag + ": unknown " + noun + " '" + e + "' (choose from " + all + ")";
      }
      if (std::find(words.begin(), words.end(), e) == words.end()) words.push_back(e);
    }
    if (words.empty()) return flag + " needs at least one " + noun;
  }
  return std::nullopt;
}

} // namespace options_detail

/// Parses argv into `c` (which holds the defaults). Accepts "--flag value" and "--flag=value".
template <class C> void parse(const command_line<C>& cl, int argc, char** argv, C& c) {
  const char* program = argc > 0 ? argv[0] : "program";
  const C initial = c;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::optional<std::string> value;
    if (const auto eq = flag.find('='); flag.starts_with("--") && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
    }
    if (flag == "--help" || flag == "-h") {
      print_usage(stdout, cl, program, initial);
      std::exit(0);
    }
    const auto o = std::find_if(cl.options.begin(), cl.options.end(), [&](const option<C>& x) {
      return !x.flag.empty() && x.flag == flag;
    });
    if (o == cl.options.end()) refuse(cl, program, "unknown option '" + flag + "'");
    if (!value && !o->value_name.empty()) {
      if (i + 1 >= argc)
        refuse(cl, program, flag + " needs a " + std::string(o->what.empty() ? "value" : o->what));
      value = argv[++i];
    }
    if (const auto why = options_detail::assign(*o, c, value)) refuse(cl, program, *why);
  }
}

/// Fills in every option with a default by mode that is still 0.
template <class C>
void resolve_defaults(std::span<const option<C>> options, C& c, bool gpu, bool quick) {
  for (const option<C>& o : options) {
    if (!o.mode) continue;
    const double v = quick && o.mode->quick ? *o.mode->quick
                     : gpu                  ? o.mode->gpu
                                            : o.mode->simulated;
    if (const auto d = std::get_if<double C::*>(&o.field); d && c.*(*d) == 0) c.*(*d) = v;
    if (const auto i = std::get_if<int C::*>(&o.field); i && c.*(*i) == 0)
      c.*(*i) = static_cast<int>(v);
  }
}

/// The settings as a command line ("--repeats 1 --load 0.5 ..."): every option with a flag and a
/// value, so that a run's output says exactly what it ran with.
template <class C> std::string settings_line(std::span<const option<C>> options, const C& c) {
  namespace d = options_detail;
  std::string s;
  const auto add = [&s](std::string_view flag, const std::string& v) {
    s += (s.empty() ? "" : " ") + std::string(flag) + (v.empty() ? "" : " " + v);
  };
  for (const option<C>& o : options) {
    if (o.flag.empty()) continue;
    if (const auto b = std::get_if<bool C::*>(&o.field)) {
      if (c.*(*b)) add(o.flag, "");
    } else if (const auto x = std::get_if<double C::*>(&o.field)) {
      add(o.flag, d::number_text(c.*(*x)));
    } else if (const auto i = std::get_if<int C::*>(&o.field)) {
      add(o.flag, std::to_string(c.*(*i)));
    } else if (const auto t = std::get_if<std::string C::*>(&o.field)) {
      if (!(c.*(*t)).empty()) add(o.flag, c.*(*t));
    } else if (const auto ns = std::get_if<std::vector<int> C::*>(&o.field)) {
      std::string v;
      for (const int n : c.*(*ns)) v += (v.empty() ? "" : ",") + std::to_string(n);
      add(o.flag, v);
    } else if (const auto ws = std::get_if<std::vector<std::string> C::*>(&o.field)) {
      std::string v;
      for (const std::string& w : c.*(*ws)) v += (v.empty() ? "" : ",") + w;
      add(o.flag, v);
    }
  }
  return s;
}

/// Writes every option with a JSON key as a field of the current JSON object.
template <class C>
void write_json(gpushare::json::json_writer& j, std::span<const option<C>> options, const C& c) {
  for (const option<C>& o : options) {
    if (o.json_key.empty()) continue;
    if (const auto b = std::get_if<bool C::*>(&o.field)) j.field(o.json_key, c.*(*b));
    if (const auto d = std::get_if<double C::*>(&o.field)) j.real_field(o.json_key, c.*(*d));
    if (const auto i = std::get_if<int C::*>(&o.field))
      j.field(o.json_key, static_cast<std::int32_t>(c.*(*i)));
    if (const auto t = std::get_if<std::string C::*>(&o.field)) j.field(o.json_key, c.*(*t));
    if (const auto ns = std::get_if<std::vector<int> C::*>(&o.field))
      j.real_array(o.json_key, std::vector<double>((c.*(*ns)).begin(), (c.*(*ns)).end()));
    if (const auto ws = std::get_if<std::vector<std::string> C::*>(&o.field)) {
      j.key(o.json_key);
      j.begin_array();
      for (const std::string& w : c.*(*ws)) j.string(w);
      j.end_array();
    }
  }
}

} // namespace demo
