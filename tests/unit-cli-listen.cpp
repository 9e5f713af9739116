// SPDX-License-Identifier: Apache-2.0
// The command-line tool's reading of `gpushare metrics --listen` (tools/cli_listen.hpp) and the
// exporter's messages, without running it.
#include <doctest/doctest.h>

#include <cerrno>
#include <string>

#include "cli_exporter.hpp"
#include "cli_listen.hpp"

using namespace gpushare::cli;

namespace {

/// The usage error parse_listen throws for `spec`, or "" if it accepts it.
std::string listen_error(const std::string& spec) {
  try {
    parse_listen(spec);
  } catch (const usage_error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("parse_listen reads PORT on loopback, ADDR:PORT and [IPv6]:PORT") {
  const listen_address port_only = parse_listen("9840");
  CHECK(port_only.host == "127.0.0.1");
  CHECK(port_only.port == 9840);
  CHECK_FALSE(port_only.ipv6);
  CHECK(port_only.text() == "127.0.0.1:9840");
  const listen_address any = parse_listen("0.0.0.0:1");
  CHECK(any.host == "0.0.0.0");
  CHECK(any.port == 1);
  const listen_address v6 = parse_listen("[::1]:65535");
  CHECK(v6.host == "::1");
  CHECK(v6.port == 65535);
  CHECK(v6.ipv6);
  CHECK(v6.text() == "[::1]:65535");
  CHECK(parse_listen("[fe80::1:2]:80").host == "fe80::1:2");
}

TEST_CASE("parse_listen names what is wrong with a bad --listen") {
  CHECK(has(listen_error("banana"), "\"banana\" is not a port number and has no ':PORT'"));
  CHECK(has(listen_error("banana"), "expected PORT, ADDR:PORT or [IPV6-ADDR]:PORT"));
  CHECK(listen_error("70000") == "--listen: port 70000 is out of range (1 to 65535)");
  CHECK(listen_error("123456789012") == "--listen: port 123456789012 is out of range (1 to 65535)");
  CHECK(has(listen_error("0"), "port 0 is not allowed"));
  CHECK(has(listen_error("127.0.0.1:0"), "port 0 is not allowed"));
  CHECK(has(listen_error(""), "is empty"));
  CHECK(has(listen_error("127.0.0.1:"), "has no port after the address"));
  CHECK(has(listen_error("127.0.0.1:80x"), "has a port that is not a number: \"80x\""));
  CHECK(has(listen_error(":9840"), "has no address before the ':'"));
  CHECK(has(listen_error("localhost:9840"), "\"localhost\", which is not a numeric IPv4"));
  CHECK(has(listen_error("300.1.1.1:80"), "not a numeric IPv4 address"));
  CHECK(has(listen_error("::1:9840"), "put it in brackets, as in [::1]:9840"));
  CHECK(has(listen_error("[::1:9840"), "has no ']' after the IPv6 address"));
  CHECK(has(listen_error("[::1]"), "has no ':PORT' after the ']'"));
  CHECK(has(listen_error("[::1]9840"), "has no ':PORT' after the ']'"));
  CHECK(has(listen_error("[1.2.3.4]:80"), "\"1.2.3.4\", which is not a numeric IPv6 address"));
  CHECK(has(listen_error("[::1]:-1"), "has a port that is not a number"));
}

TEST_CASE("the exporter says why it cannot bind and what to do") {
  const listen_address a = parse_listen("127.0.0.1:80");
  CHECK(bind_failure_text(a, EADDRINUSE) ==
        "cannot listen on 127.0.0.1:80: Address already in use (another program listens on this "
        "port: pick another one)");
  CHECK(has(bind_failure_text(a, EACCES), "ports below 1024 need privileges"));
  CHECK(has(bind_failure_text(a, EADDRNOTAVAIL), "not one of this machine's"));
  CHECK(has(bind_failure_text(a, 0), "could not be bound"));
  // The live page at / links the metrics and the JSON it refreshes from, and every nonce mark
  // is replaced by the response's nonce, which its Content-Security-Policy names.
  const std::string page = exporter_page("abc123");
  CHECK(page.find("href=\"/metrics\"") != std::string::npos);
  CHECK(page.find("href=\"/status.json\"") != std::string::npos);
  CHECK(page.find(exporter_page_nonce_mark) == std::string::npos);
  CHECK(page.find("nonce=\"abc123\"") != std::string::npos);
  CHECK(exporter_page_csp("abc123").find("'nonce-abc123'") != std::string::npos);
  CHECK(metrics_content_type == "text/plain; version=0.0.4; charset=utf-8");
}
