// SPDX-License-Identifier: Apache-2.0
// A Slurm job of the test slurm/two_cuda_jobs_share_a_gpu_on_cudasim (slurm-test.sh,
// docs/slurm.md): as slurm_job.cpp, but a CUDA program on the CUDA layer, run on cudasim (the
// simulated CUDA runtime, docs/cudasim.md) shared by both jobs through one CUDASIM_STATE. Its
// device session joins the table of the simulated GPU's UUID in GPUSHARE_DIR; its context's
// memory counts against its budget, so it allocates its limit less that, and one byte more is
// refused; its guarded work is a simulated 2 ms kernel per guard, timed with CUDA events.
//
//   gpushare_slurm_cuda_job OUT SECONDS
#include <gpushare/cuda.hpp>

#include "sim_kernels.hpp"
#include "slurm_job.hpp"

namespace {

int run(const std::string& out, double seconds) {
  slurm_job::report r;
  slurm_job::record_environment(r);
  gpushare::cuda::device_session s(0); // CUDA_VISIBLE_DEVICES from Slurm: the job's GPU
  gpushare::session& host = s.host();
  const auto info = s.info();
  r.set("name", s.name());
  r.set("table", s.table_name());
  r.set("key", s.device().uuid);
  r.set("memory_limit", info.memory_limit);
  r.set("external", info.external);
  r.set("share", info.share);
  void* budget = s.malloc(info.memory_limit - info.external);
  r.set("reserved", s.info().reserved);
  try {
    void* more = s.malloc(1);
    s.free(more);
    r.set("one_more_byte", "granted");
  } catch (const gpushare::error& e) {
    r.set("one_more_byte", gpushare::to_string(e.code()));
  }
  r.set("peers", slurm_job::wait_for_sessions(host, 2));
  slurm_job::mark_ready(out, s.name());
  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) return 1;
  bool launched = true;
  slurm_job::guarded_window(
      host, seconds,
      [&] {
        {
          gpushare::cuda::scoped_kernel guard(s, stream);
          launched = launched && simtest::launch(stream, 2'000'000) == cudaSuccess;
        }
        launched = launched && cudaStreamSynchronize(stream) == cudaSuccess;
        s.yield();
      },
      r);
  r.set("kernels_ran", launched ? "yes" : "no");
  r.set("capacity", s.snapshot().capacity);
  cudaStreamDestroy(stream);
  s.free(budget);
  s.leave();
  r.set("done", "yes");
  return r.write(out) ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  return slurm_job::main_of(argc, argv, "gpushare_slurm_cuda_job", run);
}
