// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the parsers of sizes, percentages, priorities, shares, durations, names and the
// GPUSHARE_* environment as a whole. Every input must give a value or a typed error
// (invalid_argument / invalid_environment), never a crash, a hang or an unbounded allocation.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gpushare/cuda/options.hpp>
#include <gpushare/gpushare.hpp>

namespace {

template <class F> void guarded(F&& f) {
  try {
    f();
  } catch (const gpushare::error& e) {
    if (e.code() != gpushare::errc::invalid_argument &&
        e.code() != gpushare::errc::invalid_environment)
      __builtin_trap(); // a parser may only reject with these codes
  }
}

constexpr const char* variables[] = {
    "GPUSHARE_NAME",          "GPUSHARE_PRIORITY",        "GPUSHARE_SHARE",
    "GPUSHARE_COMPUTE_LIMIT", "GPUSHARE_MEMORY_LIMIT",    "GPUSHARE_MEMORY_GUARANTEE",
    "GPUSHARE_DOMAIN",        "GPUSHARE_TABLE_MODE",      "GPUSHARE_QUANTUM",
    "GPUSHARE_HANDOVER",      "GPUSHARE_DEVICE_HEADROOM", "GPUSHARE_CONTEXT_OVERHEAD",
    "GPUSHARE_ALLOC_TIMEOUT", "GPUSHARE_MAX_IN_FLIGHT"};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  using namespace gpushare::detail;
  guarded([&] { (void)parse_memory_amount(in); });
  guarded([&] { (void)parse_percent_ppm(in); });
  guarded([&] { (void)parse_priority(in); });
  guarded([&] { (void)parse_share(in); });
  guarded([&] { (void)parse_quantum_ns(in); });
  guarded([&] { (void)parse_max_guard_ns(in); });
  guarded([&] { (void)parse_handover(in); });
  guarded([&] { (void)parse_table_access(in); });
  guarded([&] { validate_domain(in); });
  guarded([&] { validate_key(in); });
  guarded([&] { validate_session_name(in); });
  guarded([&] { (void)gpushare::cuda::detail::parse_timeout_ns(in); });
  guarded([&] { (void)gpushare::cuda::detail::parse_byte_count(in); });
  (void)quote(in, 60);
  (void)format_bytes(size * 0x9E3779B97F4A7C15ull);

  // The whole environment at once: lines are the values of the variables in order.
  std::vector<std::optional<std::string>> values(std::size(variables));
  std::size_t line = 0, start = 0;
  for (std::size_t i = 0; i <= in.size() && line < values.size(); ++i) {
    if (i == in.size() || in[i] == '\n') {
      const std::string_view v = in.substr(start, i - start);
      if (v != "-") values[line] = std::string(v); // "-" leaves the variable unset
      ++line;
      start = i + 1;
    }
  }
  const gpushare::env_lookup env = [&](const char* name) -> std::optional<std::string> {
    for (std::size_t k = 0; k < values.size(); ++k)
      if (std::string_view(name) == variables[k]) return values[k];
    return std::nullopt;
  };
  guarded([&] { (void)gpushare::resolve_options({}, env); });
  guarded([&] { (void)gpushare::cuda::resolve_device_options({}, env); });
  return 0;
}
