// SPDX-License-Identifier: Apache-2.0
#include "config.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <type_traits>
#include <variant>

namespace cudasim {
namespace {

bool parse_count(const char* text, std::uint64_t max, std::uint64_t& out) {
  if (!text || !*text) return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || text[0] == '-' || v > max) return false;
  out = v;
  return true;
}

/// Records the first bad variable of `c`.
void bad_value(config& c, const char* var, const std::string& value, const std::string& expected) {
  if (c.error.empty())
    c.error = std::string(var) + "=\"" + value + "\" is not valid: expected " + expected +
              " (see docs/cudasim.md)";
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  const auto e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

/// One "pattern=duration" entry; spaces around either part do not count.
bool parse_kernel_rule(const std::string& entry, kernel_rule& out) {
  const auto eq = entry.rfind('=');
  if (eq == std::string::npos) return false;
  out.pattern = trim(entry.substr(0, eq));
  return !out.pattern.empty() && parse_kernel_duration(trim(entry.substr(eq + 1)), out.ns);
}

/// How an entry is written, for the messages.
constexpr const char* kernel_duration_form =
    "each duration with its unit (ns, us, ms or s; at most 60s)";

/// CUDASIM_KERNELS (entries separated by commas), then CUDASIM_KERNELS_FILE (one a line).
void load_kernel_rules(config& c) {
  if (const char* s = std::getenv("CUDASIM_KERNELS")) {
    const std::string text(s);
    for (std::size_t start = 0; start <= text.size();) {
      const std::size_t comma = std::min(text.find(',', start), text.size());
      const std::string entry = text.substr(start, comma - start);
      kernel_rule rule;
      if (!parse_kernel_rule(entry, rule))
        return bad_value(c, "CUDASIM_KERNELS", s,
                         std::string("pattern=duration entries separated by commas, ") +
                             kernel_duration_form + ", as in myKernel=250us,other*=1ms; " +
                             (trim(entry).empty() ? std::string("an entry is empty")
                                                  : "the entry \"" + entry + "\" is not one"));
      c.kernels.push_back(rule);
      start = comma + 1;
    }
  }
  if (const char* path = std::getenv("CUDASIM_KERNELS_FILE")) {
    std::ifstream in(path);
    if (!in)
      return bad_value(c, "CUDASIM_KERNELS_FILE", path,
                       std::string("a readable file (") + std::strerror(errno) + ")");
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      const std::string entry = trim(line.substr(0, line.find('#')));
      kernel_rule rule;
      if (entry.empty()) continue;
      if (!parse_kernel_rule(entry, rule))
        return bad_value(c, "CUDASIM_KERNELS_FILE", path,
                         std::string("lines pattern=duration, ") + kernel_duration_form +
                             ", as in myKernel=250us, and '#' comments; line " +
                             std::to_string(number) + ": \"" + trim(line) + "\" is not one");
      c.kernels.push_back(rule);
    }
  }
}

/// One CUDASIM_* variable with a single value: how it is read, what it accepts, where it goes.
struct variable {
  const char* name;
  enum kind_t {
    count,       ///< a whole number from `min` to `max`, stored times `scale`
    one_of,      ///< a whole number that is `min` or `max`
    size,        ///< a size (parse_size) of at least `min`
    text,        ///< non-empty, shorter than 200 characters
    object_name, ///< text without '/' or spaces: a shared-memory object's name
  } kind;
  std::uint64_t min, max, scale;
  const char* expected; ///< for the message when the value is not accepted
  std::variant<int config::*, unsigned config::*, std::uint64_t config::*, std::string config::*>
      field;
};

constexpr std::uint64_t most = UINT64_MAX - 1;
constexpr std::uint64_t ms = 1'000'000, us = 1'000;

/// The devices, the time slice and the kernels' default duration.
const variable devices[] = {
    {"CUDASIM_DEVICES", variable::count, 0, 8, 1, "a device count from 0 to 8", &config::gpus},
    {"CUDASIM_MEMORY", variable::size, 64ull << 20, 0, 1, "a size of at least 64MiB, such as 16GiB",
     &config::memory},
    {"CUDASIM_NAME", variable::text, 0, 0, 1, "a non-empty name shorter than 200 characters",
     &config::name},
    {"CUDASIM_MIG", variable::count, 0, 7, 1, "a number of MIG instances per GPU from 0 (off) to 7",
     &config::mig},
    {"CUDASIM_CONTEXT_BYTES", variable::size, 0, 0, 1, "a size such as 500MiB",
     &config::context_bytes},
    {"CUDASIM_SLICE_US", variable::count, 50, 10'000'000, us,
     "a time slice in microseconds from 50 to 10000000", &config::slice_ns},
    {"CUDASIM_TEARDOWN_MS", variable::count, 0, 600'000, ms, "milliseconds from 0 to 600000",
     &config::teardown_ns},
    {"CUDASIM_KERNEL_US", variable::count, 0, 60'000'000, us, "microseconds from 0 to 60000000",
     &config::kernel_ns},
};

/// Fault injection, the layout of NVML's process records, the state's name.
const variable injections[] = {
    {"CUDASIM_CONTEXT_DELAY_MS", variable::count, 0, 600'000, ms, "milliseconds from 0 to 600000",
     &config::context_delay_ns},
    {"CUDASIM_OPEN_DELAY_MS", variable::count, 0, 600'000, ms, "milliseconds from 0 to 600000",
     &config::open_delay_ns},
    {"CUDASIM_FAIL_ALLOC_AFTER_BYTES", variable::size, 0, 0, 1, "a size such as 1GiB",
     &config::fail_alloc_after_bytes},
    {"CUDASIM_FAIL_ALLOC_AFTER_CALLS", variable::count, 0, most, 1, "a number of allocation calls",
     &config::fail_alloc_after_calls},
    {"CUDASIM_STICKY_AT_LAUNCH", variable::count, 1, most, 1,
     "the 1-based number of the launch that faults", &config::sticky_at_launch},
    {"CUDASIM_NVML_PROCESS_RECORD", variable::one_of, 24, 32, 1,
     "24 (nvmlProcessInfo_t) or 32 (R535-era drivers)", &config::nvml_process_record},
    {"CUDASIM_STATE", variable::object_name, 0, 0, 1,
     "a shared-memory object name without '/' or spaces", &config::state},
};

/// Whether `s` is a value `var` accepts; `v` is then the number to store (numbers only).
bool accepts(const variable& var, const char* s, std::uint64_t& v) {
  const std::string value(s);
  bool ok = !value.empty() && value.size() < 200;
  switch (var.kind) {
  case variable::count: return parse_count(s, var.max, v) && v >= var.min;
  case variable::one_of: return parse_count(s, var.max, v) && (v == var.min || v == var.max);
  case variable::size: return parse_size(s, v) && v >= var.min;
  case variable::text: return ok;
  case variable::object_name:
    for (char ch : value) ok = ok && ch != '/' && ch > ' ';
    return ok;
  }
  return false;
}

/// Reads the variables of `table` that are set into `c`, in order; a value it does not accept is
/// recorded (bad_value) and leaves the field as it was.
template <std::size_t n> void read_variables(config& c, const variable (&table)[n]) {
  for (const variable& var : table) {
    const char* s = std::getenv(var.name);
    std::uint64_t v = 0;
    if (!s) continue;
    if (!accepts(var, s, v)) {
      bad_value(c, var.name, s, var.expected);
      continue;
    }
    std::visit(
        [&](auto member) {
          using type = std::remove_reference_t<decltype(c.*member)>;
          if constexpr (std::is_same_v<type, std::string>)
            c.*member = s;
          else
            c.*member = static_cast<type>(v * var.scale);
        },
        var.field);
  }
}

config load() {
  config c;
  c.state = "cudasim-" + std::to_string(::getuid());
  read_variables(c, devices);
  load_kernel_rules(c);
  read_variables(c, injections);
  if (!c.error.empty()) std::fprintf(stderr, "cudasim: %s\n", c.error.c_str());
  return c;
}

} // namespace

bool parse_size(const std::string& text, std::uint64_t& out) {
  if (text.empty() || text[0] == '-' || text[0] == '+') return false;
  errno = 0;
  char* end = nullptr;
  const double number = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || !std::isfinite(number) || number < 0) return false;
  const std::string unit(end);
  double scale = 1;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "K" || unit == "KB" || unit == "KiB")
    scale = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MiB")
    scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GiB")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TiB")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else
    return false;
  const double bytes = number * scale;
  if (bytes >= 18e18) return false;
  out = static_cast<std::uint64_t>(std::llround(bytes));
  return true;
}

bool parse_kernel_duration(const std::string& text, std::uint64_t& ns) {
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.'))
    return false;
  errno = 0;
  char* end = nullptr;
  const double number = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || !std::isfinite(number)) return false;
  const std::string unit(end);
  double scale = 0;
  if (unit == "ns")
    scale = 1;
  else if (unit == "us" || unit == "\u00b5s" || unit == "\u03bcs") // micro sign, Greek mu
    scale = 1e3;
  else if (unit == "ms")
    scale = 1e6;
  else if (unit == "s")
    scale = 1e9;
  else
    return false;
  const double value = number * scale;
  if (value > 60e9) return false;
  ns = static_cast<std::uint64_t>(std::llround(value));
  return true;
}

const config& cfg() {
  static const config c = load();
  return c;
}

} // namespace cudasim
