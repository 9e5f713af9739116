// SPDX-License-Identifier: Apache-2.0
// A simulated inference engine's start-up, on the CUDA runtime it is run with (cudasim in the
// tests): it sizes its KV cache exactly as vLLM or SGLang do (docs/python.md, "Engines that
// start together"), sleeping between the phases as a real start-up takes time, so that engines
// started together interleave. With --key it first joins a gpushare session, reserves its budget,
// takes the start-up lock and sizes itself with the flags <gpushare/engines.hpp> gives; it holds
// the lock until it is "ready".
//
//   sim_engine vllm|sglang NAME WEIGHTS ACTIVATIONS GRAPHS PHASE_MS [KEY DOMAIN BUDGET MARGIN]
//
// Sizes in bytes. It prints "RESULT name=N status=S claim=B kv=B" (claim: what it allocated,
// its context not included; status ok, start_check, out_of_memory, no_kv or gpushare, the
// engine's own message printed before it), then, if it started, keeps its memory until its stdin
// closes (so that the engines are all up at once) and exits 0; if it did not start, exits 1.
#include <cuda_runtime_api.h>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gpushare/engines.hpp>
#include <gpushare/gpushare.hpp>

namespace engines = gpushare::engines;

namespace {

constexpr double gib = 1024.0 * 1024.0 * 1024.0;

struct engine {
  bool vllm = true;
  std::string name;
  std::uint64_t weights = 0, activations = 0, graphs = 0;
  int phase_ms = 100;
  // gpushare (when key is set)
  std::string key, domain;
  std::uint64_t budget = 0, margin = 0;
  // what it did
  std::vector<void*> blocks;
  std::uint64_t claimed = 0;
  std::uint64_t kv = 0;
};

void phase(const engine& e) { std::this_thread::sleep_for(std::chrono::milliseconds(e.phase_ms)); }

/// Prints the result; one that started keeps its memory until stdin closes. The exit code.
int result(const engine& e, const std::string& status) {
  std::printf("RESULT name=%s status=%s claim=%llu kv=%llu\n", e.name.c_str(), status.c_str(),
              static_cast<unsigned long long>(e.claimed), static_cast<unsigned long long>(e.kv));
  std::fflush(stdout);
  if (status != "ok") return 1;
  char c;
  while (::read(0, &c, 1) > 0) {
  }
  return 0;
}

/// cudaMalloc that counts what it took; false when the device is out of memory.
bool take(engine& e, std::uint64_t bytes) {
  void* p = nullptr;
  if (bytes == 0) return true;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    std::printf("%s: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %.2f GiB\n",
                e.name.c_str(), static_cast<double>(bytes) / gib);
    return false;
  }
  e.blocks.push_back(p);
  e.claimed += bytes;
  return true;
}

struct mem {
  std::uint64_t free = 0, total = 0;
};
mem mem_info() {
  std::size_t f = 0, t = 0;
  cudaMemGetInfo(&f, &t);
  return {f, t};
}

/// vLLM (vllm/v1/worker/gpu_worker.py): snapshot at init_device, which raises when free <
/// total x utilization; load weights; profile (activation peak); KV = the bytes given, else
/// total x utilization - non-KV memory; then capture the CUDA graphs.
const char* start_vllm(engine& e, double util, std::optional<std::uint64_t> kv_bytes) {
  const mem m = mem_info();
  const double requested = static_cast<double>(m.total) * util;
  if (static_cast<double>(m.free) < requested) {
    std::printf("%s: ValueError: Free memory on device (%.2f/%.2f GiB) on startup is less than "
                "desired GPU memory utilization (%.2f, %.2f GiB). Decrease GPU memory "
                "utilization or reduce GPU memory used by other processes.\n",
                e.name.c_str(), static_cast<double>(m.free) / gib,
                static_cast<double>(m.total) / gib, util, requested / gib);
    return "start_check";
  }
  phase(e);
  if (!take(e, e.weights)) return "out_of_memory";
  phase(e);
  if (!take(e, e.activations)) return "out_of_memory"; // the caching allocator keeps the peak
  phase(e);
  // non-KV memory: weights, activation peak and (vLLM >= 0.11 estimates them) CUDA graphs
  const double non_kv = static_cast<double>(e.weights + e.activations + e.graphs);
  e.kv = kv_bytes ? *kv_bytes : static_cast<std::uint64_t>(std::max(0.0, requested - non_kv));
  if (e.kv == 0) return "no_kv";
  if (!take(e, e.kv)) return "out_of_memory";
  phase(e);
  if (!take(e, e.graphs)) return "out_of_memory";
  return "ok";
}

/// SGLang (mem_cache/kv_cache_configurator.py): free before loading; load weights; KV = free
/// after loading - free before x (1 - mem_fraction_static); activations and graphs come out of
/// what it leaves.
const char* start_sglang(engine& e, double fraction, std::optional<std::uint64_t> free_before) {
  const std::uint64_t before = free_before ? *free_before : mem_info().free;
  phase(e);
  if (!take(e, e.weights)) return "out_of_memory";
  phase(e);
  const std::uint64_t after = mem_info().free;
  const double pool =
      engines::sglang_kv_pool(static_cast<double>(before),
                              static_cast<double>(before) - static_cast<double>(after), fraction);
  if (pool <= 0) {
    std::printf("%s: RuntimeError: Not enough memory. Please try to increase "
                "--mem-fraction-static.\n",
                e.name.c_str());
    return "no_kv";
  }
  e.kv = static_cast<std::uint64_t>(pool);
  if (!take(e, e.kv)) return "out_of_memory";
  phase(e);
  if (!take(e, e.activations) || !take(e, e.graphs)) return "out_of_memory";
  return "ok";
}

/// Its own context first, as every engine creates one before it measures anything.
void create_context() { (void)cudaFree(nullptr); }

/// Uncoordinated, with the engines' defaults: vLLM gpu_memory_utilization 0.92, SGLang's auto
/// mem_fraction_static 0.88.
const char* run_plain(engine& e) {
  create_context();
  phase(e);
  return e.vllm ? start_vllm(e, 0.92, std::nullopt) : start_sglang(e, 0.88, std::nullopt);
}

/// Joins, reserves its budget, takes the start-up lock, sizes itself with the translated flags
/// and releases the lock once it is ready. The session and reservation last until it exits.
int run_coordinated(engine& e) {
  gpushare::session_options o;
  o.name = e.name;
  o.domain = e.domain;
  o.memory_limit = gpushare::memory_amount::of_bytes(e.budget);
  gpushare::session s(e.key, o);
  gpushare::reservation r = s.reserve(e.budget, std::chrono::seconds(60));
  gpushare::startup_hold h = gpushare::hold_startup(s, std::chrono::seconds(60));
  create_context();
  const mem m = mem_info(); // under the lock: nobody else is starting
  const char* status = nullptr;
  if (e.vllm) {
    engines::vllm_inputs in;
    in.budget = e.budget;
    in.weights = e.weights;
    in.activation_peak = e.activations;
    in.cuda_graphs = e.graphs;
    in.margin = e.margin;
    in.device_total = m.total;
    const engines::vllm_plan p = engines::plan_vllm(in);
    status = start_vllm(e, *p.gpu_memory_utilization, p.kv_cache_memory_bytes);
  } else {
    engines::sglang_inputs in;
    in.budget = e.budget;
    in.weights = e.weights;
    in.free_at_start = m.free;
    in.activation_peak = e.activations;
    in.cuda_graphs = e.graphs;
    in.margin = e.margin;
    const engines::sglang_plan p = engines::plan_sglang(in);
    status = start_sglang(e, p.mem_fraction_static, m.free);
  }
  h.ready(); // the engine is ready: the next may start
  return result(e, status);
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 7 && argc != 11) {
    std::fprintf(stderr, "usage: sim_engine vllm|sglang NAME WEIGHTS ACTIVATIONS GRAPHS PHASE_MS "
                         "[KEY DOMAIN BUDGET MARGIN]\n");
    return 64;
  }
  engine e;
  e.vllm = std::string(argv[1]) == "vllm";
  e.name = argv[2];
  e.weights = std::strtoull(argv[3], nullptr, 10);
  e.activations = std::strtoull(argv[4], nullptr, 10);
  e.graphs = std::strtoull(argv[5], nullptr, 10);
  e.phase_ms = std::atoi(argv[6]);
  try {
    if (argc == 7) {
      return result(e, run_plain(e));
    } else {
      e.key = argv[7];
      e.domain = argv[8];
      e.budget = std::strtoull(argv[9], nullptr, 10);
      e.margin = std::strtoull(argv[10], nullptr, 10);
      return run_coordinated(e);
    }
  } catch (const std::exception& x) {
    std::printf("%s: %s\n", e.name.c_str(), x.what());
    return result(e, "gpushare");
  }
}
