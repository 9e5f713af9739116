// SPDX-License-Identifier: Apache-2.0
// Who may read the exporter (`gpushare metrics --listen`, issue 42 A4): the Host check that stops
// a DNS-rebinding page in a browser on the node from reading /status.json and /metrics, and the
// optional bearer token (--token-file). Pure functions of the request's headers and the options,
// so that the rules are tested without a server. See docs/cli.md, "Who can read the exporter".
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "cli_errors.hpp"

namespace gpushare::cli {

/// The exporter's access rules: the host names it answers to beside IP addresses and localhost
/// (--allow-host), and the bearer token every data request must carry (--token-file; "" none).
struct exporter_access {
  std::vector<std::string> allowed_hosts;
  std::string token;
};

/// ASCII lower case of `s`.
inline std::string lower_ascii(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// The host part of a Host header value ("name:port" -> "name", "[::1]:80" -> "::1"), lower case;
/// nullopt-like "" with `ok` false when the value is malformed (a port that is not digits, an
/// unclosed bracket).
inline std::string host_of(std::string_view value, bool& ok) {
  ok = true;
  if (!value.empty() && value.front() == '[') {
    const std::size_t close = value.find(']');
    const std::string_view rest = close == std::string_view::npos ? "" : value.substr(close + 1);
    ok = close != std::string_view::npos &&
         (rest.empty() ||
          (rest.size() > 1 && rest[0] == ':' &&
           rest.substr(1).find_first_not_of("0123456789") == std::string_view::npos));
    return ok ? lower_ascii(value.substr(1, close - 1)) : std::string();
  }
  const std::size_t colon = value.rfind(':');
  if (colon != std::string_view::npos) {
    const std::string_view port = value.substr(colon + 1);
    ok = !port.empty() && port.find_first_not_of("0123456789") == std::string_view::npos;
    value = value.substr(0, colon);
  }
  std::string h = lower_ascii(value);
  if (!h.empty() && h.back() == '.') h.pop_back(); // "localhost." is localhost
  ok = ok && !h.empty();
  return h;
}

/// Whether a request with Host header `value` ("" when it sent none, as HTTP/1.0 may) is one the
/// exporter answers: an IP address (a browser sends one only to a page loaded from that address,
/// so no rebinding), localhost, or a name given with --allow-host. A DNS-rebinding page sends its
/// own name and is refused.
inline bool host_allowed(std::string_view value, const exporter_access& access) {
  if (value.empty()) return true;
  bool ok = false;
  const std::string host = host_of(value, ok);
  if (!ok) return false;
  unsigned char addr[16];
  if (::inet_pton(AF_INET, host.c_str(), addr) == 1 ||
      ::inet_pton(AF_INET6, host.c_str(), addr) == 1)
    return true;
  if (host == "localhost") return true;
  for (const std::string& name : access.allowed_hosts)
    if (lower_ascii(name) == host) return true;
  return false;
}

/// Whether the Authorization header `value` carries the exporter's token ("Bearer <token>", the
/// scheme in any case), compared in time that does not depend on where they differ. Always true
/// without a token.
inline bool token_accepted(std::string_view value, std::string_view token) {
  if (token.empty()) return true;
  constexpr std::string_view scheme = "bearer ";
  if (value.size() < scheme.size() || lower_ascii(value.substr(0, scheme.size())) != scheme)
    return false;
  std::string_view given = value.substr(scheme.size());
  while (!given.empty() && given.front() == ' ') given.remove_prefix(1);
  unsigned char diff = given.size() == token.size() ? 0 : 1;
  for (std::size_t i = 0; i < token.size(); ++i)
    diff |= static_cast<unsigned char>(token[i] ^ (i < given.size() ? given[i] : 0));
  return diff == 0;
}

/// Parses --allow-host's comma-separated names: each a host name (letters, digits, '-', '.'),
/// not an address (those are always allowed). Throws usage_error naming a bad one.
inline std::vector<std::string> parse_allowed_hosts(std::string_view list) {
  std::vector<std::string> names;
  while (true) {
    const std::size_t comma = list.find(',');
    const std::string name = lower_ascii(list.substr(0, comma));
    if (name.empty() ||
        name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-.") != std::string::npos)
      throw usage_error("--allow-host: '" + name +
                        "' is not a host name (give names such as node1.example.com, separated "
                        "by commas; IP addresses and localhost are always allowed)");
    names.push_back(name);
    if (comma == std::string_view::npos) return names;
    list.remove_prefix(comma + 1);
  }
}

/// Reads the token of --token-file: one line of 16 to 4096 printable characters (trailing
/// whitespace dropped), in a regular file that only its owner may read or write (as ssh asks of
/// a key). Throws usage_error saying what is wrong.
inline std::string read_token_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    throw usage_error("--token-file: cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  std::string token(4097, '\0');
  const bool stat_ok = ::fstat(fd, &st) == 0;
  const ssize_t n = stat_ok && S_ISREG(st.st_mode) ? ::read(fd, token.data(), token.size()) : -1;
  ::close(fd);
  if (!stat_ok || !S_ISREG(st.st_mode) || n < 0)
    throw usage_error("--token-file: '" + path + "' is not a readable regular file");
  if ((st.st_mode & 077u) != 0)
    throw usage_error("--token-file: '" + path +
                      "' may be read or written by group or others: chmod 600 it");
  token.resize(static_cast<std::size_t>(n));
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  bool printable = true;
  for (const char c : token) printable = printable && c > ' ' && c < 0x7f;
  if (token.size() < 16 || token.size() > 4096 || !printable)
    throw usage_error("--token-file: the token in '" + path +
                      "' must be one line of 16 to 4096 printable characters without spaces "
                      "(e.g. `openssl rand -hex 32`)");
  return token;
}

} // namespace gpushare::cli
