// SPDX-License-Identifier: Apache-2.0
// The budget -> engine flags translator (<gpushare/engines.hpp>): hand-computed cases, the
// errors that name what is missing or what does not fit, and a seeded random property test (the
// flags, applied with the engines' own formulas, stay within the budget; more budget never
// gives less).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>

#include <gpushare/engines.hpp>

using namespace gpushare;
namespace e = gpushare::engines;

constexpr std::uint64_t GiB = 1ull << 30;
constexpr std::uint64_t MiB = 1ull << 20;

namespace {

std::string error_text(const std::function<void()>& f, errc* code = nullptr) {
  try {
    f();
  } catch (const error& x) {
    if (code != nullptr) *code = x.code();
    return x.what();
  }
  return "";
}

e::vllm_inputs vllm_case() {
  e::vllm_inputs in;
  in.budget = 20 * GiB;
  in.weights = 14 * GiB;
  in.activation_peak = 2 * GiB;
  in.cuda_graphs = 512 * MiB;
  in.margin = 512 * MiB;
  return in;
}

e::sglang_inputs sglang_case() {
  e::sglang_inputs in;
  in.budget = 20 * GiB;
  in.weights = 14 * GiB;
  in.free_at_start = 60 * GiB;
  in.activation_peak = 1 * GiB;
  in.cuda_graphs = 1 * GiB;
  in.margin = 0;
  in.layers = 32;
  in.kv_heads = 8;
  in.head_dim = 128;
  in.dtype_bytes = 2;
  return in;
}

} // namespace

TEST_CASE("vLLM: kv-cache-memory-bytes is the budget less every other term") {
  e::vllm_inputs in = vllm_case();
  const e::vllm_plan p = e::plan_vllm(in);
  CHECK(p.kv_cache_memory_bytes == 3 * GiB); // 20 - 14 - 2 - 0.5 - 0.5
  CHECK_FALSE(p.gpu_memory_utilization.has_value());
  CHECK(e::flags(p) == std::vector<std::string>{"--kv-cache-memory-bytes", "3221225472"});
  in.device_total = 80 * GiB;
  const e::vllm_plan q = e::plan_vllm(in);
  REQUIRE(q.gpu_memory_utilization.has_value());
  CHECK(*q.gpu_memory_utilization == 0.25);
  CHECK(e::flags(q) == std::vector<std::string>{"--kv-cache-memory-bytes", "3221225472",
                                                "--gpu-memory-utilization", "0.2500"});
  in.cuda_graphs.reset();
  in.enforce_eager = true; // no graphs: their 512 MiB go to the cache
  CHECK(e::plan_vllm(in).kv_cache_memory_bytes == 3 * GiB + 512 * MiB);
}

TEST_CASE("vLLM: unknown inputs are named, never guessed") {
  e::vllm_inputs in;
  in.budget = 20 * GiB;
  const std::vector<std::string> m = e::missing_inputs(in);
  REQUIRE(m.size() == 4);
  CHECK(m[0].rfind("weights", 0) == 0);
  CHECK(m[1].rfind("activation_peak", 0) == 0);
  CHECK(m[2].rfind("cuda_graphs", 0) == 0);
  CHECK(m[3].rfind("margin", 0) == 0);
  errc code{};
  const std::string t = error_text([&] { (void)e::plan_vllm(in); }, &code);
  CHECK(code == errc::invalid_argument);
  CHECK(t.find("cannot size the KV cache without weights") != std::string::npos);
  CHECK(t.find(" and margin") != std::string::npos);
  CHECK(e::missing_inputs(vllm_case()).empty());
}

TEST_CASE("vLLM: a budget that does not cover the terms names each of them") {
  e::vllm_inputs in = vllm_case();
  in.budget = 16 * GiB;
  errc code{};
  const std::string t = error_text([&] { (void)e::plan_vllm(in); }, &code);
  CHECK(code == errc::invalid_argument);
  CHECK(t.find("the budget 16.00 GiB leaves no KV cache") != std::string::npos);
  CHECK(t.find("weights 14.00 GiB + activation peak 2.00 GiB + CUDA graphs 512.00 MiB + "
               "margin 512.00 MiB = 17.00 GiB") != std::string::npos);
  in.budget = 20 * GiB;
  in.device_total = 16 * GiB;
  CHECK(error_text([&] { (void)e::plan_vllm(in); }).find("exceeds the device's total") !=
        std::string::npos);
}

TEST_CASE("SGLang: the fraction of free memory at start and the token cap") {
  const e::sglang_inputs in = sglang_case();
  CHECK(e::kv_bytes_per_token(in) == 2ull * 32 * 8 * 128 * 2); // 128 KiB per token
  const e::sglang_plan p = e::plan_sglang(in);
  CHECK(p.kv_budget == 4 * GiB);          // 20 - 14 - 1 - 1 - 0
  CHECK(p.max_total_tokens == 32768);     // 4 GiB / 128 KiB
  CHECK(p.mem_fraction_static <= 0.3);    // (14 + 4) / 60, rounded down
  CHECK(p.mem_fraction_static >= 0.2999); // by at most a step of the rounding
  CHECK(e::sglang_kv_pool(60.0 * GiB, 14.0 * GiB, p.mem_fraction_static) <= 4.0 * GiB);
  const std::vector<std::string> a = e::flags(p);
  REQUIRE(a.size() == 4);
  CHECK(a[0] == "--mem-fraction-static");
  CHECK(std::strtod(a[1].c_str(), nullptr) == p.mem_fraction_static);
  CHECK(a[2] == "--max-total-tokens");
  CHECK(a[3] == "32768");
  e::sglang_inputs direct = in;
  direct.kv_bytes_per_token = 70'000; // an MLA model's size, given directly
  CHECK(e::plan_sglang(direct).max_total_tokens == 4 * GiB / 70'000);
  e::sglang_inputs shapeless = in;
  shapeless.layers.reset();
  CHECK(e::plan_sglang(shapeless).max_total_tokens == 0);
  CHECK(e::flags(e::plan_sglang(shapeless)).size() == 2);
}

TEST_CASE("SGLang: missing inputs and budgets that do not fit") {
  e::sglang_inputs in = sglang_case();
  in.free_at_start.reset();
  const std::string t = error_text([&] { (void)e::plan_sglang(in); });
  CHECK(t.find("free_at_start (free memory measured under the start-up lock)") !=
        std::string::npos);
  in = sglang_case();
  in.free_at_start = 17 * GiB; // less than weights + pool: someone outside the table holds it
  CHECK(error_text([&] { (void)e::plan_sglang(in); }).find("exceed the free memory at start") !=
        std::string::npos);
  in = sglang_case();
  in.budget = 15 * GiB;
  CHECK(error_text([&] { (void)e::plan_sglang(in); }).find("leaves no KV cache") !=
        std::string::npos);
}

TEST_CASE("random budgets: the flags stay within the budget and grow with it") {
  std::mt19937_64 rng(20261127);
  auto gib = [&](double lo, double hi) {
    return static_cast<std::uint64_t>(std::uniform_real_distribution<double>(lo, hi)(rng) * GiB);
  };
  int planned = 0;
  for (int k = 0; k < 20000; ++k) {
    e::vllm_inputs v;
    v.budget = gib(0.5, 140);
    v.weights = gib(0.1, 80);
    v.activation_peak = gib(0, 8);
    v.cuda_graphs = gib(0, 2);
    v.margin = gib(0, 1);
    v.device_total = *v.budget + gib(0, 60);
    const std::uint64_t others = *v.weights + *v.activation_peak + *v.cuda_graphs + *v.margin;
    if (others >= *v.budget) {
      CHECK_THROWS_AS((void)e::plan_vllm(v), error);
      continue;
    }
    ++planned;
    const e::vllm_plan p = e::plan_vllm(v);
    CHECK(p.kv_cache_memory_bytes + others == *v.budget);
    // vLLM's start-up check with the utilization given: total x u <= budget (free at start)
    CHECK(static_cast<double>(*v.device_total) * *p.gpu_memory_utilization <=
          static_cast<double>(*v.budget));
    e::vllm_inputs more = v;
    *more.budget += gib(0, 4);
    more.device_total = std::max(*v.device_total, *more.budget);
    CHECK(e::plan_vllm(more).kv_cache_memory_bytes >= p.kv_cache_memory_bytes);

    e::sglang_inputs s;
    s.budget = v.budget;
    s.weights = v.weights;
    s.activation_peak = v.activation_peak;
    s.cuda_graphs = v.cuda_graphs;
    s.margin = v.margin;
    s.free_at_start = *v.budget + gib(0, 60);
    s.kv_bytes_per_token = 1 + rng() % (1u << 20);
    const e::sglang_plan q = e::plan_sglang(s);
    CHECK(q.kv_budget == p.kv_cache_memory_bytes);
    const double f = std::strtod(e::flags(q)[1].c_str(), nullptr); // as the engine reads it
    CHECK(f == q.mem_fraction_static);
    const double pool = e::sglang_kv_pool(static_cast<double>(*s.free_at_start),
                                          static_cast<double>(*s.weights), f);
    CHECK(pool <= static_cast<double>(q.kv_budget));
    CHECK(pool >= static_cast<double>(q.kv_budget) - 2e-6 * static_cast<double>(*s.free_at_start));
    CHECK(q.max_total_tokens * *s.kv_bytes_per_token <= q.kv_budget);
    e::sglang_inputs s_more = s;
    *s_more.budget = *more.budget;
    *s_more.free_at_start += *more.budget - *v.budget;
    CHECK(e::plan_sglang(s_more).max_total_tokens >= q.max_total_tokens);
  }
  CHECK(planned > 5000);
}
