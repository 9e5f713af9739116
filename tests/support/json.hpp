// SPDX-License-Identifier: Apache-2.0
// A minimal JSON reader, enough to check a program's JSON output (`gpushare status --json`, the
// GPU benchmark's report) field by field.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace test {

struct json {
  enum class kind { null, boolean, number, string, array, object };
  kind type = kind::null;
  bool flag = false;
  std::string text; ///< a string's content, or a number as written
  std::vector<json> items;
  // An object's members as two parallel vectors, names[i] -> values[i]. Not one vector of
  // pair<std::string, json>: clang 14 with libstdc++ 12 in C++20 instantiates that pair while
  // json is still incomplete, and fails to compile.
  std::vector<std::string> names;
  std::vector<json> values;

  const json& operator[](const std::string& key) const {
    if (type != kind::object) throw std::runtime_error("not an object, looking for " + key);
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == key) return values[i];
    throw std::runtime_error("no member \"" + key + "\"");
  }
  const json& operator[](std::size_t i) const {
    if (type != kind::array || i >= items.size()) throw std::runtime_error("no array item");
    return items[i];
  }
  bool has(const std::string& key) const {
    return std::find(names.begin(), names.end(), key) != names.end();
  }
  std::size_t size() const { return type == kind::array ? items.size() : names.size(); }
  bool is_null() const { return type == kind::null; }
  std::uint64_t u64() const {
    if (type != kind::number) throw std::runtime_error("not a number");
    return std::stoull(text);
  }
  std::int64_t i64() const {
    if (type != kind::number) throw std::runtime_error("not a number");
    return std::stoll(text);
  }
  double number() const {
    if (type != kind::number) throw std::runtime_error("not a number");
    return std::stod(text);
  }
  const std::string& str() const {
    if (type != kind::string) throw std::runtime_error("not a string");
    return text;
  }
  bool boolean() const {
    if (type != kind::boolean) throw std::runtime_error("not a boolean");
    return flag;
  }
};

class json_reader {
public:
  explicit json_reader(std::string_view in) : in_(in) {}

  json document() {
    json v = value();
    space();
    if (pos_ != in_.size()) fail("text after the document");
    return v;
  }

private:
  [[noreturn]] void fail(const std::string& why) {
    throw std::runtime_error("bad JSON at offset " + std::to_string(pos_) + ": " + why);
  }
  void space() {
    while (pos_ < in_.size() && std::strchr(" \t\r\n", in_[pos_]) != nullptr) ++pos_;
  }
  char peek() {
    space();
    if (pos_ >= in_.size()) fail("unexpected end");
    return in_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  bool word(std::string_view w) {
    if (in_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (pos_ < in_.size() && in_[pos_] != '"') {
      char c = in_[pos_++];
      if (c == '\\') {
        if (pos_ >= in_.size()) fail("bad escape");
        const char e = in_[pos_++];
        switch (e) {
        case 'n': c = '\n'; break;
        case 't': c = '\t'; break;
        case 'r': c = '\r'; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'u': { // a code point of the BMP, written back as UTF-8
          if (pos_ + 4 > in_.size()) fail("bad \\u escape");
          const auto cp =
              static_cast<unsigned>(std::stoi(std::string(in_.substr(pos_, 4)), nullptr, 16));
          pos_ += 4;
          if (cp < 0x80) {
            c = static_cast<char>(cp);
            break;
          }
          if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
          } else {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
          }
          c = static_cast<char>(0x80 | (cp & 0x3F));
          break;
        }
        default: c = e;
        }
      } else if (static_cast<unsigned char>(c) < 0x20) {
        fail("control character in a string");
      }
      out += c;
    }
    expect('"');
    return out;
  }
  json value() {
    json v;
    const char c = peek();
    if (c == '{') {
      v.type = json::kind::object;
      ++pos_;
      if (peek() == '}') {
        ++pos_;
        return v;
      }
      for (;;) {
        std::string k = string();
        expect(':');
        v.names.push_back(std::move(k));
        v.values.push_back(value());
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.type = json::kind::array;
      ++pos_;
      if (peek() == ']') {
        ++pos_;
        return v;
      }
      for (;;) {
        v.items.push_back(value());
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.type = json::kind::string;
      v.text = string();
      return v;
    }
    if (word("true") || word("false")) {
      v.type = json::kind::boolean;
      v.flag = in_[pos_ - 4] == 't';
      return v;
    }
    if (word("null")) return v;
    const std::size_t start = pos_;
    while (pos_ < in_.size() && std::strchr("+-0123456789.eE", in_[pos_]) != nullptr) ++pos_;
    if (pos_ == start) fail("unexpected character");
    v.type = json::kind::number;
    v.text = std::string(in_.substr(start, pos_ - start));
    return v;
  }

  std::string_view in_;
  std::size_t pos_ = 0;
};

inline json parse_json(const std::string& text) { return json_reader(text).document(); }

} // namespace test
