// SPDX-License-Identifier: Apache-2.0
// The exporter's connection front (`gpushare metrics --listen`): it accepts the connections
// itself, reads each request's head without a worker (one poll loop over every connection), and
// hands a worker only a complete head. So a client that trickles its request, or sends header
// lines without end, holds no worker and no unbounded memory: every request gets
// exporter_request_time in all from its connection to the end of its head (and body), at most
// exporter_max_head bytes and exporter_max_head_lines lines of head, and the connections open at
// once are bounded per client address and in all. The HTTP itself (routes, responses) is
// cpp-httplib's, driven by a worker through cli_exporter.hpp. See docs/cli.md, "Slow or malformed
// clients".
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace gpushare::cli {

/// The exporter's limits (docs/cli.md, "Slow or malformed clients").
struct exporter_limits {
  /// From a connection's accept to the end of its request (head and body): 408 after it.
  std::chrono::milliseconds request_time{5000};
  /// Writing a response, from its first byte: the connection is closed after it.
  std::chrono::milliseconds response_time{5000};
  std::size_t max_head = 16 * 1024;  ///< request line and headers, bytes: 431 past it
  std::size_t max_head_lines = 100;  ///< request line and headers, lines: 431 past it
  std::size_t max_connections = 256; ///< open at once, in all: 503 past it
  std::size_t max_per_client = 64;   ///< open at once from one address: 503 past it
  std::size_t workers = 8;           ///< requests served at once (complete heads only)
};

/// Where a request's head stands: still arriving, complete (`length` bytes, the blank line
/// included), or over a limit.
struct head_verdict {
  enum state_t { incomplete, complete, too_large } state = incomplete;
  std::size_t length = 0;
};

/// Judges the bytes received so far on a connection. A head ends at its first empty line (CRLF
/// or a bare LF, as cpp-httplib reads lines); it may hold at most `max_bytes` bytes and
/// `max_lines` lines, the empty one included.
inline head_verdict judge_head(std::string_view data, std::size_t max_bytes,
                               std::size_t max_lines) {
  std::size_t lines = 0, start = 0;
  for (std::size_t i = 0; i < data.size(); ++i) {
    if (data[i] != '\n') continue;
    ++lines;
    const std::size_t len = i - start; // the line without its LF
    if (len == 0 || (len == 1 && data[start] == '\r')) {
      if (i + 1 > max_bytes || lines > max_lines) return {head_verdict::too_large, 0};
      return {head_verdict::complete, i + 1};
    }
    if (lines >= max_lines) return {head_verdict::too_large, 0};
    start = i + 1;
  }
  if (data.size() >= max_bytes) return {head_verdict::too_large, 0};
  return {head_verdict::incomplete, 0};
}

/// A short response that ends the connection: status line, a plain-text body.
inline std::string closing_response(int status, std::string_view reason, std::string_view text) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " ";
  out.append(reason).append("\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ");
  out += std::to_string(text.size());
  if (status == 503) out += "\r\nRetry-After: 5";
  out.append("\r\nConnection: close\r\n\r\n").append(text);
  return out;
}

/// Waits until `fd` is ready for `events` (or hung up), at most until `deadline`.
inline bool wait_ready(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

/// The numeric address of a socket's peer ("127.0.0.1", "::1"; IPv4 mapped into IPv6 as IPv4),
/// and its port.
inline std::string peer_address(int fd, int* port = nullptr, bool local = false) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  auto* sa = reinterpret_cast<sockaddr*>(&a);
  if ((local ? ::getsockname(fd, sa, &len) : ::getpeername(fd, sa, &len)) != 0) return "?";
  char text[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    if (port) *port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr))
      ::inet_ntop(AF_INET, &v6->sin6_addr.s6_addr[12], text, sizeof text);
    else
      ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    if (port) *port = ntohs(v6->sin6_port);
  }
  return text;
}

/// One client connection: its socket (non-blocking), its peer's address, what it sent so far,
/// and when its request must be complete.
struct client_conn {
  int fd = -1;
  std::string peer;
  std::string data;
  std::chrono::steady_clock::time_point deadline;
  bool draining = false; ///< answered (408, 431): reading what it still sends until it stops
};

/// Accepts on a listening socket and serves complete request heads on a pool of workers; see
/// the file's comment. `serve` gets a connection whose `data` starts with a complete head; the
/// front closes the connection after it.
class exporter_front {
public:
  using serve_fn = std::function<void(client_conn&)>;

  exporter_front(int listen_fd, exporter_limits limits, serve_fn serve)
      : listen_fd_(listen_fd), limits_(limits), serve_(std::move(serve)) {}

  /// Serves until `stop` is set (checked every 100 ms); false when accepting failed.
  bool run(const std::atomic<bool>& stop);

private:
  using clock = std::chrono::steady_clock;
  void accept_all(clock::time_point now);
  bool read_some(client_conn& c, clock::time_point now); // false: close it
  void reject(client_conn& c, int status, std::string_view reason, std::string_view text,
              clock::time_point now);
  void hand_over(client_conn&& c);
  void release(client_conn& c);
  void worker();
  void poll_once();

  int listen_fd_;
  exporter_limits limits_;
  serve_fn serve_;
  std::vector<client_conn> pending_; // the poll loop's own
  clock::time_point accept_paused_until_{};
  bool accept_failed_ = false;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<client_conn> ready_;
  std::map<std::string, std::size_t> per_peer_;
  std::size_t open_ = 0;
  bool stopping_ = false;
};

inline void exporter_front::release(client_conn& c) {
  if (c.fd >= 0) ::close(c.fd);
  c.fd = -1;
  const std::lock_guard lock(m_);
  --open_;
  if (auto it = per_peer_.find(c.peer); it != per_peer_.end() && --it->second == 0)
    per_peer_.erase(it);
}

inline void exporter_front::accept_all(clock::time_point now) {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        accept_paused_until_ = now + std::chrono::milliseconds(100); // out of descriptors
      else if (errno != EAGAIN && errno != EWOULDBLOCK)
        accept_failed_ = true;
      return;
    }
    client_conn c{fd, peer_address(fd), {}, now + limits_.request_time};
    std::string refusal;
    {
      const std::lock_guard lock(m_);
      std::size_t& mine = per_peer_[c.peer];
      if (mine >= limits_.max_per_client)
        refusal = "too many connections from " + c.peer + " at once (at most " +
                  std::to_string(limits_.max_per_client) + "): try again later\n";
      else if (open_ >= limits_.max_connections)
        refusal = "too many connections at once (at most " +
                  std::to_string(limits_.max_connections) + "): try again later\n";
      if (mine == 0 && !refusal.empty()) per_peer_.erase(c.peer);
      if (refusal.empty()) ++mine, ++open_;
    }
    if (refusal.empty()) {
      pending_.push_back(std::move(c));
      continue;
    }
    const std::string r = closing_response(503, "Service Unavailable", refusal);
    (void)::send(fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::close(fd);
  }
}

/// Answers `c` and keeps reading (and dropping) what it still sends for a moment, so that the
/// answer is read before the close resets the connection.
inline void exporter_front::reject(client_conn& c, int status, std::string_view reason,
                                   std::string_view text, clock::time_point now) {
  const std::string r = closing_response(status, reason, text);
  (void)::send(c.fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(c.fd, SHUT_WR);
  c.draining = true;
  c.data.clear();
  c.data.shrink_to_fit();
  c.deadline = now + std::chrono::seconds(1);
}

inline bool exporter_front::read_some(client_conn& c, clock::time_point now) {
  char buf[4096];
  for (std::size_t got = 0; got < 256 * 1024;) {
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n == 0) return false; // the client hung up
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    got += static_cast<std::size_t>(n);
    if (c.draining) continue;
    c.data.append(buf, static_cast<std::size_t>(n));
    const head_verdict v = judge_head(c.data, limits_.max_head, limits_.max_head_lines);
    if (v.state == head_verdict::complete) {
      hand_over(std::move(c));
      return true;
    }
    if (v.state == head_verdict::too_large) {
      reject(c, 431, "Request Header Fields Too Large",
             "the request's head is too large: at most " + std::to_string(limits_.max_head) +
                 " bytes and " + std::to_string(limits_.max_head_lines) + " lines\n",
             now);
      return true;
    }
  }
  return !c.draining; // a draining client that keeps sending: closed
}

inline void exporter_front::hand_over(client_conn&& c) {
  {
    const std::lock_guard lock(m_);
    ready_.push_back(std::move(c));
  }
  c.fd = -1; // moved: the poll loop drops it
  cv_.notify_one();
}

inline void exporter_front::worker() {
  for (;;) {
    client_conn c;
    {
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
      if (ready_.empty()) return;
      c = std::move(ready_.front());
      ready_.pop_front();
    }
    if (!stopping_) {
      try {
        serve_(c);
      } catch (...) { // a response that could not be made: the connection just closes
      }
    }
    ::shutdown(c.fd, SHUT_WR);
    release(c);
  }
}

inline void exporter_front::poll_once() {
  const clock::time_point now = clock::now();
  std::vector<pollfd> fds;
  const bool accepting = now >= accept_paused_until_;
  fds.push_back({listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0});
  clock::time_point wake = now + std::chrono::milliseconds(100);
  for (const client_conn& c : pending_) {
    fds.push_back({c.fd, POLLIN, 0});
    wake = std::min(wake, c.deadline);
  }
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
  if (::poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(ms, 0))) < 0) return;
  const clock::time_point after = clock::now();
  std::vector<client_conn> keep;
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    client_conn& c = pending_[i];
    bool open = true;
    if (fds[i + 1].revents != 0) open = read_some(c, after);
    if (open && c.fd >= 0 && after >= c.deadline) {
      if (c.draining)
        open = false;
      else
        reject(c, 408, "Request Timeout",
               "the request did not arrive in " +
                   std::to_string(limits_.request_time.count() / 1000) + " s\n",
               after);
    }
    if (c.fd < 0) continue; // handed to a worker
    if (open)
      keep.push_back(std::move(c));
    else
      release(c);
  }
  pending_ = std::move(keep);
  if (accepting && (fds[0].revents & POLLIN)) accept_all(after);
}

inline bool exporter_front::run(const std::atomic<bool>& stop) {
  std::vector<std::thread> workers;
  for (std::size_t i = 0; i < limits_.workers; ++i) workers.emplace_back([this] { worker(); });
  while (!stop.load() && !accept_failed_) poll_once();
  {
    const std::lock_guard lock(m_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers) w.join();
  for (client_conn& c : pending_) release(c);
  pending_.clear();
  return !accept_failed_;
}

} // namespace gpushare::cli
