// SPDX-License-Identifier: Apache-2.0
// Keeps a forked child from holding its parent's sessions alive.
//
// A session's liveness is an OFD lock, which belongs to the open file description; fork() gives
// the child a descriptor of that same description, so if the parent died the slot would still
// look alive while the child lives. After fork, the child closes every session descriptor it
// inherited (pthread_atfork) and its copies of the sessions become inert: they neither hold the
// slot nor release it on destruction. A fork waits while another thread of the process is joining
// or creating a table (no_fork_scope), so no child inherits a lock descriptor the registry does not
// know yet.
#pragma once

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
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
    static fork_registry r; // installs the fork handlers, once, before anyone can use it
    return r;
  }

  /// Holds fork() off in this process while the current thread opens, creates or joins a table
  /// (reentrant within a thread). Without it, a fork by another thread between a joiner's
  /// claiming its slot (or a creator's taking the init lock) and its registering here would give
  /// the child a descriptor that holds that lock, unknown to the child's registry: the parent's
  /// slot would stay alive, or its creation look in progress, while the child lives. fork() waits
  /// (in its prepare handler) until every such scope in the process has ended.
  class no_fork_scope {
  public:
    no_fork_scope() {
      if (scope_depth()++ == 0) instance().enter();
    }
    ~no_fork_scope() {
      if (--scope_depth() == 0) instance().leave();
    }
    no_fork_scope(const no_fork_scope&) = delete;
    no_fork_scope& operator=(const no_fork_scope&) = delete;
  };

  void add(member* m) {
    std::lock_guard lk(mutex_);
    entries_.push_back(m);
  }

  void remove(member* m) {
    std::lock_guard lk(mutex_);
    entries_.erase(std::remove(entries_.begin(), entries_.end(), m), entries_.end());
  }

private:
  fork_registry() {
    // The gate first, then the registry's mutex (the order no_fork_scope's holders take them in).
    ::pthread_atfork([] { instance().before_fork(); }, [] { instance().after_fork(); },
                     [] { instance().in_child(); });
  }

  /// How many no_fork_scopes the calling thread is inside.
  static int& scope_depth() noexcept {
    thread_local int d = 0;
    return d;
  }

  void enter() {
    std::unique_lock lk(gate_);
    gate_cv_.wait(lk, [this] { return forks_pending_ == 0; }); // a waiting fork goes first
    ++joining_;
  }
  void leave() {
    std::lock_guard lk(gate_);
    if (--joining_ == 0) gate_cv_.notify_all();
  }
  /// fork()'s prepare handler: no new scope may begin; wait for the open ones to end; keep the
  /// gate locked across the fork.
  void before_fork() {
    std::unique_lock lk(gate_);
    ++forks_pending_;
    // A thread may fork inside its own scope (a crash-point hook running a program): only the
    // other threads' scopes are waited for.
    const int own = scope_depth() > 0 ? 1 : 0;
    gate_cv_.wait(lk, [this, own] { return joining_ == own; });
    lk.release(); // unlocked by after_fork() or in_child()
    mutex_.lock();
  }
  void after_fork() {
    mutex_.unlock();
    --forks_pending_;
    gate_.unlock();
    gate_cv_.notify_all();
  }
  void in_child() {
    // Single-threaded here; the prepare handler took both locks in the parent before fork (plain
    // mutexes, which the child's only thread may unlock).
    for (member* m : entries_) m->forked_into_child();
    entries_.clear();
    mutex_.unlock();
    forks_pending_ = 0;                   // the parent's other forking threads do not exist here
    joining_ = scope_depth() > 0 ? 1 : 0; // only this thread's scope, if any, goes on here
    gate_.unlock();
  }

  std::mutex gate_; ///< guards joining_ and forks_pending_; held across a fork
  std::condition_variable gate_cv_;
  int joining_ = 0;       ///< threads inside a no_fork_scope
  int forks_pending_ = 0; ///< threads in fork()'s prepare handler or beyond
  std::mutex mutex_;
  std::vector<member*> entries_;
};

} // namespace detail
} // namespace v0
} // namespace gpushare
