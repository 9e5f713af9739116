// SPDX-License-Identifier: Apache-2.0
// One run of a demo scenario: its device (the GPU, or a simulated one in shared memory that the
// workers inherit), a gpushare domain of its own so that no other program's sessions can mix in,
// and removal of the table at the end.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <string_view>

#include <gpushare/gpushare.hpp>

#include "interrupt_cleanup.hpp"
#include "mode.hpp"
#include "processes.hpp"
#include "sim_device.hpp"

namespace demo {

inline constexpr std::uint64_t MiB = 1ull << 20;
inline constexpr std::uint64_t GiB = 1ull << 30;

class run_context {
public:
  /// `tag` names the scenario in the domain ("<program><pid>-<tag>", program "demo" unless
  /// given); `sim_memory` is the simulated device's memory (unused on a GPU).
  run_context(const device_mode& mode, std::string_view tag, std::uint64_t sim_memory = 16 * GiB,
              std::string_view program = "demo")
      : mode_(mode),
        domain_(std::string(program) + std::to_string(::getpid()) + "-" + std::string(tag)),
        // Each run simulates a device of its own: two runs at once (two demos, or a test beside
        // a demo) share no device, so their tables must not share a key either, or each joining
        // session warns that the other's table is not arbitrated against it.
        sim_key_("simulated-gpu-" + std::to_string(::getpid())) {
    sim_->memory_capacity = sim_memory;
    remove_on_interrupt(object_name());
  }
  ~run_context() {
    ::shm_unlink(object_name().c_str());
    forget_on_interrupt(object_name());
  }
  run_context(const run_context&) = delete;
  run_context& operator=(const run_context&) = delete;

  const device_mode& mode() const { return mode_; }
  bool gpu() const { return mode_.gpu; }
  sim_device* sim() const { return sim_.get(); }
  const std::string& domain() const { return domain_; }
  /// The table's key: the GPU's UUID (device sessions choose it), or this run's simulated device.
  std::string key() const { return mode_.gpu ? mode_.uuid : sim_key_; }
  std::string object_name() const {
    return gpushare::table_name(domain_, key(), gpushare::table_access::user);
  }
  std::uint64_t device_memory() const { return mode_.gpu ? mode_.memory : sim_->memory_capacity; }

  /// Options for a worker's session in this run's domain. On the simulated device the table's
  /// capacity is its memory (a device session computes it from the GPU's).
  gpushare::session_options options(const std::string& name,
                                    int priority = gpushare::priority::normal,
                                    std::uint32_t share = 1,
                                    std::uint32_t compute_limit_ppm = 1'000'000) const {
    gpushare::session_options o;
    o.name = name;
    o.domain = domain_;
    o.priority = priority;
    o.share = share;
    o.compute_limit_ppm = compute_limit_ppm;
    if (!mode_.gpu) o.capacity = sim_->memory_capacity;
    return o;
  }

private:
  device_mode mode_;
  std::string domain_;
  std::string sim_key_;
  shared<sim_device> sim_;
};

} // namespace demo
