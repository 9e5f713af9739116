// SPDX-License-Identifier: Apache-2.0
// `gpushare metrics --listen` against clients that try to hold it (CTest label "exporter"): a
// request trickled byte by byte, a head of endless short lines, more connections than it takes
// (issue 42, A2, A3, A6). The limits are exporter_limits' (tools/cli_exporter_front.hpp) and
// docs/cli.md's "Slow or malformed clients".
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_test_util.hpp"
#include "exporter_test_util.hpp"
#include "test_util.hpp"

using namespace cli_test;
using namespace exporter_test;
using namespace std::chrono_literals;

#if GPUSHARE_CLI_HTTPLIB

namespace {

using clock_type = std::chrono::steady_clock;

/// A connection to 127.0.0.1:port from the loopback address 127.0.0.<from> (Linux routes all of
/// 127/8 to lo), so that one test can be several clients.
socket_fd connect_from(int port, int from) {
  socket_fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(s.fd >= 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(0x7f000000u | static_cast<std::uint32_t>(from));
  REQUIRE(::bind(s.fd, reinterpret_cast<sockaddr*>(&local), sizeof local) == 0);
  const timeval limit{30, 0};
  ::setsockopt(s.fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  sockaddr_in a = loopback(port);
  REQUIRE(::connect(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return s;
}

http_response scrape_from(int port, int from) {
  socket_fd s = connect_from(port, from);
  send_all(s.fd, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  return read_response(s.fd);
}

/// The resident memory of `pid` in KiB (VmRSS in /proc/PID/status).
long resident_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

/// A client that sends its request one byte at a time, every `gap`, and never ends it.
struct trickler {
  socket_fd s;
  clock_type::time_point start = clock_type::now();
  std::string reply;
  bool closed = false;
  clock_type::time_point ended{};
  explicit trickler(int port) : s(connect_to(port)) {
    send_all(s.fd, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
  }
  /// One step: read what came (the answer and the close), else send one more byte.
  void step() {
    if (closed) return;
    pollfd p{s.fd, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) {
      char buf[4096];
      const ssize_t n = ::recv(s.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) reply.append(buf, static_cast<std::size_t>(n));
      if (n <= 0) {
        closed = true;
        ended = clock_type::now();
      }
      return;
    }
    (void)::send(s.fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
};

} // namespace

TEST_CASE("metrics --listen: requests trickled a byte at a time get 408 after 5 s in all and "
          "hold no scrape up") {
  test_domain d;
  exporter x(d.name());
  // More trickling clients than the 8 workers: cpp-httplib's own loop gave each a worker and
  // timed out each read (5 s), not the request, so they held every worker for good.
  std::vector<trickler> slow;
  for (int i = 0; i < 20; ++i) slow.emplace_back(x.port());
  // The feeder alone touches the tricklers until it ends: when every one was answered and
  // closed, or after 30 s; the test reads them after joining it.
  std::thread feeder([&] {
    const auto give_up = clock_type::now() + 30s;
    for (bool all_closed = false; !all_closed && clock_type::now() < give_up;) {
      all_closed = true;
      for (auto& t : slow) {
        t.step();
        all_closed = all_closed && t.closed;
      }
      std::this_thread::sleep_for(300ms);
    }
  });
  for (int k = 0; k < 3; ++k) {
    const http_response r = get(x.port(), "/metrics");
    CHECK(r.complete);
    CHECK(r.status == 200);
    std::this_thread::sleep_for(500ms);
  }
  feeder.join();
  for (const auto& t : slow) {
    REQUIRE(t.closed);
    CHECK(contains(t.reply, "HTTP/1.1 408 Request Timeout\r\n"));
    CHECK(contains(t.reply, "the request did not arrive in 5 s\n"));
    // The bound is the whole request: never before 5 s, and not much later (the feeder kept
    // sending a byte every 300 ms, which renewed cpp-httplib's per-read timeout for ever).
    CHECK(t.ended - t.start >= 4900ms);
    CHECK(t.ended - t.start < 20s);
  }
  CHECK(get(x.port(), "/metrics").status == 200);
}

TEST_CASE("metrics --listen: a head of endless short lines gets 431 and the memory stays bounded") {
  test_domain d;
  exporter x(d.name());
  REQUIRE(get(x.port(), "/metrics").status == 200);
  const long before = resident_kib(x.pid());
  REQUIRE(before > 0);
  socket_fd s = connect_to(x.port());
  send_all(s.fd, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  const std::string lines = [] {
    std::string out;
    for (int i = 0; i < 4096; ++i) out += "X-A: b\r\n";
    return out;
  }();
  // Up to 256 MiB of header lines (each 8 bytes, far below cpp-httplib's 8 KiB per line), sent
  // while nothing comes back; the answer ends it.
  std::size_t sent = 0;
  bool answered = false;
  while (sent < (256u << 20) && !answered) {
    pollfd p{s.fd, POLLIN | POLLOUT, 0};
    REQUIRE(::poll(&p, 1, 30'000) > 0);
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      answered = true;
      break;
    }
    const ssize_t n = ::send(s.fd, lines.data(), lines.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) break;
    sent += static_cast<std::size_t>(n);
  }
  CHECK(answered);
  CHECK(sent < (4u << 20)); // answered after 16 KiB, not at the end
  const http_response r = read_response(s.fd);
  CHECK(r.status == 431);
  CHECK(r.body == "the request's head is too large: at most 16384 bytes and 100 lines\n");
  const long after = resident_kib(x.pid());
  CHECK_MESSAGE(after - before < 16 * 1024, "VmRSS " << before << " -> " << after << " KiB");
  // The line limit alone: 101 short lines are refused, 100 (the empty one included) served.
  std::string head = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (int i = 0; i < 96; ++i) head += "X-A: b\r\n";
  CHECK(ask(x.port(), head + "\r\n").status == 200);
  CHECK(ask(x.port(), head + "X-A: b\r\n\r\n").status == 431);
  CHECK(x.running());
}

TEST_CASE("metrics --listen: at most 64 connections from one address and 256 in all; a client "
          "over the limit gets 503 at once and others are served") {
  test_domain d;
  exporter x(d.name());
  std::vector<socket_fd> mine;
  for (int i = 0; i < 64; ++i) mine.push_back(connect_from(x.port(), 1));
  // Each connection the exporter has accepted counts; let it see all 64 before the 65th.
  std::this_thread::sleep_for(300ms);
  const http_response over = scrape_from(x.port(), 1);
  CHECK(over.status == 503);
  CHECK(over.header("Retry-After") == "5");
  CHECK(over.body == "too many connections from 127.0.0.1 at once (at most 64): try again later\n");
  CHECK(scrape_from(x.port(), 2).status == 200); // another client is served meanwhile
  // Connections closed by the client are counted off at once.
  mine.clear();
  http_response back;
  for (int k = 0; k < 50 && back.status != 200; ++k) {
    std::this_thread::sleep_for(100ms);
    back = scrape_from(x.port(), 1);
  }
  CHECK(back.status == 200);
  // In all: four clients of 64 each fill the 256; a fifth is refused until they time out (5 s).
  std::vector<socket_fd> many;
  for (int from = 2; from <= 5; ++from)
    for (int i = 0; i < 64; ++i) many.push_back(connect_from(x.port(), from));
  std::this_thread::sleep_for(300ms);
  const http_response full = scrape_from(x.port(), 6);
  CHECK(full.status == 503);
  CHECK(full.body == "too many connections at once (at most 256): try again later\n");
  http_response later;
  const auto start = clock_type::now();
  while (later.status != 200 && clock_type::now() - start < 30s) {
    std::this_thread::sleep_for(250ms);
    later = scrape_from(x.port(), 6);
  }
  CHECK(later.status == 200);
  CHECK(clock_type::now() - start >= 3s); // they were held until their request time ran out
  for (const auto& s : many) {            // each gets its 408 and the close, 5 s after its accept
    pollfd p{s.fd, POLLIN, 0};
    CHECK(::poll(&p, 1, 30'000) == 1);
    CHECK(contains(read_response(s.fd).head, "HTTP/1.1 408 Request Timeout\r\n"));
  }
  CHECK(x.running());
}

#endif
