// SPDX-License-Identifier: Apache-2.0
// The simulated devices' state that processes share: one POSIX shared-memory object (name from
// CUDASIM_STATE) holding each device's memory, its contexts (one per process and device, with
// their usage, as NVML reports it) and its time-slice schedule. Guarded by one robust
// process-shared mutex; a process that dies is noticed by the next one that looks, and its
// memory is freed after the configured teardown delay, as a driver does.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cudasim {

struct config;

constexpr int max_units = 56;     // 8 GPUs x 7 MIG instances
constexpr int max_contexts = 256; // contexts alive at once, all processes together

/// One device unit as NVML lists it: a GPU, or a MIG instance of one.
struct unit_info {
  int index = 0;         ///< position in the NVML/CUDA enumeration before CUDA_VISIBLE_DEVICES
  int gpu = 0;           ///< physical GPU index
  int mig = -1;          ///< MIG instance index, -1 when not MIG
  std::string uuid;      ///< "GPU-…" or "MIG-…"
  unsigned char raw[16]; ///< the UUID's bytes (cudaDeviceProp::uuid)
  std::uint64_t total = 0;
};

/// One physical GPU, as NVML lists it by index (nvmlDeviceGetCount_v2 counts GPUs).
struct gpu_info {
  int index = 0;
  std::string uuid;       ///< "GPU-…", in MIG mode too
  std::vector<int> units; ///< its units: the GPU itself, or its MIG instances
};

struct process_usage {
  pid_t pid = 0;
  std::uint64_t bytes = 0;
};

struct memory_info {
  std::uint64_t total = 0, used = 0;
};

/// Monotonic time in nanoseconds (CLOCK_MONOTONIC: the same clock in every process).
std::uint64_t now_ns();

class shared {
public:
  /// The process's view; maps (creating if needed) the state object. Throws nothing: when the
  /// object cannot be used, ok() is false and error() says why.
  static shared& get();

  bool ok() const { return base_ != nullptr; }
  const std::string& error() const { return error_; }

  const std::vector<unit_info>& units() const { return units_; }
  const std::vector<gpu_info>& gpus() const { return gpus_; }

  /// Registers a context of this process on `unit`, charging `bytes` (the context's memory).
  /// Returns the slot, or -1 when the device's memory or the context table is full.
  int open_context(int unit, std::uint64_t bytes);
  /// Ends a context of this process at once (normal exit; a killed process's contexts end
  /// after the teardown delay instead).
  void close_context(int slot);
  /// Charges (`bytes` > 0) or returns memory of a context; false if the device is full.
  bool charge(int slot, std::uint64_t bytes);
  void uncharge(int slot, std::uint64_t bytes);
  memory_info memory(int unit);
  std::vector<process_usage> processes(int unit);

  /// Runs a kernel of `ns` of device time for context `slot` on `unit`: returns when the
  /// context has held the device for `ns` since the call (slices.cpp says how the device's time
  /// is shared). Kernels of one context run concurrently; contexts take turns.
  void execute(int unit, int slot, std::uint64_t ns);
  /// How many times the device passed to or from context `slot` (cudasimStats).
  std::uint64_t switches(int slot);

private:
  shared();
  struct layout;
  layout* base_ = nullptr;
  int fd_ = -1; ///< the state object, open (and flock()ed shared) for the process's life
  std::string error_;
  std::vector<unit_info> units_;
  std::vector<gpu_info> gpus_;
  class guard;
  void init_layout(layout* l, const config& c);
  void describe_units(const config& c);
  void sweep(std::uint64_t now);
  // Time slices (slices.cpp); all with the lock held.
  std::uint64_t schedule(int unit, std::uint64_t t);
  void hand_over(int unit, std::uint64_t at);
  void arrive(int unit, int slot, std::uint64_t t, std::uint64_t target);
  int next_wanting(int unit, int after) const;
  bool others_want(int unit, int slot) const;
  std::uint64_t held(int slot, std::uint64_t t) const;
  std::uint64_t used_locked(int unit) const;
};

} // namespace cudasim
