// SPDX-License-Identifier: Apache-2.0
// The gpushare tool across a trust boundary (issue 14, items 2, 4 and 5): display commands read
// other users' tables without locking or writing them; `set` changes only the caller's own
// tables; table-sourced strings cannot put control bytes into text, JSON or metrics output; and
// tables whose locks a stopped process holds never stall the tool. The multi-user tests run a
// child as uid 1000 and need root; without root they print the skip marker.
#include <doctest/doctest.h>

#include <grp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <gpushare/discovery.hpp>

#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;

namespace {

constexpr uid_t other_uid = 1000;

bool skip_unless_root() {
  if (::geteuid() == 0) return false;
  std::printf("GPUSHARE_SKIP: needs root to run a child as uid %u\n", other_uid);
  return true;
}

/// In a forked child: become `uid` (and gid `uid`, no supplementary groups) for good.
bool become(uid_t uid) {
  return ::setgroups(0, nullptr) == 0 && ::setresgid(uid, uid, uid) == 0 &&
         ::setresuid(uid, uid, uid) == 0 && ::geteuid() == uid;
}

/// A domain of one's own ("trust-<pid>-<n>"), whose sessions get 64 MiB tables; its tables are
/// removed at the end.
struct test_domain : test::temp_domain {
  test_domain() : temp_domain("trust-") {}
  session_options options(const std::string& session_name) const {
    return temp_domain::options(session_name, 64ull << 20);
  }
};

/// Runs the tool with `args` (a shell word list); stdout only unless `args` redirects. The tool
/// would take GPUSHARE_DOMAIN as its domain: it runs without it, as the tests expect.
test::command_result cli(const std::string& args) {
  return test::run_command(std::string("env -u GPUSHARE_DOMAIN ") + GPUSHARE_CLI_PATH + " " + args);
}

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

/// The first byte of `text` outside printable ASCII other than '\n', or -1.
int first_unsafe_byte(const std::string& text) {
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c != '\n' && (c < 0x20 || c >= 0x7f)) return c;
  }
  return -1;
}

// ------------------------------------------------------------------------------------------------
// A strict JSON syntax check (RFC 8259): returns "" when `s` is one valid document, else why not.
// ------------------------------------------------------------------------------------------------
class json_check {
public:
  explicit json_check(std::string_view s) : s_(s) {}
  std::string run() {
    try {
      ws();
      value();
      ws();
      if (i_ != s_.size()) fail("trailing bytes");
    } catch (const std::string& why) {
      return why + std::string(" at byte ") + std::to_string(i_);
    }
    return "";
  }

private:
  [[noreturn]] void fail(const std::string& why) { throw why; }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r'))
      ++i_;
  }
  void literal(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) fail("bad literal");
    i_ += w.size();
  }
  void string() {
    expect('"');
    for (;;) {
      if (i_ >= s_.size()) fail("unterminated string");
      const auto c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return;
      if (c < 0x20) fail("raw control byte in a string");
      if (c >= 0x80) fail("non-ASCII byte in a string (the writer escapes them)");
      if (c != '\\') continue;
      const char e = peek();
      ++i_;
      if (e == 'u') {
        for (int k = 0; k < 4; ++k)
          if (!std::isxdigit(static_cast<unsigned char>(peek())) || i_++ >= s_.size())
            fail("bad \\u escape");
      } else if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) {
        fail("bad escape");
      }
    }
  }
  void number() {
    const std::size_t start = i_;
    if (peek() == '-') ++i_;
    if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("bad number");
    while (std::isdigit(static_cast<unsigned char>(peek())) || peek() == '.' || peek() == 'e' ||
           peek() == 'E' || peek() == '+' || peek() == '-')
      ++i_;
    if (i_ == start) fail("bad number");
  }
  void value() {
    ws();
    const char c = peek();
    if (c == '{') {
      ++i_;
      ws();
      if (peek() == '}') {
        ++i_;
        return;
      }
      for (;;) {
        ws();
        string();
        ws();
        expect(':');
        value();
        ws();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect('}');
        return;
      }
    }
    if (c == '[') {
      ++i_;
      ws();
      if (peek() == ']') {
        ++i_;
        return;
      }
      for (;;) {
        value();
        ws();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect(']');
        return;
      }
    }
    if (c == '"') return string();
    if (c == 't') return literal("true");
    if (c == 'f') return literal("false");
    if (c == 'n') return literal("null");
    number();
  }
  std::string_view s_;
  std::size_t i_ = 0;
};

// ------------------------------------------------------------------------------------------------
// A checker of the Prometheus text exposition format (0.0.4), as strict as promtool's parser on
// what matters here: valid UTF-8 throughout; only HELP/TYPE comments; metric and label names
// well-formed; label values with only the escapes \\, \" and \n and no raw control bytes; a
// float value; every sample in a family TYPE'd before it; no series twice. Returns "" or why not.
// ------------------------------------------------------------------------------------------------
bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80                 ? 1
                    : c >= 0xC2 && c <= 0xDF ? 2
                    : c >= 0xE0 && c <= 0xEF ? 3
                    : c >= 0xF0 && c <= 0xF4 ? 4
                                             : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    const auto c1 = static_cast<unsigned char>(n > 1 ? s[i + 1] : 0);
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) || (c == 0xF0 && c1 < 0x90) ||
        (c == 0xF4 && c1 >= 0x90))
      return false;
    i += n;
  }
  return true;
}

bool name_ok(std::string_view n, bool metric) {
  if (n.empty()) return false;
  for (std::size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool alpha =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (metric && c == ':');
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

std::string check_prometheus(const std::string& text) {
  if (!valid_utf8(text)) return "not valid UTF-8";
  if (!text.empty() && text.back() != '\n') return "no final newline";
  std::set<std::string> typed, series;
  std::size_t line_no = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t end = text.find('\n', pos);
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    const std::string where = std::string("line ") + std::to_string(line_no) + ": ";
    for (const char ch : line)
      if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) return where + "raw control byte";
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::vector<std::string> w;
      std::size_t p = 1;
      while (w.size() < 3 && p < line.size()) {
        while (p < line.size() && line[p] == ' ') ++p;
        const std::size_t q = w.size() < 2 ? line.find(' ', p) : line.size();
        w.push_back(line.substr(p, q == std::string::npos ? std::string::npos : q - p));
        p = q == std::string::npos ? line.size() : q;
      }
      if (w.size() >= 2 && (w[0] == "HELP" || w[0] == "TYPE")) {
        if (!name_ok(w[1], true)) return where + "bad metric name in comment";
        if (w[0] == "TYPE") {
          static const std::set<std::string> types = {"counter", "gauge", "histogram", "summary",
                                                      "untyped"};
          if (w.size() < 3 || types.count(w[2]) == 0) return where + "bad TYPE";
          if (!typed.insert(w[1]).second) return where + "second TYPE for " + w[1];
        }
      }
      continue;
    }
    std::size_t p = 0;
    while (p < line.size() && line[p] != '{' && line[p] != ' ') ++p;
    const std::string name = line.substr(0, p);
    if (!name_ok(name, true)) return where + "bad metric name";
    if (typed.count(name) == 0) return where + "sample before its TYPE: " + name;
    std::string key = name;
    if (p < line.size() && line[p] == '{') {
      ++p;
      while (p < line.size() && line[p] != '}') {
        const std::size_t eq = line.find('=', p);
        if (eq == std::string::npos || !name_ok(line.substr(p, eq - p), false))
          return where + "bad label name";
        p = eq + 1;
        if (p >= line.size() || line[p] != '"') return where + "label value not quoted";
        ++p;
        for (;;) {
          if (p >= line.size()) return where + "unterminated label value";
          const char c = line[p++];
          if (c == '"') break;
          if (c == '\\') {
            if (p >= line.size() || (line[p] != '\\' && line[p] != '"' && line[p] != 'n'))
              return where + "invalid escape in a label value";
            ++p;
          }
        }
        key += line.substr(eq, p - eq);
        if (p < line.size() && line[p] == ',') ++p;
      }
      if (p >= line.size()) return where + "unterminated label set";
      ++p; // '}'
    }
    if (p >= line.size() || line[p] != ' ') return where + "no value";
    const std::string value = line.substr(p + 1);
    const std::string first = value.substr(0, value.find(' '));
    char* stop = nullptr;
    (void)std::strtod(first.c_str(), &stop);
    if (first.empty() || *stop != '\0') return where + "bad value '" + first + "'";
    if (!series.insert(key).second) return where + "series twice: " + key;
  }
  return "";
}

/// Maps the table `object_name` read-write, as a peer with access to it could.
struct raw_table {
  void* base = MAP_FAILED;
  std::size_t size = 0;
  explicit raw_table(const std::string& object_name) {
    const int fd = ::shm_open(object_name.c_str(), O_RDWR | O_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    struct stat st {};
    REQUIRE(::fstat(fd, &st) == 0);
    size = static_cast<std::size_t>(st.st_size);
    base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    REQUIRE(base != MAP_FAILED);
  }
  ~raw_table() {
    if (base != MAP_FAILED) ::munmap(base, size);
  }
  raw_table(const raw_table&) = delete;
  raw_table& operator=(const raw_table&) = delete;
  detail::table_header& header() { return *static_cast<detail::table_header*>(base); }
  detail::slot_record& slot(std::uint32_t i) {
    return reinterpret_cast<detail::slot_record*>(static_cast<char*>(base) +
                                                  sizeof(detail::table_header))[i];
  }
};

void write_field(char* dst, std::size_t cap, std::string_view bytes) {
  REQUIRE(bytes.size() < cap);
  std::memset(dst, 0, cap);
  std::memcpy(dst, bytes.data(), bytes.size());
}

} // namespace

TEST_CASE("status, top and metrics leave another user's table unchanged, byte for byte") {
  if (skip_unless_root()) return;
  test_domain d;
  const std::string key = "GPU-theirs";
  const std::string object = d.object_name(key);
  std::string owned_name = object; // the name carries the uid of its creator
  owned_name.replace(owned_name.find(".u0."), 4, ".u1000.");
  // uid 1000 creates its table; one of its sessions lives on in a child, one dies without
  // leaving (a dead session: the old CLI reclaimed it, i.e. wrote the table).
  test::shared_block<std::atomic<int>> state(2);
  int gate[2];
  REQUIRE(::pipe(gate) == 0);
  const pid_t owner = test::spawn([&] {
    ::close(gate[1]); // EOF on gate[0] once the parent closes its end
    if (!become(other_uid)) return 3;
    session live(key, d.options("alive"));
    const pid_t dying = test::spawn([&]() -> int {
      session gone(key, d.options("gone"));
      std::_Exit(0); // without leaving: the slot stays active, its owner dead
    });
    if (test::wait_exit(dying) != 0) return 4;
    state[0] = 1;
    char c;
    (void)::read(gate[0], &c, 1); // until the parent closes the pipe
    return 0;
  });
  ::close(gate[0]);
  REQUIRE(test::eventually([&] { return state[0].load() == 1; }));
  const auto before = test::object_bytes(owned_name);
  REQUIRE(before.has_value());

  const auto status = cli("status --interval 0 --domain " + d.name());
  CHECK(status.exit_code == 0);
  CHECK(contains(status.output, owned_name));
  CHECK(contains(status.output, "1 table, 1 live session")); // the dead one is not counted...
  CHECK(contains(status.output, "alive"));
  CHECK(contains(status.output, "dead, not reclaimed yet: \"gone\"")); // ...but shown as dead
  const auto json = cli("status --json --interval 0.01 --domain " + d.name());
  CHECK(json.exit_code == 0);
  CHECK(contains(json.output, "\"alive\""));
  const auto top = cli("top --iterations 2 --interval 0.01 --domain " + d.name());
  CHECK(top.exit_code == 0);
  CHECK(contains(top.output, owned_name));
  const auto metrics = cli("metrics --domain " + d.name());
  CHECK(metrics.exit_code == 0);
  CHECK(contains(metrics.output, "session=\"alive\""));

  const auto after = test::object_bytes(owned_name);
  REQUIRE(after.has_value());
  CHECK(after->size() == before->size());
  CHECK(*after == *before); // not a byte written: no lock taken, no dead session reclaimed
  ::close(gate[1]);
  CHECK(test::wait_exit(owner) == 0);
  ::shm_unlink(owned_name.c_str());
}

TEST_CASE("set refuses another user's table and leaves it unchanged") {
  if (skip_unless_root()) return;
  test_domain d;
  const std::string key = "GPU-theirs-set";
  std::string object = d.object_name(key);
  object.replace(object.find(".u0."), 4, ".u1000.");
  test::shared_block<std::atomic<int>> state(1);
  int gate[2];
  REQUIRE(::pipe(gate) == 0);
  const pid_t owner = test::spawn([&] {
    ::close(gate[1]); // EOF on gate[0] once the parent closes its end
    if (!become(other_uid)) return 3;
    session live(key, d.options("theirs"));
    state[0] = 1;
    char c;
    (void)::read(gate[0], &c, 1);
    return 0;
  });
  ::close(gate[0]);
  REQUIRE(test::eventually([&] { return state[0].load() == 1; }));
  const auto before = test::object_bytes(object);
  REQUIRE(before.has_value());

  const auto set = cli("set theirs --share 7 --domain " + d.name() + " 2>&1");
  CHECK(set.exit_code == 1);
  CHECK(contains(set.output, "refusing to change table " + object));
  CHECK(contains(set.output, "belongs to uid 1000"));
  CHECK(*test::object_bytes(object) == *before);
  const table_snapshot s = table::read_unlocked(object);
  REQUIRE(s.sessions.size() == 1);
  CHECK(s.sessions[0].share == default_share);
  ::close(gate[1]);
  CHECK(test::wait_exit(owner) == 0);
  ::shm_unlink(object.c_str());
}

TEST_CASE("hostile bytes in a table's strings reach no output raw and every format stays valid") {
  test_domain d;
  const std::string key = "GPU-hostile";
  session victim(key, d.options("victim"));
  const std::string object = d.object_name(key);
  // ESC sequences (set the title, clear the screen), BEL, CR, a forged row after LF, 0xff, an
  // invalid UTF-8 pair, DEL, a C1 control, a quote and a backslash.
  const std::string evil_name =
      "\x1b]0;PWNED\x07\x1b[2J\rX\n  9  forged  1\xff\xc3(\x7f\xc2\x9b\"\\";
  const std::string evil_key = "K\x1b[31mred\x1b[0m\r\nforged-key \xff\xfe\x07";
  const std::string evil_device = "NVIDIA\x1b[2J\x07\r\n  forged device\xc0\xaf\xed\xa0\x80";
  {
    raw_table raw(object);
    auto& h = raw.header();
    write_field(h.key, detail::key_capacity, evil_key);
    write_field(h.device_name, detail::device_name_capacity, evil_device);
    h.device_total = 80ull << 30;
    h.device_free = 40ull << 30;
    h.device_observed_unix_ns = detail::realtime_ns();
    h.device_observer_pid = 1;
    bool named = false;
    for (std::uint32_t i = 0; i < h.prefix.slot_count; ++i)
      if (raw.slot(i).state.load() == detail::slot_active) {
        write_field(raw.slot(i).name, detail::name_capacity, evil_name);
        named = true;
      }
    REQUIRE(named);
  }
  // A second table whose header's domain is hostile (it no longer matches --domain, so the
  // commands below list every table, as root's monitoring would).
  const std::string key2 = "GPU-hostile-domain";
  session other(key2, d.options("plain"));
  {
    raw_table raw(d.object_name(key2));
    write_field(raw.header().domain, detail::domain_capacity, "dom\x1b]0;X\x07\n\xff");
  }

  const auto text = cli("status --interval 0");
  CHECK(text.exit_code == 0);
  CHECK(first_unsafe_byte(text.output) == -1);
  CHECK(contains(text.output, object));
  CHECK(contains(text.output, "\\x1b]0;PWNED\\x07\\x1b[2J\\x0dX\\x0a  9  forged  1\\xff\\xc3(\\x7f"
                              "\\xc2\\x9b\"\\\\"));
  CHECK(contains(text.output, "key K\\x1b[31mred\\x1b[0m\\x0d\\x0aforged-key \\xff\\xfe\\x07"));
  CHECK(contains(text.output, "GPU: NVIDIA\\x1b[2J\\x07\\x0d\\x0a  forged device"));
  CHECK(contains(text.output, "domain dom\\x1b]0;X\\x07\\x0a\\xff"));
  // No forged row or line: every line that mentions "forged" is one of the escaped ones.
  for (std::size_t p = 0; p < text.output.size();) {
    const std::size_t e = text.output.find('\n', p);
    const std::string line = text.output.substr(p, e - p);
    if (contains(line, "forged")) CHECK_MESSAGE(contains(line, "\\x0a"), line);
    p = e + 1;
  }

  const auto top = cli("top --iterations 1 --interval 0.01");
  CHECK(top.exit_code == 0);
  CHECK(first_unsafe_byte(top.output) == -1);
  CHECK(contains(top.output, "\\x1b]0;PWNED\\x07"));

  const auto json = cli("status --json --interval 0");
  CHECK(json.exit_code == 0);
  CHECK(first_unsafe_byte(json.output) == -1);
  CHECK(json_check(json.output).run() == "");
  CHECK(contains(json.output, "\"\\u001b]0;PWNED\\u0007\\u001b[2J\\r"));

  const auto metrics = cli("metrics");
  CHECK(metrics.exit_code == 0);
  CHECK(check_prometheus(metrics.output) == "");
  CHECK(contains(metrics.output,
                 "session=\"\\\\x1b]0;PWNED\\\\x07\\\\x1b[2J\\\\x0dX\\n  9  forged  "
                 "1\\\\xff\\\\xc3(\\\\x7f\\\\xc2\\\\x9b\\\"\\\\\""));
  CHECK(contains(metrics.output, "device=\"NVIDIA\\\\x1b[2J\\\\x07\\\\x0d\\n  forged "
                                 "device\\\\xc0\\\\xaf\\\\xed\\\\xa0\\\\x80\""));
}

TEST_CASE("the prometheus checker rejects what a collector would") {
  CHECK(check_prometheus("# TYPE a gauge\na 1\n") == "");
  CHECK(check_prometheus("# TYPE a gauge\na{x=\"\x1b\"} 1\n") != "");
  CHECK(check_prometheus("# TYPE a gauge\na{x=\"\xff\"} 1\n") != "");
  CHECK(check_prometheus("# TYPE a gauge\na{x=\"\\x\"} 1\n") != "");
  CHECK(check_prometheus("a 1\n") != "");
  CHECK(check_prometheus("# TYPE a gauge\na{x=\"1\"} 1\na{x=\"1\"} 2\n") != "");
  CHECK(json_check("{\"a\": [1, \"x\\u0001\", null]}").run() == "");
  CHECK(json_check("{\"a\": \"\x01\"}").run() != "");
}

TEST_CASE("tables whose locks a stopped process holds stall neither status nor set") {
  test_domain d;
  session mine("GPU-stuck-0", d.options("mine")); // a live session in one of the stuck tables
  test::shared_block<std::atomic<int>> held(1);
  const pid_t holder = test::spawn([&] {
    std::vector<detail::table_core> cores;
    std::vector<std::unique_ptr<detail::table_core::guard>> guards;
    for (int i = 0; i < 3; ++i) {
      const std::string name = d.object_name(test::numbered("GPU-stuck-", i));
      if (i > 0)
        (void)table::open(test::numbered("GPU-stuck-", i), gpushare::open_mode::open_or_create,
                          d.options("x"));
      cores.emplace_back(detail::mapped_table::open_existing(name, 1'000'000'000));
    }
    for (auto& c : cores) guards.push_back(std::make_unique<detail::table_core::guard>(c));
    held[0] = 1;
    ::raise(SIGSTOP);
    return 0;
  });
  REQUIRE(test::eventually([&] { return held[0].load() == 1; }));
  int st = 0;
  REQUIRE(::waitpid(holder, &st, WUNTRACED) == holder);
  REQUIRE(WIFSTOPPED(st));

  auto start = test::now_ns();
  const auto status = cli("status --domain " + d.name() + " 2>&1");
  const auto status_ns = test::now_ns() - start;
  CHECK(status.exit_code == 0);
  CHECK(status_ns < 5'000'000'000ull); // was 60 s: 10 s per lock, twice per table, 3 tables
  for (int i = 0; i < 3; ++i)
    CHECK(contains(status.output, d.object_name(test::numbered("GPU-stuck-", i))));
  CHECK(contains(status.output, "mine"));

  start = test::now_ns();
  const auto metrics = cli("metrics --domain " + d.name());
  CHECK(metrics.exit_code == 0);
  CHECK(test::now_ns() - start < 5'000'000'000ull);

  start = test::now_ns();
  const auto set = cli("set mine --share 3 --domain " + d.name() + " 2>&1");
  const auto set_ns = test::now_ns() - start;
  CHECK(set.exit_code == 1);
  CHECK(contains(set.output, "is busy"));
  CHECK(set_ns < 5'000'000'000ull); // was 10 s: the library's lock timeout
  CHECK(std::count(set.output.begin(), set.output.end(), '\n') == 1); // one line

  ::kill(holder, SIGKILL);
  test::wait_exit(holder);
}
