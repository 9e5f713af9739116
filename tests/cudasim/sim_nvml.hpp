// SPDX-License-Identifier: Apache-2.0
// NVML for the simulator tests, as a program reads it: dlopen("libnvidia-ml.so.1") (the
// simulator's here) and the entry points of NVML's C ABI, declared from nvml.h's documentation
// (the toolkit ships no nvml.h). A device handle is an opaque pointer; every call returns an
// nvmlReturn_t (0 = NVML_SUCCESS).
#pragma once

#include <dlfcn.h>
#include <sys/types.h>

#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

namespace simtest {

/// nvmlReturn_t values the tests check (nvml.h, enum nvmlReturn_enum).
enum nvml_return : int {
  nvml_success = 0,
  nvml_invalid_argument = 2,
  nvml_not_found = 6,
  nvml_insufficient_size = 7,
};

struct nvml {
  struct memory {
    unsigned long long total, free, used;
  };
  struct process { // nvmlProcessInfo_t (nvmlProcessInfo_v2_t): 24 bytes
    unsigned pid;
    unsigned long long used;
    unsigned gi, ci;
  };
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW);
  template <typename F> F fn(const char* n) {
    const auto f = reinterpret_cast<F>(::dlsym(lib, n));
    const bool found = f != nullptr;
    REQUIRE_MESSAGE(found, "NVML has no ", n);
    return f;
  }
  nvml() {
    REQUIRE(lib != nullptr);
    REQUIRE(fn<int (*)()>("nvmlInit_v2")() == nvml_success);
  }
  ~nvml() {
    fn<int (*)()>("nvmlShutdown")();
    ::dlclose(lib);
  }
  nvml(const nvml&) = delete;
  nvml& operator=(const nvml&) = delete;

  unsigned count() {
    unsigned n = 0;
    REQUIRE(fn<int (*)(unsigned*)>("nvmlDeviceGetCount_v2")(&n) == nvml_success);
    return n;
  }
  void* device(unsigned index) {
    void* d = nullptr;
    REQUIRE(fn<int (*)(unsigned, void**)>("nvmlDeviceGetHandleByIndex_v2")(index, &d) ==
            nvml_success);
    return d;
  }
  /// nvmlDeviceGetHandleByUUID's result; the handle in `out`.
  int by_uuid(const std::string& uuid, void*& out) {
    out = nullptr;
    return fn<int (*)(const char*, void**)>("nvmlDeviceGetHandleByUUID")(uuid.c_str(), &out);
  }
  std::string uuid(void* d) {
    char text[96] = {};
    REQUIRE(fn<int (*)(void*, char*, unsigned)>("nvmlDeviceGetUUID")(d, text, sizeof text) ==
            nvml_success);
    return text;
  }
  memory mem(void* d) {
    memory m{};
    REQUIRE(fn<int (*)(void*, memory*)>("nvmlDeviceGetMemoryInfo")(d, &m) == nvml_success);
    return m;
  }
  std::vector<process> processes(void* d) {
    std::vector<process> out(64);
    unsigned n = 64;
    REQUIRE(fn<int (*)(void*, unsigned*, process*)>("nvmlDeviceGetComputeRunningProcesses_v3")(
                d, &n, out.data()) == nvml_success);
    out.resize(n);
    return out;
  }
  /// The bytes nvmlDeviceGetComputeRunningProcesses_v3 writes for `capacity` records into a
  /// buffer of 32 bytes per record prefilled with 0xa5, whatever the record's size; the count
  /// it returns in `count`.
  std::vector<unsigned char> raw_processes(void* d, unsigned capacity, unsigned& count) {
    std::vector<unsigned char> bytes(capacity * 32u + 64u, 0xa5);
    count = capacity;
    REQUIRE(fn<int (*)(void*, unsigned*, void*)>("nvmlDeviceGetComputeRunningProcesses_v3")(
                d, &count, bytes.data()) == nvml_success);
    return bytes;
  }
  unsigned long long used_by(void* d, pid_t pid) {
    for (const auto& p : processes(d))
      if (p.pid == static_cast<unsigned>(pid)) return p.used;
    return 0;
  }

  // MIG (nvml.h, "Multi Instance GPU Management").
  /// nvmlDeviceGetMigMode's result; the current and pending modes in `current`, `pending`.
  int mig_mode(void* d, unsigned& current, unsigned& pending) {
    return fn<int (*)(void*, unsigned*, unsigned*)>("nvmlDeviceGetMigMode")(d, &current, &pending);
  }
  unsigned max_mig_devices(void* d) {
    unsigned n = 99;
    REQUIRE(fn<int (*)(void*, unsigned*)>("nvmlDeviceGetMaxMigDeviceCount")(d, &n) == nvml_success);
    return n;
  }
  /// nvmlDeviceGetMigDeviceHandleByIndex's result; the MIG device handle in `out`.
  int mig_device(void* d, unsigned index, void*& out) {
    out = nullptr;
    return fn<int (*)(void*, unsigned, void**)>("nvmlDeviceGetMigDeviceHandleByIndex")(d, index,
                                                                                       &out);
  }
  /// nvmlDeviceGetDeviceHandleFromMigDeviceHandle's result; the parent in `out`.
  int parent(void* mig, void*& out) {
    out = nullptr;
    return fn<int (*)(void*, void**)>("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")(mig, &out);
  }
  bool is_mig(void* d) {
    unsigned v = 99;
    REQUIRE(fn<int (*)(void*, unsigned*)>("nvmlDeviceIsMigDeviceHandle")(d, &v) == nvml_success);
    return v != 0;
  }
  unsigned gpu_instance_id(void* mig) {
    unsigned v = 99;
    REQUIRE(fn<int (*)(void*, unsigned*)>("nvmlDeviceGetGpuInstanceId")(mig, &v) == nvml_success);
    return v;
  }
};

} // namespace simtest
