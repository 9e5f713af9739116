// SPDX-License-Identifier: Apache-2.0
// The gpushare command-line tool: `status`, as text and as JSON.
// The tool runs as a program against tables that these tests create. Every test uses a domain
// of its own, so no other test's tables can show up in its output.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>

#include <gpushare/discovery.hpp>

#include "cli_test_util.hpp"
#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;

constexpr std::uint64_t MiB = 1ull << 20;

using namespace cli_test;

// ------------------------------------------------------------------------------------------------
// status
// ------------------------------------------------------------------------------------------------

TEST_CASE("status --json lists each table and each live session with its settings and memory") {
  test_domain d;
  session_options ao = d.options("alpha", 64 * MiB);
  ao.priority = priority::high;
  ao.share = 3;
  ao.compute_limit_ppm = 400'000;
  ao.memory_limit = memory_amount::of_bytes(32 * MiB);
  ao.memory_guarantee = memory_amount::of_bytes(2 * MiB);
  session alpha("gpu-a", ao);
  auto ra = alpha.reserve(1 * MiB, 0ms);
  session beta("gpu-a", d.options("beta"));
  auto rb = beta.reserve(4 * MiB, 0ms);
  beta.set_external_usage(3 * MiB);
  const pid_t gamma = spawn_holder(d, "gpu-b", "gamma", 5 * MiB);

  const cli_result r = run_cli({"status", "--json", "--domain", d.name(), "--interval", "0.05"});
  REQUIRE(r.code == 0);
  CHECK(r.err.empty());
  CHECK(contains(r.out, "\"reserved_bytes\": 1048576"));
  const json doc = parse_json(r.out);
  CHECK(doc["schema_version"].u64() == 1);
  CHECK(doc["gpushare_version"].str() == GPUSHARE_VERSION_STRING);
  CHECK(doc["table_layout_version"].u64() == table_layout_version);
  CHECK(doc["domain"].str() == d.name());
  CHECK(doc["interval_ns"].u64() == 50'000'000);
  CHECK(doc["unreadable"].size() == 0);
  REQUIRE(doc["tables"].size() == 2);

  const json& a = table_of(doc, "gpu-a");
  CHECK(a["object_name"].str() == d.object_name("gpu-a"));
  CHECK(a["path"].str() == d.path("gpu-a"));
  CHECK(a["domain"].str() == d.name());
  CHECK(a["owner"].str() == "u" + std::to_string(::geteuid()));
  CHECK(a["access"].str() == "user");
  CHECK(a["mode"].str() == "0600");
  CHECK(a["creator_pid"].i64() == ::getpid());
  CHECK(a["slot_count"].u64() == 256);
  CHECK(a["capacity_bytes"].u64() == 64 * MiB);
  CHECK_FALSE(a["capacity_unlimited"].boolean());
  CHECK(a["reserved_bytes"].u64() == 5 * MiB);
  CHECK(a["committed_bytes"].u64() == 2 * MiB + 7 * MiB); // alpha's guarantee; beta's 4 + 3
  CHECK(a["available_bytes"].u64() == 64 * MiB - 9 * MiB);
  CHECK(a["live_sessions"].u64() == 2);
  CHECK(a["device"].is_null());
  CHECK(a["holder"].is_null());
  CHECK(a["recent_window_ns"].u64() > 0);
  REQUIRE(a["sessions"].size() == 2);

  const json& sa = session_of(a, "alpha");
  CHECK(sa["pid"].i64() == ::getpid());
  CHECK(sa["slot"].u64() == alpha.id().slot);
  CHECK(sa["generation"].u64() == alpha.id().generation);
  CHECK(sa["priority"].i64() == priority::high);
  CHECK(sa["priority_name"].str() == "high");
  CHECK(sa["share"].u64() == 3);
  CHECK(sa["compute_limit_ppm"].u64() == 400'000);
  CHECK(sa["memory_limit_bytes"].u64() == 32 * MiB);
  CHECK(sa["memory_guarantee_bytes"].u64() == 2 * MiB);
  CHECK(sa["reserved_bytes"].u64() == 1 * MiB);
  CHECK(sa["external_bytes"].u64() == 0);
  CHECK(sa["peak_bytes"].u64() == 1 * MiB);
  CHECK(sa["reservations_granted"].u64() == 1);
  CHECK(sa["quantum_ns"].u64() == 5'000'000);
  CHECK(sa["handover"].str() == "guard");
  CHECK(sa["state"].str() == "idle");
  CHECK(sa["device_ns"].u64() == 0);
  CHECK(sa["recent_device_percent"].number() == 0.0); // idle over the whole window
  CHECK(sa["device_waits"].u64() == 0);
  CHECK_FALSE(sa["holds_device"].boolean());

  const json& sb = session_of(a, "beta");
  CHECK(sb["priority"].i64() == priority::normal);
  CHECK(sb["share"].u64() == 1);
  CHECK(sb["compute_limit_ppm"].u64() == 1'000'000);
  CHECK(sb["memory_limit_bytes"].u64() == 64 * MiB); // the default limit is the capacity
  CHECK(sb["reserved_bytes"].u64() == 4 * MiB);
  CHECK(sb["external_bytes"].u64() == 3 * MiB);
  CHECK(sb["peak_bytes"].u64() == 7 * MiB);

  const json& b = table_of(doc, "gpu-b");
  CHECK(b["capacity_unlimited"].boolean());
  CHECK(b["capacity_bytes"].u64() == unlimited_memory);
  REQUIRE(b["sessions"].size() == 1);
  CHECK(b["sessions"][0]["name"].str() == "gamma");
  CHECK(b["sessions"][0]["pid"].i64() == gamma);
  CHECK(b["sessions"][0]["reserved_bytes"].u64() == 5 * MiB);
  kill_holder(gamma);
}

TEST_CASE("status --json counts device time and shows no recent figure without an interval") {
  test_domain d;
  session s("gpu", d.options("worker"));
  {
    scoped_kernel g(s);
    g.set_device_time(250ms);
  }
  const cli_result r = run_cli({"status", "--json", "--domain", d.name(), "--interval", "0"});
  REQUIRE(r.code == 0);
  const json doc = parse_json(r.out);
  const json& w = session_of(table_of(doc, "gpu"), "worker");
  CHECK(w["device_ns"].u64() == 250'000'000);
  CHECK(w["guards"].u64() == 1);
  CHECK(w["recent_device_percent"].is_null());
  CHECK(table_of(doc, "gpu")["recent_window_ns"].is_null());
  CHECK(doc["interval_ns"].u64() == 0);
}

TEST_CASE("status prints an aligned table with the session names") {
  test_domain d;
  session a("gpu", d.options("first", 64 * MiB));
  auto ra = a.reserve(1 * MiB, 0ms);
  session b("gpu", d.options("a-much-longer-name"));
  auto rb = b.reserve(12 * MiB, 0ms);

  const cli_result r = run_cli({"status", "--domain", d.name(), "--interval", "0.05"});
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, "1 table, 2 live sessions"));
  CHECK(contains(r.out, d.object_name("gpu")));
  CHECK(contains(r.out, "capacity 64.00 MiB, free 51.00 MiB"));
  const auto lines = lines_of(r.out);
  std::size_t header = lines.size();
  for (std::size_t i = 0; i < lines.size(); ++i)
    if (contains(lines[i], "SLOT") && contains(lines[i], "NAME")) header = i;
  REQUIRE(header + 2 < lines.size());
  const std::string& h = lines[header];
  const std::size_t name_col = h.find("NAME");
  const std::size_t reserved_end = h.find("RESERVED") + std::strlen("RESERVED");
  const std::size_t pid_end = h.find("PID") + 3;
  std::map<std::string, std::string> rows; // session name -> its row
  for (std::size_t i = header + 1; i <= header + 2; ++i) {
    const std::string& row = lines[i];
    const std::size_t end = row.find(' ', name_col);
    rows[row.substr(name_col, end - name_col)] = row;
  }
  REQUIRE(rows.count("first") == 1);
  REQUIRE(rows.count("a-much-longer-name") == 1);
  // Right-aligned columns end where their titles end.
  CHECK(rows["first"].substr(0, reserved_end).ends_with("1.00 MiB"));
  CHECK(rows["a-much-longer-name"].substr(0, reserved_end).ends_with("12.00 MiB"));
  CHECK(rows["first"].substr(0, pid_end).ends_with(std::to_string(::getpid())));
  CHECK(contains(rows["first"], "idle"));
}

TEST_CASE("status with no tables in the domain says so and succeeds") {
  test_domain d;
  const cli_result r = run_cli({"status", "--domain", d.name()});
  CHECK(r.code == 0);
  CHECK(r.out.starts_with("domain \"" + d.name() + "\" has no tables"));
  const cli_result j = run_cli({"status", "--json", "--domain", d.name()});
  CHECK(j.code == 0);
  CHECK(parse_json(j.out)["tables"].size() == 0);
}

TEST_CASE("status reports a table of another layout and a table it may not open, and goes on") {
  test_domain d;
  session ok("good", d.options("fine"));
  { auto t = table::open("old", gpushare::open_mode::open_or_create, d.options("x")); }
  {
    const int fd = ::shm_open(d.object_name("old").c_str(), O_RDWR, 0);
    REQUIRE(fd >= 0);
    void* p =
        ::mmap(nullptr, sizeof(detail::table_header), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(p != MAP_FAILED);
    static_cast<detail::table_header*>(p)->prefix.layout_version = 99;
    ::munmap(p, sizeof(detail::table_header));
    ::close(fd);
  }
  const cli_result r = run_cli({"status", "--json", "--domain", d.name(), "--interval", "0"});
  REQUIRE(r.code == 0);
  const json doc = parse_json(r.out);
  REQUIRE(doc["tables"].size() == 1);
  CHECK(doc["tables"][0]["key"].str() == "good");
  REQUIRE(doc["unreadable"].size() == 1);
  CHECK(doc["unreadable"][0]["key"].str() == "old");
  CHECK(doc["unreadable"][0]["error"].str() == "table_incompatible");
  CHECK(contains(doc["unreadable"][0]["message"].str(), "layout version 99"));
  const cli_result text = run_cli({"status", "--domain", d.name(), "--interval", "0"});
  CHECK(text.code == 0);
  CHECK(contains(text.out, "incompatible layout"));
  CHECK(contains(text.out, "fine"));

  if (::geteuid() != 0) {
    MESSAGE("not root: the permission-denied part needs another uid to run the tool as");
    return;
  }
  const uid_t nobody = 65534;
  const cli_result denied = run_cli({"status", "--json", "--domain", d.name()}, nobody);
  REQUIRE(denied.code == 0);
  const json dd = parse_json(denied.out);
  CHECK(dd["tables"].size() == 0);
  REQUIRE(dd["unreadable"].size() == 2);
  for (const auto& u : dd["unreadable"].items) {
    CHECK(u["error"].str() == "permission_denied");
    CHECK(u["file_uid"].u64() == 0);
    CHECK(u["file_mode"].str() == "0600");
  }
  const cli_result denied_text = run_cli({"status", "--domain", d.name()}, nobody);
  CHECK(denied_text.code == 0);
  CHECK(contains(denied_text.out, "permission denied"));
  CHECK(contains(denied_text.out, "belongs to another user or group"));
  // clean as another user removes nothing it may not open.
  const cli_result clean = run_cli({"clean", "--domain", d.name()}, nobody);
  CHECK(clean.code == 0);
  CHECK(contains(clean.out, "kept " + d.object_name("good") + ": owned by uid 0"));
  CHECK(d.exists("good"));
  CHECK(d.exists("old"));
}
