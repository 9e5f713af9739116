// SPDX-License-Identifier: Apache-2.0
// `gpushare run --engine vllm|sglang[,INPUT=VALUE...]`: the inference engine's own flags for the
// program's budget (<gpushare/engines.hpp>), appended to its command line. The inputs the budget
// does not tell (the model's weights, activation peak, graphs, margin, ...) are given after the
// engine's name; a missing one is named by the translator's message.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <gpushare/engines.hpp>
#include <gpushare/error.hpp>
#include <gpushare/text.hpp>

#include "cli_errors.hpp"

namespace gpushare::cli {

/// --engine, as read: the engine and its inputs ("weights" -> "14GiB").
struct engine_spec {
  enum class kind { vllm, sglang } engine = kind::vllm;
  std::vector<std::pair<std::string, std::string>> inputs;
};

inline constexpr std::string_view vllm_engine_inputs[] = {"weights", "activation_peak",
                                                          "cuda_graphs", "enforce_eager", "margin"};
inline constexpr std::string_view sglang_engine_inputs[] = {
    "weights",    "free_at_start",      "activation_peak", "cuda_graphs", "disable_cuda_graph",
    "margin",     "kv_bytes_per_token", "layers",          "kv_heads",    "head_dim",
    "dtype_bytes"};

inline std::string engine_inputs_text(engine_spec::kind k) {
  std::string out;
  const auto add = [&](std::string_view n) { out.append(out.empty() ? "" : ", ").append(n); };
  if (k == engine_spec::kind::vllm)
    for (std::string_view n : vllm_engine_inputs) add(n);
  else
    for (std::string_view n : sglang_engine_inputs) add(n);
  return out;
}

/// Reads "vllm,weights=14GiB,activation_peak=2GiB,cuda_graphs=1GiB,margin=1GiB".
inline engine_spec parse_engine_spec(std::string_view text) {
  engine_spec spec;
  const std::size_t comma = text.find(',');
  const std::string_view name = text.substr(0, comma);
  if (name == "vllm")
    spec.engine = engine_spec::kind::vllm;
  else if (name == "sglang")
    spec.engine = engine_spec::kind::sglang;
  else
    throw usage_error("--engine: unknown engine " + quote(name) +
                      "; give vllm or sglang, then its inputs: --engine "
                      "vllm,weights=14GiB,activation_peak=2GiB,cuda_graphs=1GiB,margin=1GiB");
  std::string_view rest = comma == std::string_view::npos ? "" : text.substr(comma + 1);
  while (!rest.empty()) {
    const std::string_view item = rest.substr(0, rest.find(','));
    rest = item.size() == rest.size() ? "" : rest.substr(item.size() + 1);
    const std::size_t eq = item.find('=');
    const std::string_view key = item.substr(0, eq);
    bool known = false;
    for (std::string_view n : spec.engine == engine_spec::kind::vllm
                                  ? std::span<const std::string_view>(vllm_engine_inputs)
                                  : std::span<const std::string_view>(sglang_engine_inputs))
      known = known || n == key;
    if (!known || eq == std::string_view::npos || eq + 1 == item.size())
      throw usage_error(
          "--engine " + std::string(name) + ": " +
          (known ? "give " + std::string(key) + "=VALUE" : "unknown input " + quote(key)) +
          "; its inputs: " + engine_inputs_text(spec.engine));
    spec.inputs.emplace_back(std::string(key), std::string(item.substr(eq + 1)));
  }
  return spec;
}

namespace engine_detail {

inline std::uint64_t size_input(const std::string& key, const std::string& v) {
  try {
    return parse_capacity(v);
  } catch (const gpushare::error&) {
    throw usage_error("--engine: " + key + "=" + v + " is not a size (e.g. 14GiB, 512MiB)");
  }
}

inline std::uint32_t count_input(const std::string& key, const std::string& v) {
  const std::uint64_t n = size_input(key, v);
  if (n == 0 || n > 0xffffffffu)
    throw usage_error("--engine: " + key + "=" + v + " must be a positive whole number");
  return static_cast<std::uint32_t>(n);
}

inline bool flag_input(const std::string& key, const std::string& v) {
  if (v == "1" || v == "true" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "no") return false;
  throw usage_error("--engine: " + key + "=" + v + " must be true or false");
}

} // namespace engine_detail

/// The engine's flags for a budget of `budget` bytes on a card of `card_total` bytes (if known).
/// A missing input or a budget that leaves no KV cache: runtime_failure with the translator's
/// message (it names what to supply).
inline std::vector<std::string> engine_flags(const engine_spec& spec, std::uint64_t budget,
                                             std::optional<std::uint64_t> card_total) {
  using namespace engine_detail;
  try {
    if (spec.engine == engine_spec::kind::vllm) {
      engines::vllm_inputs in;
      in.budget = budget;
      in.device_total = card_total;
      for (const auto& [k, v] : spec.inputs) {
        if (k == "enforce_eager")
          in.enforce_eager = flag_input(k, v);
        else if (k == "weights")
          in.weights = size_input(k, v);
        else if (k == "activation_peak")
          in.activation_peak = size_input(k, v);
        else if (k == "cuda_graphs")
          in.cuda_graphs = size_input(k, v);
        else
          in.margin = size_input(k, v);
      }
      return engines::flags(engines::plan_vllm(in));
    }
    engines::sglang_inputs in;
    in.budget = budget;
    for (const auto& [k, v] : spec.inputs) {
      if (k == "disable_cuda_graph")
        in.disable_cuda_graph = flag_input(k, v);
      else if (k == "layers")
        in.layers = count_input(k, v);
      else if (k == "kv_heads")
        in.kv_heads = count_input(k, v);
      else if (k == "head_dim")
        in.head_dim = count_input(k, v);
      else if (k == "dtype_bytes")
        in.dtype_bytes = count_input(k, v);
      else if (k == "weights")
        in.weights = size_input(k, v);
      else if (k == "free_at_start")
        in.free_at_start = size_input(k, v);
      else if (k == "activation_peak")
        in.activation_peak = size_input(k, v);
      else if (k == "cuda_graphs")
        in.cuda_graphs = size_input(k, v);
      else if (k == "kv_bytes_per_token")
        in.kv_bytes_per_token = size_input(k, v);
      else
        in.margin = size_input(k, v);
    }
    return engines::flags(engines::plan_sglang(in));
  } catch (const gpushare::error& e) {
    throw runtime_failure(std::string("--engine: ").append(e.what()));
  }
}

} // namespace gpushare::cli
