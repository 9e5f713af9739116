// SPDX-License-Identifier: Apache-2.0
// The gpushare command-line tool: `metrics --listen`, the node exporter (CTest label "exporter").
// The tool runs as a program on a loopback port picked free by the test; a small HTTP client over
// a plain socket scrapes it, so the test needs no curl. Every test uses a domain of its own.
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gpushare/gpushare.hpp>

#include "cli_test_util.hpp"
#include "test_util.hpp"

using namespace gpushare;
using namespace cli_test;
using namespace std::chrono_literals;

#if GPUSHARE_CLI_HTTPLIB

namespace {

constexpr std::uint64_t MiB = 1ull << 20;

// ------------------------------------------------------------------------------------------------
// A loopback HTTP/1.1 client: just enough to read the exporter's answers.
// ------------------------------------------------------------------------------------------------

/// A TCP socket closed when it goes out of scope.
struct socket_fd {
  int fd = -1;
  explicit socket_fd(int f = -1) : fd(f) {}
  socket_fd(socket_fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  socket_fd& operator=(socket_fd&&) = delete;
  ~socket_fd() {
    if (fd >= 0) ::close(fd);
  }
};

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

/// A port that was free a moment ago: bound to 127.0.0.1:0, read back, closed.
int free_port() {
  socket_fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a = loopback(0);
  REQUIRE(::bind(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(s.fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  return ntohs(a.sin_port);
}

/// A connection to 127.0.0.1:port; reads give up after 30 s (a hang fails, not stalls, the
/// test). `receive_buffer` > 0 shrinks the receive buffer before connecting.
socket_fd connect_to(int port, int receive_buffer = 0) {
  socket_fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(s.fd >= 0);
  if (receive_buffer > 0)
    ::setsockopt(s.fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
  const timeval limit{30, 0};
  ::setsockopt(s.fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  sockaddr_in a = loopback(port);
  REQUIRE(::connect(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return s;
}

void send_all(int fd, const std::string& text) {
  std::size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    REQUIRE(n > 0);
    sent += static_cast<std::size_t>(n);
  }
}

struct http_response {
  int status = 0;
  std::string head; ///< status line and headers, lower-cased names kept as sent
  std::string body;
  bool complete = false; ///< the whole body that Content-Length announced arrived

  std::string header(const std::string& name) const {
    for (const auto& line : lines_of(head))
      if (line.size() > name.size() && line.compare(0, name.size(), name) == 0 &&
          line[name.size()] == ':') {
        std::string v = line.substr(name.size() + 1);
        v.erase(0, v.find_first_not_of(' '));
        if (!v.empty() && v.back() == '\r') v.pop_back();
        return v;
      }
    return "";
  }
};

/// Reads one response from `fd`: the head, then Content-Length bytes of body (none for HEAD).
http_response read_response(int fd, bool has_body = true) {
  http_response r;
  std::string data;
  std::size_t head_end = std::string::npos, length = 0;
  for (;;) {
    if (head_end == std::string::npos && (head_end = data.find("\r\n\r\n")) != std::string::npos) {
      r.head = data.substr(0, head_end + 2);
      r.status = std::atoi(r.head.substr(r.head.find(' ') + 1, 3).c_str());
      length = has_body ? std::strtoull(r.header("Content-Length").c_str(), nullptr, 10) : 0;
    }
    if (head_end != std::string::npos && data.size() >= head_end + 4 + length) break;
    char buf[8192];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return r; // closed, or 30 s without a byte: incomplete
    data.append(buf, static_cast<std::size_t>(n));
  }
  r.body = data.substr(head_end + 4, length);
  r.complete = true;
  return r;
}

/// One request on a connection of its own.
http_response ask(int port, const std::string& request, bool has_body = true) {
  socket_fd s = connect_to(port);
  send_all(s.fd, request);
  return read_response(s.fd, has_body);
}

http_response get(int port, const std::string& path) {
  return ask(port, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
}

/// True while the server has neither closed `fd` nor sent anything on it.
bool still_open(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

// ------------------------------------------------------------------------------------------------
// The exporter as a program.
// ------------------------------------------------------------------------------------------------

/// `gpushare metrics --domain D --listen 127.0.0.1:<port>` running beside the test (stderr into
/// stdout), on a port found free; killed and reaped at the end if still running.
class exporter {
public:
  explicit exporter(const std::string& domain, const std::vector<std::string>& extra = {}) {
    // The port was free when picked; another program may take it before the tool binds it.
    for (int attempt = 0; attempt < 10; ++attempt) {
      port_ = free_port();
      if (start(domain, extra)) return;
    }
    FAIL("the exporter could not bind a free port in 10 attempts: " << output_);
  }
  ~exporter() {
    if (p_.pid > 0) test::kill_and_wait(p_.pid);
    if (p_.out >= 0) ::close(p_.out);
  }
  exporter(const exporter&) = delete;
  exporter& operator=(const exporter&) = delete;

  int port() const { return port_; }
  bool running() const { return p_.pid > 0 && ::waitpid(p_.pid, nullptr, WNOHANG) == 0; }
  /// Sends `sig` and waits up to `limit` for the exit code (-1: still running, then killed).
  int stop(int sig, std::chrono::milliseconds limit = 30s) {
    ::kill(p_.pid, sig);
    const int code = test::wait_exit_within(p_.pid, limit);
    p_.pid = -1;
    output_ += read_rest();
    return code;
  }
  const std::string& output() const { return output_; }

private:
  bool start(const std::string& domain, const std::vector<std::string>& extra) {
    test::process_options o;
    o.err = test::stderr_to::stdout_pipe;
    o.unset = {"GPUSHARE_DOMAIN"};
    std::vector<std::string> words = {GPUSHARE_CLI_PATH, "metrics",
                                      "--domain",        domain,
                                      "--listen",        "127.0.0.1:" + std::to_string(port_)};
    words.insert(words.end(), extra.begin(), extra.end());
    p_ = test::start_process(words, o);
    output_ = read_line();
    if (output_ == "serving metrics on http://127.0.0.1:" + std::to_string(port_) + "/metrics\n")
      return true;
    const int code = test::wait_exit_within(p_.pid, 30s);
    p_.pid = -1;
    output_ += read_rest();
    ::close(p_.out);
    p_.out = -1;
    REQUIRE_MESSAGE(code == 1, output_);
    REQUIRE_MESSAGE(contains(output_, "Address already in use"), output_);
    return false;
  }
  /// The first line of output (with its newline), or what came within 30 s.
  std::string read_line() {
    std::string line;
    const auto end = std::chrono::steady_clock::now() + 30s;
    while (line.empty() || line.back() != '\n') {
      pollfd p{p_.out, POLLIN, 0};
      if (std::chrono::steady_clock::now() > end || ::poll(&p, 1, 100) < 0) break;
      char c = 0;
      if ((p.revents & (POLLIN | POLLHUP)) == 0) continue;
      if (::read(p_.out, &c, 1) != 1) break;
      line += c;
    }
    return line;
  }
  std::string read_rest() {
    std::string rest;
    char buf[4096];
    for (ssize_t n; (n = ::read(p_.out, buf, sizeof buf)) > 0;)
      rest.append(buf, static_cast<std::size_t>(n));
    return rest;
  }

  test::running_process p_;
  int port_ = 0;
  std::string output_;
};

/// A session of its own table in domain `d`: 64 MiB capacity, share 4, 3 MiB reserved.
struct live_session {
  session s;
  std::optional<reservation> r;
  explicit live_session(const test_domain& d) : s("gpu", options(d)) {
    r = s.reserve(3 * MiB, 0ms);
  }
  static session_options options(const test_domain& d) {
    session_options o = d.options("exported", 64 * MiB);
    o.share = 4;
    return o;
  }
  std::string table_labels(const test_domain& d) const {
    return "table=\"" + d.object_name("gpu") + "\",key=\"gpu\",domain=\"" + d.name() + "\"";
  }
  std::string session_labels(const test_domain& d) const {
    // (and the platform identity's labels, empty for a session without one: cli_identity.hpp)
    return table_labels(d) + ",session=\"exported\",slot=\"" + std::to_string(s.id().slot) +
           "\",pod=\"\",namespace=\"\",container=\"\",slurm_job_id=\"\",slurm_step_id=\"\",group="
           "\"\"";
  }
};

} // namespace

// ------------------------------------------------------------------------------------------------
// Scrapes
// ------------------------------------------------------------------------------------------------

TEST_CASE("metrics --listen serves what metrics prints and samples afresh on every scrape") {
  test_domain d;
  live_session l(d);
  exporter x(d.name());
  const http_response first = get(x.port(), "/metrics");
  REQUIRE(first.complete);
  CHECK(first.status == 200);
  CHECK(first.header("Content-Type") == "text/plain; version=0.0.4; charset=utf-8");
  // Exactly what the command prints at the same moment (nothing in the table changes between).
  const cli_result printed = run_cli({"metrics", "--domain", d.name()});
  REQUIRE(printed.code == 0);
  CHECK(first.body == printed.out);
  const std::string table = l.table_labels(d), sess = l.session_labels(d);
  CHECK(contains(first.body, "gpushare_table_capacity_bytes{" + table + "} 67108864\n"));
  CHECK(contains(first.body, "gpushare_table_sessions{" + table + "} 1\n"));
  CHECK(contains(first.body, "gpushare_session_reserved_bytes{" + sess + "} 3145728\n"));
  CHECK(contains(first.body, "gpushare_session_share{" + sess + "} 4\n"));
  // A second scrape reads the table again.
  auto more = l.s.reserve(1 * MiB, 0ms);
  const http_response second = get(x.port(), "/metrics");
  REQUIRE(second.complete);
  CHECK(contains(second.body, "gpushare_session_reserved_bytes{" + sess + "} 4194304\n"));
  CHECK(contains(second.body, "gpushare_table_reserved_bytes{" + table + "} 4194304\n"));
  // HEAD: the same head, no body.
  socket_fd h = connect_to(x.port());
  send_all(h.fd, "HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const http_response head = read_response(h.fd, false);
  CHECK(head.status == 200);
  char extra = 0;
  CHECK(::recv(h.fd, &extra, 1, 0) == 0); // closed, nothing after the head
  const http_response index = get(x.port(), "/");
  CHECK(index.status == 200);
  CHECK(index.header("Content-Type") == "text/html; charset=utf-8");
  CHECK(contains(index.body, "<a href=\"/metrics\">/metrics</a>"));
}

/// The line of `family` for the session named `name` in an exposition, or "".
std::string session_line(const std::string& body, const std::string& family,
                         const std::string& name) {
  for (const auto& line : lines_of(body))
    if (line.rfind(family + "{", 0) == 0 && contains(line, "session=\"" + name + "\"")) return line;
  return "";
}

TEST_CASE("metrics --listen --dir serves the tables of a table directory") {
  std::string dir = "/dev/shm/gpushare-exportertest-XXXXXX";
  REQUIRE(::mkdtemp(dir.data()) != nullptr);
  test_domain d;
  {
    session_options o = d.options("in-dir", 64 * MiB);
    o.directory = dir;
    session s("gpu", o);
    auto r = s.reserve(5 * MiB, 0ms);
    exporter in_dir(d.name(), {"--dir", dir});
    const http_response got = get(in_dir.port(), "/metrics");
    CHECK(got.status == 200);
    CHECK(
        session_line(got.body, "gpushare_session_reserved_bytes", "in-dir").ends_with(" 5242880"));
    exporter in_shm(d.name()); // /dev/shm itself: not there
    const http_response shm = get(in_shm.port(), "/metrics");
    CHECK(shm.status == 200);
    CHECK(session_line(shm.body, "gpushare_session_reserved_bytes", "in-dir").empty());
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST_CASE("metrics --listen answers unknown paths 404 and other methods 405") {
  test_domain d;
  exporter x(d.name());
  const http_response missing = get(x.port(), "/nope");
  CHECK(missing.status == 404);
  CHECK(missing.body == "not found: the metrics are at /metrics\n");
  CHECK(get(x.port(), "/metrics/extra").status == 404);
  const http_response post =
      ask(x.port(), "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                    "Connection: close\r\n\r\na=1");
  CHECK(post.status == 405);
  CHECK(post.header("Allow") == "GET, HEAD");
  CHECK(post.body == "method POST is not allowed: use GET\n");
  const http_response del = ask(x.port(), "DELETE / HTTP/1.1\r\nConnection: close\r\n\r\n");
  CHECK(del.status == 405);
  // A body over the limit (8 KiB) is refused, not read.
  const http_response big = ask(
      x.port(), "POST /metrics HTTP/1.1\r\nContent-Length: 100000000\r\nConnection: close\r\n\r\n");
  CHECK(big.status == 413);
  CHECK(get(x.port(), "/metrics").status == 200);
}

TEST_CASE("metrics --listen answers a malformed request 400 and serves the next scrape") {
  test_domain d;
  live_session l(d);
  exporter x(d.name());
  const std::string long_header =
      "GET /metrics HTTP/1.1\r\nX: " + std::string(9000, 'a') + "\r\n\r\n";
  for (const std::string& bad :
       {std::string("BANANA\r\n\r\n"), std::string("GET /metrics HTTP/9.9\r\n\r\n"),
        std::string("GET /metrics\r\n\r\n"), long_header}) {
    const http_response r = ask(x.port(), bad);
    CHECK_MESSAGE(r.status == 400, bad.substr(0, 40));
  }
  const http_response next = get(x.port(), "/metrics");
  CHECK(next.status == 200);
  CHECK(contains(next.body,
                 "gpushare_session_reserved_bytes{" + l.session_labels(d) + "} 3145728\n"));
}

TEST_CASE("metrics --listen serves 32 concurrent clients complete responses") {
  test_domain d;
  live_session l(d);
  exporter x(d.name());
  std::vector<http_response> answers(32);
  std::vector<std::thread> clients;
  for (auto& a : answers)
    clients.emplace_back([&a, port = x.port()] {
      socket_fd s = connect_to(port);
      send_all(s.fd, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
      a = read_response(s.fd);
    });
  for (auto& c : clients) c.join();
  const std::string line = "gpushare_session_share{" + l.session_labels(d) + "} 4\n";
  for (const auto& a : answers) {
    CHECK(a.complete);
    CHECK(a.status == 200);
    CHECK(contains(a.body, line));
    CHECK(a.body == answers[0].body); // nothing changed between the scrapes
  }
}

TEST_CASE("metrics --listen: silent, stalled and non-reading clients do not hold up a scrape") {
  test_domain d;
  live_session l(d);
  exporter x(d.name());
  std::vector<socket_fd> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(connect_to(x.port())); // connect, send nothing
  socket_fd stalled = connect_to(x.port());
  send_all(stalled.fd, "GET /metr"); // half a request line, then nothing
  std::vector<socket_fd> deaf;       // ask, never read (tiny receive buffers)
  for (int i = 0; i < 3; ++i) {
    deaf.push_back(connect_to(x.port(), 1024));
    send_all(deaf.back().fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  {
    socket_fd reset = connect_to(x.port()); // ask, then hang up at once (RST)
    send_all(reset.fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    const linger abort{1, 0};
    ::setsockopt(reset.fd, SOL_SOCKET, SO_LINGER, &abort, sizeof abort);
  }
  const auto start = std::chrono::steady_clock::now();
  const http_response r = get(x.port(), "/metrics");
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(r.status == 200);
  CHECK(contains(r.body, "gpushare_session_reserved_bytes{" + l.session_labels(d) + "} 3145728\n"));
  CHECK(took < 10s);
  // The scrape did not wait for the slow clients to time out (5 s): they are still connected.
  if (took < 4s) {
    for (const auto& s : idle) CHECK(still_open(s.fd));
    CHECK(still_open(stalled.fd));
  }
  CHECK(x.running());
  CHECK(get(x.port(), "/metrics").status == 200);
}

TEST_CASE("metrics --listen ends with exit code 0 on SIGTERM and on SIGINT") {
  test_domain d;
  for (const int sig : {SIGTERM, SIGINT}) {
    exporter x(d.name());
    REQUIRE(get(x.port(), "/metrics").status == 200);
    socket_fd idle = connect_to(x.port()); // an open connection does not keep it alive
    const int code = x.stop(sig);
    CHECK_MESSAGE(code == 0, x.output());
    CHECK(x.output() ==
          "serving metrics on http://127.0.0.1:" + std::to_string(x.port()) + "/metrics\n");
  }
}

TEST_CASE("metrics --listen on a port in use fails with exit code 1 and says so") {
  test_domain d;
  exporter x(d.name());
  const std::string where = "127.0.0.1:" + std::to_string(x.port());
  const cli_result r = run_cli({"metrics", "--domain", d.name(), "--listen", where});
  CHECK(r.code == 1);
  CHECK(contains(r.err, "cannot listen on " + where + ": Address already in use"));
  CHECK(r.out.empty());
  CHECK(x.running());
}

TEST_CASE("promtool check metrics accepts what the exporter serves") {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    std::printf("GPUSHARE_SKIP: promtool is not installed (Debian: prometheus)\n");
    return;
  }
  test_domain d;
  live_session l(d);
  exporter x(d.name());
  const http_response r = get(x.port(), "/metrics");
  REQUIRE(r.status == 200);
  const std::string file = "/tmp/gpushare-exporter-" + d.name() + ".prom";
  std::ofstream(file) << r.body;
  const test::command_result check =
      test::run_command("promtool check metrics < " + file + " 2>&1");
  std::remove(file.c_str());
  CHECK_MESSAGE(check.exit_code == 0, check.output);
}
#else
TEST_CASE("metrics --listen without cpp-httplib says which package to install") {
  const cli_result r = run_cli({"metrics", "--listen", "127.0.0.1:9840"});
  CHECK(r.code == 2);
  CHECK(contains(r.err, "libcpp-httplib-dev"));
  CHECK(contains(r.err, "--listen needs cpp-httplib"));
  CHECK(r.out.empty());
}
#endif

// Usage errors are found before anything is bound, with or without cpp-httplib.
TEST_CASE("metrics --listen rejects a bad address or port with exit code 2") {
  const cli_result banana = run_cli({"metrics", "--listen", "banana"});
  CHECK(banana.code == 2);
  CHECK(contains(banana.err, "--listen: \"banana\" is not a port number and has no ':PORT'"));
  CHECK(contains(banana.err, "expected PORT, ADDR:PORT or [IPV6-ADDR]:PORT"));
  const cli_result big = run_cli({"metrics", "--listen", "70000"});
  CHECK(big.code == 2);
  CHECK(contains(big.err, "--listen: port 70000 is out of range (1 to 65535)"));
  const cli_result none = run_cli({"metrics", "--listen"});
  CHECK(none.code == 2);
  CHECK(contains(none.err, "option --listen needs a value"));
  const cli_result name = run_cli({"metrics", "--listen", "localhost:9840"});
  CHECK(name.code == 2);
  CHECK(contains(name.err, "not a numeric IPv4 address"));
  for (const cli_result& r : {banana, big, none, name}) CHECK(r.out.empty());
}
