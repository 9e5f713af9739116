// SPDX-License-Identifier: Apache-2.0
// A process has one CUDA context per device, however many device sessions it opens there. This
// process-wide registry makes the table count that context once: it remembers the overhead
// measured for each device (by UUID), and for each table (domain + device) which of the process's
// live device sessions carries the overhead as external usage. When the carrier closes while
// others remain, the charge moves to another one, so the table never counts it twice or zero
// times. CUDA-free.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gpushare/cuda/detail/overhead.hpp>
#include <gpushare/detail/budget.hpp>
#include <gpushare/detail/session_core.hpp>

namespace gpushare {
inline namespace v0 {
namespace cuda {
namespace detail {

/// One device session's part in its process's context overhead.
struct overhead_share {
  std::shared_ptr<gpushare::detail::session_core> core;
  std::string table;          ///< the table's name (domain and device UUID): the registry's key
  std::uint64_t overhead = 0; ///< what this session charges while it carries the overhead
  std::uint64_t extra = 0;    ///< other external usage (device_session::set_external_usage)
  bool carrying = false;      ///< guarded by the registry's mutex
};

class context_registry {
public:
  /// The process's registry (never destroyed: device sessions may close during static
  /// destruction).
  static context_registry& instance() {
    static context_registry* const r = new context_registry();
    return *r;
  }

  /// Held while a session creates and measures the process's context on a device, so that two
  /// sessions opening at once in this process measure it once.
  std::mutex& measuring() noexcept { return measuring_; }

  /// The overhead measured earlier in this process for the device with this UUID.
  std::optional<std::pair<std::uint64_t, overhead_source>> measurement(const std::string& uuid) {
    std::lock_guard lock(m_);
    const auto it = measured_.find(uuid);
    if (it == measured_.end()) return std::nullopt;
    return it->second;
  }
  void remember(const std::string& uuid, std::uint64_t bytes, overhead_source source) {
    std::lock_guard lock(m_);
    measured_[uuid] = {bytes, source};
  }

  /// Adds a session that has just joined its table. It carries the overhead if no other live
  /// session of this process on the same table does. Sets its external usage accordingly.
  void join(const std::shared_ptr<overhead_share>& s) {
    std::lock_guard lock(m_);
    auto& members = tables_[s->table];
    bool carried = false;
    for (const auto& o : members) carried = carried || o->carrying;
    s->carrying = !carried;
    members.push_back(s);
    try {
      apply(*s);
    } catch (...) {
      members.pop_back();
      s->carrying = false;
      if (members.empty()) tables_.erase(s->table);
      throw;
    }
  }

  /// Sets a session's other external usage (its overhead added while it carries it).
  void set_extra(overhead_share& s, std::uint64_t extra) {
    std::lock_guard lock(m_);
    s.extra = extra;
    apply(s);
  }

  bool carrying(const overhead_share& s) {
    std::lock_guard lock(m_);
    return s.carrying;
  }

  /// Removes a session that is about to leave its table. If it carried the overhead, the next
  /// live session of this process on the table takes the charge now, before this one's slot is
  /// cleared (for an instant the table counts the overhead twice, never zero times). Idempotent.
  void leave(const std::shared_ptr<overhead_share>& s) noexcept {
    std::lock_guard lock(m_);
    const auto it = tables_.find(s->table);
    if (it == tables_.end()) return;
    auto& members = it->second;
    bool found = false;
    for (auto m = members.begin(); m != members.end(); ++m)
      if (*m == s) {
        members.erase(m);
        found = true;
        break;
      }
    if (!found) return;
    if (s->carrying) {
      s->carrying = false;
      for (const auto& next : members) {
        next->carrying = true;
        try {
          apply(*next);
          break;
        } catch (...) {
          next->carrying = false; // that session cannot be charged (it ended): try another
        }
      }
    }
    if (members.empty()) tables_.erase(it);
  }

private:
  context_registry() = default;

  static void apply(overhead_share& s) {
    s.core->set_external(s.carrying ? gpushare::detail::sat_add(s.overhead, s.extra) : s.extra);
  }

  std::mutex measuring_;
  std::mutex m_;
  std::map<std::string, std::pair<std::uint64_t, overhead_source>> measured_;
  std::map<std::string, std::vector<std::shared_ptr<overhead_share>>> tables_;
};

} // namespace detail
} // namespace cuda
} // namespace v0
} // namespace gpushare
