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

/// The devices, the time slice and the kernels' default duration.
void load_devices(config& c) {
  auto bad = [&c](const char* var, const char* value, const char* expected) {
    bad_value(c, var, value, expected);
  };
  std::uint64_t v = 0;
  if (const char* s = std::getenv("CUDASIM_DEVICES")) {
    if (parse_count(s, 8, v))
      c.gpus = static_cast<int>(v);
    else
      bad("CUDASIM_DEVICES", s, "a device count from 0 to 8");
  }
  if (const char* s = std::getenv("CUDASIM_MEMORY")) {
    if (parse_size(s, v) && v >= (64ull << 20))
      c.memory = v;
    else
      bad("CUDASIM_MEMORY", s, "a size of at least 64MiB, such as 16GiB");
  }
  if (const char* s = std::getenv("CUDASIM_NAME")) {
    if (*s && std::string(s).size() < 200)
      c.name = s;
    else
      bad("CUDASIM_NAME", s, "a non-empty name shorter than 200 characters");
  }
  if (const char* s = std::getenv("CUDASIM_MIG")) {
    if (parse_count(s, 7, v))
      c.mig = static_cast<int>(v);
    else
      bad("CUDASIM_MIG", s, "a number of MIG instances per GPU from 0 (off) to 7");
  }
  if (const char* s = std::getenv("CUDASIM_CONTEXT_BYTES")) {
    if (parse_size(s, v))
      c.context_bytes = v;
    else
      bad("CUDASIM_CONTEXT_BYTES", s, "a size such as 500MiB");
  }
  if (const char* s = std::getenv("CUDASIM_SLICE_US")) {
    if (parse_count(s, 10'000'000, v) && v >= 50)
      c.slice_ns = v * 1000;
    else
      bad("CUDASIM_SLICE_US", s, "a time slice in microseconds from 50 to 10000000");
  }
  if (const char* s = std::getenv("CUDASIM_TEARDOWN_MS")) {
    if (parse_count(s, 600'000, v))
      c.teardown_ns = v * 1'000'000;
    else
      bad("CUDASIM_TEARDOWN_MS", s, "milliseconds from 0 to 600000");
  }
  if (const char* s = std::getenv("CUDASIM_KERNEL_US")) {
    if (parse_count(s, 60'000'000, v))
      c.kernel_ns = v * 1000;
    else
      bad("CUDASIM_KERNEL_US", s, "microseconds from 0 to 60000000");
  }
}

/// Fault injection, and the layout of NVML's process records.
void load_injections(config& c) {
  auto bad = [&c](const char* var, const char* value, const char* expected) {
    bad_value(c, var, value, expected);
  };
  std::uint64_t v = 0;
  if (const char* s = std::getenv("CUDASIM_CONTEXT_DELAY_MS")) {
    if (parse_count(s, 600'000, v))
      c.context_delay_ns = v * 1'000'000;
    else
      bad("CUDASIM_CONTEXT_DELAY_MS", s, "milliseconds from 0 to 600000");
  }
  if (const char* s = std::getenv("CUDASIM_OPEN_DELAY_MS")) {
    if (parse_count(s, 600'000, v))
      c.open_delay_ns = v * 1'000'000;
    else
      bad("CUDASIM_OPEN_DELAY_MS", s, "milliseconds from 0 to 600000");
  }
  if (const char* s = std::getenv("CUDASIM_FAIL_ALLOC_AFTER_BYTES")) {
    if (parse_size(s, v))
      c.fail_alloc_after_bytes = v;
    else
      bad("CUDASIM_FAIL_ALLOC_AFTER_BYTES", s, "a size such as 1GiB");
  }
  if (const char* s = std::getenv("CUDASIM_FAIL_ALLOC_AFTER_CALLS")) {
    if (!parse_count(s, UINT64_MAX - 1, c.fail_alloc_after_calls))
      bad("CUDASIM_FAIL_ALLOC_AFTER_CALLS", s, "a number of allocation calls");
  }
  if (const char* s = std::getenv("CUDASIM_STICKY_AT_LAUNCH")) {
    if (!parse_count(s, UINT64_MAX - 1, c.sticky_at_launch) || c.sticky_at_launch == 0)
      bad("CUDASIM_STICKY_AT_LAUNCH", s, "the 1-based number of the launch that faults");
  }
  if (const char* s = std::getenv("CUDASIM_NVML_PROCESS_RECORD")) {
    if (parse_count(s, 32, v) && (v == 24 || v == 32))
      c.nvml_process_record = static_cast<unsigned>(v);
    else
      bad("CUDASIM_NVML_PROCESS_RECORD", s, "24 (nvmlProcessInfo_t) or 32 (R535-era drivers)");
  }
}

config load() {
  config c;
  c.state = "cudasim-" + std::to_string(::getuid());
  load_devices(c);
  load_kernel_rules(c);
  load_injections(c);
  if (const char* s = std::getenv("CUDASIM_STATE")) {
    std::string name(s);
    bool ok = !name.empty() && name.size() < 200;
    for (char ch : name) ok = ok && ch != '/' && ch > ' ';
    if (ok)
      c.state = name;
    else
      bad_value(c, "CUDASIM_STATE", s, "a shared-memory object name without '/' or spaces");
  }
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
