// SPDX-License-Identifier: Apache-2.0
#include "kernel_names.hpp"

#include <cxxabi.h>

#include <cstdlib>

namespace cudasim {

namespace {

/// "void ns::reduce<4>(float*)" -> "ns::reduce<4>": drops the parameter list (the last
/// top-level parentheses) and a return type (up to the last space outside <> and ()).
std::string short_name(const std::string& full) {
  if (full.empty() || full.back() != ')') return full;
  std::size_t open = std::string::npos;
  int depth = 0;
  for (std::size_t i = full.size(); i-- > 0;) {
    if (full[i] == ')') ++depth;
    if (full[i] == '(' && --depth == 0) {
      open = i;
      break;
    }
  }
  if (open == std::string::npos || open == 0) return full;
  const std::string head = full.substr(0, open);
  std::size_t cut = std::string::npos;
  int nested = 0;
  for (std::size_t i = 0; i < head.size(); ++i) {
    const char c = head[i];
    if (c == '<' || c == '(') ++nested;
    if (c == '>' || c == ')') --nested;
    if (c == ' ' && nested == 0) cut = i;
  }
  return cut == std::string::npos ? head : head.substr(cut + 1);
}

} // namespace

std::vector<std::string> kernel_names(const std::string& device_name) {
  std::vector<std::string> names;
  if (device_name.empty()) return names;
  names.push_back(device_name);
  // Only "_Z..." is a mangled function name (the demangler also reads types: "i" is "int").
  if (device_name.rfind("_Z", 0) != 0) return names;
  int status = 0;
  char* text = abi::__cxa_demangle(device_name.c_str(), nullptr, nullptr, &status);
  if (status != 0 || !text) return names;
  const std::string full(text);
  std::free(text);
  names.push_back(full);
  const std::string brief = short_name(full);
  if (brief != full) names.push_back(brief);
  return names;
}

bool glob_match(std::string_view pattern, std::string_view text) {
  std::size_t p = 0, t = 0;
  std::size_t star = std::string_view::npos, resume = 0; // the last `*` and where it matched to
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (star != std::string_view::npos) {
      p = star + 1; // let the last `*` take one more character
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool matches_name(const std::string& pattern, const std::vector<std::string>& names) {
  for (const auto& n : names)
    if (glob_match(pattern, n)) return true;
  return false;
}

} // namespace cudasim
