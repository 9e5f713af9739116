// SPDX-License-Identifier: Apache-2.0
// What the exporter's tests share (mp-cli-exporter, mp-cli-page): a loopback HTTP/1.1 client over
// a plain socket (so the tests need no curl) and `gpushare metrics --listen` run as a program on a
// free loopback port.
#pragma once

#include <doctest/doctest.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "test_util.hpp"

namespace exporter_test {

using namespace cli_test;
using namespace std::chrono_literals;

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

inline sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

/// A port that was free a moment ago: bound to 127.0.0.1:0, read back, closed.
inline int free_port() {
  socket_fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a = loopback(0);
  REQUIRE(::bind(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(s.fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  return ntohs(a.sin_port);
}

/// A connection to 127.0.0.1:port; reads give up after 30 s (a hang fails, not stalls, the
/// test). `receive_buffer` > 0 shrinks the receive buffer before connecting.
inline socket_fd connect_to(int port, int receive_buffer = 0) {
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

inline void send_all(int fd, const std::string& text) {
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
inline http_response read_response(int fd, bool has_body = true) {
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
inline http_response ask(int port, const std::string& request, bool has_body = true) {
  socket_fd s = connect_to(port);
  send_all(s.fd, request);
  return read_response(s.fd, has_body);
}

inline http_response get(int port, const std::string& path) {
  return ask(port, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
}

/// True while the server has neither closed `fd` nor sent anything on it.
inline bool still_open(int fd) {
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
  pid_t pid() const { return p_.pid; }
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

} // namespace exporter_test
