// SPDX-License-Identifier: Apache-2.0
// The exporter front's pure parts (tools/cli_exporter_front.hpp): where a request's head ends and
// when it is over the limits, and the short answers it closes a connection with. The front's
// behaviour against real clients is mp-cli-exporter-limits'.
#include <doctest/doctest.h>

#include <random>
#include <string>

#include "cli_exporter_front.hpp"

using gpushare::cli::closing_response;
using gpushare::cli::head_verdict;
using gpushare::cli::judge_head;

TEST_CASE("judge_head: a head ends at its first empty line, CRLF or bare LF") {
  const std::string h = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
  head_verdict v = judge_head(h + "body", 1024, 10);
  CHECK(v.state == head_verdict::complete);
  CHECK(v.length == h.size());
  v = judge_head("GET / HTTP/1.1\nHost: a\n\nrest", 1024, 10);
  CHECK(v.state == head_verdict::complete);
  CHECK(v.length == 24);
  CHECK(judge_head("GET / HTTP/1.1\r\nHost: a\r\n", 1024, 10).state == head_verdict::incomplete);
  CHECK(judge_head("GET / HTTP/1.1\r\nHost: a\r\n\r", 1024, 10).state == head_verdict::incomplete);
  CHECK(judge_head("", 1024, 10).state == head_verdict::incomplete);
}

TEST_CASE("judge_head: the byte and line limits, at and past the edge") {
  const std::string h = "GET / HTTP/1.1\r\nA: b\r\n\r\n"; // 24 bytes, 3 lines
  CHECK(judge_head(h, 24, 3).state == head_verdict::complete);
  CHECK(judge_head(h, 23, 3).state == head_verdict::too_large);
  CHECK(judge_head(h, 24, 2).state == head_verdict::too_large);
  // An unfinished head is over the limit as soon as it cannot end within it.
  CHECK(judge_head("GET / HTTP/1.1\r\nA: b\r\n", 100, 2).state == head_verdict::too_large);
  CHECK(judge_head(std::string(99, 'x'), 100, 10).state == head_verdict::incomplete);
  CHECK(judge_head(std::string(100, 'x'), 100, 10).state == head_verdict::too_large);
}

TEST_CASE("judge_head: seeded random heads, fed in random pieces") {
  for (unsigned seed = 1; seed <= 2000; ++seed) {
    std::mt19937 rng(seed);
    const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution(lo, hi)(rng); };
    const std::size_t max_bytes = static_cast<std::size_t>(pick(16, 2048));
    const std::size_t max_lines = static_cast<std::size_t>(pick(2, 40));
    std::string head;
    const int lines = pick(1, 50);
    for (int k = 0; k < lines; ++k) {
      head += std::string(static_cast<std::size_t>(pick(1, 80)), static_cast<char>(pick('!', '~')));
      head += pick(0, 3) == 0 ? "\n" : "\r\n";
    }
    head += pick(0, 1) == 0 ? "\n" : "\r\n";
    const std::string data = head + std::string(static_cast<std::size_t>(pick(0, 40)), 'z');
    const bool fits = head.size() <= max_bytes && static_cast<std::size_t>(lines + 1) <= max_lines;
    // Every prefix: incomplete while the head may still fit, never complete before its end, and
    // once over a limit, over it for good.
    bool over = false;
    for (std::size_t cut = 0; cut <= data.size(); cut += static_cast<std::size_t>(pick(1, 64))) {
      const head_verdict v =
          judge_head(std::string_view(data).substr(0, cut), max_bytes, max_lines);
      INFO("seed " << seed << " cut " << cut);
      if (cut < head.size()) CHECK(v.state != head_verdict::complete);
      if (fits && cut < head.size()) CHECK(v.state == head_verdict::incomplete);
      if (over) CHECK(v.state == head_verdict::too_large);
      over = over || v.state == head_verdict::too_large;
    }
    const head_verdict all = judge_head(data, max_bytes, max_lines);
    INFO("seed " << seed);
    CHECK(all.state == (fits ? head_verdict::complete : head_verdict::too_large));
    if (fits) CHECK(all.length == head.size());
  }
}

TEST_CASE("closing_response: a complete HTTP response that ends the connection") {
  const std::string r = closing_response(503, "Service Unavailable", "busy\n");
  CHECK(r == "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
             "Content-Length: 5\r\nRetry-After: 5\r\nConnection: close\r\n\r\nbusy\n");
  CHECK(closing_response(408, "Request Timeout", "") ==
        "HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain; charset=utf-8\r\n"
        "Content-Length: 0\r\nConnection: close\r\n\r\n");
}
