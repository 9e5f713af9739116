// SPDX-License-Identifier: Apache-2.0
// From a session's memory budget to the flags inference engines understand (docs/python.md,
// "Engines that start together"), from the engines' own start-up formulas. Pure functions: no
// CUDA, no table.
//
//   vLLM (vllm/v1/worker/gpu_worker.py, vllm/config/cache.py): at start it raises if free memory <
//   total x --gpu-memory-utilization; the KV cache is total x utilization - the non-KV memory
//   its profile run measured, unless --kv-cache-memory-bytes gives it absolutely. A fraction of
//   TOTAL memory checked against FREE memory is the wrong output for a budget, so the plan gives
//   the absolute bytes, and a utilization of budget / total only to pass the start-up check.
//
//   SGLang (python/sglang/srt/server_args.py, mem_cache/kv_cache_configurator.py): the KV pool
//   is free after loading - free before loading x (1 - --mem-fraction-static), so the fraction is
//   relative to the free memory at start; --max-total-tokens caps the pool in tokens.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <gpushare/error.hpp>
#include <gpushare/text.hpp>

namespace gpushare {
inline namespace v0 {
namespace engines {

/// What a vLLM engine's KV cache may take from a budget. Every byte count is for one GPU (one
/// tensor-parallel rank). Unset: unknown; plan_vllm() then says which the user must supply.
struct vllm_inputs {
  std::optional<std::uint64_t> budget;  ///< the session's memory budget on this GPU
  std::optional<std::uint64_t> weights; ///< the model's weights on this GPU
  /// Peak activation memory of vLLM's profile run (its log: "activation peak"): about
  /// max_num_batched_tokens x hidden size x a model-dependent factor; measure it once.
  std::optional<std::uint64_t> activation_peak;
  /// CUDA graph memory (its log: "graph capturing ... took X GiB"); 0 with --enforce-eager,
  /// which vLLM documents as capturing no graphs (set enforce_eager instead).
  std::optional<std::uint64_t> cuda_graphs;
  bool enforce_eager = false; ///< --enforce-eager: no CUDA graphs, so cuda_graphs is 0
  /// Room kept for what none of the terms counts (the CUDA context, NCCL, fragmentation).
  std::optional<std::uint64_t> margin;
  /// Total device memory (cudaMemGetInfo total): sets --gpu-memory-utilization to budget/total
  /// so that vLLM's start-up check (free >= total x utilization) passes; unset: not given.
  std::optional<std::uint64_t> device_total;
};

/// What plan_vllm() computed: the vLLM flags to start the engine with.
struct vllm_plan {
  std::uint64_t kv_cache_memory_bytes = 0; ///< --kv-cache-memory-bytes
  /// --gpu-memory-utilization (only its start-up check reads it once the bytes are given);
  /// rounded down to 4 decimals; unset when device_total was not given.
  std::optional<double> gpu_memory_utilization;
};

/// What an SGLang engine's KV pool may take from a budget (one GPU, one rank).
struct sglang_inputs {
  std::optional<std::uint64_t> budget;  ///< the session's memory budget on this GPU
  std::optional<std::uint64_t> weights; ///< the model's weights on this GPU
  /// Free device memory just before the engine loads, measured under the start-up lock (what
  /// SGLang measures; with gpushare's lock, nobody else is starting meanwhile).
  std::optional<std::uint64_t> free_at_start;
  std::optional<std::uint64_t> activation_peak; ///< peak activations (chunked prefill)
  std::optional<std::uint64_t> cuda_graphs;     ///< 0 with --disable-cuda-graph (set that instead)
  bool disable_cuda_graph = false;              ///< --disable-cuda-graph: no graph memory
  std::optional<std::uint64_t> margin;          ///< room for the CUDA context, NCCL, fragmentation
  /// Bytes of KV cache per token, if known directly (MLA and hybrid models: take it from the
  /// engine's log); else computed from the shape below (MHA/GQA).
  std::optional<std::uint64_t> kv_bytes_per_token;
  /// The model's shape: layers, KV heads, head dimension, bytes per element.
  ///@{
  std::optional<std::uint32_t> layers, kv_heads, head_dim, dtype_bytes;
  ///@}
};

/// What plan_sglang() computed: the SGLang flags to start the engine with.
struct sglang_plan {
  double mem_fraction_static = 0;     ///< --mem-fraction-static, rounded down to 6 decimals
  std::uint64_t kv_budget = 0;        ///< bytes the KV pool may take
  std::uint64_t max_total_tokens = 0; ///< --max-total-tokens; 0: per-token size not known
};

namespace detail {

inline void need(std::vector<std::string>& out, bool has, const char* what) {
  if (!has) out.emplace_back(what);
}

/// Budget - every term, or errc::invalid_argument naming each term when they do not fit.
inline std::uint64_t kv_left(const char* engine, std::uint64_t budget,
                             const std::vector<std::pair<const char*, std::uint64_t>>& terms) {
  std::uint64_t sum = 0;
  std::string list;
  for (const auto& [name, bytes] : terms) {
    sum = bytes > UINT64_MAX - sum ? UINT64_MAX : sum + bytes;
    list.append(list.empty() ? "" : " + ").append(name).append(" ").append(format_bytes(bytes));
  }
  if (sum >= budget)
    throw error(errc::invalid_argument,
                std::string(engine) + ": the budget " + format_bytes(budget) +
                    " leaves no KV cache: " + list + " = " + format_bytes(sum) +
                    "; give the session a larger memory budget, or a smaller model, batch "
                    "(activations) or margin");
  return budget - sum;
}

inline void throw_missing(const char* engine, const std::vector<std::string>& missing) {
  if (missing.empty()) return;
  std::string m = std::string(engine) + ": cannot size the KV cache without ";
  for (std::size_t k = 0; k < missing.size(); ++k)
    m.append(k == 0 ? "" : (k + 1 == missing.size() ? " and " : ", ")).append(missing[k]);
  throw error(errc::invalid_argument, m + "; supply them (gpushare does not guess them)");
}

/// floor(num / den x 10^6), exactly (den > 0, num <= den; exact for den below 18 TB).
inline std::int64_t millionths(std::uint64_t num, std::uint64_t den) {
  constexpr std::uint64_t m = 1'000'000;
  if (den > UINT64_MAX / m)
    return static_cast<std::int64_t>(
        std::floor(static_cast<double>(num) / static_cast<double>(den) * 1e6));
  return static_cast<std::int64_t>((num / den) * m + (num % den) * m / den);
}

} // namespace detail

/// The inputs plan_vllm() needs and `in` lacks, each named as the user supplies it (empty: none).
inline std::vector<std::string> missing_inputs(const vllm_inputs& in) {
  std::vector<std::string> m;
  detail::need(m, in.budget.has_value(), "budget (the session's memory budget)");
  detail::need(m, in.weights.has_value(), "weights (bytes of the model's weights on this GPU)");
  detail::need(m, in.activation_peak.has_value(), "activation_peak (vLLM's profile run logs it)");
  detail::need(m, in.cuda_graphs.has_value() || in.enforce_eager,
               "cuda_graphs (vLLM logs graph memory; or enforce_eager)");
  detail::need(m, in.margin.has_value(), "margin (room for the CUDA context and NCCL)");
  return m;
}

/// --kv-cache-memory-bytes = budget - weights - activation peak - CUDA graphs - margin.
/// Throws errc::invalid_argument naming the missing inputs, or each term when the budget does
/// not cover them.
inline vllm_plan plan_vllm(const vllm_inputs& in) {
  detail::throw_missing("vLLM", missing_inputs(in));
  const std::uint64_t graphs = in.enforce_eager ? 0 : *in.cuda_graphs;
  vllm_plan p;
  p.kv_cache_memory_bytes = detail::kv_left("vLLM", *in.budget,
                                            {{"weights", *in.weights},
                                             {"activation peak", *in.activation_peak},
                                             {"CUDA graphs", graphs},
                                             {"margin", *in.margin}});
  if (in.device_total.has_value()) {
    if (*in.device_total == 0 || *in.budget > *in.device_total)
      throw error(errc::invalid_argument, "vLLM: the budget " + format_bytes(*in.budget) +
                                              " exceeds the device's total memory " +
                                              format_bytes(*in.device_total));
    p.gpu_memory_utilization =
        static_cast<double>(detail::millionths(*in.budget, *in.device_total) / 100) / 1e4;
  }
  return p;
}

/// The inputs plan_sglang() needs and `in` lacks (empty: none). The per-token size is optional:
/// without it the plan has no --max-total-tokens.
inline std::vector<std::string> missing_inputs(const sglang_inputs& in) {
  std::vector<std::string> m;
  detail::need(m, in.budget.has_value(), "budget (the session's memory budget)");
  detail::need(m, in.weights.has_value(), "weights (bytes of the model's weights on this GPU)");
  detail::need(m, in.free_at_start.has_value(),
               "free_at_start (free memory measured under the start-up lock)");
  detail::need(m, in.activation_peak.has_value(), "activation_peak (peak activations)");
  detail::need(m, in.cuda_graphs.has_value() || in.disable_cuda_graph,
               "cuda_graphs (SGLang logs graph memory; or disable_cuda_graph)");
  detail::need(m, in.margin.has_value(), "margin (room for the CUDA context and NCCL)");
  return m;
}

/// KV bytes per token: given directly, else 2 x layers x kv_heads x head_dim x dtype_bytes (K and
/// V, MHA/GQA); nullopt when neither is complete.
inline std::optional<std::uint64_t> kv_bytes_per_token(const sglang_inputs& in) {
  if (in.kv_bytes_per_token.has_value()) return in.kv_bytes_per_token;
  if (!in.layers || !in.kv_heads || !in.head_dim || !in.dtype_bytes) return std::nullopt;
  return 2ull * *in.layers * *in.kv_heads * *in.head_dim * *in.dtype_bytes;
}

/// The KV pool that SGLang's formula gives: free after loading - free at start x (1 - f).
inline double sglang_kv_pool(double free_at_start, double weights, double f) {
  return (free_at_start - weights) - free_at_start * (1.0 - f);
}

/// --mem-fraction-static f with free_at_start x (1 - f) = free_at_start - (budget - activations
/// - graphs - margin): what SGLang leaves free is what other sessions hold plus this engine's
/// own activations, graphs and margin, so its KV pool is budget - weights - the rest. Rounded
/// down (a smaller pool). --max-total-tokens = floor(pool / bytes per token) when that is known.
inline sglang_plan plan_sglang(const sglang_inputs& in) {
  detail::throw_missing("SGLang", missing_inputs(in));
  const std::uint64_t graphs = in.disable_cuda_graph ? 0 : *in.cuda_graphs;
  sglang_plan p;
  p.kv_budget = detail::kv_left("SGLang", *in.budget,
                                {{"weights", *in.weights},
                                 {"activation peak", *in.activation_peak},
                                 {"CUDA graphs", graphs},
                                 {"margin", *in.margin}});
  const std::uint64_t free = *in.free_at_start;
  const std::uint64_t static_part = p.kv_budget + *in.weights; // budget - the rest
  if (static_part > free)
    throw error(errc::invalid_argument,
                "SGLang: weights + KV pool " + format_bytes(static_part) +
                    " exceed the free memory at start " + format_bytes(free) +
                    ": memory outside gpushare's accounting is in use; start under the "
                    "start-up lock with a reservation of the budget, or lower the budget");
  // In millionths, rounded down; then down again while the engine's own formula, in doubles,
  // would give a pool above the budget's.
  std::int64_t micro = detail::millionths(static_part, free);
  const auto pool = [&](std::int64_t m) {
    return sglang_kv_pool(static_cast<double>(free), static_cast<double>(*in.weights),
                          static_cast<double>(m) / 1e6);
  };
  while (micro > 0 && pool(micro) > static_cast<double>(p.kv_budget)) --micro;
  const double f = static_cast<double>(micro) / 1e6;
  if (micro <= 0)
    throw error(errc::invalid_argument, "SGLang: the budget gives no positive "
                                        "--mem-fraction-static of the free memory " +
                                            format_bytes(free));
  p.mem_fraction_static = f;
  if (const std::optional<std::uint64_t> per = kv_bytes_per_token(in); per && *per > 0)
    p.max_total_tokens = p.kv_budget / *per;
  return p;
}

/// The flags as argv strings: {"--kv-cache-memory-bytes", "N", "--gpu-memory-utilization", "u"}.
inline std::vector<std::string> flags(const vllm_plan& p) {
  std::vector<std::string> a{"--kv-cache-memory-bytes", std::to_string(p.kv_cache_memory_bytes)};
  if (p.gpu_memory_utilization.has_value()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4f", *p.gpu_memory_utilization);
    a.insert(a.end(), {"--gpu-memory-utilization", buf});
  }
  return a;
}

/// {"--mem-fraction-static", "f"} and, when known, {"--max-total-tokens", "n"}.
inline std::vector<std::string> flags(const sglang_plan& p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6f", p.mem_fraction_static);
  std::vector<std::string> a{"--mem-fraction-static", buf};
  if (p.max_total_tokens > 0)
    a.insert(a.end(), {"--max-total-tokens", std::to_string(p.max_total_tokens)});
  return a;
}

} // namespace engines
} // namespace v0
} // namespace gpushare
