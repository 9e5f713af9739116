// SPDX-License-Identifier: Apache-2.0
// gpushare's budgeted allocator for PyTorch (gpushare_torch_alloc.h): one device_session per
// device, opened on first use, charged by every allocation. No exception leaves this file.
#include "gpushare_torch_alloc.h"

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>

#include <gpushare/cuda.hpp>

#include "settings.hpp"

namespace gpushare_torch {
namespace {

thread_local std::string last_error;

struct device_entry {
  explicit device_entry(int device, const alloc_settings& s)
      : session(device, s.session, s.device) {}
  gpushare::cuda::device_session session;
  std::atomic<std::uint64_t> allocated{0}, allocations{0}, failed_mallocs{0}, failed_frees{0};
};

/// The process's sessions by device ordinal. Allocation and free take the lock shared; opening a
/// session, configure and shutdown take it exclusively. Never destroyed: PyTorch may free
/// tensors during the interpreter's shutdown, after static destructors would have run.
class registry {
public:
  static registry& instance() {
    static registry* r = new registry(); // leaked on purpose (see above)
    return *r;
  }

  /// The entry of `device`, opening its session if needed; `shared` must hold lock_ shared.
  device_entry& entry(int device, std::shared_lock<std::shared_mutex>& shared) {
    if (device < 0) device = current_device();
    if (auto it = devices_.find(device); it != devices_.end()) return *it->second;
    shared.unlock();
    {
      std::unique_lock exclusive(lock_);
      if (!devices_.count(device)) {
        if (!settings_) settings_ = parse_settings(nullptr);
        devices_.emplace(device, std::make_unique<device_entry>(device, *settings_));
      }
    }
    shared.lock();
    // Sessions are removed only by shutdown(), which refuses while allocations are live; an
    // entry that vanished between the two locks is opened again by the caller's retry.
    auto it = devices_.find(device);
    if (it == devices_.end())
      throw gpushare::error(gpushare::errc::session_closed,
                            "the allocator was shut down while a session opened; try again");
    return *it->second;
  }

  /// The entry of `device` if its session is open; `shared` must hold lock_ shared.
  device_entry* find(int device) {
    if (device < 0) device = current_device();
    auto it = devices_.find(device);
    return it == devices_.end() ? nullptr : it->second.get();
  }

  void configure(const char* text) {
    alloc_settings s = parse_settings(text);
    std::unique_lock exclusive(lock_);
    if (!devices_.empty())
      throw gpushare::error(gpushare::errc::invalid_argument,
                            std::string("the allocator's sessions are already open (")
                                .append(std::to_string(devices_.size()))
                                .append(" device(s)); call gpushare_torch_shutdown() before "
                                        "configuring it again"));
    sync_on_free_.store(s.sync_on_free, std::memory_order_relaxed);
    settings_ = std::move(s);
  }

  void shutdown() {
    std::unique_lock exclusive(lock_);
    for (const auto& [device, e] : devices_)
      if (e->allocations.load() != 0)
        throw gpushare::error(gpushare::errc::invalid_argument,
                              std::string("device ")
                                  .append(std::to_string(device))
                                  .append(" still has ")
                                  .append(std::to_string(e->allocations.load()))
                                  .append(" allocation(s) of ")
                                  .append(gpushare::format_bytes(e->allocated.load()))
                                  .append(" from this allocator; free them (drop the tensors and "
                                          "the pools that hold them) before shutting the "
                                          "allocator down"));
    devices_.clear();
    settings_.reset();
    sync_on_free_.store(false, std::memory_order_relaxed);
  }

  bool sync_on_free() const noexcept { return sync_on_free_.load(std::memory_order_relaxed); }
  std::shared_mutex& lock() noexcept { return lock_; }

private:
  static int current_device() {
    int d = 0;
    const cudaError_t rc = cudaGetDevice(&d);
    if (rc != cudaSuccess)
      throw gpushare::error(gpushare::errc::no_device,
                            std::string("cudaGetDevice failed: ").append(cudaGetErrorString(rc)));
    return d;
  }

  std::shared_mutex lock_;
  std::optional<alloc_settings> settings_;
  std::map<int, std::unique_ptr<device_entry>> devices_;
  std::atomic<bool> sync_on_free_{false};
};

/// Runs `f`, turning an exception into `on_error` and the thread's last error.
template <class F, class R> R guarded(F&& f, R on_error) noexcept {
  try {
    return f();
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "unknown error";
  }
  return on_error;
}

/// Synchronises `device` (for sync_on_free), leaving the thread's current device as it was.
void synchronize_device(int device) {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = device;
  cudaError_t rc = cudaSetDevice(device);
  if (rc == cudaSuccess) rc = cudaDeviceSynchronize();
  if (previous != device) cudaSetDevice(previous);
  if (rc != cudaSuccess)
    throw gpushare::error(
        gpushare::errc::invalid_argument,
        std::string("cudaDeviceSynchronize before a free failed: ").append(cudaGetErrorString(rc)));
}

void fill_stats(device_entry& e, gpushare_torch_stats& out) {
  const gpushare::session_info info = e.session.info();
  out.allocated = e.allocated.load();
  out.allocations = e.allocations.load();
  out.failed_mallocs = e.failed_mallocs.load();
  out.failed_frees = e.failed_frees.load();
  out.charged = info.reserved;
  out.external = info.external;
  out.memory_limit = info.memory_limit;
  out.context_overhead = e.session.carries_context_overhead() ? e.session.context_overhead() : 0;
  out.device_total = e.session.device().total_memory;
}

} // namespace
} // namespace gpushare_torch

using gpushare_torch::guarded;
using gpushare_torch::registry;

extern "C" {

void* gpushare_torch_malloc(size_t size, int device, cudaStream_t stream) {
  if (size == 0) return nullptr;
  gpushare_torch::device_entry* failed_on = nullptr;
  void* p = guarded(
      [&]() -> void* {
        registry& r = registry::instance();
        std::shared_lock shared(r.lock());
        gpushare_torch::device_entry& e = r.entry(device, shared);
        failed_on = &e;
        void* q = e.session.malloc_async(size, stream);
        e.allocated.fetch_add(size);
        e.allocations.fetch_add(1);
        return q;
      },
      static_cast<void*>(nullptr));
  if (!p && failed_on) failed_on->failed_mallocs.fetch_add(1);
  return p;
}

void gpushare_torch_free(void* ptr, size_t size, int device, cudaStream_t stream) {
  if (!ptr) return;
  guarded(
      [&] {
        registry& r = registry::instance();
        std::shared_lock shared(r.lock());
        gpushare_torch::device_entry* e = r.find(device);
        if (!e)
          throw gpushare::error(gpushare::errc::invalid_argument,
                                std::string("gpushare_torch_free: no session is open on device ")
                                    .append(std::to_string(device))
                                    .append("; the pointer was not allocated by "
                                            "gpushare_torch_malloc"));
        try {
          if (r.sync_on_free()) gpushare_torch::synchronize_device(device);
          e->session.free_async(ptr, stream);
        } catch (...) {
          e->failed_frees.fetch_add(1);
          throw;
        }
        e->allocated.fetch_sub(size);
        e->allocations.fetch_sub(1);
        return 0;
      },
      0);
}

int gpushare_torch_configure(const char* settings) {
  return guarded(
      [&] {
        registry::instance().configure(settings);
        return 0;
      },
      -1);
}

int gpushare_torch_open(int device) {
  return guarded(
      [&] {
        registry& r = registry::instance();
        std::shared_lock shared(r.lock());
        r.entry(device, shared);
        return 0;
      },
      -1);
}

int gpushare_torch_get_stats(int device, gpushare_torch_stats* out) {
  if (!out) {
    gpushare_torch::last_error = "gpushare_torch_get_stats: out is NULL";
    return -1;
  }
  std::memset(out, 0, sizeof *out);
  return guarded(
      [&] {
        registry& r = registry::instance();
        std::shared_lock shared(r.lock());
        gpushare_torch::device_entry* e = r.find(device);
        if (!e) return 1;
        gpushare_torch::fill_stats(*e, *out);
        return 0;
      },
      -1);
}

int gpushare_torch_synchronize(int device) {
  return guarded(
      [&] {
        registry& r = registry::instance();
        std::shared_lock shared(r.lock());
        gpushare_torch::device_entry* e = r.find(device);
        if (!e) return 1;
        e->session.synchronize();
        return 0;
      },
      -1);
}

int gpushare_torch_set_external_usage(int device, uint64_t bytes) {
  return guarded(
      [&] {
        registry& r = registry::instance();
        std::shared_lock shared(r.lock());
        r.entry(device, shared).session.set_external_usage(bytes);
        return 0;
      },
      -1);
}

int gpushare_torch_shutdown(void) {
  return guarded(
      [&] {
        registry::instance().shutdown();
        return 0;
      },
      -1);
}

const char* gpushare_torch_last_error(void) { return gpushare_torch::last_error.c_str(); }

} // extern "C"
