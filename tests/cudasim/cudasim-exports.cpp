// SPDX-License-Identifier: Apache-2.0
// cudasim's libcudart.so.13 exports the whole runtime API of the toolkit it impersonates, with
// the toolkit's symbol version, so that a program linked against the toolkit's library loads
// against cudasim whatever it calls; a function cudasim does not model returns
// cudaErrorNotSupported and says so once (docs/cudasim.md, "The runtime's functions").
#include <doctest/doctest.h>

#include <unistd.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "sim_util.hpp"

namespace {

/// A library's defined dynamic symbols as `nm -D --defined-only` lists them: name -> "<type>
/// <version>", where the version is what follows '@' or "@@" ("" without one) and the type is
/// nm's letter (T, W, i: functions; A: the version definition; D, B, R: data).
std::map<std::string, std::string> exports_of(const std::string& library) {
  std::map<std::string, std::string> out;
  const std::string command = std::string(GPUSHARE_NM) + " -D --defined-only '" + library + "'";
  const test::command_result nm = test::run_command(command);
  INFO(command);
  std::istringstream lines(nm.output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    std::string address, type, symbol;
    if (!(in >> address >> type >> symbol)) continue;
    const auto at = symbol.find('@');
    const std::string name = symbol.substr(0, at);
    const std::string version =
        at == std::string::npos ? "" : symbol.substr(symbol.find_first_not_of('@', at));
    out[name] = type + " " + version;
  }
  CHECK(nm.exit_code == 0);
  return out;
}

bool is_function(const std::string& entry) {
  const char t = entry.empty() ? '?' : entry[0];
  return t == 'T' || t == 'W' || t == 'i';
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

/// Runs the helper `unmodelled` on the simulator state `state` to its end: its exit status (128 +
/// signal when a signal ended it), stdout and stderr.
test::process_result run_unmodelled(const std::string& state) {
  test::process_options o;
  o.env = {"CUDASIM_STATE=" + state};
  return test::run_process(
      {std::string(GPUSHARE_HELPER_DIR) + "/gpushare_helper_cudasim_unmodelled"}, o);
}

std::map<std::string, std::string> values(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

/// Whether the build generated the stubs (it found the toolkit's library); if not, the skip
/// marker CTest looks for.
bool stubs_built() {
  if (std::string(GPUSHARE_TOOLKIT_CUDART).empty()) {
    std::printf("GPUSHARE_SKIP: the CUDA toolkit's libcudart.so.13 was not found when this was "
                "configured, so cudasim exports only the functions it models\n");
    return false;
  }
  return true;
}

} // namespace

TEST_CASE("cudasim exports every function of the toolkit's libcudart.so.13, with its version") {
  const std::string toolkit = GPUSHARE_TOOLKIT_CUDART;
  if (!stubs_built()) return;
  const auto theirs = exports_of(toolkit);
  const auto ours = exports_of(GPUSHARE_CUDASIM_CUDART);
  REQUIRE(theirs.size() > 300); // nm worked: CUDA 13.0's runtime exports 422 functions
  std::string missing, not_function, wrong_version, extra;
  std::size_t functions = 0;
  for (const auto& [name, entry] : theirs) {
    if (!is_function(entry)) continue; // the version definition itself ("A libcudart.so.13")
    ++functions;
    const auto it = ours.find(name);
    if (it == ours.end())
      missing += name + " ";
    else if (!is_function(it->second))
      not_function += name + " ";
    else if (it->second.substr(2) != entry.substr(2))
      wrong_version += name + " (" + it->second + ") ";
  }
  for (const auto& [name, entry] : ours)
    if (name.rfind("cuda", 0) == 0 && name.rfind("cudasim", 0) != 0 && !theirs.count(name))
      extra += name + " ";
    else if (name.rfind("__cuda", 0) == 0 && !theirs.count(name))
      extra += name + " ";
  MESSAGE("the toolkit's runtime exports ", functions, " functions; cudasim ", ours.size(),
          " symbols");
  CHECK_MESSAGE(missing.empty(), "not exported by cudasim: ", missing);
  CHECK_MESSAGE(not_function.empty(), "not a function in cudasim: ", not_function);
  CHECK_MESSAGE(wrong_version.empty(), "another symbol version in cudasim: ", wrong_version);
  CHECK_MESSAGE(extra.empty(), "runtime names the toolkit does not export: ", extra);
  for (const auto& [name, entry] : theirs)
    if (!is_function(entry)) CHECK_MESSAGE(entry[0] == 'A', name, " is data: ", entry);
}

TEST_CASE("a function cudasim does not model returns cudaErrorNotSupported, says so once, and the "
          "program goes on") {
  if (!stubs_built()) return;
  simtest::fresh_state st("unmodelled");
  const test::process_result run = run_unmodelled(st.name());
  const int status = run.code;
  const std::string& err = run.err;
  auto r = values(run.out);
  CAPTURE(err);
  REQUIRE(status == 0); // not "symbol lookup error" (127)
  CHECK(r["count"] == "cudaSuccess");
  CHECK(r["exec_flags1"] == "cudaErrorNotSupported");
  CHECK(r["exec_flags2"] == "cudaErrorNotSupported");
  CHECK(r["last1"] == "cudaErrorNotSupported"); // the last error, as for any failing call
  CHECK(r["last2"] == "cudaSuccess");
  CHECK(r["limit"] == "cudaErrorNotSupported");
  CHECK(r["peek"] == "cudaErrorNotSupported");
  CHECK(r["copy_to_array"] == "cudaErrorNotSupported");
  CHECK(r["channel"] == "8,16,0,0,0"); // cudaCreateChannelDesc returns a struct: modelled
  CHECK(r["after"] == "cudaSuccess");
  CHECK(r["calls"] == "2");
  CHECK(r["done"] == "1");
  CHECK(occurrences(err, "cudasim: cudaGraphExecGetFlags is not modelled; it returns "
                         "cudaErrorNotSupported\n") == 1);
  CHECK(occurrences(err, "cudasim: cudaDeviceGetLimit is not modelled") == 1);
  CHECK(occurrences(err, "cudasim: cudaMemcpy2DToArrayAsync is not modelled") == 1);
  CHECK(occurrences(err, "cudasim:") == 3);
}
