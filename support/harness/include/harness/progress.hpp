// SPDX-License-Identifier: Apache-2.0
// A one-line progress display for the demos and the GPU benchmark: "showcase: [2/2] fair share,
// phase 3/3 · 4 s left", rewritten in place ("\r" + text + erase to end of line) on stderr. It is
// shown only when stderr is a terminal, --quiet was not given and GPUSHARE_NO_PROGRESS is not set;
// --quiet silences only this line, never results. A light ticker thread redraws it every 250 ms
// (it sleeps in between and takes a mutex only to draw), so the countdown moves between phase
// boundaries without disturbing what is measured. Only the process that made the display draws:
// a forked child that calls any member does nothing (it checks the process id before touching the
// mutex, which might have been held by the ticker when the parent forked).
#pragma once

#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace demo {

/// "<1 s", "4 s", "1 min 40 s", "2 h 5 min": the time left, rounded up to whole seconds.
inline std::string format_time_left(double seconds) {
  if (!(seconds > 0)) return "<1 s";
  auto s = static_cast<long long>(seconds);
  if (static_cast<double>(s) < seconds) ++s;
  if (s < 60) return std::to_string(s).append(" s");
  if (s < 3600) {
    std::string out = std::to_string(s / 60).append(" min");
    if (s % 60 != 0) out.append(" ").append(std::to_string(s % 60)).append(" s");
    return out;
  }
  std::string out = std::to_string(s / 3600).append(" h");
  if ((s % 3600) / 60 != 0) out.append(" ").append(std::to_string((s % 3600) / 60)).append(" min");
  return out;
}

/// Columns a UTF-8 string takes on a terminal (one per code point; continuation bytes count 0).
inline std::size_t display_columns(std::string_view text) {
  std::size_t n = 0;
  for (const char c : text)
    if ((static_cast<unsigned char>(c) & 0xC0U) != 0x80U) ++n;
  return n;
}

/// The longest prefix of `text` that fits in `columns` terminal columns, cut between code points.
inline std::string fit_to_width(std::string_view text, std::size_t columns) {
  std::size_t used = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0U) == 0x80U) continue;
    if (used == columns) return std::string(text.substr(0, i));
    ++used;
  }
  return std::string(text);
}

/// Seconds left, refined by what is already done: the planned seconds still to run, scaled by
/// how long the finished parts really took against their plan (1 when nothing is finished yet).
/// So a benchmark whose scenarios run 20 % over their planned measuring time is expected to run
/// 20 % over for the rest, too.
inline double refined_seconds_left(double planned_left, double planned_done, double actual_done) {
  if (!(planned_done > 0) || !(actual_done > 0)) return planned_left;
  return planned_left * (actual_done / planned_done);
}

/// "scenario 2/5 share", "repeat 1/3", "phase 2/4" and the like: `noun i/n name`.
inline std::string counter(std::string_view noun, std::size_t i, std::size_t n,
                           std::string_view name = {}) {
  std::string out(noun);
  if (!out.empty()) out.append(" ");
  out.append(std::to_string(i)).append("/").append(std::to_string(n));
  if (!name.empty()) out.append(" ").append(name);
  return out;
}

/// `status` + " · " + time left, fitted to `columns` (0: no limit).
inline std::string progress_text(std::string_view status, double seconds_left,
                                 std::size_t columns) {
  std::string line(status);
  line.append(" \xC2\xB7 ").append(format_time_left(seconds_left)).append(" left");
  return columns == 0 ? line : fit_to_width(line, columns);
}

/// Whether progress is drawn: stderr is a terminal, not --quiet, no GPUSHARE_NO_PROGRESS.
inline bool progress_wanted(bool quiet) {
  return !quiet && isatty(STDERR_FILENO) == 1 && std::getenv("GPUSHARE_NO_PROGRESS") == nullptr;
}

/// Whether a progress line is on the terminal now: the interrupt handler (interrupt_cleanup.hpp)
/// erases it with a signal-safe write() before the process dies of Ctrl-C.
inline std::atomic<bool> progress_line_shown{false};

/// The progress line on stderr (see the top of this file). Disabled, every member does nothing.
class progress_line {
public:
  explicit progress_line(bool enabled) : enabled_(enabled), owner_(getpid()) {
    if (enabled_) ticker_ = std::thread([this] { tick(); });
  }
  progress_line(const progress_line&) = delete;
  progress_line& operator=(const progress_line&) = delete;
  ~progress_line() {
    if (!mine()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      erase_locked();
    }
    wake_.notify_all();
    if (ticker_.joinable()) ticker_.join();
  }

  /// What is running now and how many seconds are planned from now to the end.
  void set(std::string status, double seconds_left) {
    if (!mine()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    status_ = std::move(status);
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(seconds_left));
    draw_locked();
  }

  /// Erases the line, runs `print` (which writes normal output), then redraws the line.
  template <class F> void around_output(F&& print) {
    if (!mine()) {
      print();
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    erase_locked();
    print();
    std::fflush(stdout);
    draw_locked();
  }

  /// Erases the line; it comes back on the next set().
  void clear() {
    if (!mine()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    erase_locked();
    status_.clear();
  }

private:
  bool mine() const { return enabled_ && getpid() == owner_; }

  void tick() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      wake_.wait_for(lock, std::chrono::milliseconds(250));
      if (!stop_) draw_locked();
    }
  }

  static std::size_t terminal_columns() {
    winsize ws{};
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1) return ws.ws_col - 1U;
    return 79;
  }

  void draw_locked() {
    if (status_.empty()) return;
    const std::chrono::duration<double> left = deadline_ - std::chrono::steady_clock::now();
    const std::string line = progress_text(status_, left.count(), terminal_columns());
    std::fflush(stdout);
    std::fprintf(stderr, "\r%s\x1b[K", line.c_str());
    std::fflush(stderr);
    shown_ = true;
    progress_line_shown.store(true);
  }

  void erase_locked() {
    if (!shown_) return;
    std::fflush(stdout);
    std::fputs("\r\x1b[K", stderr);
    std::fflush(stderr);
    shown_ = false;
    progress_line_shown.store(false);
  }

  bool enabled_;
  pid_t owner_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread ticker_;
  std::string status_;
  std::chrono::steady_clock::time_point deadline_{};
  bool stop_ = false;
  bool shown_ = false;
};

/// The process's progress line, if its main() made one (demo_main does), and what it is running.
struct progress_state {
  progress_line* line = nullptr;
  std::string stage;  ///< e.g. "showcase: [2/2] fair share"
  double later_s = 0; ///< planned seconds after the current stage
};
inline progress_state& current_progress() {
  static progress_state state;
  return state;
}

/// A demo names the stage it starts ("showcase: [1/2] QoS") and how long is planned after it.
inline void progress_stage(std::string stage, double later_s) {
  current_progress().stage = std::move(stage);
  current_progress().later_s = later_s;
}

/// A scenario starts phase `i` of `n`, each about `phase_s` long: "<stage>, phase i/n".
inline void progress_phase(std::size_t i, std::size_t n, double phase_s) {
  progress_state& st = current_progress();
  if (st.line == nullptr) return;
  std::string status = st.stage;
  status.append(status.empty() ? "" : ", ").append(counter("phase", i, n));
  st.line->set(std::move(status), static_cast<double>(n - i + 1) * phase_s + st.later_s);
}

/// A scenario's phases are over: the line goes away before its results are printed.
inline void progress_done() {
  if (current_progress().line != nullptr) current_progress().line->clear();
}

} // namespace demo
