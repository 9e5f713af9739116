// SPDX-License-Identifier: Apache-2.0
// Who may read the exporter (tools/cli_exporter_access.hpp, issue 42 A4): the Host rule that
// refuses DNS-rebinding names, the bearer token check, and the options' parsing.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <string>

#include "cli_exporter_access.hpp"

using gpushare::cli::exporter_access;
using gpushare::cli::host_allowed;
using gpushare::cli::parse_allowed_hosts;
using gpushare::cli::read_token_file;
using gpushare::cli::token_accepted;
using gpushare::cli::usage_error;

TEST_CASE("exporter Host rule: addresses, localhost and --allow-host names pass; others do not") {
  const exporter_access none;
  for (const char* ok : {"", "127.0.0.1", "127.0.0.1:9400", "10.1.2.3:80", "[::1]:9400", "[::1]",
                         "[fe80::1]:1", "localhost", "LOCALHOST:9400", "localhost.:9400"}) {
    CAPTURE(ok);
    CHECK(host_allowed(ok, none));
  }
  for (const char* bad : {"evil.example", "evil.example:9400", "127.0.0.1.evil.example:9400",
                          "localhost.evil", "[::1", "[::1]x", "[::1]:", "127.0.0.1:", "127.0.0.1:x",
                          ":9400", "node1:9400", "localhost:9400:1", "1.2.3.4.5"}) {
    CAPTURE(bad);
    CHECK(!host_allowed(bad, none));
  }
  exporter_access named;
  named.allowed_hosts = parse_allowed_hosts("node1.example.com,Prom-Target");
  CHECK(host_allowed("node1.example.com:9400", named));
  CHECK(host_allowed("NODE1.EXAMPLE.COM", named));
  CHECK(host_allowed("prom-target:80", named));
  CHECK(!host_allowed("node2.example.com:9400", named));
  CHECK(!host_allowed("example.com", named));
}

TEST_CASE("exporter Host rule: random names are refused unless allowed (seeded)") {
  std::mt19937 rng(7);
  const std::string letters = "abcdefghijklmnopqrstuvwxyz-.";
  exporter_access a;
  for (int i = 0; i < 500; ++i) {
    std::string name(1 + rng() % 20, 'a');
    for (char& c : name) c = letters[rng() % letters.size()];
    if (name.back() == '.') name.back() = 'x'; // (a trailing dot is the same name)
    if (name == "localhost") continue;
    CAPTURE(name);
    a.allowed_hosts.clear();
    CHECK(!host_allowed(name + ":9400", a));
    a.allowed_hosts.push_back(name);
    CHECK(host_allowed(name + ":9400", a));
    CHECK(!host_allowed(name + "x:9400", a));
  }
}

TEST_CASE("exporter token: only 'Bearer <token>' passes; no token, every request passes") {
  const std::string token = "0123456789abcdef0123";
  CHECK(token_accepted("Bearer " + token, token));
  CHECK(token_accepted("bearer " + token, token));
  CHECK(token_accepted("BEARER  " + token, token));
  CHECK(!token_accepted("", token));
  CHECK(!token_accepted("Bearer", token));
  CHECK(!token_accepted("Bearer " + token + "x", token));
  CHECK(!token_accepted("Bearer " + token.substr(1), token));
  CHECK(!token_accepted("Basic " + token, token));
  CHECK(!token_accepted(token, token));
  CHECK(token_accepted("", ""));
  CHECK(token_accepted("anything", ""));
}

TEST_CASE("--allow-host and --token-file: bad values are usage errors that say what to do") {
  CHECK_THROWS_WITH_AS(parse_allowed_hosts("a,,b"), doctest::Contains("'' is not a host name"),
                       usage_error);
  CHECK_THROWS_WITH_AS(parse_allowed_hosts("a b"), doctest::Contains("'a b' is not a host name"),
                       usage_error);
  CHECK(parse_allowed_hosts("A.example,b").size() == 2);

  const std::string path = "/tmp/gpushare-token-test-" + std::to_string(::getpid());
  auto write = [&](const std::string& text, mode_t mode) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
    REQUIRE(::chmod(path.c_str(), mode) == 0);
  };
  write("0123456789abcdef0123\n", 0600);
  CHECK(read_token_file(path) == "0123456789abcdef0123");
  write("0123456789abcdef0123\n", 0644);
  CHECK_THROWS_WITH_AS(read_token_file(path), doctest::Contains("chmod 600 it"), usage_error);
  write("short\n", 0600);
  CHECK_THROWS_WITH_AS(read_token_file(path), doctest::Contains("16 to 4096 printable"),
                       usage_error);
  write("0123456789abcdef 0123\n", 0600);
  CHECK_THROWS_WITH_AS(read_token_file(path), doctest::Contains("without spaces"), usage_error);
  ::unlink(path.c_str());
  CHECK_THROWS_WITH_AS(read_token_file(path), doctest::Contains("cannot open"), usage_error);
  CHECK_THROWS_WITH_AS(read_token_file("/tmp"), doctest::Contains("not a readable regular file"),
                       usage_error);
}
