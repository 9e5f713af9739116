// SPDX-License-Identifier: Apache-2.0
// `gpushare run`: runs an unmodified program under a memory budget. The runner joins the table on
// the program's behalf, reserves the budget (or, with --library, passes it to a program that opens
// its own session), starts the program, forwards signals to it, holds the session until it ends
// and returns its exit code. See run_usage and docs/cli.md, "run".
#pragma once

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <gpushare/error.hpp>
#include <gpushare/interrupt.hpp>
#include <gpushare/options.hpp>
#include <gpushare/session.hpp>
#include <gpushare/startup.hpp>
#include <gpushare/table.hpp>
#include <gpushare/text.hpp>

#include "cli_args.hpp"
#include "cli_errors.hpp"
#include "cli_format.hpp"
#include "cli_run_args.hpp"
#include "cli_run_child.hpp"
#include "cli_run_env.hpp"
#include "cli_run_ready.hpp"
#include "cli_run_reclaim.hpp"
#include "cli_run_usage.hpp"
#include "cli_status.hpp" // write_stdout

namespace gpushare::cli {

/// The exit code of `gpushare run` when it fails itself before the program runs (no table, the
/// budget not free in time), as env(1) and timeout(1) do; the program's own codes pass through.
inline constexpr int run_failed = 125;

/// The capacity of the table `r` names, if it exists and has one (not unlimited); when it does
/// not exist, the capacity the runner would create it with (GPUSHARE_CAPACITY), except with
/// --library, where the program creates it. nullopt otherwise. Opening it never creates it.
inline std::optional<std::uint64_t> existing_capacity(const run_request& r) {
  std::uint64_t c = unlimited_memory;
  try {
    c = table::open(r.key, open_mode::open_existing, r.options).snapshot().capacity;
  } catch (const gpushare::error& e) {
    if (e.code() != errc::no_such_table) throw;
    if (!r.library) c = resolve_options(r.options).capacity;
  }
  return c < unlimited_memory ? std::optional(c) : std::nullopt;
}

/// Fills in the card's memory (--card-memory, else the table's capacity `capacity`) and the budget
/// in bytes (a percentage is of the capacity). With --pytorch both are needed: a runtime_failure
/// says what to give when one is unknown.
inline void complete_budget(run_budget& b, const run_request& r,
                            std::optional<std::uint64_t> capacity) {
  if (r.card_memory) {
    b.card_total = r.card_memory;
    b.card_total_source = "--card-memory";
  } else if (capacity) {
    b.card_total = capacity;
    b.card_total_source = "the table's capacity";
  }
  if (!b.budget_bytes && r.memory.kind == memory_amount::unit::bytes)
    b.budget_bytes = r.memory.value;
  if (!b.budget_bytes && capacity) b.budget_bytes = r.memory.resolve(*capacity);
  if (!r.pytorch) return;
  if (!b.card_total)
    throw runtime_failure(
        std::string("--pytorch needs the card's total memory, and table ").append(quote(r.key)) +
        (capacity ? "" : " has no capacity (it is unlimited, or not created yet)") +
        ": give --card-memory SIZE (nvidia-smi --query-gpu=memory.total)");
  if (!b.budget_bytes)
    throw runtime_failure("--memory " + r.memory_given +
                          " is a percentage of the table's capacity, and the table has none: give "
                          "--memory in bytes (e.g. 20GiB)");
}

/// "# PyTorch: per_process_memory_fraction 0.250000 = 20.00 GiB of 80.00 GiB (the table's
/// capacity)" and what holds the budget, for --dry-run.
inline std::string dry_run_notes(const run_budget& b, const run_request& r) {
  std::string out = b.library ? "# the program's own session reserves the budget (--library)\n"
                              : "# gpushare run reserves " + r.memory_given + " in table " +
                                    quote(r.key) + " for the program's lifetime\n";
  if (r.pytorch && b.budget_bytes && b.card_total)
    out +=
        "# PyTorch: per_process_memory_fraction " + fraction_text(*b.budget_bytes, *b.card_total) +
        std::string(" = ").append(bytes_text(*b.budget_bytes)) +
        std::string(" of ").append(bytes_text(*b.card_total)) + " (" + b.card_total_source + ")\n";
  return out;
}

/// "; memory is held by "trainer" (pid 4242) 30.00 GiB, ..." from a snapshot of the table.
inline std::string holders_text(const table_snapshot& t, session_id self) {
  std::string out;
  for (const session_info& s : t.sessions) {
    if (s.id == self || s.reserved + s.external == 0) continue;
    out += (out.empty() ? "; memory is held by " : ", ") + quote(s.name) + " (pid " +
           std::to_string(s.pid) + std::string(") ").append(bytes_text(s.reserved + s.external));
  }
  return out;
}

/// Reserves `bytes` for the program (`reclaimable`: as memory it gives back when asked), waiting
/// up to `timeout_ns` (max: without end); says on stderr that it waits when the memory is not
/// free at once.
/// A signal that ended the wait for the budget (SIGINT, SIGTERM or SIGHUP).
struct wait_signalled {
  int signal;
};

/// While alive: SIGINT, SIGTERM and SIGHUP are blocked, and every wait of the session checks for
/// one pending and leaves by wait_signalled. A runner killed by Ctrl-C in its wait for the budget
/// left a dead session in the table until a peer reclaimed it (issue 42, B8); now the wait ends,
/// the session leaves as the exception unwinds, and the runner exits 128 + the signal.
class budget_wait_signals {
public:
  budget_wait_signals() {
    sigemptyset(&set_);
    for (const int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set_, sig);
    ::pthread_sigmask(SIG_BLOCK, &set_, &old_);
  }
  ~budget_wait_signals() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  budget_wait_signals(const budget_wait_signals&) = delete;
  budget_wait_signals& operator=(const budget_wait_signals&) = delete;
  /// Throws wait_signalled if one of the signals is pending (and takes it).
  void check() const {
    const timespec now{0, 0};
    if (const int sig = ::sigtimedwait(&set_, nullptr, &now); sig > 0) throw wait_signalled{sig};
  }

private:
  sigset_t set_{}, old_{};
};

inline reservation hold_budget(session& s, std::uint64_t bytes, std::uint64_t timeout_ns,
                               bool reclaimable = false) {
  if (bytes == 0) return {};
  if (auto r = reclaimable ? s.try_reserve_reclaimable(bytes) : s.try_reserve(bytes))
    return std::move(*r);
  const table_snapshot t = s.snapshot();
  std::fputs(
      ("gpushare run: waiting " +
       (timeout_ns == UINT64_MAX ? std::string("without end")
                                 : std::string("up to ").append(format_duration(timeout_ns))) +
       std::string(" for ").append(bytes_text(bytes)) +
       std::string(" of table ").append(quote(t.key)) + " (" + bytes_text(t.available) + " free" +
       holders_text(t, s.id()) + ")\n")
          .c_str(),
      stderr);
  try {
    const auto timeout = timeout_ns == UINT64_MAX ? std::chrono::nanoseconds::max()
                                                  : std::chrono::nanoseconds(timeout_ns);
    const budget_wait_signals signals;
    const wait_interrupt on_signal([&signals] { signals.check(); });
    reservation r = reclaimable ? s.reserve_reclaimable(bytes, timeout) : s.reserve(bytes, timeout);
    signals.check(); // one that came as it was granted: given back as the stack unwinds
    return r;
  } catch (const gpushare::error& e) {
    if (e.code() != errc::timeout) throw;
    throw runtime_failure(std::string(e.what()) + holders_text(s.snapshot(), s.id()) +
                          "; the program was not started");
  }
}

/// The table's start-up lock as the readiness watch's hold (--serialize-startup): taken by
/// `holder` before the program starts, waiting up to --timeout; released once it is ready, its
/// wait timed out, or it exited first. A hold that is not taken in time ends the run (125) with
/// the library's message, which names the holder.
inline readiness_hold startup_lock_hold(session& holder, const run_request& r,
                                        std::optional<gpushare::startup_hold>& lock) {
  return readiness_hold{
      [&holder, &lock, timeout = r.timeout_ns] {
        try {
          lock.emplace(timeout == UINT64_MAX
                           ? hold_startup(holder)
                           : hold_startup(holder, std::chrono::nanoseconds(timeout)));
        } catch (const gpushare::error& e) {
          if (e.code() != errc::timeout) throw;
          throw runtime_failure(std::string(e.what()) + "; the program was not started");
        }
      },
      [&lock] {
        if (lock) lock->ready();
      }};
}

/// The session that holds the start-up lock with --library, where the runner joins none for the
/// budget: the program's name with "-startup", reserving nothing.
inline session_options startup_holder_options(const run_request& r) {
  session_options o;
  const std::string base = r.options.name ? *r.options.name : name_from_command(r.command[0]);
  o.name = base.substr(0, 55) + "-startup";
  return o;
}

/// Starts `command` with `added` in its environment and stays beside it until it ends; its exit
/// code, or 126/127 when it could not be started. `holder`: the session that takes the start-up
/// lock with --serialize-startup. `gated`: called once the runner's signals are blocked, with the
/// mask the program gets (threads started there never take a signal meant for the program).
inline int run_program(const run_request& r, const std::vector<std::string>& command,
                       const std::vector<env_var>& added, session* holder,
                       const std::function<void(const sigset_t&)>& gated = {}) {
  signal_gate gate;
  if (gated) gated(gate.original_mask());
  std::optional<gpushare::startup_hold> lock;
  std::optional<readiness_watch> watch;
  if (r.ready)
    watch.emplace(*r.ready, r.startup_timeout_ns,
                  r.serialize_startup && holder ? startup_lock_hold(*holder, r, lock)
                                                : readiness_hold{});
  if (watch) watch->take();
  const bool capture = r.ready && r.ready->what == ready_condition::kind::log;
  auto [program, failure] =
      start_program(command, child_environment(added), gate.original_mask(), capture);
  if (failure) {
    std::fputs(
        (std::string("gpushare run: error: ").append(failure->text(command[0])) + "\n").c_str(),
        stderr);
    return failure->code();
  }
  if (watch) watch->started();
  supervisor sup(gate, program, watch ? &*watch : nullptr);
  return sup.run();
}

/// The program's command line: with --engine, the engine's flags for the budget appended.
inline std::vector<std::string> program_command(const run_request& r, const run_budget& b) {
  std::vector<std::string> command = r.command;
  if (!r.engine) return command;
  if (!b.budget_bytes)
    throw runtime_failure("--engine needs the budget in bytes, and --memory " + r.memory_given +
                          " is a percentage of a table with no capacity: give --memory in bytes");
  for (std::string& f : engine_flags(*r.engine, *b.budget_bytes, b.card_total))
    command.push_back(std::move(f));
  return command;
}

/// The run itself, once the command line is read: join, reserve, start, wait.
inline int run_with_budget(const run_request& r) {
  run_budget b = r.budget;
  if (r.library || r.dry_run) {
    complete_budget(b, r, existing_capacity(r));
    const auto added = budget_environment(b, process_environment);
    const std::vector<std::string> command = program_command(r, b);
    if (r.dry_run) {
      write_stdout(dry_run_notes(b, r) + dry_run_text(added, command));
      return 0;
    }
    std::optional<session> holder;
    if (r.serialize_startup) holder.emplace(r.key, startup_holder_options(r));
    return run_program(r, command, added, holder ? &*holder : nullptr);
  }
  session s(r.key, r.options);
  const table_snapshot t = s.snapshot();
  b.budget_bytes = s.info().memory_limit;
  complete_budget(b, r, t.capacity < unlimited_memory ? std::optional(t.capacity) : std::nullopt);
  const std::vector<std::string> command = program_command(r, b);
  const std::uint64_t give = r.reclaim ? r.reclaim->bytes : 0;
  if (give > *b.budget_bytes)
    throw runtime_failure("--reclaimable " + r.reclaim->given + " is more than the budget, " +
                          bytes_text(*b.budget_bytes) + " (--memory " + r.memory_given + ")");
  const reservation held = hold_budget(s, *b.budget_bytes - give, r.timeout_ns);
  reservation cache = hold_budget(s, give, r.timeout_ns, true);
  std::optional<run_reclaimer> reclaimer;
  return run_program(r, command, budget_environment(b, process_environment), &s,
                     [&](const sigset_t& mask) {
                       if (!r.reclaim) return;
                       reclaimer.emplace(s, std::move(cache), *r.reclaim, mask);
                       reclaimer->start();
                     });
}

inline int run_run(std::span<const std::string> args) {
  try {
    const std::optional<run_request> r = parse_run_request(args, process_environment);
    if (!r) {
      write_stdout(std::string(run_usage));
      return 0;
    }
    return run_with_budget(*r);
  } catch (const usage_error&) {
    throw;
  } catch (const wait_signalled& w) {
    std::fputs(("gpushare run: SIG" +
                std::string(::sigabbrev_np(w.signal) ? ::sigabbrev_np(w.signal) : "?") +
                " while waiting for the budget: the session left the table and the program was "
                "not started\n")
                   .c_str(),
               stderr);
    return 128 + w.signal;
  } catch (const std::exception& e) {
    std::fputs((std::string("gpushare run: error: ").append(e.what()) + "\n").c_str(), stderr);
  }
  return run_failed;
}

} // namespace gpushare::cli
