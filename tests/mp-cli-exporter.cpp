// SPDX-License-Identifier: Apache-2.0
// The gpushare command-line tool: `metrics --listen`, the node exporter (CTest label "exporter").
// The tool runs as a program on a loopback port picked free by the test; a small HTTP client over
// a plain socket scrapes it, so the test needs no curl. Every test uses a domain of its own.
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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
#include "exporter_test_util.hpp"
#include "test_util.hpp"

using namespace gpushare;
using namespace cli_test;
using namespace exporter_test;
using namespace std::chrono_literals;

#if GPUSHARE_CLI_HTTPLIB

namespace {

constexpr std::uint64_t MiB = 1ull << 20;

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
  send_all(h.fd, "HEAD /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
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
      ask(x.port(), "POST /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\n"
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
      send_all(s.fd, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
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
    send_all(deaf.back().fd, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  }
  {
    socket_fd reset = connect_to(x.port()); // ask, then hang up at once (RST)
    send_all(reset.fd, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
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
// ------------------------------------------------------------------------------------------------
// Who may read it (issue 42, A4)
// ------------------------------------------------------------------------------------------------

namespace {
/// GET `path` with Host `host` and, unless empty, `Authorization: Bearer <token>`.
http_response get_as(int port, const std::string& path, const std::string& host,
                     const std::string& token = "") {
  return ask(port, "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n" +
                       (token.empty() ? "" : "Authorization: Bearer " + token + "\r\n") +
                       "Connection: close\r\n\r\n");
}
} // namespace

TEST_CASE("metrics --listen answers its addresses, localhost and --allow-host names, not others") {
  // A DNS-rebinding page in a browser on the node asks with its own name in Host: refused
  // (before: /status.json answered any Host, session names, pids and pods included).
  test_domain d;
  live_session l(d);
  exporter x(d.name(), {"--allow-host", "node1.example,prom.example"});
  const std::string port = ":" + std::to_string(x.port());
  for (const std::string path : {"/status.json", "/metrics", "/"}) {
    CAPTURE(path);
    const http_response evil = get_as(x.port(), path, "rebind.evil.example" + port);
    CHECK(evil.status == 421);
    CHECK(contains(evil.body, "not 'rebind.evil.example" + port + "'"));
    CHECK(contains(evil.body, "add the name with --allow-host"));
    CHECK(!contains(evil.body, "exported")); // no session data
    for (const std::string& host :
         std::vector<std::string>{"127.0.0.1" + port, "localhost" + port, "node1.example" + port,
                                  "PROM.example", "[::1]" + port}) {
      CAPTURE(host);
      CHECK(get_as(x.port(), path, host).status == 200);
    }
  }
  CHECK(contains(get_as(x.port(), "/status.json", "localhost" + port).body, "exported"));
}

TEST_CASE("metrics --listen --token-file: the data needs the bearer token, the page does not") {
  test_domain d;
  live_session l(d);
  const std::string token = "5c1e0b7f2a9d4e6c8b3a1f0e7d6c5b4a";
  const std::string file = "/tmp/gpushare-exporter-token-" + std::to_string(::getpid());
  {
    std::ofstream(file) << token << "\n";
    REQUIRE(::chmod(file.c_str(), 0600) == 0);
  }
  exporter x(d.name(), {"--token-file", file});
  for (const std::string path : {"/metrics", "/status.json"}) {
    CAPTURE(path);
    const http_response none = get_as(x.port(), path, "127.0.0.1");
    CHECK(none.status == 401);
    CHECK(none.header("WWW-Authenticate") == "Bearer realm=\"gpushare\"");
    CHECK(contains(none.body, "Authorization: Bearer <token>"));
    CHECK(get_as(x.port(), path, "127.0.0.1", token + "0").status == 401);
    CHECK(get_as(x.port(), path, "127.0.0.1", token.substr(1)).status == 401);
    const http_response ok = get_as(x.port(), path, "127.0.0.1", token);
    CHECK(ok.status == 200);
    CHECK(contains(ok.body, "exported"));
  }
  CHECK(get_as(x.port(), "/", "127.0.0.1").status == 200); // the page: no data, no token
  // A token file others may read is refused before anything is bound.
  REQUIRE(::chmod(file.c_str(), 0644) == 0);
  const cli_result loose =
      run_cli({"metrics", "--domain", d.name(), "--listen", "127.0.0.1:1", "--token-file", file});
  CHECK(loose.code == 2);
  CHECK(contains(loose.err, "may be read or written by group or others: chmod 600 it"));
  ::unlink(file.c_str());
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
TEST_CASE("metrics: --allow-host and --token-file go with --listen") {
  const cli_result r = run_cli({"metrics", "--allow-host", "a.example"});
  CHECK(r.code == 2);
  CHECK(contains(r.err, "--allow-host and --token-file go with --listen"));
  CHECK(r.out.empty());
}

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
