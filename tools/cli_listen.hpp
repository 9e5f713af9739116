// SPDX-License-Identifier: Apache-2.0
// The address of `gpushare metrics --listen`: PORT, ADDR:PORT or [IPv6]:PORT, checked before
// anything is bound, so that every mistake is a usage error (exit code 2) that says what is wrong.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "cli_args.hpp"
#include "cli_errors.hpp"

namespace gpushare::cli {

/// Where the exporter listens: a numeric address and a port.
struct listen_address {
  std::string host;   ///< an IPv4 address, or an IPv6 address without brackets
  std::uint16_t port; ///< 1 to 65535
  bool ipv6 = false;

  /// "127.0.0.1:9840", "[::1]:9840": as the address is written in a URL.
  std::string text() const { return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port); }
};

/// The address when --listen gives only a port: loopback, so that nothing is exposed beyond this
/// machine unless an address is named (0.0.0.0 or [::] for every interface).
inline constexpr std::string_view default_listen_host = "127.0.0.1";

namespace listen_detail {

[[noreturn]] inline void bad(std::string_view spec, const std::string& why) {
  throw usage_error("--listen: " + quote(spec) + " " + why +
                    "; expected PORT, ADDR:PORT or [IPV6-ADDR]:PORT, e.g. 9840, "
                    "0.0.0.0:9840 or [::1]:9840");
}

inline std::uint16_t port_of(std::string_view spec, std::string_view port) {
  if (port.empty()) bad(spec, "has no port after the address");
  for (const char c : port)
    if (c < '0' || c > '9') bad(spec, "has a port that is not a number: " + quote(port));
  if (port.size() > 5 || std::stoul(std::string(port)) > 65535)
    throw usage_error("--listen: port " + std::string(port) + " is out of range (1 to 65535)");
  const auto value = static_cast<std::uint16_t>(std::stoul(std::string(port)));
  if (value == 0)
    throw usage_error("--listen: port 0 is not allowed: name the port Prometheus will scrape "
                      "(1 to 65535)");
  return value;
}

inline bool is_ipv4(const std::string& host) {
  in_addr a{};
  return ::inet_pton(AF_INET, host.c_str(), &a) == 1;
}

inline bool is_ipv6(const std::string& host) {
  in6_addr a{};
  return ::inet_pton(AF_INET6, host.c_str(), &a) == 1;
}

} // namespace listen_detail

/// Reads the value of --listen: "PORT" (on 127.0.0.1), "ADDR:PORT" with a numeric IPv4 address,
/// or "[ADDR]:PORT" with a numeric IPv6 address. Host names are not accepted (say which address
/// to bind, not which name resolves to it). Throws usage_error naming the problem.
inline listen_address parse_listen(std::string_view spec) {
  using namespace listen_detail;
  if (spec.empty()) bad(spec, "is empty");
  if (spec.find_first_not_of("0123456789") == std::string_view::npos)
    return {std::string(default_listen_host), port_of(spec, spec), false};
  if (spec.front() == '[') {
    const std::size_t close = spec.find(']');
    if (close == std::string_view::npos) bad(spec, "has no ']' after the IPv6 address");
    const std::string host(spec.substr(1, close - 1));
    if (!is_ipv6(host)) bad(spec, "has " + quote(host) + ", which is not a numeric IPv6 address");
    if (close + 1 >= spec.size() || spec[close + 1] != ':')
      bad(spec, "has no ':PORT' after the ']'");
    return {host, port_of(spec, spec.substr(close + 2)), true};
  }
  const std::size_t colon = spec.rfind(':');
  if (colon == std::string_view::npos) bad(spec, "is not a port number and has no ':PORT'");
  const std::string host(spec.substr(0, colon));
  if (host.find(':') != std::string::npos)
    bad(spec, "looks like an IPv6 address: put it in brackets, as in [::1]:9840");
  if (host.empty()) bad(spec, "has no address before the ':' (give 0.0.0.0 for every interface)");
  if (!is_ipv4(host))
    bad(spec, "has " + quote(host) +
                  ", which is not a numeric IPv4 address (host names are "
                  "not accepted)");
  return {host, port_of(spec, spec.substr(colon + 1)), false};
}

} // namespace gpushare::cli
