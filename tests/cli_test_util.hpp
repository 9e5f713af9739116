// SPDX-License-Identifier: Apache-2.0
// Running the gpushare command-line tool from a test (mp-cli, mp-cli-evict): a domain of one's
// own, the tool's exit code, stdout and stderr, a small JSON reader for `status --json`, and
// children that hold a session. The tool's path comes from GPUSHARE_CLI_PATH (tests/CMakeLists.txt
// defines it for the tests that run it).
#pragma once

#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <gpushare/discovery.hpp>

#include "test_util.hpp"

namespace cli_test {

using namespace gpushare;
using namespace std::chrono_literals;

// ------------------------------------------------------------------------------------------------
// A domain of one's own: its tables are removed when it goes out of scope.
// ------------------------------------------------------------------------------------------------
class test_domain {
public:
  test_domain() {
    static int counter = 0;
    name_ = "cli-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  }
  ~test_domain() {
    for (const auto& e : list_tables(name_)) ::shm_unlink(e.object_name.c_str());
  }
  test_domain(const test_domain&) = delete;
  test_domain& operator=(const test_domain&) = delete;

  const std::string& name() const { return name_; }
  session_options options(const std::string& session_name, std::uint64_t capacity = 0) const {
    session_options o;
    o.domain = name_;
    o.name = session_name;
    o.capacity = capacity;
    return o;
  }
  std::string object_name(const std::string& key) const {
    return detail::table_object_name(name_, key, table_access::user);
  }
  std::string path(const std::string& key) const { return "/dev/shm" + object_name(key); }
  bool exists(const std::string& key) const { return ::access(path(key).c_str(), F_OK) == 0; }

private:
  std::string name_;
};

// ------------------------------------------------------------------------------------------------
// Running the tool.
// ------------------------------------------------------------------------------------------------
struct cli_result {
  int code = -1;
  std::string out, err;
};

constexpr uid_t keep_uid = static_cast<uid_t>(-1);

/// Starts the tool with `args`; its stdout and stderr go to the returned pipes. With `as_uid`,
/// the child drops to that uid (and gid) before exec.
struct running_cli {
  pid_t pid = -1;
  int out = -1, err = -1;
};

/// Environment variables to set for the tool ("NAME=value"). GPUSHARE_DOMAIN is never inherited
/// from the test's own environment: a test that wants it sets it here.
using env_vars = std::vector<std::string>;

inline running_cli start_cli(const std::vector<std::string>& args, uid_t as_uid = keep_uid,
                             const env_vars& env = {}) {
  std::vector<std::string> words = {GPUSHARE_CLI_PATH};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  // The child's environment, built here: setenv() between fork() and exec() is not safe.
  std::vector<std::string> vars;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::string_view(*e).rfind("GPUSHARE_DOMAIN=", 0) != 0) vars.emplace_back(*e);
  vars.insert(vars.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  int out[2], err[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(err, O_CLOEXEC) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    if (as_uid != keep_uid && (::setgid(as_uid) != 0 || ::setuid(as_uid) != 0)) ::_exit(126);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  return {pid, out[0], err[0]};
}

/// Reads both pipes to their end, then waits for the tool.
inline cli_result finish_cli(running_cli r) {
  cli_result res;
  pollfd fds[2] = {{r.out, POLLIN, 0}, {r.err, POLLIN, 0}};
  std::string* sinks[2] = {&res.out, &res.err};
  int open_pipes = 2;
  while (open_pipes > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_pipes;
      }
    }
  }
  res.code = test::wait_exit(r.pid);
  return res;
}

inline cli_result run_cli(const std::vector<std::string>& args, uid_t as_uid = keep_uid) {
  return finish_cli(start_cli(args, as_uid));
}

/// The tool run with environment variables `env` ("NAME=value") added.
inline cli_result run_cli_env(const env_vars& env, const std::vector<std::string>& args) {
  return finish_cli(start_cli(args, keep_uid, env));
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// ------------------------------------------------------------------------------------------------
// A minimal JSON reader, enough to check `status --json` field by field.
// ------------------------------------------------------------------------------------------------
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
        case 'u': {
          if (pos_ + 4 > in_.size()) fail("bad \\u escape");
          c = static_cast<char>(std::stoi(std::string(in_.substr(pos_, 4)), nullptr, 16));
          pos_ += 4;
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

/// The table of `key` in a status document.
inline const json& table_of(const json& doc, const std::string& key) {
  for (const auto& t : doc["tables"].items)
    if (t["key"].str() == key) return t;
  throw std::runtime_error("no table with key " + key);
}

/// The session named `name` in a table of a status document.
inline const json& session_of(const json& table, const std::string& name) {
  for (const auto& s : table["sessions"].items)
    if (s["name"].str() == name) return s;
  throw std::runtime_error("no session named " + name);
}

/// Runs a forked child that joins `key` as `name`, reserves `reserve` bytes, then waits to be
/// killed. Returns once the child has joined.
inline pid_t spawn_holder(const test_domain& d, const std::string& key, const std::string& name,
                          std::uint64_t reserve = 0, std::uint64_t capacity = 0) {
  test::shared_block<std::atomic<int>> ready;
  const pid_t pid = test::spawn([&] {
    session s(key, d.options(name, capacity));
    std::optional<reservation> r;
    if (reserve > 0) r = s.reserve(reserve, 0ms);
    ready[0] = 1;
    for (;;) ::pause();
    return 0;
  });
  REQUIRE(test::eventually([&] { return ready[0].load() == 1; }, 10s));
  return pid;
}

/// Kills a holder and waits for it.
inline void kill_holder(pid_t pid) {
  ::kill(pid, SIGKILL);
  CHECK(test::wait_exit(pid) == 128 + SIGKILL);
}

} // namespace cli_test
