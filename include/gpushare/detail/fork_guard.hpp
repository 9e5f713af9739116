// SPDX-License-Identifier: Apache-2.0
// Keeps a forked child from holding its parent's sessions alive.
//
// A session's liveness is an OFD lock, which belongs to the open file description; fork() gives
// the child a descriptor of that same description, so if the parent died the slot would still
// look alive while the child lives. After fork, the child closes every session descriptor it
// inherited (pthread_atfork) and its copies of the sessions become inert: they neither hold the
// slot nor release it on destruction.
#pragma once

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <vector>

namespace gpushare {
inline namespace v0 {
namespace detail {

class fork_registry {
public:
  /// Something that holds liveness locks through a descriptor.
  struct member {
    /// Runs in the child after fork (single-threaded): close the descriptor, go inert.
    virtual void forked_into_child() noexcept = 0;

  protected:
    ~member() = default;
  };

  static fork_registry& instance() {
    static fork_registry r;
    return r;
  }

  void add(member* m) {
    std::call_once(installed_, [] {
      ::pthread_atfork([] { instance().mutex_.lock(); }, [] { instance().mutex_.unlock(); },
                       [] { instance().in_child(); });
    });
    std::lock_guard lk(mutex_);
    entries_.push_back(m);
  }

  void remove(member* m) {
    std::lock_guard lk(mutex_);
    entries_.erase(std::remove(entries_.begin(), entries_.end(), m), entries_.end());
  }

private:
  void in_child() {
    // Single-threaded here; the prepare handler took the mutex in the parent before fork.
    for (member* m : entries_) m->forked_into_child();
    entries_.clear();
    mutex_.unlock();
  }

  std::once_flag installed_;
  std::mutex mutex_;
  std::vector<member*> entries_;
};

} // namespace detail
} // namespace v0
} // namespace gpushare
