// SPDX-License-Identifier: Apache-2.0
// Parsing and validation of option values (include/gpushare/detail/parse.hpp).
#include <gpushare/detail/parse.hpp> // on purpose first and alone: it must stand by itself

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <doctest/doctest.h>

#include "test_util.hpp"

namespace {

using gpushare::errc;
using gpushare::memory_amount;
using namespace gpushare::detail;

constexpr std::uint64_t KiB = 1024, MiB = KiB * 1024, GiB = MiB * 1024, TiB = GiB * 1024;

using test::thrown;

/// `f` throws invalid_argument whose message contains every fragment.
void check_invalid(const std::function<void()>& f, std::initializer_list<std::string_view> parts) {
  const auto e = thrown(f);
  REQUIRE_MESSAGE(e.has_value(), "no gpushare::error thrown");
  CHECK(e->code() == errc::invalid_argument);
  const std::string what = e->what();
  for (const auto part : parts)
    CHECK_MESSAGE(what.find(part) != std::string::npos, "\"", part, "\" not in: ", what);
}

void check_bad_memory(std::string_view s, std::string_view reason) {
  CAPTURE(s);
  check_invalid([&] { parse_memory_amount(s); },
                {"invalid memory amount", test::quoted(s), reason, "GiB", "20%"});
}

void check_bad_percent(std::string_view s, std::string_view reason) {
  CAPTURE(s);
  check_invalid([&] { parse_percent_ppm(s); },
                {"invalid percentage", test::quoted(s), reason, "12.5%"});
}

} // namespace

TEST_CASE("memory amounts in plain bytes") {
  CHECK(parse_memory_amount("0") == memory_amount::of_bytes(0));
  CHECK(parse_memory_amount("1048576") == memory_amount::of_bytes(1048576));
  CHECK(parse_memory_amount("007") == memory_amount::of_bytes(7));
  CHECK(parse_memory_amount("9223372036854775808") == memory_amount::of_bytes(max_memory_bytes));
}

TEST_CASE("memory amounts with units") {
  CHECK(parse_memory_amount("1B") == memory_amount::of_bytes(1));
  CHECK(parse_memory_amount("1K") == memory_amount::of_bytes(1000));
  CHECK(parse_memory_amount("1kb") == memory_amount::of_bytes(1000));
  CHECK(parse_memory_amount("1KiB") == memory_amount::of_bytes(KiB));
  CHECK(parse_memory_amount("2M") == memory_amount::of_bytes(2'000'000));
  CHECK(parse_memory_amount("2MB") == memory_amount::of_bytes(2'000'000));
  CHECK(parse_memory_amount("512 MiB") == memory_amount::of_bytes(512 * MiB));
  CHECK(parse_memory_amount("4G") == memory_amount::of_bytes(4'000'000'000));
  CHECK(parse_memory_amount("4gb") == memory_amount::of_bytes(4'000'000'000));
  CHECK(parse_memory_amount("4 GiB") == memory_amount::of_bytes(4 * GiB));
  CHECK(parse_memory_amount("4gib") == memory_amount::of_bytes(4 * GiB));
  CHECK(parse_memory_amount("4GIB") == memory_amount::of_bytes(4 * GiB));
  CHECK(parse_memory_amount("3T") == memory_amount::of_bytes(3'000'000'000'000));
  CHECK(parse_memory_amount("3TB") == memory_amount::of_bytes(3'000'000'000'000));
  CHECK(parse_memory_amount("3TiB") == memory_amount::of_bytes(3 * TiB));
  CHECK(parse_memory_amount("8388608TiB") == memory_amount::of_bytes(max_memory_bytes));
  CHECK(parse_memory_amount("8589934592GiB") == memory_amount::of_bytes(max_memory_bytes));
}

TEST_CASE("memory amounts with fractions are exact and round down") {
  CHECK(parse_memory_amount("1.5GiB") == memory_amount::of_bytes(1610612736));
  CHECK(parse_memory_amount("1.5 KiB") == memory_amount::of_bytes(1536));
  CHECK(parse_memory_amount("0.5MiB") == memory_amount::of_bytes(512 * KiB));
  CHECK(parse_memory_amount("1.000001K") == memory_amount::of_bytes(1000));   // 1000.001 -> 1000
  CHECK(parse_memory_amount("0.1GiB") == memory_amount::of_bytes(107374182)); // .4 rounded down
  CHECK(parse_memory_amount("2.25GB") == memory_amount::of_bytes(2'250'000'000));
  CHECK(parse_memory_amount("0.999999TiB") == memory_amount::of_bytes(1099510528264));
}

TEST_CASE("memory amounts as percentages") {
  CHECK(parse_memory_amount("20%") == memory_amount::of_ppm(200'000));
  CHECK(parse_memory_amount("12.5%") == memory_amount::of_ppm(125'000));
  CHECK(parse_memory_amount("0%") == memory_amount::of_ppm(0));
  CHECK(parse_memory_amount("100%") == memory_amount::of_ppm(1'000'000));
  CHECK(parse_memory_amount("100.0%") == memory_amount::of_ppm(1'000'000));
  CHECK(parse_memory_amount("33.333333%") == memory_amount::of_ppm(333'333));
}

TEST_CASE("malformed memory amounts are rejected") {
  check_bad_memory("", "empty");
  check_bad_memory("-1", "sign");
  check_bad_memory("+1", "sign");
  check_bad_memory("1e99GiB", "not a unit");
  check_bad_memory("30%%", "'%'");
  check_bad_memory("GiB", "digit");
  check_bad_memory("1.2.3G", "not a unit");
  check_bad_memory(".5GiB", "digit before the decimal point");
  check_bad_memory("1.GiB", "digit must follow");
  check_bad_memory("1.5", "whole");
  check_bad_memory("1.5B", "whole");
  check_bad_memory("1.0", "whole");
  check_bad_memory("1.1234567GiB", "6 decimals");
  check_bad_memory("9EiB", "not a unit");
  check_bad_memory("4  GiB", "one space");
  check_bad_memory("4 ", "one space");
  check_bad_memory(" 4GiB", "digit");
  check_bad_memory("4GiB ", "not a unit");
  check_bad_memory("4 GiBs", "not a unit");
  check_bad_memory("0x10", "not a unit");
  check_bad_memory("1,5GiB", "not a unit");
}

TEST_CASE("memory amounts out of range are rejected") {
  check_bad_memory("18446744073709551616", "too large");
  check_bad_memory("99999999999999999999999GiB", "too large");
  check_bad_memory("9223372036854775809", "2^63");
  check_bad_memory("18446744073709551615", "2^63");
  check_bad_memory("8589934593GiB", "2^63");
  check_bad_memory("8589934592.5GiB", "2^63");
  check_bad_memory("8388609TiB", "2^63");
  check_bad_memory("9000000TiB", "2^63");
  check_bad_memory("100.5%", "0% to 100%");
  check_bad_memory("101%", "0% to 100%");
}

TEST_CASE("percentages") {
  CHECK(parse_percent_ppm("30%") == 300'000);
  CHECK(parse_percent_ppm("12.5%") == 125'000);
  CHECK(parse_percent_ppm("100%") == 1'000'000);
  CHECK(parse_percent_ppm("0.0001%") == 1);
  CHECK(parse_percent_ppm("0.00019%") == 1); // rounded down to whole ppm
  CHECK(parse_percent_ppm("99.9999%") == 999'999);
}

TEST_CASE("bad percentages are rejected") {
  check_bad_percent("30", "write \"30%\"");
  check_bad_percent("12.5", "write \"12.5%\"");
  check_bad_percent("", "empty");
  check_bad_percent("%", "number must come before");
  check_bad_percent("0%", "greater than 0%");
  check_bad_percent("0.00001%", "greater than 0%");
  check_bad_percent("101%", "at most 100%");
  check_bad_percent("100.0001%", "at most 100%");
  check_bad_percent("30%%", "one '%'");
  check_bad_percent("-5%", "sign");
  check_bad_percent("30 %", "unexpected characters");
  check_bad_percent("abc", "'%' is required");
  check_bad_percent("1e2%", "unexpected characters");
}

TEST_CASE("priorities") {
  CHECK(parse_priority("low") == gpushare::priority::low);
  CHECK(parse_priority("normal") == gpushare::priority::normal);
  CHECK(parse_priority("High") == gpushare::priority::high);
  CHECK(parse_priority("CRITICAL") == gpushare::priority::critical);
  CHECK(parse_priority("0") == 0);
  CHECK(parse_priority("7") == 7);
  for (const std::string_view bad :
       {"8", "-1", "+1", "", "urgent", "1.5", "99999999999999999999", " 1", "1 ", "lowest"}) {
    CAPTURE(bad);
    check_invalid([&] { parse_priority(bad); },
                  {"invalid priority", test::quoted(bad), "critical", "0", "7"});
  }
}

TEST_CASE("shares") {
  CHECK(parse_share("1") == 1);
  CHECK(parse_share("250") == 250);
  CHECK(parse_share("1000000") == 1'000'000);
  for (const std::string_view bad :
       {"0", "1000001", "-1", "", "x", "2.5", "18446744073709551616", "10 "}) {
    CAPTURE(bad);
    check_invalid([&] { parse_share(bad); },
                  {"invalid share", test::quoted(bad), "from 1 to 1000000"});
  }
}

TEST_CASE("table access modes") {
  CHECK(parse_table_access("user") == gpushare::table_access::user);
  CHECK(parse_table_access("0600") == gpushare::table_access::user);
  CHECK(parse_table_access("group") == gpushare::table_access::group);
  CHECK(parse_table_access("0660") == gpushare::table_access::group);
  CHECK(parse_table_access("Group") == gpushare::table_access::group);
  for (const std::string_view bad : {"", "0644", "600", "world", "0666", "users"}) {
    CAPTURE(bad);
    check_invalid([&] { parse_table_access(bad); },
                  {"invalid table mode", "\"user\"", "\"0600\"", "\"group\"", "\"0660\""});
  }
}

TEST_CASE("domains and keys") {
  CHECK_NOTHROW(validate_domain("default"));
  CHECK_NOTHROW(validate_domain("team-a_1.x"));
  CHECK_NOTHROW(validate_domain(std::string(max_domain_length, 'd')));
  CHECK_NOTHROW(validate_key(std::string(max_key_length, 'k')));
  CHECK_NOTHROW(validate_key("GPU-8e7a.0_x"));

  check_invalid([] { validate_domain(""); }, {"invalid domain", "empty"});
  check_invalid([] { validate_domain(std::string(33, 'd')); },
                {"invalid domain", "33 characters", "limit is 32"});
  check_invalid([] { validate_key(std::string(97, 'k')); },
                {"invalid key", "97 characters", "limit is 96"});
  check_invalid([] { validate_domain("a/b"); }, {"\"a/b\"", "\"/\"", "position 1"});
  check_invalid([] { validate_domain("ab c"); }, {"\" \"", "position 2"});
  check_invalid([] { validate_domain("ab\n"); }, {"\"\\x0a\"", "position 2"});
  check_invalid([] { validate_domain("caf\xc3\xa9"); }, {"\"\\xc3\"", "position 3"});
  check_invalid([] { validate_domain(".hidden"); }, {"start with '.'"});
  check_invalid([] { validate_domain(".."); }, {"start with '.'"});
  check_invalid([] { validate_key("a:b"); }, {"invalid key", "position 1"});
  check_invalid([] { validate_key(".k"); }, {"invalid key", "start with '.'"});
}

TEST_CASE("session names") {
  CHECK_NOTHROW(validate_session_name("trainer"));
  CHECK_NOTHROW(validate_session_name("job 42 / step ~3"));
  CHECK_NOTHROW(validate_session_name(std::string(max_session_name_length, 'n')));

  check_invalid([] { validate_session_name(""); }, {"invalid session name", "empty"});
  check_invalid([] { validate_session_name(std::string(64, 'n')); },
                {"64 bytes long", "limit is 63"});
  check_invalid([] { validate_session_name("tab\there"); }, {"\\x09", "position 3"});
  check_invalid([] { validate_session_name("del\x7f"); }, {"\\x7f", "position 3"});
  check_invalid([] { validate_session_name("na\xc3\xafve"); }, {"\\xc3", "position 2"});
}

TEST_CASE("a huge session name gives a short message") {
  const std::string huge(10'000, 'x');
  const auto e = thrown([&] { validate_session_name(huge); });
  REQUIRE(e.has_value());
  CHECK(e->code() == errc::invalid_argument);
  const std::string what = e->what();
  CHECK(what.size() < 200);
  CHECK(what.find("10000 bytes") != std::string::npos);
  CHECK(what.find(std::string(41, 'x')) == std::string::npos); // quotes 40 characters at most

  // Control characters late in a long name: still short, the bad byte's position is named.
  std::string late(60, 'y');
  late[50] = '\x01';
  const auto e2 = thrown([&] { validate_session_name(late); });
  REQUIRE(e2.has_value());
  CHECK(std::string(e2->what()).size() < 250);
  CHECK(std::string(e2->what()).find("position 50") != std::string::npos);
}

TEST_CASE("a huge bad value gives a short message") {
  const std::string huge(10'000, '9');
  const auto e = thrown([&] { parse_memory_amount(huge + "x"); });
  REQUIRE(e.has_value());
  CHECK(std::string(e->what()).size() < 700);
  CHECK(std::string(e->what()).find("10001 bytes") != std::string::npos);
}

TEST_CASE("quote escapes and truncates") {
  CHECK(quote("abc") == "\"abc\"");
  CHECK(quote("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(quote(std::string_view("\0\x1f", 2)) == "\"\\x00\\x1f\"");
  CHECK(quote("abcdef", 3) == "\"abc\"... (6 bytes in all)");
}

TEST_CASE("format_bytes") {
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(1024) == "1.00 KiB");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(2047) == "1.99 KiB"); // rounded down, never up to "2.00"
  CHECK(format_bytes(MiB - 1) == "1023.99 KiB");
  CHECK(format_bytes(MiB) == "1.00 MiB");
  CHECK(format_bytes(4 * GiB) == "4.00 GiB");
  CHECK(format_bytes(1610612736) == "1.50 GiB");
  CHECK(format_bytes(80 * GiB + 512 * MiB) == "80.50 GiB");
  CHECK(format_bytes(3 * TiB) == "3.00 TiB");
  CHECK(format_bytes(max_memory_bytes) == "8.00 EiB");
  CHECK(format_bytes(UINT64_MAX) == "15.99 EiB");
}

TEST_CASE("format_ppm_percent") {
  CHECK(format_ppm_percent(0) == "0%");
  CHECK(format_ppm_percent(300'000) == "30%");
  CHECK(format_ppm_percent(125'000) == "12.5%");
  CHECK(format_ppm_percent(1'000'000) == "100%");
  CHECK(format_ppm_percent(1) == "0.0001%");
  CHECK(format_ppm_percent(333'333) == "33.3333%");
  CHECK(format_ppm_percent(100) == "0.01%");
}

TEST_CASE("parse and format agree") {
  for (const std::uint32_t ppm : {1u, 100u, 125'000u, 300'000u, 333'333u, 999'999u, 1'000'000u})
    CHECK(parse_percent_ppm(format_ppm_percent(ppm)) == ppm);
}

TEST_CASE("parse_quantum_ns: quanta with a unit from 1us to 10s") {
  using gpushare::detail::parse_quantum_ns;
  CHECK(parse_quantum_ns("5ms") == 5'000'000);
  CHECK(parse_quantum_ns("500us") == 500'000);
  CHECK(parse_quantum_ns("0.5s") == 500'000'000);
  CHECK(parse_quantum_ns("1000ns") == 1'000);
  CHECK(parse_quantum_ns("10s") == 10'000'000'000);
  for (const char* bad : {"", "5", "5 ms", "-1ms", "999ns", "11s", "1e3ms", "5msx", "5m"}) {
    CAPTURE(bad);
    try {
      (void)parse_quantum_ns(bad);
      FAIL("accepted a bad duration");
    } catch (const gpushare::error& e) {
      CHECK(e.code() == gpushare::errc::invalid_argument);
      CHECK(std::string(e.what()).find("duration") != std::string::npos);
    }
  }
}

TEST_CASE("parse_handover: guard or yield") {
  using gpushare::detail::parse_handover;
  CHECK(parse_handover("guard") == gpushare::handover_point::at_guard);
  CHECK(parse_handover("YIELD") == gpushare::handover_point::at_yield);
  CHECK_THROWS_AS(parse_handover("sometimes"), gpushare::error);
}
