// SPDX-License-Identifier: Apache-2.0
// cudasim's NVML (libnvidia-ml.so.1, tools/cudasim/src/nvml.cpp): devices and MIG as nvml.h
// documents them, and the layout of nvmlDeviceGetComputeRunningProcesses_v3's records, with the
// 32-byte record some drivers write (CUDASIM_NVML_PROCESS_RECORD, fault injection). Each test
// case is a CTest test of its own on a fresh simulated device state (docs/cudasim.md).
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "sim_nvml.hpp"
#include "sim_util.hpp"

using simtest::fresh_state;
using simtest::nvml;
using simtest::probe;

namespace {

constexpr std::uint64_t GiB = 1ull << 30;
constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t context_bytes = 500 * MiB;  // the default CUDASIM_CONTEXT_BYTES
constexpr unsigned mig_disable = 0, mig_enable = 1; // NVML_DEVICE_MIG_DISABLE / _ENABLE

std::string hex_prefix(const cudaDeviceProp& p) {
  char raw[16];
  const auto* b = reinterpret_cast<const unsigned char*>(p.uuid.bytes);
  std::snprintf(raw, sizeof raw, "%02x%02x%02x%02x-", b[0], b[1], b[2], b[3]);
  return raw;
}

template <typename T> T read_at(const std::vector<unsigned char>& bytes, std::size_t offset) {
  T v{};
  std::memcpy(&v, bytes.data() + offset, sizeof v);
  return v;
}

} // namespace

TEST_CASE("NVML counts GPUs, not MIG instances, and reaches the instances through the MIG calls") {
  fresh_state st("nvml-mig");
  st.use_here();
  ::setenv("CUDASIM_DEVICES", "2", 1);
  ::setenv("CUDASIM_MIG", "3", 1);
  nvml ml;
  REQUIRE(ml.count() == 2); // nvmlDeviceGetCount_v2: "A compute device is a single GPU"
  std::set<std::string> uuids;
  for (unsigned g = 0; g < 2; ++g) {
    void* gpu = ml.device(g);
    const std::string gpu_uuid = ml.uuid(gpu);
    CAPTURE(gpu_uuid);
    CHECK(gpu_uuid.rfind("GPU-", 0) == 0);
    CHECK_FALSE(ml.is_mig(gpu));
    unsigned current = 9, pending = 9;
    CHECK(ml.mig_mode(gpu, current, pending) == simtest::nvml_success);
    CHECK(current == mig_enable);
    CHECK(pending == mig_enable);
    const unsigned max = ml.max_mig_devices(gpu);
    CHECK(max == 7); // the most instances an A100 or H100 has; only 3 exist here
    void* parent = nullptr;
    CHECK(ml.parent(gpu, parent) == simtest::nvml_invalid_argument); // not a MIG handle
    for (unsigned i = 0; i < 3; ++i) {
      void* mig = nullptr;
      REQUIRE(ml.mig_device(gpu, i, mig) == simtest::nvml_success);
      const std::string mig_uuid = ml.uuid(mig);
      CHECK(mig_uuid.rfind("MIG-", 0) == 0);
      CHECK(ml.is_mig(mig));
      CHECK(ml.gpu_instance_id(mig) == i);
      REQUIRE(ml.parent(mig, parent) == simtest::nvml_success);
      CHECK(ml.uuid(parent) == gpu_uuid);
      void* found = nullptr;
      REQUIRE(ml.by_uuid(mig_uuid, found) == simtest::nvml_success); // "GPU or MIG instance"
      CHECK(ml.uuid(found) == mig_uuid);
      CHECK(ml.is_mig(found));
      uuids.insert(mig_uuid);
    }
    void* none = nullptr;
    CHECK(ml.mig_device(gpu, 3, none) == simtest::nvml_not_found); // below max, not there
    CHECK(ml.mig_device(gpu, max, none) == simtest::nvml_invalid_argument);
    uuids.insert(gpu_uuid);
  }
  CHECK(uuids.size() == 8); // 2 GPUs and 6 instances, all different
  void* gone = nullptr;
  CHECK(ml.by_uuid("MIG-00000000-0000-4000-8000-000000000000", gone) == simtest::nvml_not_found);
}

TEST_CASE("without MIG, NVML's MIG calls say so and the GPU is the only device") {
  fresh_state st("nvml-nomig");
  st.use_here();
  nvml ml;
  REQUIRE(ml.count() == 1);
  void* gpu = ml.device(0);
  unsigned current = 9, pending = 9;
  CHECK(ml.mig_mode(gpu, current, pending) == simtest::nvml_success);
  CHECK(current == mig_disable);
  CHECK(pending == mig_disable);
  CHECK(ml.max_mig_devices(gpu) == 0); // "Returns zero if MIG is not supported or enabled"
  void* mig = nullptr;
  CHECK(ml.mig_device(gpu, 0, mig) == simtest::nvml_invalid_argument);
  CHECK_FALSE(ml.is_mig(gpu));
}

TEST_CASE("MIG: CUDA's device is an instance, whose UUID NVML writes MIG-… under its GPU") {
  fresh_state st("nvml-cuda-mig");
  st.use_here();
  ::setenv("CUDASIM_MIG", "2", 1);
  ::setenv("CUDASIM_MEMORY", "80GiB", 1);
  int n = 0;
  REQUIRE(cudaGetDeviceCount(&n) == cudaSuccess);
  CHECK(n == 1); // a CUDA process can use one MIG instance
  cudaDeviceProp p{};
  REQUIRE(cudaGetDeviceProperties(&p, 0) == cudaSuccess);
  CHECK(p.totalGlobalMem == 40 * GiB);
  nvml ml;
  REQUIRE(ml.count() == 1);
  void* gpu = ml.device(0);
  void* first = nullptr;
  void* second = nullptr;
  REQUIRE(ml.mig_device(gpu, 0, first) == simtest::nvml_success);
  REQUIRE(ml.mig_device(gpu, 1, second) == simtest::nvml_success);
  const std::string first_uuid = ml.uuid(first);
  CHECK(first_uuid.substr(0, 4) == "MIG-");
  CHECK(first_uuid.substr(4, 9) == hex_prefix(p)); // the instance's UUID is what CUDA reports
  // CUDA_VISIBLE_DEVICES=MIG-<uuid> picks the second instance.
  const std::string second_uuid = ml.uuid(second);
  auto r = probe({"devices"}, {{"CUDASIM_STATE", st.name()}, {"CUDA_VISIBLE_DEVICES", second_uuid}})
               .result();
  CHECK(r.at("count") == "1");
  CHECK("MIG-" + r.at("uuid0") == second_uuid);
}

TEST_CASE("MIG: a GPU handle reports its instances' memory and processes together, an instance's "
          "handle its own") {
  fresh_state st("nvml-mig-usage");
  st.use_here();
  ::setenv("CUDASIM_MIG", "3", 1);
  ::setenv("CUDASIM_MEMORY", "30GiB", 1);
  REQUIRE(cudaSetDevice(0) == cudaSuccess); // a context on instance 0
  nvml ml;
  void* gpu = ml.device(0);
  void* mig0 = nullptr;
  void* mig1 = nullptr;
  REQUIRE(ml.mig_device(gpu, 0, mig0) == simtest::nvml_success);
  REQUIRE(ml.mig_device(gpu, 1, mig1) == simtest::nvml_success);
  CHECK(ml.mem(mig0).total == 10 * GiB);
  CHECK(ml.mem(mig0).used == context_bytes);
  CHECK(ml.mem(mig1).used == 0);
  CHECK(ml.mem(gpu).total == 30 * GiB); // nvmlDeviceGetMemoryInfo: aggregate in MIG mode
  CHECK(ml.mem(gpu).used == context_bytes);
  CHECK(ml.used_by(mig0, ::getpid()) == context_bytes);
  CHECK(ml.used_by(mig1, ::getpid()) == 0);
  const auto all = ml.processes(gpu); // aggregate, each with its instance's ids
  REQUIRE(all.size() == 1);
  CHECK(all[0].pid == static_cast<unsigned>(::getpid()));
  CHECK(all[0].used == context_bytes);
  CHECK(all[0].gi == ml.gpu_instance_id(mig0));
  CHECK(all[0].ci == 0);
}

TEST_CASE("process records are nvmlProcessInfo_t, 24 bytes each, 0xFFFFFFFF instance ids "
          "without MIG") {
  fresh_state st("nvml-record24");
  st.use_here();
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  probe holder({"hold", "64"}, {{"CUDASIM_STATE", st.name()}});
  REQUIRE(holder.until("held").count("held"));
  nvml ml;
  unsigned count = 0;
  const auto bytes = ml.raw_processes(ml.device(0), 8, count);
  REQUIRE(count == 2);
  std::set<unsigned> pids;
  for (std::size_t i = 0; i < count; ++i) {
    pids.insert(read_at<unsigned>(bytes, 24 * i));
    CHECK(read_at<unsigned>(bytes, 24 * i + 16) == 0xffffffffu); // gpuInstanceId
    CHECK(read_at<unsigned>(bytes, 24 * i + 20) == 0xffffffffu); // computeInstanceId
  }
  CHECK(pids ==
        std::set<unsigned>{static_cast<unsigned>(::getpid()), static_cast<unsigned>(holder.pid())});
  CHECK(read_at<std::uint64_t>(bytes, 24 * count) == 0xa5a5a5a5a5a5a5a5ull); // nothing beyond
}

TEST_CASE("CUDASIM_NVML_PROCESS_RECORD=32 (fault injection) writes the 32-byte records of "
          "R535-era drivers") {
  fresh_state st("nvml-record32");
  st.use_here();
  ::setenv("CUDASIM_NVML_PROCESS_RECORD", "32", 1);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  probe holder({"hold", "64"}, {{"CUDASIM_STATE", st.name()}});
  REQUIRE(holder.until("held").count("held"));
  nvml ml;
  unsigned count = 0;
  const auto bytes = ml.raw_processes(ml.device(0), 8, count);
  REQUIRE(count == 2);
  std::set<unsigned> pids;
  for (std::size_t i = 0; i < count; ++i) {
    pids.insert(read_at<unsigned>(bytes, 32 * i));
    CHECK(read_at<unsigned>(bytes, 32 * i + 16) == 0xffffffffu);
    CHECK(read_at<std::uint64_t>(bytes, 32 * i + 24) == 0); // usedGpuCcProtectedMemory
  }
  CHECK(pids ==
        std::set<unsigned>{static_cast<unsigned>(::getpid()), static_cast<unsigned>(holder.pid())});
  CHECK(read_at<std::uint64_t>(bytes, 32 * count) == 0xa5a5a5a5a5a5a5a5ull);
}

TEST_CASE("a bad CUDASIM_NVML_PROCESS_RECORD fails the initialisation of NVML and CUDA") {
  fresh_state st("nvml-record-bad");
  st.use_here();
  ::setenv("CUDASIM_NVML_PROCESS_RECORD", "28", 1);
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW);
  REQUIRE(lib != nullptr);
  const auto init = reinterpret_cast<int (*)()>(::dlsym(lib, "nvmlInit_v2"));
  const bool found = init != nullptr;
  REQUIRE(found);
  CHECK(init() == 9); // NVML_ERROR_DRIVER_NOT_LOADED, as for every bad CUDASIM_ variable
  ::dlclose(lib);
  int n = 0;
  CHECK(cudaGetDeviceCount(&n) == cudaErrorInitializationError);
}
