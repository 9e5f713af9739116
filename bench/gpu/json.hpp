// SPDX-License-Identifier: Apache-2.0
// A small JSON writer for the benchmark's results: objects, arrays, strings (escaped), numbers
// (a number that is not finite is written as null: JSON has no NaN).
#pragma once

#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace bench {

class json_writer {
public:
  void begin_object() { open('{'); }
  void end_object() { close('}'); }
  void begin_array() { open('['); }
  void end_array() { close(']'); }

  /// The next member's name (inside an object).
  void key(std::string_view k) {
    separate();
    string(k);
    out_ += ": ";
    after_key_ = true;
  }

  void value(std::string_view s) {
    separate();
    string(s);
  }
  void value(const char* s) { value(std::string_view(s)); }
  void value(const std::string& s) { value(std::string_view(s)); }
  void value(bool b) {
    separate();
    out_ += b ? "true" : "false";
  }
  void value(double d) {
    separate();
    if (!std::isfinite(d)) {
      out_ += "null";
      return;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", d);
    out_ += buf;
  }
  void value(int i) { value(static_cast<double>(i)); }
  void null() {
    separate();
    out_ += "null";
  }

  template <class T> void member(std::string_view k, const T& v) {
    key(k);
    value(v);
  }
  void member(std::string_view k, const std::vector<double>& v) {
    key(k);
    begin_array();
    for (double d : v) value(d);
    end_array();
  }

  const std::string& str() const { return out_; }

private:
  void open(char c) {
    separate();
    out_ += c;
    first_.push_back(true);
  }
  void close(char c) {
    first_.pop_back();
    out_ += '\n';
    indent();
    out_ += c;
  }
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (first_.empty()) return;
    if (!first_.back()) out_ += ',';
    first_.back() = false;
    out_ += '\n';
    indent();
  }
  void indent() { out_.append(2 * first_.size(), ' '); }
  void string(std::string_view s) {
    out_ += '"';
    for (const char ch : s) {
      const auto c = static_cast<unsigned char>(ch);
      switch (c) {
      case '"': out_ += "\\\""; break;
      case '\\': out_ += "\\\\"; break;
      case '\n': out_ += "\\n"; break;
      case '\r': out_ += "\\r"; break;
      case '\t': out_ += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out_ += buf;
        } else {
          out_ += ch;
        }
      }
    }
    out_ += '"';
  }

  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

} // namespace bench
