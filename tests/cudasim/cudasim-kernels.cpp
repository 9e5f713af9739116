// SPDX-License-Identifier: Apache-2.0
// Kernel durations by name (docs/cudasim.md, "Kernels: durations and models"): CUDASIM_KERNELS
// and CUDASIM_KERNELS_FILE give kernels durations without changing the program, and
// cudasimSetKernelModelByName gives them models from code. The kernels are host stubs registered
// under mangled device names as nvcc registers kernels (sim_named.hpp); the device time each
// launch got is read from cudasimStats::kernel_ns, exactly, so nothing here is timed.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "sim_named.hpp"
#include "sim_util.hpp"

using simtest::env_list;
using simtest::fresh_state;
using simtest::probe;

namespace {

// Mangled names, as nvcc registers them:
const char* const my_kernel = "_Z8myKernelPfi";             // myKernel(float*, int)
const char* const reduce4 = "_ZN2ns6reduceILi4EEEvPf";      // void ns::reduce<4>(float*)
const char* const other = "_Z5otherv";                      // other()
const char* const unmatched = "_Z9unmatchedv";              // unmatched()
const char* const anonymous = "_ZN12_GLOBAL__N_16hiddenEi"; // (anonymous namespace)::hidden(int)

/// Runs `probe named` with these names and environment; returns its values.
std::map<std::string, std::string> named(const std::vector<std::string>& names, env_list env) {
  fresh_state st("kernels");
  env.push_back({"CUDASIM_STATE", st.name()});
  std::vector<std::string> args{"named"};
  args.insert(args.end(), names.begin(), names.end());
  probe p(args, env);
  return p.result();
}

/// A file in /tmp with `text`, removed at the end.
struct temp_file {
  std::string path = "/tmp/cudasim-kernels-" + std::to_string(::getpid()) + ".txt";
  explicit temp_file(const std::string& text) {
    FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
  ~temp_file() { std::remove(path.c_str()); }
};

} // namespace

TEST_CASE("CUDASIM_KERNELS: by mangled, demangled or short name, with globs, the first match "
          "winning") {
  const auto r = named({my_kernel, reduce4, other, unmatched},
                       {{"CUDASIM_KERNELS", " myKernel = 250us, my*=1ms, ns::reduce<*>=1.5ms, "
                                            "_Z5oth?rv=0.002s, void ns::reduce<4>(float*)=9ms"},
                        {"CUDASIM_KERNEL_US", "3"}});
  CHECK(r.at("init") == "cudaSuccess");
  CHECK(r.at("ns0") == "250000");  // "myKernel", its short name, before "my*"
  CHECK(r.at("ns1") == "1500000"); // a template's short name keeps its arguments
  CHECK(r.at("ns2") == "2000000"); // the mangled name
  CHECK(r.at("ns3") == "3000");    // no entry: CUDASIM_KERNEL_US
}

TEST_CASE("CUDASIM_KERNELS matches full demangled signatures and anonymous namespaces") {
  const auto r =
      named({my_kernel, anonymous},
            {{"CUDASIM_KERNELS", "myKern=1us,(anonymous namespace)::hidden=40ns,myKernel(*)=5us"}});
  CHECK(r.at("init") == "cudaSuccess");
  CHECK(r.at("ns0") == "5000"); // "myKernel(float*, int)"; "myKern" is not the whole name
  CHECK(r.at("ns1") == "40");
}

TEST_CASE("CUDASIM_KERNELS_FILE: one entry a line, comments, after CUDASIM_KERNELS's") {
  const temp_file file("# durations of this program's kernels\n"
                       "\n"
                       "myKernel(float*, int) = 42us   # a comma: only in the file\n"
                       "  other=0.5ms\n"
                       "unmatched=1ns\n");
  const auto r = named({my_kernel, other, unmatched},
                       {{"CUDASIM_KERNELS_FILE", file.path}, {"CUDASIM_KERNELS", "unm*=7ns"}});
  CHECK(r.at("init") == "cudaSuccess");
  CHECK(r.at("ns0") == "42000");
  CHECK(r.at("ns1") == "500000");
  CHECK(r.at("ns2") == "7"); // CUDASIM_KERNELS comes first
}

TEST_CASE("a bad CUDASIM_KERNELS or CUDASIM_KERNELS_FILE fails initialisation and says where") {
  struct bad_case {
    env_list env;
    std::string said; // in the message on stderr
  };
  const temp_file file("fine=1us\nbroken line\n");
  const std::vector<bad_case> cases{
      {{{"CUDASIM_KERNELS", "myKernel=250"}}, "CUDASIM_KERNELS=\"myKernel=250\" is not valid"},
      {{{"CUDASIM_KERNELS", "a=1us,=1ms"}}, "\"=1ms\""},
      {{{"CUDASIM_KERNELS", "myKernel"}}, "\"myKernel\""},
      {{{"CUDASIM_KERNELS", "k=-1ms"}}, "\"k=-1ms\""},
      {{{"CUDASIM_KERNELS", "k=61s"}}, "\"k=61s\""},
      {{{"CUDASIM_KERNELS", "k=1.5.3ms"}}, "\"k=1.5.3ms\""},
      {{{"CUDASIM_KERNELS", "a=1us,,b=2us"}}, "an entry is empty"},
      {{{"CUDASIM_KERNELS_FILE", file.path}}, "line 2: \"broken line\""},
      {{{"CUDASIM_KERNELS_FILE", "/nonexistent/kernels.txt"}},
       "CUDASIM_KERNELS_FILE=\"/nonexistent/kernels.txt\" is not valid"},
  };
  for (const auto& c : cases) {
    fresh_state st("kernels-bad");
    env_list env = c.env;
    env.push_back({"CUDASIM_STATE", st.name()});
    probe p({"named", my_kernel}, env, true);
    const auto r = p.result();
    INFO("environment: " << c.env[0].first << "=" << c.env[0].second << "\noutput:\n" << p.text());
    CHECK(r.at("init") == "cudaErrorInitializationError");
    CHECK(p.text().find("cudasim: " + c.env[0].first) != std::string::npos);
    CHECK(p.text().find(c.said) != std::string::npos);
  }
}

TEST_CASE("a model by name from code: its duration reads the launch's arguments") {
  fresh_state st("kernels-code");
  st.use_here();
  const void* scale = simtest::register_named(my_kernel, simtest::named_stub<0>);
  const void* later = simtest::register_named(other, simtest::named_stub<1>);
  const void* own = simtest::register_named(reduce4, simtest::named_stub<2>);
  // The address model (cudasimSetKernelModel) of one kernel wins over names.
  REQUIRE(cudasim::set_kernel_model<int, float*>(own, [](const cudasimLaunch*) { return 77ull; }));
  REQUIRE(cudasim::set_kernel_model_by_name<int, float*>(
      "myKernel", [](const cudasimLaunch* l) { return 100ull * *static_cast<int*>(l->args[0]); },
      [](const cudasimLaunch* l) {
        **static_cast<float**>(l->args[1]) = static_cast<float>(*static_cast<int*>(l->args[0]));
      }));
  REQUIRE(cudasim::set_kernel_model_by_name<int, float*>(
      "*", [](const cudasimLaunch*) { return 5ull; })); // after "myKernel": a fallback
  float out = 0;
  CHECK(simtest::timed_launch(scale, 7, &out) == 700);
  CHECK(out == 7.0f); // its execute function ran, in stream order
  CHECK(simtest::timed_launch(scale, 30, &out) == 3000);
  CHECK(simtest::timed_launch(own, 30, &out) == 77);
  CHECK(simtest::timed_launch(later, 1, &out) == 5); // the "*" model
  // Declaring a pattern again replaces its model, for kernels launched before too.
  REQUIRE(cudasim::set_kernel_model_by_name<int, float*>(
      "myKernel", [](const cudasimLaunch*) { return 11ull; }));
  CHECK(simtest::timed_launch(scale, 7, &out) == 11);
  // Bad declarations are refused.
  const auto set =
      cudasim::detail::lookup<int (*)(const char*, int, const size_t*, cudasimDurationFn,
                                      cudasimExecuteFn)>("cudasimSetKernelModelByName");
  REQUIRE(static_cast<bool>(set));
  CHECK(set(nullptr, 0, nullptr, nullptr, nullptr) != 0);
  CHECK(set("", 0, nullptr, nullptr, nullptr) != 0);
  CHECK(set("k", 2, nullptr, nullptr, nullptr) != 0);
}

TEST_CASE("a model by name from code wins over CUDASIM_KERNELS") {
  fresh_state st("kernels-both");
  probe p({"named", "--model", "other", other, unmatched},
          {{"CUDASIM_STATE", st.name()}, {"CUDASIM_KERNELS", "other=3us,unmatched=4us"}});
  const auto r = p.result();
  CHECK(r.at("model") == "1");
  CHECK(r.at("ns0") == "1234");
  CHECK(r.at("ns1") == "4000");
}
