// SPDX-License-Identifier: Apache-2.0
// Three simulated engines (sim_engine.cpp: two vLLM, one SGLang) started at once on one
// simulated 80 GiB card (cudasim; not GPU figures): uncoordinated, with the engines' default
// fractions, they fail or over-commit as reported (issue 27 section 2); each in a gpushare session
// with a budget, the start-up lock and the translated flags, every one starts and the sum of their
// claims stays within the card. The figures go to docs/benchmarks.md ("Simulated engine
// start-up").
#include <doctest/doctest.h>

#include <unistd.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gpushare/gpushare.hpp>

#include "../cudasim/sim_util.hpp"
#include "../support/domain.hpp"
#include "../support/process.hpp"

namespace {

constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t GiB = 1ull << 30;
constexpr std::uint64_t card = 80 * GiB;
constexpr std::uint64_t context = 500 * MiB; // CUDASIM_CONTEXT_BYTES below

struct spec {
  const char* kind;
  const char* name;
  std::uint64_t weights, activations, graphs, budget;
};
const std::vector<spec> engines = {
    {"vllm", "vllm-a", 16 * GiB, 2 * GiB, 1 * GiB, 30 * GiB},
    {"sglang", "sglang-b", 14 * GiB, 1 * GiB, 1 * GiB, 24 * GiB},
    {"vllm", "vllm-c", 8 * GiB, 1 * GiB, 512 * MiB, 20 * GiB},
};

struct outcome {
  std::string name, status, log;
  std::uint64_t claim = 0, kv = 0;
  int code = -1;
};

/// Reads `r`'s output up to its RESULT line (or its end).
outcome read_result(const test::running_process& r) {
  outcome o;
  std::string text;
  char buf[4096];
  while (text.find("RESULT ") == std::string::npos || text.back() != '\n') {
    const ssize_t n = ::read(r.out, buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  o.log = text;
  const auto at = text.find("RESULT ");
  if (at == std::string::npos) return o;
  std::istringstream in(text.substr(at + 7));
  std::map<std::string, std::string> kv;
  for (std::string word; in >> word;)
    if (const auto eq = word.find('='); eq != std::string::npos)
      kv[word.substr(0, eq)] = word.substr(eq + 1);
  o.name = kv["name"];
  o.status = kv["status"];
  o.claim = std::stoull(kv["claim"]);
  o.kv = std::stoull(kv["kv"]);
  return o;
}

/// Starts engine `s` (with `extra` arguments) on the simulated card of `st`.
test::running_process start_engine(const simtest::fresh_state& st, const spec& s,
                                   std::vector<std::string> extra) {
  test::process_options o;
  o.env = {"CUDASIM_STATE=" + st.name(), "CUDASIM_MEMORY=80GiB", "CUDASIM_CONTEXT_BYTES=500MiB"};
  o.err = test::stderr_to::stdout_pipe;
  o.stdin_pipe = true;
  std::vector<std::string> argv = {GPUSHARE_HELPER_DIR "/gpushare_helper_sim_engine",
                                   s.kind,
                                   s.name,
                                   std::to_string(s.weights),
                                   std::to_string(s.activations),
                                   std::to_string(s.graphs),
                                   "100"};
  for (std::string& a : extra) argv.push_back(std::move(a));
  return test::start_process(argv, o);
}

/// Starts every engine at once (with `extra` arguments for each), collects their results once
/// all have reported, then lets the ones that started end.
std::vector<outcome> start_all(const simtest::fresh_state& st,
                               const std::function<std::vector<std::string>(const spec&)>& extra) {
  std::vector<test::running_process> procs;
  for (const spec& s : engines) procs.push_back(start_engine(st, s, extra(s)));
  std::vector<outcome> out;
  for (const auto& p : procs) out.push_back(read_result(p));
  for (std::size_t k = 0; k < procs.size(); ++k) {
    ::close(procs[k].in); // the engines that started may end now
    out[k].code = test::finish_process(procs[k]).code;
  }
  return out;
}

std::string figures(const std::vector<outcome>& out) {
  std::string t;
  for (const outcome& o : out)
    t += o.name + ": " + o.status + ", claim " + gpushare::format_bytes(o.claim) + " (KV " +
         gpushare::format_bytes(o.kv) + ") + context\n";
  return t;
}

std::uint64_t started_sum(const std::vector<outcome>& out) {
  std::uint64_t sum = 0;
  for (const outcome& o : out)
    if (o.status == "ok") sum += o.claim + context;
  return sum;
}

} // namespace

TEST_CASE("uncoordinated engines with their default fractions fail or over-commit") {
  simtest::fresh_state st("engines-plain");
  const std::vector<outcome> out =
      start_all(st, [](const spec&) { return std::vector<std::string>{}; });
  int started = 0;
  for (const outcome& o : out) {
    INFO(o.log);
    CHECK_FALSE(o.status.empty()); // every engine reported
    started += o.status == "ok" ? 1 : 0;
    CHECK(o.code == (o.status == "ok" ? 0 : 1));
  }
  MESSAGE("uncoordinated (cudasim, not GPU figures):\n"
          << figures(out) << "started " << started << " of 3, their claims with contexts "
          << gpushare::format_bytes(started_sum(out)) << " of " << gpushare::format_bytes(card));
  // Each engine sizes itself from the free memory it saw alone: not all three can start on one
  // card (the simulated runtime refuses the allocation past the card, as a GPU does).
  CHECK(started < 3);
  CHECK(started_sum(out) <= card);
}

TEST_CASE("engines in gpushare sessions under the start-up lock all start within the card") {
  simtest::fresh_state st("engines-lock");
  test::temp_domain dom("engines");
  const std::string key = "GPU-sim-engines";
  gpushare::session_options o = dom.options("driver", card - 2 * GiB);
  gpushare::table t = gpushare::table::open(key, gpushare::open_mode::open_or_create, o);
  const std::vector<outcome> out = start_all(st, [&](const spec& s) {
    return std::vector<std::string>{key, dom.name(), std::to_string(s.budget),
                                    std::to_string(1 * GiB)};
  });
  std::uint64_t sum = 0;
  for (std::size_t k = 0; k < out.size(); ++k) {
    INFO(out[k].log);
    CHECK(out[k].status == "ok");
    CHECK(out[k].code == 0);
    CHECK(out[k].claim + context <= engines[k].budget); // each within its budget
    sum += out[k].claim + context;
  }
  MESSAGE("with gpushare (cudasim, not GPU figures):\n"
          << figures(out) << "claims with contexts " << gpushare::format_bytes(sum) << " of "
          << gpushare::format_bytes(card));
  CHECK(sum <= card);
  CHECK(t.snapshot().startup_takes == 3);
}

TEST_CASE("a vLLM engine started beside a running one fails its own start-up check") {
  simtest::fresh_state st("engines-check");
  const test::running_process first = start_engine(st, engines[1], {}); // SGLang, alone: starts
  const outcome a = read_result(first);
  CHECK(a.status == "ok");
  const test::running_process second = start_engine(st, engines[2], {}); // vLLM at 0.92
  const outcome b = read_result(second);
  INFO(b.log);
  CHECK(b.status == "start_check");
  CHECK(b.claim == 0); // it allocated nothing
  CHECK(b.log.find("ValueError: Free memory on device") != std::string::npos);
  CHECK(b.log.find("less than desired GPU memory utilization (0.92") != std::string::npos);
  ::close(second.in);
  CHECK(test::finish_process(second).code == 1);
  ::close(first.in);
  CHECK(test::finish_process(first).code == 0);
}
