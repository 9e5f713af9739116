// SPDX-License-Identifier: Apache-2.0
// The Prometheus text exposition format (version 0.0.4) for `gpushare metrics`: families of
// samples, each with its HELP and TYPE lines, label values escaped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli_format.hpp"
#include "json_writer.hpp"

namespace gpushare::cli {

/// A label value escaped for the exposition format: backslash, double quote and line feed become
/// \\, \" and \n (the format's only escapes); every other control byte (0x00-0x1f, 0x7f), every
/// byte that is not part of well-formed UTF-8, and C1 controls become the four characters \xNN
/// (written as an escaped backslash followed by xNN), so the file is always valid UTF-8 that a
/// Prometheus parser accepts, whatever bytes a table holds. Well-formed UTF-8 passes unchanged.
inline std::string escape_label_value(std::string_view v) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size();) {
    const auto c = static_cast<unsigned char>(v[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else if (const std::size_t n = c >= 0x80 ? json::utf8_sequence(v.substr(i)) : 0; n > 0) {
      out += v.substr(i, n);
      i += n;
      continue;
    } else {
      out += "\\\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
    ++i;
  }
  return out;
}

/// HELP text escaped: backslash and line feed become \\ and \n.
inline std::string escape_help(std::string_view v) {
  std::string out;
  for (const char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

using label_set = std::vector<std::pair<std::string, std::string>>;

/// Metric families in the order they were declared; each family's samples follow its HELP and
/// TYPE lines, as the format requires.
class exposition {
public:
  /// Declares a family (once per name; a second declaration is ignored).
  void declare(std::string name, std::string type, std::string help) {
    if (find(name) == nullptr)
      families_.push_back({std::move(name), std::move(type), std::move(help), {}});
  }

  /// Adds a sample to a declared family. `value` is already formatted.
  void sample(std::string_view name, const label_set& labels, std::string value) {
    family* f = find(name);
    if (f == nullptr) return;
    std::string line(name);
    if (!labels.empty()) {
      line += "{";
      for (std::size_t i = 0; i < labels.size(); ++i) {
        if (i > 0) line += ",";
        line += labels[i].first + "=\"" + escape_label_value(labels[i].second) + "\"";
      }
      line += "}";
    }
    f->samples.push_back(line + " " + value);
  }
  void sample(std::string_view name, const label_set& labels, std::uint64_t value) {
    sample(name, labels, std::to_string(value));
  }

  /// The whole exposition; families without samples are left out.
  std::string render() const {
    std::string out;
    for (const auto& f : families_) {
      if (f.samples.empty()) continue;
      out += "# HELP " + f.name + " " + escape_help(f.help) + "\n";
      out += "# TYPE " + f.name + " " + f.type + "\n";
      for (const auto& s : f.samples) out += s + "\n";
    }
    return out;
  }

private:
  struct family {
    std::string name, type, help;
    std::vector<std::string> samples;
  };
  family* find(std::string_view name) {
    for (auto& f : families_)
      if (f.name == name) return &f;
    return nullptr;
  }
  std::vector<family> families_;
};

} // namespace gpushare::cli
