// SPDX-License-Identifier: Apache-2.0
// The one doctest main() shared by every unit-* and mp-* test executable. It first unsets the
// platform's variables that sessions read (a Kubernetes pod's or Slurm job's identity, a cluster
// scheduler's GPU limits: detail/cluster_env.hpp, docs/cluster-env.md), so that tests run alike
// in a pod, in a Slurm job and on a desktop; a test that wants them sets them itself.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <gpushare/detail/cluster_env.hpp>

extern char** environ; // POSIX: the process's environment

int main(int argc, char** argv) {
  std::vector<std::string> platform;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry = *e;
    const std::string_view name = entry.substr(0, entry.find('='));
    if (gpushare::detail::is_platform_variable(name)) platform.emplace_back(name);
  }
  for (const std::string& name : platform) ::unsetenv(name.c_str());
  return doctest::Context(argc, argv).run();
}
