// SPDX-License-Identifier: Apache-2.0
// The CUDA layer's GPU-free rules, checked with the plain host compiler: device options and their
// environment variables, capacity from device memory, the in-flight allowance, the context
// overhead's source and plausibility, UUID text and its GPU-/MIG- prefix, the device block of a
// table snapshot, and the words of the no-device error.
#include <gpushare/cuda/detail/intervals.hpp>
#include <gpushare/cuda/detail/no_device.hpp>
#include <gpushare/cuda/detail/uuid.hpp>
#include <gpushare/cuda/options.hpp>
#include <gpushare/gpushare.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

#include "test_util.hpp"

namespace {

namespace gc = gpushare::cuda;
using gpushare::errc;
using gpushare::memory_amount;
using namespace std::chrono_literals;

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
constexpr std::uint64_t GiB = std::uint64_t{1} << 30;

using test::fake_env;

using test::thrown;

gc::resolved_device_options resolve(const gc::device_options& o,
                                    std::map<std::string, std::string> env = {}) {
  return gc::resolve_device_options(o, fake_env(std::move(env)));
}

} // namespace

TEST_CASE("device options default to 2% headroom, 60 s allocation timeout, 2 ms in flight") {
  const auto r = resolve({});
  CHECK(r.headroom == memory_amount::of_ppm(20'000));
  CHECK(r.headroom_is_default);
  CHECK_FALSE(r.context_overhead.has_value());
  CHECK(r.allocation_timeout_ns == 60'000'000'000ull);
  CHECK(r.max_in_flight_ns == 2'000'000ull);
  CHECK(r.max_in_flight_lower_ns == 250'000ull);
}

TEST_CASE("device options: code beats the environment, the environment beats the default") {
  const std::map<std::string, std::string> env{{"GPUSHARE_DEVICE_HEADROOM", "1GiB"},
                                               {"GPUSHARE_CONTEXT_OVERHEAD", "300MiB"},
                                               {"GPUSHARE_ALLOC_TIMEOUT", "2min"},
                                               {"GPUSHARE_MAX_IN_FLIGHT", "500us"},
                                               {"GPUSHARE_MAX_IN_FLIGHT_LOWER", "100us"}};
  const auto from_env = resolve({}, env);
  CHECK(from_env.headroom == memory_amount::of_bytes(GiB));
  CHECK_FALSE(from_env.headroom_is_default);
  CHECK(from_env.context_overhead == 300 * MiB);
  CHECK(from_env.allocation_timeout_ns == 120'000'000'000ull);
  CHECK(from_env.max_in_flight_ns == 500'000ull);
  CHECK(from_env.max_in_flight_lower_ns == 100'000ull);

  gc::device_options o;
  o.headroom = memory_amount::of_ppm(50'000);
  o.context_overhead = 0;
  o.allocation_timeout = 0ms;
  o.max_in_flight = 10ms;
  o.max_in_flight_lower = 1ms;
  const auto from_code = resolve(o, env);
  CHECK(from_code.headroom == memory_amount::of_ppm(50'000));
  CHECK(from_code.context_overhead == 0u);
  CHECK(from_code.allocation_timeout_ns == 0u);
  CHECK(from_code.max_in_flight_ns == 10'000'000ull);
  CHECK(from_code.max_in_flight_lower_ns == 1'000'000ull);
  o.max_in_flight_lower = 11s;
  const auto over = thrown([&] { resolve(o); });
  REQUIRE(over.has_value());
  CHECK(over->code() == errc::invalid_argument);
  CHECK(std::string(over->what()).find("device_options::max_in_flight_lower") != std::string::npos);
  o.max_in_flight_lower = 1ms;

  o.allocation_timeout = std::chrono::nanoseconds::max();
  CHECK(resolve(o).allocation_timeout_ns == gc::no_timeout);
  CHECK(resolve({}, {{"GPUSHARE_ALLOC_TIMEOUT", "none"}}).allocation_timeout_ns == gc::no_timeout);
  CHECK(resolve({}, {{"GPUSHARE_ALLOC_TIMEOUT", "1.5s"}}).allocation_timeout_ns ==
        1'500'000'000ull);

  CHECK(resolve({}).drain_timeout_ns == gc::default_drain_timeout_ns);
  CHECK(resolve({}, {{"GPUSHARE_DRAIN_TIMEOUT", "300ms"}}).drain_timeout_ns == 300'000'000ull);
  CHECK(resolve({}, {{"GPUSHARE_DRAIN_TIMEOUT", "none"}}).drain_timeout_ns == gc::no_timeout);
  gc::device_options d;
  d.drain_timeout = 1s;
  CHECK(resolve(d, {{"GPUSHARE_DRAIN_TIMEOUT", "300ms"}}).drain_timeout_ns == 1'000'000'000ull);
  d.drain_timeout = -1ms;
  const auto e = thrown([&] { resolve(d); });
  REQUIRE(e.has_value());
  CHECK(e->code() == errc::invalid_argument);
  CHECK(std::string(e->what()).find("drain_timeout") != std::string::npos);
}

TEST_CASE("bad device option variables name the variable, the value and the accepted forms") {
  struct bad_case {
    const char* var;
    const char* value;
    const char* expect;
  };
  for (const bad_case& c : {bad_case{"GPUSHARE_DEVICE_HEADROOM", "-1", "a sign is not allowed"},
                            bad_case{"GPUSHARE_DEVICE_HEADROOM", "150%", "100%"},
                            bad_case{"GPUSHARE_CONTEXT_OVERHEAD", "10%", "percentage"},
                            bad_case{"GPUSHARE_CONTEXT_OVERHEAD", "1e99GiB", "unit"},
                            bad_case{"GPUSHARE_ALLOC_TIMEOUT", "30", "a unit is required"},
                            bad_case{"GPUSHARE_ALLOC_TIMEOUT", "25h", "longer than 24h"},
                            bad_case{"GPUSHARE_ALLOC_TIMEOUT", "", "set but empty"},
                            bad_case{"GPUSHARE_MAX_IN_FLIGHT", "20s", "10s"},
                            bad_case{"GPUSHARE_MAX_IN_FLIGHT", "fast", "must start with a digit"},
                            bad_case{"GPUSHARE_MAX_IN_FLIGHT_LOWER", "0us", "1us"},
                            bad_case{"GPUSHARE_MAX_IN_FLIGHT_LOWER", "soon", "a digit"},
                            bad_case{"GPUSHARE_DRAIN_TIMEOUT", "2", "a unit is required"}}) {
    CAPTURE(c.var);
    CAPTURE(c.value);
    const auto e = thrown([&] { resolve({}, {{c.var, c.value}}); });
    REQUIRE(e.has_value());
    CHECK(e->code() == errc::invalid_environment);
    const std::string m = e->what();
    CHECK(m.find(c.var) != std::string::npos);
    CHECK(m.find(c.expect) != std::string::npos);
  }
}

TEST_CASE("bad device options set in code are invalid_argument") {
  gc::device_options o;
  o.allocation_timeout = -1ms;
  auto e = thrown([&] { resolve(o); });
  REQUIRE(e.has_value());
  CHECK(e->code() == errc::invalid_argument);
  CHECK(std::string(e->what()).find("allocation_timeout") != std::string::npos);

  o = {};
  o.max_in_flight = 0ms;
  e = thrown([&] { resolve(o); });
  REQUIRE(e.has_value());
  CHECK(std::string(e->what()).find("max_in_flight") != std::string::npos);

  o = {};
  o.headroom = memory_amount::of_ppm(1'500'000);
  e = thrown([&] { resolve(o); });
  REQUIRE(e.has_value());
  CHECK(std::string(e->what()).find("headroom") != std::string::npos);
}

TEST_CASE("GPUSHARE_DRAIN picks what a handover waits for: the guarded streams or the device") {
  CHECK(resolve({}).drain == gc::drain_scope::stream);
  CHECK(resolve({}, {{"GPUSHARE_DRAIN", "device"}}).drain == gc::drain_scope::device);
  CHECK(resolve({}, {{"GPUSHARE_DRAIN", "STREAM"}}).drain == gc::drain_scope::stream);
  gc::device_options o;
  o.drain = gc::drain_scope::stream;
  CHECK(resolve(o, {{"GPUSHARE_DRAIN", "device"}}).drain == gc::drain_scope::stream);
  o.drain = gc::drain_scope::device;
  CHECK(resolve(o).drain == gc::drain_scope::device);
  for (const char* bad : {"", "all", "devices"}) {
    CAPTURE(bad);
    const auto e = thrown([&] { resolve({}, {{"GPUSHARE_DRAIN", bad}}); });
    REQUIRE(e.has_value());
    CHECK(e->code() == errc::invalid_environment);
    const std::string m = e->what();
    CHECK(m.find("GPUSHARE_DRAIN") != std::string::npos);
    if (*bad) CHECK(m.find("\"stream\" or \"device\"") != std::string::npos);
  }
  o.drain = static_cast<gc::drain_scope>(7);
  const auto e = thrown([&] { resolve(o); });
  REQUIRE(e.has_value());
  CHECK(e->code() == errc::invalid_argument);
}

TEST_CASE("stream priorities follow the priority classes within the device's range") {
  using gc::detail::stream_priority_for;
  // An H100/H200's range: 0 (the default) .. -5.
  CHECK(stream_priority_for(gpushare::priority::low, 0, -5) == 0);
  CHECK(stream_priority_for(gpushare::priority::normal, 0, -5) == 0);
  CHECK(stream_priority_for(gpushare::priority::high, 0, -5) == -1);
  CHECK(stream_priority_for(6, 0, -5) == -5);
  CHECK(stream_priority_for(7, 0, -5) == -5); // clamped to the range
  CHECK(stream_priority_for(-3, 0, -5) == 0); // out-of-range classes as the nearest
  CHECK(stream_priority_for(42, 0, -5) == -5);
  CHECK(stream_priority_for(gpushare::priority::high, 0, 0) == 0);   // no priorities: all default
  CHECK(stream_priority_for(gpushare::priority::high, -5, 0) == -1); // range given the other way
  // Monotone: a higher class never gets a less urgent stream.
  for (int least : {0, 2})
    for (int greatest : {least, least - 1, least - 5})
      for (int c = gpushare::min_priority; c < gpushare::max_priority; ++c)
        CHECK(stream_priority_for(c + 1, least, greatest) <=
              stream_priority_for(c, least, greatest));
}

TEST_CASE("GPUSHARE_GUARD_TIMING picks batched or per-guard timing") {
  CHECK(resolve({}).timing == gc::guard_timing::batched);
  CHECK(resolve({}, {{"GPUSHARE_GUARD_TIMING", "each"}}).timing == gc::guard_timing::each);
  CHECK(resolve({}, {{"GPUSHARE_GUARD_TIMING", "Batched"}}).timing == gc::guard_timing::batched);
  gc::device_options o;
  o.timing = gc::guard_timing::batched;
  CHECK(resolve(o, {{"GPUSHARE_GUARD_TIMING", "each"}}).timing == gc::guard_timing::batched);
  for (const char* bad : {"", "batch", "every", "1"}) {
    CAPTURE(bad);
    const auto e = thrown([&] { resolve({}, {{"GPUSHARE_GUARD_TIMING", bad}}); });
    REQUIRE(e.has_value());
    CHECK(e->code() == errc::invalid_environment);
    const std::string m = e->what();
    CHECK(m.find("GPUSHARE_GUARD_TIMING") != std::string::npos);
    if (*bad) CHECK(m.find("\"batched\" or \"each\"") != std::string::npos);
  }
  o.timing = static_cast<gc::guard_timing>(9);
  const auto e = thrown([&] { resolve(o); });
  REQUIRE(e.has_value());
  CHECK(e->code() == errc::invalid_argument);
  CHECK(std::string(e->what()).find("device_options::timing") != std::string::npos);
}

TEST_CASE("accounted intervals: only the part not covered yet counts") {
  gc::detail::interval_set s;
  CHECK(s.add(10, 20) == 10);
  CHECK(s.add(10, 20) == 0);      // the same region again
  CHECK(s.add(15, 25) == 5);      // overlaps the end
  CHECK(s.add(5, 12) == 5);       // overlaps the start
  CHECK(s.add(30, 40) == 10);     // disjoint
  CHECK(s.add(0, 50) == 50 - 30); // covers everything: only the gaps count
  REQUIRE(s.size() == 1);
  CHECK(s.spans().front() == std::pair<std::int64_t, std::int64_t>(0, 50));
  CHECK(s.add(50, 60) == 10); // touching: merged
  CHECK(s.size() == 1);
  CHECK(s.add(7, 7) == 0); // empty
  CHECK(s.add(9, 3) == 0); // reversed
  CHECK(s.add(-20, -10) == 10);
  CHECK(s.size() == 2);
  s.drop_before(-10); // ends at -10: forgotten
  CHECK(s.size() == 1);
  s.drop_before(59); // ends after 59: kept
  CHECK(s.size() == 1);
  CHECK(s.add(100, 110) == 10);
  CHECK(s.add(200, 210) == 10);
  s.keep_newest(2);
  CHECK(s.spans().front().first == 100);
  s.clear();
  CHECK(s.empty());
}

TEST_CASE("accounted intervals: the sum accounted is the length of the union (random)") {
  std::mt19937_64 rng(17);
  for (int round = 0; round < 200; ++round) {
    gc::detail::interval_set s;
    std::vector<bool> covered(1000, false);
    std::uint64_t accounted = 0;
    std::uniform_int_distribution<int> begin(0, 990), len(0, 60);
    const int n = 1 + round % 40;
    for (int i = 0; i < n; ++i) {
      const int b = begin(rng), e = std::min(b + len(rng), 1000);
      accounted += s.add(b, e);
      for (int t = b; t < e; ++t) covered[static_cast<std::size_t>(t)] = true;
      std::uint64_t union_length = 0;
      for (const bool c : covered) union_length += c ? 1 : 0;
      REQUIRE(accounted == union_length);
      // Disjoint, sorted, not touching.
      for (std::size_t k = 0; k < s.size(); ++k) {
        REQUIRE(s.spans()[k].first < s.spans()[k].second);
        if (k > 0) REQUIRE(s.spans()[k - 1].second < s.spans()[k].first);
      }
    }
  }
}

TEST_CASE("a device table's capacity is the device memory less the headroom") {
  // 80 GiB device, default 2%: 1.6 GiB of headroom.
  const std::uint64_t h100 = 80 * GiB;
  CHECK(gc::capacity_for_device(h100, resolve({})) == h100 - h100 / 50);
  // A small device: the default headroom is at least 256 MiB.
  CHECK(gc::capacity_for_device(4 * GiB, resolve({})) == 4 * GiB - 256 * MiB);
  // An explicit headroom is taken as given, even below 256 MiB.
  gc::device_options o;
  o.headroom = memory_amount::of_bytes(64 * MiB);
  CHECK(gc::capacity_for_device(4 * GiB, resolve(o)) == 4 * GiB - 64 * MiB);
  o.headroom = memory_amount::of_ppm(100'000); // 10%
  CHECK(gc::capacity_for_device(10 * GiB, resolve(o)) == 9 * GiB);
  // A headroom that leaves nothing is refused with what to do.
  o.headroom = memory_amount::of_bytes(8 * GiB);
  const auto e = thrown([&] { (void)gc::capacity_for_device(8 * GiB, resolve(o)); });
  REQUIRE(e.has_value());
  CHECK(e->code() == errc::invalid_argument);
  CHECK(std::string(e->what()).find("GPUSHARE_DEVICE_HEADROOM") != std::string::npos);
  CHECK(thrown([&] { (void)gc::capacity_for_device(100 * MiB, resolve({})); }).has_value());
}

TEST_CASE("the in-flight allowance fits the bound at the average guard's device time") {
  using gc::detail::in_flight_guards_allowed;
  CHECK(in_flight_guards_allowed(0, 2'000'000) == 0);         // nothing measured: wait, measure
  CHECK(in_flight_guards_allowed(1'000'000, 2'000'000) == 2); // 1 ms guards, 2 ms bound
  CHECK(in_flight_guards_allowed(2'000'001, 2'000'000) == 0); // longer than the bound: none
  CHECK(in_flight_guards_allowed(5'000'000, 2'000'000) == 0);
  CHECK(in_flight_guards_allowed(10'000, 2'000'000) == 200); // (regions: max_in_flight_regions)

  // A batch holds a quarter of the bound's work, and at least two guards or it is not one.
  using gc::detail::batch_guard_limit;
  CHECK(gc::detail::batch_span_ns(2'000'000) == 500'000);
  CHECK(batch_guard_limit(0, 2'000'000) == 0); // nothing measured yet: time each guard
  CHECK(batch_guard_limit(5'000, 2'000'000) == 100);
  CHECK(batch_guard_limit(250'000, 2'000'000) == 2);
  CHECK(batch_guard_limit(250'001, 2'000'000) == 0); // one guard fills the span
  CHECK(batch_guard_limit(1, 10'000'000'000) == gc::detail::max_batch_guards);

  using gc::detail::update_average;
  CHECK(update_average(0, 800) == 800);
  CHECK(update_average(800, 800) == 800);
  CHECK(update_average(800, 1600) == 900);
  std::uint64_t avg = 1'000'000;
  for (int i = 0; i < 100; ++i) avg = update_average(avg, 100'000);
  CHECK(avg < 110'000); // converges to the new length
}

TEST_CASE("the context overhead is configured, else measured per process, else the device "
          "delta, else estimated") {
  using gc::detail::choose_context_overhead;
  using gc::detail::overhead_measurement;
  using gc::detail::overhead_source;
  const std::optional<std::uint64_t> none, configured{100};
  overhead_measurement both;
  both.per_process = 500 * MiB;
  both.device_delta = 1500 * MiB; // three processes created contexts at the same moment
  both.device_total = 80 * GiB;
  const auto a = choose_context_overhead(configured, both);
  CHECK(a.first == 100);
  CHECK(a.second == overhead_source::configured);
  const auto b = choose_context_overhead(none, both); // the per-process figure wins
  CHECK(b.first == 500 * MiB);
  CHECK(b.second == overhead_source::measured_per_process);
  overhead_measurement delta_only = both; // this process is not listed (another PID namespace)
  delta_only.per_process.reset();
  const auto c = choose_context_overhead(none, delta_only);
  CHECK(c.first == 1500 * MiB);
  CHECK(c.second == overhead_source::measured_device_delta);
  const auto d = choose_context_overhead(none, overhead_measurement{});
  CHECK(d.first == gc::estimated_context_overhead);
  CHECK(d.second == overhead_source::estimated);
  CHECK(std::string(gc::detail::to_string(overhead_source::measured_per_process)) ==
        "measured (per process)");
  CHECK(std::string(gc::detail::to_string(overhead_source::measured_device_delta)) ==
        "measured (device delta)");
  CHECK(std::string(gc::detail::to_string(overhead_source::estimated)) == "estimated");
  CHECK(gc::detail::is_measured(overhead_source::measured_per_process));
  CHECK(gc::detail::is_measured(overhead_source::measured_device_delta));
  CHECK_FALSE(gc::detail::is_measured(overhead_source::estimated));
  CHECK_FALSE(gc::detail::is_measured(overhead_source::configured));
}

TEST_CASE("an implausible overhead measurement is replaced by the estimate, and says so") {
  using gc::detail::choose_context_overhead;
  using gc::detail::overhead_measurement;
  using gc::detail::overhead_source;
  const std::optional<std::uint64_t> none;
  const auto pick = [&](std::optional<std::uint64_t> per_process,
                        std::optional<std::uint64_t> delta, std::uint64_t total) {
    overhead_measurement m;
    m.per_process = per_process;
    m.device_delta = delta;
    m.device_total = total;
    return choose_context_overhead(none, m);
  };
  // Over 4 GiB: not a context.
  auto r = pick(5 * GiB, std::nullopt, 80 * GiB);
  CHECK(r.first == gc::estimated_context_overhead);
  CHECK(r.second == overhead_source::estimated_implausible);
  CHECK(std::string(gc::detail::to_string(r.second)) == "estimated (measurement implausible)");
  CHECK(pick(4 * GiB, std::nullopt, 80 * GiB).second == overhead_source::measured_per_process);
  CHECK(pick(4 * GiB + 1, std::nullopt, 80 * GiB).second == overhead_source::estimated_implausible);
  // As much as the device's memory, or more.
  CHECK(pick(2 * GiB, std::nullopt, 2 * GiB).second == overhead_source::estimated_implausible);
  CHECK(pick(2 * GiB - 1, std::nullopt, 2 * GiB).second == overhead_source::measured_per_process);
  // 0 bytes: nothing was seen.
  CHECK(pick(0, std::nullopt, 80 * GiB).second == overhead_source::estimated_implausible);
  CHECK(pick(std::nullopt, 0, 80 * GiB).second == overhead_source::estimated_implausible);
  // An implausible per-process figure falls back to a plausible delta.
  r = pick(0, 300 * MiB, 80 * GiB);
  CHECK(r.first == 300 * MiB);
  CHECK(r.second == overhead_source::measured_device_delta);
  // Device memory unknown (0): only the 4 GiB bound applies.
  CHECK(pick(1 * GiB, std::nullopt, 0).second == overhead_source::measured_per_process);
  CHECK(gc::detail::plausible_context_overhead(500 * MiB, 80 * GiB));
  CHECK_FALSE(
      gc::detail::plausible_context_overhead(gc::detail::max_plausible_context_overhead + 1, 0));
}

TEST_CASE("a GPU UUID is written as nvidia-smi writes it") {
  const unsigned char bytes[16] = {0x8f, 0x1e, 0x02, 0xab, 0xcd, 0xef, 0x01, 0x23,
                                   0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x00, 0xff};
  CHECK(gc::detail::format_gpu_uuid(bytes) == "GPU-8f1e02ab-cdef-0123-4567-89abcdef00ff");
  CHECK(gc::detail::format_uuid_hex(bytes) == "8f1e02ab-cdef-0123-4567-89abcdef00ff");
  // It is a valid table key (letters, digits, '-'), with either prefix.
  CHECK_NOTHROW(gpushare::detail::validate_key(gc::detail::format_gpu_uuid(bytes)));
  CHECK_NOTHROW(gpushare::detail::validate_key("MIG-" + gc::detail::format_uuid_hex(bytes)));
}

TEST_CASE(
    "a UUID's prefix is the form NVML knows, else what CUDA_VISIBLE_DEVICES says, else GPU-") {
  using gc::detail::choose_uuid_prefix;
  CHECK(std::string(choose_uuid_prefix(true, false, false)) == "GPU-");
  CHECK(std::string(choose_uuid_prefix(true, true, true)) == "GPU-"); // NVML's word first
  CHECK(std::string(choose_uuid_prefix(false, true, false)) == "MIG-");
  CHECK(std::string(choose_uuid_prefix(false, false, true)) == "MIG-"); // no NVML: the variable
  CHECK(std::string(choose_uuid_prefix(false, false, false)) == "GPU-");

  using gc::detail::visible_devices_name_mig;
  const std::string hex = "8f1e02ab-cdef-0123-4567-89abcdef00ff";
  CHECK(visible_devices_name_mig("MIG-8f1e02ab-cdef-0123-4567-89abcdef00ff", hex));
  CHECK(visible_devices_name_mig("0, MIG-8F1E02AB ,2", hex)); // a unique prefix, any case
  CHECK(visible_devices_name_mig("MIG-aaaa,MIG-8f1e", hex));
  CHECK_FALSE(visible_devices_name_mig("GPU-8f1e02ab-cdef-0123-4567-89abcdef00ff", hex));
  CHECK_FALSE(visible_devices_name_mig("MIG-8f1e03", hex));
  CHECK_FALSE(visible_devices_name_mig("MIG-", hex));
  CHECK_FALSE(visible_devices_name_mig("MIG-8f1e02ab-cdef-0123-4567-89abcdef00ff0", hex));
  CHECK_FALSE(visible_devices_name_mig("MIG-GPU-8f1e02ab-cdef-0123-4567-89abcdef00ff/1/0", hex));
  CHECK_FALSE(visible_devices_name_mig("", hex));
  CHECK_FALSE(visible_devices_name_mig("0,1", hex));
}

TEST_CASE("a snapshot shows the device as last observed, and memory no session accounts for") {
  test::unique_table t("device", 10 * GiB);
  auto s = t.join("observer");
  auto r = s.reserve(1 * GiB);
  s.set_external_usage(512 * MiB);
  auto before = t.open().snapshot();
  CHECK(before.device_observed_unix_ns == 0); // host-only so far: no device block
  CHECK(before.device_total == 0);
  CHECK(before.device_name.empty());

  auto table = t.open();
  {
    // What a CUDA session does after cudaMemGetInfo: 16 GiB device, 12 GiB free.
    gpushare::detail::table_core core(
        gpushare::detail::mapped_table::open_existing(t.object_name(), 1'000'000'000));
    gpushare::detail::record_device_observation(core, "Test GPU", 16 * GiB, 12 * GiB, 3);
  }
  const auto after = table.snapshot();
  CHECK(after.device_name == "Test GPU");
  CHECK(after.device_total == 16 * GiB);
  CHECK(after.device_free == 12 * GiB);
  CHECK(after.device_observer_pid == ::getpid());
  CHECK(after.device_observed_unix_ns > 0);
  // 4 GiB used on the device; sessions account for 1.5 GiB: 2.5 GiB is someone else's.
  CHECK(after.device_untracked == 2 * GiB + 512 * MiB);

  // More accounted than used (reservations not yet allocated): floored at 0, never wraps.
  {
    gpushare::detail::table_core core(
        gpushare::detail::mapped_table::open_existing(t.object_name(), 1'000'000'000));
    gpushare::detail::record_device_observation(core, std::string(200, 'x'), 16 * GiB, 15 * GiB, 0);
  }
  const auto floored = table.snapshot();
  CHECK(floored.device_untracked == 0);
  CHECK(floored.device_name.size() == gpushare::detail::device_name_capacity - 1);
}

TEST_CASE("memory a dead session had accounted shows as being released, not as untracked") {
  test::unique_table t("releasing", 10 * GiB);
  auto s = t.join("alive");
  auto r = s.reserve(1 * GiB);
  test::shared_block<std::atomic<int>> ready;
  const pid_t pid = test::spawn([&] {
    auto dying = t.join("dying");
    auto held = dying.reserve(3 * GiB);
    dying.set_external_usage(512 * MiB);
    ready[0] = 1;
    for (;;) ::pause();
    return 0;
  });
  REQUIRE(test::eventually([&] { return ready[0].load() == 1; }, 10000ms));
  ::kill(pid, SIGKILL);
  CHECK(test::wait_exit(pid) == 128 + SIGKILL);
  {
    gpushare::detail::table_core core(
        gpushare::detail::mapped_table::open_existing(t.object_name(), 1'000'000'000));
    // 16 GiB device, 10 GiB free: 6 GiB used, 1 GiB accounted by the live session, 3.5 GiB by the
    // dead one (its process's memory, which the driver is releasing), 1.5 GiB by nobody.
    gpushare::detail::record_device_observation(core, "Test GPU", 16 * GiB, 10 * GiB, 0);
  }
  const auto seen = gpushare::table::read_unlocked(t.object_name(), std::chrono::seconds(1));
  REQUIRE(seen.dead_sessions.size() == 1);
  CHECK(seen.dead_sessions[0].name == "dying");
  CHECK(seen.dead_sessions[0].reserved == 3 * GiB);
  CHECK(seen.sessions.size() == 1);
  CHECK(seen.device_releasing == 3 * GiB + 512 * MiB);
  CHECK(seen.device_untracked == 1 * GiB + 512 * MiB);
  // Reclaimed (a snapshot under the lock does it): no longer a dead session; the memory counts as
  // untracked until the next observation.
  const auto reclaimed = t.open().snapshot();
  CHECK(reclaimed.dead_sessions.empty());
  CHECK(reclaimed.device_releasing == 0);
  CHECK(reclaimed.device_untracked == 5 * GiB);
}

TEST_CASE("no-device message: no NVIDIA driver is not a driver to upgrade") {
  const gc::detail::nvidia_driver none;
  gc::detail::nvidia_driver installed;
  installed.present = true;
  installed.version = "470.82.01";
  const gc::detail::nvidia_driver unreadable{true, ""};
  const auto message = [](std::string_view name, const gc::detail::nvidia_driver& d,
                          int runtime = 12040) {
    return gc::detail::no_device_message(name, std::string(name) + " (CUDA's text)",
                                         "cudaGetDeviceCount", d, runtime);
  };

  // No driver loaded: CUDA says "insufficient driver" or "no device"; either way, no driver.
  CHECK(message("cudaErrorInsufficientDriver", none) ==
        "no NVIDIA driver or GPU found (cudaErrorInsufficientDriver, from cudaGetDeviceCount)");
  CHECK(message("cudaErrorNoDevice", none) ==
        "no NVIDIA driver or GPU found (cudaErrorNoDevice, from cudaGetDeviceCount)");
  // A driver that really is too old: said so, with its version and the runtime's.
  CHECK(message("cudaErrorInsufficientDriver", installed) ==
        "the NVIDIA driver 470.82.01 is too old for CUDA runtime 12.4 "
        "(cudaErrorInsufficientDriver, from cudaGetDeviceCount); install a newer NVIDIA driver");
  CHECK(message("cudaErrorInsufficientDriver", unreadable, 0) ==
        "the NVIDIA driver is too old for this CUDA runtime (cudaErrorInsufficientDriver, from "
        "cudaGetDeviceCount); install a newer NVIDIA driver");
  // A driver and no device (every GPU hidden, say), or any other reason: CUDA's error and what
  // to check, whether or not a driver is loaded.
  CHECK(message("cudaErrorNoDevice", installed) ==
        "no CUDA device available: cudaErrorNoDevice (CUDA's text) (from cudaGetDeviceCount); "
        "check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES");
  CHECK(message("cudaErrorStubLibrary", none) ==
        "no CUDA device available: cudaErrorStubLibrary (CUDA's text) (from cudaGetDeviceCount); "
        "check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES");
  CHECK(message("cudaErrorDevicesUnavailable", installed)
            .rfind("no CUDA device available: cudaErrorDevicesUnavailable", 0) == 0);
}

TEST_CASE("the NVIDIA driver's version is read from /proc/driver/nvidia/version") {
  CHECK(gc::detail::parse_nvidia_driver_version(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC "
            "2023") == "535.104.05");
  CHECK(gc::detail::parse_nvidia_driver_version(
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
            "(dvs-builder@U16-I3-B03-4-3)  Tue Sep 23 09:58:45 UTC 2025") == "580.95.05");
  CHECK(gc::detail::parse_nvidia_driver_version("NVRM version: unknown").empty());
  CHECK(gc::detail::parse_nvidia_driver_version("").empty());
  CHECK(gc::detail::format_cuda_version(13000) == "13.0");
  CHECK(gc::detail::format_cuda_version(12040) == "12.4");
  CHECK(gc::detail::format_cuda_version(0).empty());

  // A file that is not there: no driver. One that is: present, its version parsed.
  CHECK_FALSE(gc::detail::find_nvidia_driver("/nonexistent/nvidia/version").present);
  char path[] = "/tmp/gpushare-nvidia-version-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  const std::string text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.82.01  Tue\n"
                           "GCC version:  gcc version 9.3.0\n";
  REQUIRE(::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  ::close(fd);
  const gc::detail::nvidia_driver d = gc::detail::find_nvidia_driver(path);
  ::unlink(path);
  CHECK(d.present);
  CHECK(d.version == "470.82.01");
}
