// SPDX-License-Identifier: Apache-2.0
// A Slurm job of the test slurm/two_jobs_share_a_gpu (slurm-test.sh, docs/slurm.md), on the core
// library: it joins the table that the shipped TaskProlog points it at (GPUSHARE_DIR,
// GPUSHARE_KEY, GPUSHARE_NAME, GPUSHARE_SHARE, GPUSHARE_MEMORY_LIMIT, GPUSHARE_CAPACITY: all read
// by the library from the environment except the key), reserves its whole budget, checks that one
// byte more is refused, waits until it sees the other job in the table, runs guarded work for a
// window while sampling the device time of every session, and writes what it saw to OUT as
// key=value lines.
//
//   gpushare_slurm_job OUT SECONDS
//
// The guarded work sleeps inside each guard: device time is the wall time in guards, so the
// split between the jobs does not depend on how busy the machine's CPUs are.
#include "slurm_job.hpp"

namespace {

int run(const std::string& out, double seconds) {
  using slurm_job::env_or;
  slurm_job::report r;
  const std::string key = env_or("GPUSHARE_KEY", "");
  if (key.empty()) {
    std::fprintf(stderr, "gpushare_slurm_job: GPUSHARE_KEY is not set: the TaskProlog "
                         "(deploy/slurm/gpushare-task-prolog) did not run for this job\n");
    return 2;
  }
  slurm_job::record_environment(r);
  gpushare::session s(key);
  const auto info = s.info();
  r.set("name", s.name());
  r.set("table", s.table_name());
  r.set("memory_limit", info.memory_limit);
  r.set("share", info.share);
  r.set("external", info.external);
  auto budget = s.reserve(info.memory_limit, std::chrono::seconds(60));
  r.set("reserved", budget.size());
  try {
    auto more = s.reserve(1, std::chrono::seconds(1));
    r.set("one_more_byte", "granted");
  } catch (const gpushare::error& e) {
    r.set("one_more_byte", gpushare::to_string(e.code()));
  }
  r.set("peers", slurm_job::wait_for_sessions(s, 2));
  slurm_job::mark_ready(out, s.name());
  slurm_job::guarded_window(
      s, seconds,
      [&] {
        gpushare::scoped_kernel g(s, std::chrono::seconds(30));
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        g.finish();
      },
      r);
  r.set("capacity", s.snapshot().capacity);
  budget.release();
  s.leave();
  r.set("done", "yes");
  return r.write(out) ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  return slurm_job::main_of(argc, argv, "gpushare_slurm_job", run);
}
