// SPDX-License-Identifier: Apache-2.0
// `gpushare run --reclaimable SIZE --on-reclaim CMD [--on-restore CMD]`: an unmodified program
// that can give memory back (an engine's sleep endpoint) takes part in cooperative reclaim
// (docs/design.md section 15). The runner holds SIZE of the budget as a reclaimable reservation.
// When a reserve of a higher class asks, it runs CMD (e.g. `curl -X POST .../sleep`) and, once
// CMD succeeds, gives the SIZE back. With --on-restore, once nobody waits for memory and SIZE is
// free again, it takes it back and runs the restore command (the engine's wake-up).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gpushare/session.hpp>
#include <gpushare/text.hpp>

#include "cli_errors.hpp"
#include "cli_format.hpp"
#include "cli_run_child.hpp"
#include "cli_run_env.hpp"

namespace gpushare::cli {

/// What --reclaimable, --on-reclaim and --on-restore asked for.
struct run_reclaim_spec {
  std::uint64_t bytes = 0; ///< the part of the budget the program gives back when asked
  std::string given;       ///< as written: "12GiB"
  std::string on_reclaim;  ///< a shell command that makes the program free that memory
  std::string on_restore;  ///< a shell command that makes it take the memory again ("": none)
};

/// How long a hook command may run before it counts as failed (and is killed).
inline constexpr std::chrono::seconds reclaim_hook_timeout{60};
/// How often the runner looks whether the given-back memory is free again (--on-restore).
inline constexpr std::chrono::milliseconds restore_poll{200};
/// After a restore command failed, the runner waits this long before it tries again.
inline constexpr std::chrono::seconds restore_backoff{5};

/// Runs `command` with /bin/sh, `added` in its environment and the signal mask `mask`; waits
/// up to reclaim_hook_timeout. Returns "" on success, else what went wrong.
inline std::string run_hook(const std::string& command, const std::vector<env_var>& added,
                            const sigset_t& mask) {
  auto [hook, failure] =
      start_program({"/bin/sh", "-c", command}, child_environment(added), mask, false);
  if (failure) return failure->text("/bin/sh");
  const auto end = std::chrono::steady_clock::now() + reclaim_hook_timeout;
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(hook.pid, &status, WNOHANG);
    if (r == hook.pid) break;
    if (r < 0 && errno != EINTR) return "waitpid failed";
    if (std::chrono::steady_clock::now() >= end) {
      ::kill(hook.pid, SIGKILL);
      while (::waitpid(hook.pid, &status, 0) < 0 && errno == EINTR) {
      }
      return std::string("it ran longer than ")
          .append(std::to_string(reclaim_hook_timeout.count()))
          .append(" s and was killed");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  if (WIFEXITED(status))
    return std::string("it exited with ").append(std::to_string(WEXITSTATUS(status)));
  return std::string("it was killed by signal ").append(std::to_string(WTERMSIG(status)));
}

/// The runner's side of reclaim for one program: the reclaimable part of its budget, the
/// handler that runs --on-reclaim and gives it back, and the thread that restores it.
class run_reclaimer {
public:
  run_reclaimer(session& s, reservation cache, const run_reclaim_spec& spec, const sigset_t& mask)
      : s_(s), cache_(std::move(cache)), spec_(spec), mask_(mask) {}
  run_reclaimer(const run_reclaimer&) = delete;
  run_reclaimer& operator=(const run_reclaimer&) = delete;
  ~run_reclaimer() {
    {
      const std::lock_guard<std::mutex> l(m_);
      stop_ = true;
    }
    cv_.notify_all();
    if (restorer_.joinable()) restorer_.join();
    // The program has ended: the session leaves now, which stops the watcher, so that no
    // handler call can still reach this object.
    s_.leave();
  }

  /// Registers the handler and starts the watcher (and the restorer, with --on-restore). Call
  /// with the runner's signals blocked: the threads inherit the mask, so none of them is ever
  /// delivered a signal meant for the program.
  void start() {
    s_.on_reclaim([this](std::uint64_t asked) { return give_back(asked); });
    // --on-reclaim may take far longer than a guaranteed session's reclaim deadline (an engine
    // going to sleep): taking back SIZE on loan could see the loan written off while the program
    // still holds the memory. So the runner takes back only memory that is free.
    s_.accept_loans(false);
    s_.watch_reclaim();
    if (!spec_.on_restore.empty()) restorer_ = std::thread([this] { restore_loop(); });
  }

private:
  static void say(const std::string& line) {
    std::fputs(("gpushare run: " + line + "\n").c_str(), stderr);
  }

  /// The handler (on the session's watcher thread): runs --on-reclaim, then gives the whole
  /// reclaimable part back; nothing if the program already gave it or the command failed.
  std::uint64_t give_back(std::uint64_t asked) {
    const std::lock_guard<std::mutex> l(m_);
    if (!cache_) return 0;
    const std::string failed =
        run_hook(spec_.on_reclaim,
                 {{"GPUSHARE_RECLAIM_BYTES", std::to_string(asked)},
                  {"GPUSHARE_RECLAIMABLE_BYTES", std::to_string(cache_.size())}},
                 mask_);
    if (!failed.empty()) {
      say("--on-reclaim failed (" + failed + "): the program keeps its " +
          bytes_text(cache_.size()));
      return 0;
    }
    const std::uint64_t given = cache_.size();
    cache_.release();
    say(std::string("gave back ").append(bytes_text(given)) + " (asked for " + bytes_text(asked) +
        ") after --on-reclaim");
    cv_.notify_all();
    return given;
  }

  /// Whether the given-back memory may be taken again: nobody waits for memory.
  bool nobody_waits() {
    for (const session_info& i : s_.snapshot().sessions)
      if (i.waiting_for_memory > 0) return false;
    return true;
  }

  /// One attempt to take the memory back and run --on-restore; false to back off.
  bool try_restore() {
    if (!nobody_waits()) return true;
    std::optional<reservation> again = s_.try_reserve_reclaimable(spec_.bytes);
    if (!again) return true;
    const std::string failed = run_hook(
        spec_.on_restore, {{"GPUSHARE_RESTORE_BYTES", std::to_string(spec_.bytes)}}, mask_);
    if (!failed.empty()) {
      say("--on-restore failed (" + failed + "): the memory stays given back; trying again in " +
          std::to_string(restore_backoff.count()) + " s");
      return false; // `again` releases it
    }
    cache_ = std::move(*again);
    say(std::string("took back ").append(bytes_text(spec_.bytes)) + " after --on-restore");
    return true;
  }

  void restore_loop() {
    std::unique_lock<std::mutex> l(m_);
    while (!stop_) {
      cv_.wait_for(l, restore_poll);
      if (stop_ || cache_) continue;
      bool ok = true;
      try {
        ok = try_restore();
      } catch (const std::exception& e) {
        say(std::string("restoring failed: ").append(e.what()));
        ok = false;
      }
      if (!ok) cv_.wait_for(l, restore_backoff, [this] { return stop_; });
    }
  }

  session& s_;
  reservation cache_; ///< the reclaimable part while the program holds it; empty once given
  run_reclaim_spec spec_;
  sigset_t mask_;
  std::mutex m_; ///< guards cache_ and stop_; held while a hook runs
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread restorer_;
};

} // namespace gpushare::cli
