// SPDX-License-Identifier: Apache-2.0
#include "shared.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "config.hpp"
#include "shared_layout.hpp"
#include "state_id.hpp"

namespace cudasim {

namespace {
std::uint64_t fnv1a(const std::string& s, std::uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string format_uuid(const char* prefix, const unsigned char* b) {
  char text[64];
  std::snprintf(text, sizeof text,
                "%s-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", prefix,
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
                b[13], b[14], b[15]);
  return text;
}

/// A version-4-style UUID's 16 bytes, a hash of `key` (stable for a given state name).
void uuid_bytes(const std::string& key, unsigned char* raw) {
  const std::uint64_t h1 = fnv1a(key, 0xcbf29ce484222325ull);
  const std::uint64_t h2 = fnv1a("uuid", h1);
  std::memcpy(raw, &h1, 8);
  std::memcpy(raw + 8, &h2, 8);
  raw[6] = static_cast<unsigned char>((raw[6] & 0x0f) | 0x40);
}

/// What /proc/<pid>/stat says of `pid`: its state (field 3: 'Z' for a zombie) and the kernel's
/// start time (field 22); state 0 and start 0 when it cannot be read.
struct proc_stat {
  char state = 0;
  std::uint64_t started = 0;
};

proc_stat read_stat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(in, text);
  proc_stat out;
  const auto close = text.rfind(')');
  if (close == std::string::npos) return out;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 3) out.state = field[0];
    if (i == 22) out.started = std::strtoull(field.c_str(), nullptr, 10);
  }
  return out;
}

std::uint64_t start_time(pid_t pid) { return read_stat(pid).started; }

/// The "Threads:" line of /proc/<pid>/status (0 when it cannot be read).
int thread_count(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  return 0;
}

/// Whether the process that made a context still runs. A zombie (killed or exited, not yet
/// reaped by its parent) does not: the driver ends its contexts when its files close, at exit.
/// (A process whose main thread ended while others run also shows 'Z', with more threads.)
bool alive(pid_t pid, std::uint64_t started) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  const proc_stat now = read_stat(pid);
  if ((now.state == 'Z' || now.state == 'X') && thread_count(pid) <= 1) return false;
  return now.started == 0 || now.started == started;
}

void sleep_until(std::uint64_t t) {
  timespec ts{static_cast<time_t>(t / 1'000'000'000), static_cast<long>(t % 1'000'000'000)};
  while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

} // namespace

std::uint64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

shared& shared::get() {
  static shared* instance = new shared(); // never destroyed: worker threads may outlive main
  return *instance;
}

namespace {

/// Takes the shared flock that says this process uses the state (state_id.hpp). A cleaner holds
/// the exclusive one for microseconds; false after 5 s (a cleaner stopped while holding it).
bool lock_shared(int fd) {
  for (int i = 0; i < 5000; ++i) {
    if (::flock(fd, LOCK_SH | LOCK_NB) == 0) return true;
    if (errno != EWOULDBLOCK && errno != EINTR) return false;
    ::usleep(1000);
  }
  return false;
}

/// Whether the opened state `st` is one this process must not use, with `error` saying why: not a
/// regular file, another user's, or open to group or others. Another user could otherwise make
/// the state first (a mode 0666 object of the default name `cudasim-<uid>`) and read and change
/// the victim's simulated devices, process-shared mutexes included (issue 42, A5). Tables refuse
/// the same (docs/design.md, "Trust").
bool foreign_state(const struct stat& st, const std::string& name, std::string& error) {
  const unsigned mode = st.st_mode & 07777u;
  if (S_ISREG(st.st_mode) && st.st_uid == ::geteuid() && (mode & 077u) == 0) return false;
  char octal[8];
  std::snprintf(octal, sizeof octal, "%04o", mode);
  error = "refusing the shared state /dev/shm" + name + ": it " +
          (!S_ISREG(st.st_mode)
               ? std::string("is not a regular file")
               : "belongs to uid " + std::to_string(st.st_uid) + " with mode " + octal) +
          ", and cudasim uses only a state of its own user (uid " + std::to_string(::geteuid()) +
          ") with no group or other permissions, which no other user can read or change; set "
          "CUDASIM_STATE to another name, or have its owner remove it (gpushare clean --cudasim " +
          name.substr(1) + ")";
  return true;
}

/// Opens the state object `name` ("/..."), creating it (empty) if there is none, and takes the
/// shared lock; starts again when a cleaner removed the name in between, so that the object
/// returned is the one the name refers to while the lock is held. -1 with `error` on failure.
int open_state(const std::string& name, bool& creator, std::string& error) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    creator = false;
    int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0)
      creator = true;
    else if (errno == EEXIST)
      fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && errno == ENOENT) continue; // removed between the two opens
    if (fd < 0) {
      error = "cannot open the shared state /dev/shm" + name + ": " + std::strerror(errno);
      return -1;
    }
    if (cfg().open_delay_ns > 0) sleep_until(now_ns() + cfg().open_delay_ns); // fault injection
    if (!lock_shared(fd)) {
      error = "cannot lock the shared state /dev/shm" + name + ": " +
              (errno == EWOULDBLOCK ? "a cleaner (gpushare clean --cudasim) has held it for 5 s; "
                                      "resume or kill it"
                                    : std::string(std::strerror(errno)));
      ::close(fd);
      return -1;
    }
    struct stat mine {
    }, named{};
    if (::fstat(fd, &mine) == 0 && ::stat(("/dev/shm" + name).c_str(), &named) == 0 &&
        mine.st_dev == named.st_dev && mine.st_ino == named.st_ino) {
      if (!foreign_state(mine, name, error)) return fd;
      ::close(fd);
      return -1;
    }
    ::close(fd); // the name was removed meanwhile: use what it names now
  }
  error = "the shared state /dev/shm" + name + " was removed 1000 times while opening it";
  return -1;
}

} // namespace

shared::shared() {
  const config& c = cfg();
  const std::string name = "/" + c.state;
  const std::size_t size = sizeof(layout);
  bool creator = false;
  const int fd = open_state(name, creator, error_);
  if (fd < 0) return;
  auto fail_with = [&](std::string why) {
    error_ = std::move(why);
    ::close(fd); // drops the lock: this process does not use the state
  };
  if (creator && ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    fail_with("cannot size the shared state /dev/shm" + name + ": " + std::strerror(errno));
    return;
  }
  // A creator may still be sizing the object: wait for it briefly.
  struct stat st {};
  for (int i = 0; i < 5000 && ::fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) < size;
       ++i)
    ::usleep(1000);
  if (static_cast<std::size_t>(st.st_size) != size) {
    fail_with("the shared state /dev/shm" + name +
              " has the wrong size (another cudasim version, or not cudasim's): remove it "
              "(gpushare clean --cudasim --force " +
              c.state + ") or set CUDASIM_STATE to another name");
    return;
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    fail_with("cannot map the shared state /dev/shm" + name + ": " + std::strerror(errno));
    return;
  }
  auto* l = static_cast<layout*>(p);
  if (creator) {
    init_layout(l, c);
  } else {
    for (int i = 0; i < 5000 && l->ready.load(std::memory_order_acquire) == 0; ++i) ::usleep(1000);
    if (l->ready.load(std::memory_order_acquire) == 0 || l->magic != state_magic ||
        l->version != state_version) {
      ::munmap(p, size);
      fail_with("the shared state /dev/shm" + name +
                " is not a usable cudasim state (its creator died, or another version made it): "
                "remove it (gpushare clean --cudasim --force " +
                c.state + ") or set CUDASIM_STATE to another name");
      return;
    }
  }
  fd_ = fd; // kept open for the process's life: its lock says the state is in use
  base_ = l;
  describe_units(c);
}

void shared::init_layout(layout* l, const config& c) {
  l->magic = state_magic;
  l->version = state_version;
  pthread_mutexattr_t a;
  ::pthread_mutexattr_init(&a);
  ::pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  ::pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  ::pthread_mutex_init(&l->lock, &a);
  ::pthread_mutexattr_destroy(&a);
  l->gpus = c.gpus;
  l->mig = c.mig;
  l->units = c.units();
  l->slice_ns = c.slice_ns;
  l->teardown_ns = c.teardown_ns;
  for (int u = 0; u < l->units; ++u) {
    l->total[u] = c.mig > 0 ? c.memory / static_cast<std::uint64_t>(c.mig) : c.memory;
    l->dev[u].owner = -1;
  }
  l->ready.store(1, std::memory_order_release);
}

void shared::describe_units(const config& c) {
  const layout* l = base_;
  for (int u = 0; u < l->units; ++u) {
    unit_info info;
    info.index = u;
    info.gpu = l->mig > 0 ? u / l->mig : u;
    info.mig = l->mig > 0 ? u % l->mig : -1;
    uuid_bytes(c.state + "/" + std::to_string(u), info.raw);
    info.uuid = format_uuid(info.mig >= 0 ? "MIG" : "GPU", info.raw);
    info.total = l->total[u];
    units_.push_back(info);
  }
  for (int g = 0; g < l->gpus; ++g) { // a MIG-mode GPU's own UUID: a hash of its own
    gpu_info gpu;
    gpu.index = g;
    for (const auto& u : units_)
      if (u.gpu == g) gpu.units.push_back(u.index);
    if (l->mig > 0) {
      unsigned char raw[16];
      uuid_bytes(c.state + "/gpu" + std::to_string(g), raw);
      gpu.uuid = format_uuid("GPU", raw);
    } else {
      gpu.uuid = units_[static_cast<std::size_t>(g)].uuid;
    }
    gpus_.push_back(gpu);
  }
}

void shared::sweep(std::uint64_t now) {
  layout* l = base_;
  if (now - l->last_sweep < 1'000'000) return;
  l->last_sweep = now;
  for (int i = 0; i < max_contexts; ++i) {
    auto& x = l->ctx[i];
    if (x.state == ctx_live && !alive(x.pid, x.started)) {
      // A dead process's kernels end (the driver tears its context down): its turn ends now.
      schedule(x.unit, now);
      x.state = ctx_dead;
      x.dead_since = now;
      if (l->dev[x.unit].owner == i) hand_over(x.unit, now);
    }
    if (x.state == ctx_dead && now - x.dead_since >= l->teardown_ns) {
      x = {};
    }
  }
}

int shared::open_context(int unit, std::uint64_t bytes) {
  guard g(base_);
  const std::uint64_t now = now_ns();
  base_->last_sweep = 0;
  sweep(now);
  if (used_locked(unit) + bytes > base_->total[unit]) return -1;
  for (int i = 0; i < max_contexts; ++i) {
    auto& x = base_->ctx[i];
    if (x.state != ctx_free) continue;
    x.state = ctx_live;
    x.pid = ::getpid();
    x.started = start_time(x.pid);
    x.unit = unit;
    x.bytes = bytes;
    x.dead_since = 0;
    x.device_ns = x.need_ns = x.switches = 0;
    return i;
  }
  return -1;
}

std::uint64_t shared::used_locked(int unit) const {
  std::uint64_t used = 0;
  for (const auto& x : base_->ctx)
    if (x.state != ctx_free && x.unit == unit) used += x.bytes;
  return used;
}

void shared::close_context(int slot) {
  guard g(base_);
  auto& x = base_->ctx[slot];
  if (x.state != ctx_live || x.pid != ::getpid()) return;
  const std::uint64_t now = now_ns();
  schedule(x.unit, now);
  x.need_ns = x.device_ns; // nothing left to run: its turn ends now
  if (base_->dev[x.unit].owner == slot) hand_over(x.unit, now);
  x = {};
}

bool shared::charge(int slot, std::uint64_t bytes) {
  guard g(base_);
  sweep(now_ns());
  auto& x = base_->ctx[slot];
  if (used_locked(x.unit) + bytes > base_->total[x.unit]) return false;
  x.bytes += bytes;
  return true;
}

void shared::uncharge(int slot, std::uint64_t bytes) {
  guard g(base_);
  auto& x = base_->ctx[slot];
  x.bytes -= std::min(x.bytes, bytes);
}

memory_info shared::memory(int unit) {
  guard g(base_);
  sweep(now_ns());
  return {base_->total[unit], used_locked(unit)};
}

std::vector<process_usage> shared::processes(int unit) {
  guard g(base_);
  sweep(now_ns());
  std::vector<process_usage> out;
  for (const auto& x : base_->ctx)
    if (x.state != ctx_free && x.unit == unit) out.push_back({x.pid, x.bytes});
  return out;
}

} // namespace cudasim
