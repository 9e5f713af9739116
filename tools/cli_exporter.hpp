// SPDX-License-Identifier: Apache-2.0
// `gpushare metrics`, once on stdout or, with --listen, over HTTP for Prometheus (a node
// exporter: GET /metrics samples every table afresh), with a live page of the tables at GET /
// (tools/cli_page.hpp) and its data at GET /status.json. The HTTP server is cpp-httplib (Debian:
// libcpp-httplib-dev); a tool built without it still prints, and says what to install when
// --listen is asked for. See docs/cli.md, "gpushare metrics".
#pragma once

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "cli_args.hpp"
#include "cli_errors.hpp"
#include "cli_exporter_access.hpp"
#include "cli_exporter_front.hpp"
#include "cli_listen.hpp"
#include "cli_metrics.hpp"
#include "cli_page.hpp"
#include "cli_sample.hpp"
#include "cli_status.hpp"
#include "cli_usage.hpp"

#if defined(GPUSHARE_CLI_HTTPLIB) && GPUSHARE_CLI_HTTPLIB
#include <httplib.h>
#endif

namespace gpushare::cli {

/// The Content-Type of the Prometheus text exposition format.
inline constexpr std::string_view metrics_content_type = "text/plain; version=0.0.4; charset=utf-8";

/// A request's body may be at most this long (GET needs none). The other limits:
/// exporter_limits (cli_exporter_front.hpp).
inline constexpr std::size_t exporter_max_body = 8192;

/// A fresh nonce for the page's CSP: 128 bits from the system's random source, in hex.
inline std::string page_nonce() {
  std::random_device rd;
  std::string out;
  for (int k = 0; k < 4; ++k) {
    char part[9];
    std::snprintf(part, sizeof part, "%08x", static_cast<unsigned>(rd()));
    out += part;
  }
  return out;
}

/// The signals that end the exporter. Blocked in every thread, taken by sigtimedwait.
inline sigset_t exporter_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

/// Waits for SIGINT or SIGTERM (blocked: see exporter_stop_signals), or for `done`. Returns the
/// signal, or 0 when `done` came first.
inline int wait_for_stop_signal(const sigset_t& set, const std::atomic<bool>& done) {
  const timespec tick{0, 100'000'000};
  while (!done.load()) {
    const int sig = ::sigtimedwait(&set, nullptr, &tick);
    if (sig > 0) return sig;
  }
  return 0;
}

/// Why binding failed, for a human: the system's reason and what to do about it.
inline std::string bind_failure_text(const listen_address& where, int err) {
  std::string out = "cannot listen on " + where.text();
  if (err == 0) return out + " (the address could not be bound; is it one of this machine's?)";
  out.append(": ").append(std::strerror(err));
  if (err == EADDRINUSE) out += " (another program listens on this port: pick another one)";
  if (err == EACCES) out += " (ports below 1024 need privileges: pick a port from 1024 up)";
  if (err == EADDRNOTAVAIL) out += " (the address is not one of this machine's)";
  return out;
}

#if defined(GPUSHARE_CLI_HTTPLIB) && GPUSHARE_CLI_HTTPLIB

inline constexpr bool exporter_available = true;

namespace exporter_detail {

/// The body of an error response that no handler wrote (httplib's own 400, 413, 414, ...).
inline std::string status_text(int status) {
  switch (status) {
  case 400: return "bad request: the request line or a header is malformed\n";
  case 413: return "the request's body is too long (GET needs none)\n";
  case 414: return "the request target is too long\n";
  default: return "the request failed\n";
  }
}

inline void plain_text(httplib::Response& res, int status, const std::string& text) {
  res.status = status;
  res.set_content(text, "text/plain; charset=utf-8");
}

/// GET /metrics, GET /status.json, GET / (the live page; HEAD as well: httplib answers it from the
/// GET handler without the body); every other method 405, every other path 404, a malformed request
/// 400.
inline void add_routes(httplib::Server& s, const domain_choice& domain) {
  s.Get("/metrics", [domain](const httplib::Request&, httplib::Response& res) {
    try {
      res.set_content(metrics_text(take_sample(domain)), std::string(metrics_content_type));
    } catch (const std::exception& e) {
      plain_text(res, 500, std::string("gpushare metrics: error: ").append(e.what()) + "\n");
    }
  });
  s.Get(std::string(exporter_status_path),
        [domain](const httplib::Request&, httplib::Response& res) {
          try {
            res.set_content(status_json(nullptr, take_sample(domain), domain.name, 0),
                            "application/json");
            res.set_header("Cache-Control", "no-store");
          } catch (const std::exception& e) {
            plain_text(res, 500, std::string("gpushare metrics: error: ").append(e.what()) + "\n");
          }
        });
  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    const std::string nonce = page_nonce();
    res.set_content(exporter_page(nonce), "text/html; charset=utf-8");
    res.set_header("Content-Security-Policy", exporter_page_csp(nonce));
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Referrer-Policy", "no-referrer");
    res.set_header("Cache-Control", "no-store");
  });
  const httplib::Server::Handler not_allowed = [](const httplib::Request& req,
                                                  httplib::Response& res) {
    res.set_header("Allow", "GET, HEAD");
    plain_text(res, 405, "method " + req.method + " is not allowed: use GET\n");
  };
  s.Post(".*", not_allowed);
  s.Put(".*", not_allowed);
  s.Patch(".*", not_allowed);
  s.Delete(".*", not_allowed);
  s.Options(".*", not_allowed);
  s.set_error_handler(httplib::Server::Handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      plain_text(res, 404, "not found: the metrics are at /metrics\n");
    else
      plain_text(res, res.status, std::to_string(res.status) + " " + status_text(res.status));
  }));
}

/// Who may read (cli_exporter_access.hpp), before any route: a Host that is not an address,
/// localhost or an --allow-host name gets 421; a data path (/metrics, /status.json) without the
/// --token-file token gets 401. The page at / holds no data and needs no token: its script sends
/// the token given after '#token=' in its address.
inline void add_access_check(httplib::Server& s, const exporter_access& access) {
  s.set_pre_routing_handler([access](const httplib::Request& req, httplib::Response& res) {
    const std::string host = req.get_header_value("Host");
    if (!host_allowed(host, access)) {
      plain_text(res, 421,
                 "this exporter answers requests addressed to an IP address of this machine, "
                 "localhost, or a name given with --allow-host; not '" +
                     host.substr(0, 200) +
                     "' (a page in a browser on this machine could otherwise read it through a "
                     "name that resolves here): add the name with --allow-host\n");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.path != "/" && !token_accepted(req.get_header_value("Authorization"), access.token)) {
      res.set_header("WWW-Authenticate", "Bearer realm=\"gpushare\"");
      plain_text(res, 401,
                 "this exporter needs the token of its --token-file: send the header "
                 "'Authorization: Bearer <token>' (Prometheus: authorization: credentials_file)\n");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
}

/// The routes of a cpp-httplib server, driven one request at a time on a connection that the
/// front (cli_exporter_front.hpp) accepted and whose head it read: process_request is cpp-httplib's
/// own (protected) entry for one request on a stream; its arguments differ between versions.
class routed_server : public httplib::Server {
public:
  template <class Stream>
  bool serve(Stream& s, const std::string& ip, int port, const std::string& local_ip,
             int local_port) {
    bool closed = false;
    const std::function<void(httplib::Request&)> setup;
    if constexpr (requires { this->process_request(s, true, closed, setup); }) {
      (void)ip, (void)port, (void)local_ip, (void)local_port;
      return this->process_request(s, true, closed, setup);
    } else {
      return this->process_request(s, ip, port, local_ip, local_port, true, closed, setup);
    }
  }
};

/// A connection for cpp-httplib: the bytes the front read first, then the socket; every read
/// before the request's deadline, every write within `response_time` of the response's first.
class front_stream final : public httplib::Stream {
public:
  front_stream(client_conn& c, std::chrono::milliseconds response_time)
      : c_(c), response_time_(response_time) {}
  bool is_readable() const override {
    return used_ < c_.data.size() || wait_ready(c_.fd, POLLIN, c_.deadline);
  }
  bool is_writable() const override { return wait_ready(c_.fd, POLLOUT, write_deadline()); }
  ssize_t read(char* ptr, size_t size) override {
    if (used_ < c_.data.size()) {
      const std::size_t n = std::min(size, c_.data.size() - used_);
      std::memcpy(ptr, c_.data.data() + used_, n);
      used_ += n;
      return static_cast<ssize_t>(n);
    }
    if (!wait_ready(c_.fd, POLLIN, c_.deadline)) return -1;
    return ::recv(c_.fd, ptr, size, 0);
  }
  ssize_t write(const char* ptr, size_t size) override {
    std::size_t sent = 0;
    while (sent < size) {
      if (!wait_ready(c_.fd, POLLOUT, write_deadline())) return -1;
      const ssize_t n = ::send(c_.fd, ptr + sent, size - sent, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
      if (n > 0) sent += static_cast<std::size_t>(n);
    }
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = peer_address(c_.fd, &port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = peer_address(c_.fd, &port, true);
  }
  int socket() const override { return c_.fd; }

private:
  std::chrono::steady_clock::time_point write_deadline() const {
    if (write_deadline_ == std::chrono::steady_clock::time_point{})
      write_deadline_ = std::chrono::steady_clock::now() + response_time_;
    return write_deadline_;
  }
  client_conn& c_;
  std::size_t used_ = 0;
  std::chrono::milliseconds response_time_;
  mutable std::chrono::steady_clock::time_point write_deadline_{};
};

/// A listening socket on `where` (SO_REUSEADDR: a restart binds while old connections linger;
/// not SO_REUSEPORT, which would let a second exporter share the port without an error).
inline int listen_on(const listen_address& where) {
  sockaddr_storage a{};
  socklen_t len = 0;
  if (where.ipv6) {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&a);
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(where.port);
    if (::inet_pton(AF_INET6, where.host.c_str(), &v6->sin6_addr) != 1)
      throw runtime_failure(bind_failure_text(where, 0));
    len = sizeof *v6;
  } else {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&a);
    v4->sin_family = AF_INET;
    v4->sin_port = htons(where.port);
    if (::inet_pton(AF_INET, where.host.c_str(), &v4->sin_addr) != 1)
      throw runtime_failure(bind_failure_text(where, 0));
    len = sizeof *v4;
  }
  const int fd = ::socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw runtime_failure(bind_failure_text(where, errno));
  const int yes = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    const int err = errno;
    ::close(fd);
    throw runtime_failure(bind_failure_text(where, err));
  }
  return fd;
}

} // namespace exporter_detail

/// Serves the metrics of `domain` at `where` until SIGINT or SIGTERM; 0 then. A failure to bind
/// is a runtime_failure (exit code 1).
inline int serve_metrics(const listen_address& where, const domain_choice& domain,
                         const exporter_access& access) {
  // Before any thread starts, so that every thread inherits the mask and the signals come to
  // sigtimedwait below; SIGPIPE: a client that hangs up mid-response must not end the process.
  const sigset_t stop = exporter_stop_signals();
  ::pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  exporter_detail::routed_server server;
  exporter_detail::add_access_check(server, access);
  exporter_detail::add_routes(server, domain);
  server.set_payload_max_length(exporter_max_body);
  const int fd = exporter_detail::listen_on(where);
  const exporter_limits limits;
  exporter_front front(fd, limits, [&](client_conn& c) {
    int port = 0, local_port = 0;
    const std::string ip = peer_address(c.fd, &port);
    const std::string local_ip = peer_address(c.fd, &local_port, true);
    exporter_detail::front_stream s(c, limits.response_time);
    server.serve(s, ip, port, local_ip, local_port);
  });
  write_stdout("serving metrics on http://" + where.text() + "/metrics\n");
  std::atomic<bool> done{false}, quit{false};
  bool served = false;
  std::thread listener([&] {
    served = front.run(quit);
    done.store(true);
  });
  const int sig = wait_for_stop_signal(stop, done);
  quit.store(true);
  listener.join();
  ::close(fd);
  if (sig == 0 && !served)
    throw runtime_failure("the server on " + where.text() + " stopped: accepting failed");
  return 0;
}

#else

inline constexpr bool exporter_available = false;

/// Without cpp-httplib: says what to install; exit code 2 (the option cannot be used here).
inline int serve_metrics(const listen_address&, const domain_choice&, const exporter_access&) {
  std::fputs("gpushare metrics: error: --listen needs cpp-httplib, and this gpushare tool was "
             "built without it: install it (Debian/Ubuntu: apt-get install libcpp-httplib-dev) "
             "and build the tool again, or publish `gpushare metrics` through node exporter's "
             "textfile collector instead (gpushare metrics --help)\n",
             stderr);
  return 2;
}

#endif

inline int run_metrics(std::span<const std::string> args) {
  static constexpr flag_spec specs[] = {{"--domain", true},     {"--all-domains", false},
                                        {"--dir", true},        {"--listen", true},
                                        {"--allow-host", true}, {"--token-file", true}};
  const parsed_args a = parse_command_line(args, specs, 0);
  if (a.help) {
    write_stdout(std::string(metrics_usage));
    return 0;
  }
  const domain_choice domain = domain_option(a);
  const auto listen = a.value("--listen");
  if (!listen && (a.has("--allow-host") || a.has("--token-file")))
    throw usage_error("--allow-host and --token-file go with --listen (they say who may read the "
                      "exporter)");
  if (listen) {
    exporter_access access;
    if (const auto hosts = a.value("--allow-host"))
      access.allowed_hosts = parse_allowed_hosts(*hosts);
    if (const auto file = a.value("--token-file")) access.token = read_token_file(*file);
    return serve_metrics(parse_listen(*listen), domain, access);
  }
  write_stdout(metrics_text(take_sample(domain)));
  return 0;
}

} // namespace gpushare::cli
