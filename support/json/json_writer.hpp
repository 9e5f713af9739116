// SPDX-License-Identifier: Apache-2.0
// A small JSON writer (target gpushare_json) for `gpushare status --json` and the GPU benchmark's
// --json: indented output, exact 64-bit integers, and strings escaped so the output is valid JSON
// whatever bytes a name holds.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpushare::json {

/// The length of the well-formed UTF-8 sequence at the start of `v` (2..4 bytes, no overlong
/// form, no surrogate, at most U+10FFFF, and not a C1 control U+0080..U+009F), or 0.
inline std::size_t utf8_sequence(std::string_view v) {
  auto b = [&](std::size_t i) { return static_cast<unsigned char>(v[i]); };
  auto cont = [&](std::size_t i) { return i < v.size() && (b(i) & 0xC0) == 0x80; };
  const unsigned char c = b(0);
  if (c >= 0xC2 && c <= 0xDF && cont(1)) return c == 0xC2 && b(1) < 0xA0 ? 0 : 2; // C1: 0
  if (c >= 0xE0 && c <= 0xEF && cont(1) && cont(2)) {
    if (c == 0xE0 && b(1) < 0xA0) return 0;  // overlong
    if (c == 0xED && b(1) >= 0xA0) return 0; // surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4 && cont(1) && cont(2) && cont(3)) {
    if (c == 0xF0 && b(1) < 0x90) return 0;  // overlong
    if (c == 0xF4 && b(1) >= 0x90) return 0; // above U+10FFFF
    return 4;
  }
  return 0;
}

/// `s` as a JSON string literal, quotes included, always valid JSON that reads back as the same
/// text: well-formed UTF-8 passes unchanged ("é" stays "é"); control characters, DEL and the
/// C1 controls (U+0080..U+009F) are written as \uXXXX; a byte that is not part of well-formed
/// UTF-8 becomes the four characters \xNN (an escaped backslash, then xNN), as the CLI's text
/// and the metrics show it, since JSON has no way to carry a raw byte.
inline std::string json_quote(std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  const auto u00 = [&](std::string& out, unsigned c) {
    out += "\\u00";
    out += hex[c >> 4];
    out += hex[c & 15];
  };
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\r': out += "\\r"; break;
    case '\t': out += "\\t"; break;
    case '\b': out += "\\b"; break;
    case '\f': out += "\\f"; break;
    default:
      if (c < 0x20 || c == 0x7f) {
        u00(out, c);
      } else if (c < 0x80) {
        out += static_cast<char>(c);
      } else if (const std::size_t n = utf8_sequence(s.substr(i)); n > 0) {
        out += s.substr(i, n);
        i += n;
        continue;
      } else if (c == 0xC2 && i + 1 < s.size() &&
                 (static_cast<unsigned char>(s[i + 1]) & 0xE0) == 0x80) {
        u00(out, static_cast<unsigned char>(s[i + 1])); // a C1 control, U+0080..U+009F
        i += 2;
        continue;
      } else {
        out += "\\\\x";
        out += hex[c >> 4];
        out += hex[c & 15];
      }
    }
    ++i;
  }
  return out + "\"";
}

/// Writes one JSON document into a string, two spaces of indentation per level:
///
///     json_writer w;
///     w.begin_object();
///     w.field("schema_version", std::uint64_t{1});
///     w.key("tables"); w.begin_array(); ... w.end_array();
///     w.end_object();
///     std::string text = w.str();
class json_writer {
public:
  void begin_object() { open('{'); }
  void end_object() { close('}'); }
  void begin_array() { open('['); }
  void end_array() { close(']'); }

  /// The key of the next member of the current object.
  void key(std::string_view k) {
    separate();
    out_ += json_quote(k) + ": ";
    after_key_ = true;
  }

  void string(std::string_view s) { scalar(json_quote(s)); }
  void number(std::uint64_t v) { scalar(std::to_string(v)); }
  void number(std::int64_t v) { scalar(std::to_string(v)); }
  void number(std::uint32_t v) { scalar(std::to_string(v)); }
  void number(std::int32_t v) { scalar(std::to_string(v)); }
  /// A fraction with `decimals` digits after the point (finite values only).
  void number(double v, int decimals) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    scalar(buf);
  }
  /// A measured value, as precisely as it is known (9 significant digits); null when it is not
  /// finite (JSON has no NaN or infinity).
  void real(double v) {
    if (!std::isfinite(v)) return null();
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    scalar(buf);
  }
  void boolean(bool v) { scalar(v ? "true" : "false"); }
  void null() { scalar("null"); }

  // key + value in one call
  void field(std::string_view k, std::string_view v) {
    key(k);
    string(v);
  }
  void field(std::string_view k, const char* v) { field(k, std::string_view(v)); }
  void field(std::string_view k, const std::string& v) { field(k, std::string_view(v)); }
  void field(std::string_view k, std::uint64_t v) {
    key(k);
    number(v);
  }
  void field(std::string_view k, std::int64_t v) {
    key(k);
    number(v);
  }
  void field(std::string_view k, std::uint32_t v) {
    key(k);
    number(v);
  }
  void field(std::string_view k, std::int32_t v) {
    key(k);
    number(v);
  }
  void field(std::string_view k, bool v) {
    key(k);
    boolean(v);
  }
  void real_field(std::string_view k, double v) {
    key(k);
    real(v);
  }
  void real_array(std::string_view k, const std::vector<double>& values) {
    key(k);
    begin_array();
    for (double v : values) real(v);
    end_array();
  }
  void null_field(std::string_view k) {
    key(k);
    null();
  }

  /// The document; complete once every object and array has been closed.
  const std::string& str() const { return out_; }

private:
  struct level {
    char closer;
    std::size_t items = 0;
  };

  void indent() { out_.append(2 * stack_.size(), ' '); }

  /// Before a value or key: a comma after the previous item, a new line and the indentation.
  void separate() {
    if (stack_.empty()) return;
    if (stack_.back().items++ > 0) out_ += ",";
    out_ += "\n";
    indent();
  }

  void start_value() {
    if (after_key_)
      after_key_ = false;
    else
      separate();
  }

  void scalar(std::string_view text) {
    start_value();
    out_ += text;
    if (stack_.empty()) out_ += "\n";
  }

  void open(char c) {
    start_value();
    out_ += c;
    stack_.push_back({c == '{' ? '}' : ']', 0});
  }

  void close(char c) {
    const bool had_items = !stack_.empty() && stack_.back().items > 0;
    if (!stack_.empty()) stack_.pop_back();
    if (had_items) {
      out_ += "\n";
      indent();
    }
    out_ += c;
    if (stack_.empty()) out_ += "\n";
  }

  std::string out_;
  std::vector<level> stack_;
  bool after_key_ = false;
};

} // namespace gpushare::json
