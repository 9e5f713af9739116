// SPDX-License-Identifier: Apache-2.0
// <gpushare/text.hpp>: the public text forms agree with what the library itself prints and reads.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include <gpushare/gpushare.hpp>

namespace gs = gpushare;

TEST_CASE("format_bytes and format_capacity use binary units and the one word for unlimited") {
  CHECK(gs::format_bytes(0) == "0 B");
  CHECK(gs::format_bytes(1023) == "1023 B");
  CHECK(gs::format_bytes(1536) == "1.50 KiB");
  CHECK(gs::format_bytes(4ull << 30) == "4.00 GiB");
  CHECK(gs::format_capacity(gs::unlimited_memory) == "unlimited");
  CHECK(gs::format_capacity(80ull << 30) == "80.00 GiB");
}

TEST_CASE("format_percent shows parts per million as a percentage without trailing zeros") {
  CHECK(gs::format_percent(300'000) == "30%");
  CHECK(gs::format_percent(125'000) == "12.5%");
  CHECK(gs::format_percent(1) == "0.0001%");
  CHECK(gs::format_percent(1'000'000) == "100%");
}

TEST_CASE("parse_memory_amount reads what GPUSHARE_MEMORY_LIMIT reads and refuses the rest") {
  CHECK(gs::parse_memory_amount("4GiB") == gs::memory_amount::of_bytes(4ull << 30));
  CHECK(gs::parse_memory_amount("4gb") == gs::memory_amount::of_bytes(4'000'000'000ull));
  CHECK(gs::parse_memory_amount("30%") == gs::memory_amount::of_ppm(300'000));
  CHECK(gs::parse_memory_amount("123") == gs::memory_amount::of_bytes(123));
  try {
    (void)gs::parse_memory_amount("4 lightyears");
    FAIL("parse_memory_amount accepted \"4 lightyears\"");
  } catch (const gs::error& e) {
    CHECK(e.code() == gs::errc::invalid_argument);
    CHECK(std::string(e.what()).find("4 lightyears") != std::string::npos);
  }
}

TEST_CASE("table_name is the name a session of that domain and key uses, and table_file its file") {
  const std::string domain = "text" + std::to_string(::getpid());
  const std::string uid = std::to_string(::geteuid());
  const std::string gid = std::to_string(::getegid());
  CHECK(gs::table_name(domain, "k") == "/gpushare." + domain + ".u" + uid + ".k");
  CHECK(gs::table_name(domain, "k", gs::table_access::group) ==
        "/gpushare." + domain + ".g" + gid + ".k");
  CHECK(gs::table_file(gs::table_name(domain, "k")) ==
        "/dev/shm/gpushare." + domain + ".u" + uid + ".k");
  gs::session_options o;
  o.domain = domain;
  o.name = std::string("t");
  {
    gs::session s("k", o);
    CHECK(s.table_name() == gs::table_name(domain, "k"));
  }
  (void)gs::table::remove("k", o);
  CHECK_THROWS_AS((void)gs::table_name("bad/domain", "k"), gs::error);
  CHECK_THROWS_AS((void)gs::table_name(domain, ""), gs::error);
}

TEST_CASE("the setting parsers read what the GPUSHARE_ variables read") {
  CHECK(gs::parse_priority("HIGH") == gs::priority::high);
  CHECK(gs::parse_priority("7") == 7);
  CHECK(gs::parse_share("4") == 4u);
  CHECK(gs::parse_percent("12.5%") == 125'000u);
  CHECK(gs::parse_compute_guarantee("none") == 0u);
  CHECK(gs::parse_compute_guarantee("10%") == 100'000u);
  CHECK(gs::parse_pause_hold("2") == 2'000'000u);
  CHECK(gs::parse_pause_hold("none") == 0u);
  CHECK_THROWS_AS(gs::parse_pause_hold("200"), gs::error);
  CHECK(gs::parse_quantum("500us") == std::chrono::microseconds(500));
  CHECK(gs::parse_max_guard("2min") == std::chrono::minutes(2));
  CHECK(gs::parse_max_guard("none") == std::chrono::nanoseconds(0));
  CHECK(gs::parse_handover("yield") == gs::handover_point::at_yield);
  CHECK(gs::parse_capacity("unlimited") == 0u);
  CHECK(gs::parse_capacity("1KiB") == 1024u);
  CHECK_NOTHROW(gs::validate_domain("my.domain-1"));
  for (const auto& bad : {std::function<void()>([] { (void)gs::parse_priority("8"); }),
                          std::function<void()>([] { (void)gs::parse_share("0"); }),
                          std::function<void()>([] { (void)gs::parse_quantum("20s"); }),
                          std::function<void()>([] { gs::validate_domain(".hidden"); })}) {
    try {
      bad();
      FAIL("a bad value was accepted");
    } catch (const gs::error& e) {
      CHECK(e.code() == gs::errc::invalid_argument);
    }
  }
}

TEST_CASE("quote escapes quotes and control bytes and cuts long strings") {
  CHECK(gs::quote("a\"b") == "\"a\\\"b\"");
  CHECK(gs::quote(std::string_view("\x01", 1)) == "\"\\x01\"");
  CHECK(gs::quote("abcdef", 3) == "\"abc\"... (6 bytes in all)");
}
