// SPDX-License-Identifier: Apache-2.0
// Exit-path updates that hit the table-lock timeout and whose session then goes idle for good
// (issue 23, item 1). Before, such an update waited in the process for the session's next lock:
// a server that went quiet after one lost guard exit kept the device for as long as it lived,
// and a guard wait that failed with table_busy left a phantom device waiter. Now the update goes
// into the session's slot (the journal, detail/journal.hpp), and whichever process locks the
// table next applies it. In every case here the session that lost its update never calls
// gpushare again: it sleeps in pause() until the test kills it.
//
// Lock timeouts are reached quickly by lowering detail::lock_timeout_ns in a forked child, with a
// "stopper" child that takes the table lock and stops itself (SIGSTOP) until the test resumes it.
#include <doctest/doctest.h>

#include <cstring>

#include "test_util.hpp"

using namespace gpushare;
using namespace std::chrono_literals;
namespace d = gpushare::detail;

constexpr std::uint64_t MiB = 1ull << 20;

namespace {

d::table_core map_raw(const test::unique_table& t) {
  return d::table_core(d::mapped_table::open_existing(t.object_name(), 1'000'000'000));
}

/// A child that takes the table lock and stops itself with it held. Returns once it is stopped.
pid_t stop_with_lock(const test::unique_table& t) {
  test::shared_block<std::atomic<int>> locked;
  const pid_t pid = test::spawn([&] {
    auto raw = map_raw(t);
    d::table_core::guard g(raw);
    locked[0] = 1;
    ::raise(SIGSTOP);
    return 0;
  });
  REQUIRE(test::eventually([&] { return locked[0].load() == 1; }));
  int status = 0;
  REQUIRE(::waitpid(pid, &status, WUNTRACED) == pid); // it has stopped, lock held
  REQUIRE(WIFSTOPPED(status));
  return pid;
}

/// Kills and reaps a child that pause()s at the end, also when a REQUIRE ends the test early.
struct reaper {
  pid_t pid;
  ~reaper() {
    if (::kill(pid, SIGKILL) == 0) test::wait_exit(pid);
  }
};

/// Runs `fn` in a child; returns its exit code, or -1 if it had not ended within `limit` (then it
/// is killed): the hangs under test show up as -1, not as a stuck test.
int run_bounded(const std::function<int()>& fn, std::chrono::milliseconds limit) {
  const pid_t pid = test::spawn(fn);
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(5ms);
  }
  ::kill(pid, SIGKILL);
  test::wait_exit(pid);
  return -1;
}

const session_info* find(const table_snapshot& s, const std::string& name) {
  for (const auto& i : s.sessions)
    if (i.name == name) return &i;
  return nullptr;
}

/// The state the test and its children step through (shared memory).
struct steps {
  test::shared_block<std::atomic<int>> word{2};
  void set(int n) { word[0] = n; }
  bool reached(int n, std::chrono::milliseconds limit = 20000ms) {
    return test::eventually([&] { return word[0].load() >= n; }, limit);
  }
  void wait_for(int n) {
    while (word[0].load() < n) ::usleep(1000);
  }
};

} // namespace

TEST_CASE("a guard exit lost to a lock timeout frees the device although its session stays idle") {
  // P1 is inside a guard; P2 stops holding the table lock; P1 leaves its guard (the exit times
  // out) and never calls gpushare again; P2 is continued. A third session's guard must get the
  // device. Before: P1 stayed `running` with the device, and the third guard waited for good.
  test::unique_table t("journal-exit", 100 * MiB);
  steps st;
  const pid_t p1 = test::spawn([&] {
    d::lock_timeout_ns = 300'000'000; // 300 ms
    session s = t.join("p1");
    {
      scoped_kernel k(s);
      st.set(1);
      st.wait_for(2); // the stopper holds the lock now
    }                 // the exit times out on the lock: journaled
    st.set(3);
    ::pause(); // idle for good, as a server between requests
    return 0;
  });
  const reaper reap_p1{p1};
  REQUIRE(st.reached(1));
  const pid_t stopper = stop_with_lock(t);
  st.set(2);
  REQUIRE(st.reached(3));
  ::kill(stopper, SIGCONT);
  CHECK(test::wait_exit(stopper) == 0);
  const auto start = test::now_ns();
  const int rc = run_bounded(
      [&] {
        session c = t.join("third");
        scoped_kernel k(c);
        return 0;
      },
      5000ms);
  CHECK(rc == 0); // before: -1, still blocked after 5 s
  CHECK(test::now_ns() - start < 5'000'000'000ull);
  session observer = t.join("observer");
  const table_snapshot snap = observer.snapshot();
  const session_info* p = find(snap, "p1");
  REQUIRE(p != nullptr);
  CHECK(p->active_guards == 0);
  CHECK_FALSE(p->holds_device);
  CHECK(p->guards == 1);   // the exit was accounted, once
  CHECK(p->device_ns > 0); // with its time
}

TEST_CASE("a guard wait that fails with table_busy leaves no phantom waiter, its session idle") {
  // Before: the failed waiter stayed registered until its session's next lock; holders handed
  // the device to a session that no longer waited, and device_waiters kept the fast paths shut.
  test::unique_table t("journal-phantom", 100 * MiB);
  session holder = t.join("holder");
  auto k = std::make_optional<scoped_kernel>(holder); // holds the device while w waits
  auto raw = map_raw(t);
  steps st;
  const pid_t w = test::spawn([&] {
    d::lock_timeout_ns = 300'000'000;
    session s = t.join("w");
    st.set(1);
    const auto e = test::thrown([&] { scoped_kernel g(s); });
    st.word[1] = e ? static_cast<int>(e->code()) : -1;
    st.set(3);
    ::pause(); // never calls gpushare again
    return 0;
  });
  const reaper reap_w{w};
  REQUIRE(st.reached(1));
  REQUIRE(test::eventually([&] { return raw.header().device_waiters.load() == 1; }));
  const pid_t stopper = stop_with_lock(t); // w's next re-check times out on the lock
  REQUIRE(st.reached(3));
  CHECK(st.word[1].load() == static_cast<int>(errc::table_busy));
  ::kill(stopper, SIGCONT);
  CHECK(test::wait_exit(stopper) == 0);
  k.reset(); // the holder's exit locks the table: the journal is folded before it decides
  CHECK(raw.header().device_waiters.load() == 0); // before: 1, for as long as w lived
  const table_snapshot snap = holder.snapshot();
  const session_info* wi = find(snap, "w");
  REQUIRE(wi != nullptr);
  CHECK(wi->waiting_for_device == 0);
  CHECK(wi->state() == std::string("idle"));
  // The device went to nobody: the holder's next guard enters on its lease (nobody waits).
  CHECK_FALSE(snap.holder.has_value());
  { scoped_kernel again(holder); }
  { scoped_kernel on_lease(holder); }
  CHECK(holder.info().guards_on_lease >= 1);
}

TEST_CASE(
    "a memory wait and a release lost to lock timeouts are applied while their session idles") {
  test::unique_table t("journal-memory", 100 * MiB);
  session holder = t.join("holder");
  auto held = std::make_optional<reservation>(holder.reserve(80 * MiB, 0ms));
  auto raw = map_raw(t);
  steps st;
  const pid_t w = test::spawn([&] {
    d::lock_timeout_ns = 300'000'000;
    session s = t.join("w");
    auto mine = s.reserve(15 * MiB, 0ms);
    st.set(1);
    const auto e = test::thrown([&] { auto r = s.reserve(50 * MiB, 30s); });
    st.word[1] = e ? static_cast<int>(e->code()) : -1;
    mine.release(); // the lock is still held by the stopper: journaled
    st.set(3);
    ::pause();
    return 0;
  });
  const reaper reap_w{w};
  REQUIRE(st.reached(1));
  REQUIRE(test::eventually([&] { return raw.header().memory_waiters == 1; }));
  const pid_t stopper = stop_with_lock(t);
  REQUIRE(st.reached(3));
  CHECK(st.word[1].load() == static_cast<int>(errc::table_busy));
  ::kill(stopper, SIGCONT);
  CHECK(test::wait_exit(stopper) == 0);
  const table_snapshot snap = holder.snapshot(); // this lock folds w's journal
  const session_info* wi = find(snap, "w");
  REQUIRE(wi != nullptr);
  CHECK(wi->waiting_for_memory == 0); // before: 1 until w's next call
  CHECK(wi->reserved == 0);           // before: 15 MiB until w's next call
  CHECK(snap.reserved_total == 80 * MiB);
  CHECK(raw.header().memory_waiters == 0);
  held.reset();
  auto r = holder.reserve(100 * MiB, 0ms); // all of it: w's 15 MiB came back
  CHECK(r.size() == 100 * MiB);
}

namespace {
/// Crash-point hook state of a child that kills itself at its `kill_at`-th fold point.
struct fold_killer {
  static inline int hits = 0;
  static inline int kill_at = 0;
  static void hook(const char* at) {
    if (std::strncmp(at, "journal.fold.", 13) == 0 && ++hits == kill_at) ::raise(SIGKILL);
  }
};
} // namespace

TEST_CASE("a locker killed at any point of a journal fold loses nothing: the next locker folds") {
  // Two slots hold journaled updates: device time of one session and a release of another's
  // 15 MiB (as their owners' exits write them when the lock times out). A child takes the lock
  // and is killed at its k-th fold point (journal.fold.begin, .step, .slot), for every k until a
  // fold runs to its end. Before: the fold zeroed journal_pending first, so the next locker
  // (which repairs the dead owner's lock) saw nothing to fold: the release stayed booked.
  int completed_at = 0;
  for (int k = 1; k <= 64 && completed_at == 0; ++k) {
    CAPTURE(k);
    test::unique_table t("journal-fold-kill", 100 * MiB);
    session s1 = t.join("s1");
    steps st;
    const pid_t w = test::spawn([&] {
      session s = t.join("w");
      auto mine = s.reserve(15 * MiB, 0ms);
      st.set(1);
      ::pause(); // its release is journaled below, as if its own exit had timed out
      return 0;
    });
    const reaper reap_w{w};
    REQUIRE(st.reached(1));
    auto raw = map_raw(t);
    std::uint32_t w_slot = 0;
    for (const auto& i : s1.snapshot().sessions)
      if (i.name == "w") w_slot = i.id.slot;
    d::journal_device_time(raw.header(), raw.slot(s1.id().slot), 7'000'000);
    d::journal_shrink(raw.header(), raw.slot(w_slot), 15 * MiB);
    const int rc = run_bounded(
        [&] {
          fold_killer::kill_at = k;
          d::crash_point_hook = &fold_killer::hook;
          auto mine = map_raw(t);
          d::table_core::guard g(mine); // folds, and is killed at its k-th point
          return 0;
        },
        10000ms);
    if (rc == 0)
      completed_at = k;
    else
      REQUIRE(rc == 128 + SIGKILL);
    const table_snapshot snap = s1.snapshot(); // takes the lock over, repairs, folds
    const session_info* wi = find(snap, "w");
    const session_info* si = find(snap, "s1");
    REQUIRE(wi != nullptr);
    REQUIRE(si != nullptr);
    CHECK(si->device_ns == 7'000'000); // once: not lost, not twice
    CHECK(wi->reserved == 0);          // before: 15 MiB, booked until w journaled again
    CHECK(snap.reserved_total == 0);
    CHECK(raw.header().journal_pending.load() == 0);
    CHECK(raw.header().lock_repairs == (rc == 0 ? 0u : 1u));
  }
  CHECK(completed_at == 14); // 1 + 6 points for each of the two slots; then one fold to its end
}
