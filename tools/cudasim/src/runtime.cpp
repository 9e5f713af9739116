// SPDX-License-Identifier: Apache-2.0
#include "runtime.hpp"

#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "capture.hpp"
#include "config.hpp"
#include "shared.hpp"

namespace cudasim {

void completion::finish(std::uint64_t t) {
  {
    std::lock_guard<std::mutex> lock(m);
    done = true;
    at = t;
  }
  cv.notify_all();
}

bool completion::ready() {
  std::lock_guard<std::mutex> lock(m);
  return done;
}

void completion::wait() {
  std::unique_lock<std::mutex> lock(m);
  cv.wait(lock, [this] { return done; });
}

namespace {
thread_local int tl_device = 0;
thread_local cudaError_t tl_last_error = cudaSuccess;
thread_local std::map<int, stream_obj*> tl_per_thread;
thread_local cudaStreamCaptureMode tl_capture_mode = cudaStreamCaptureModeGlobal;
constexpr std::uint64_t pool_granule = 2ull << 20;

std::uint64_t round_up(std::uint64_t v, std::uint64_t to) { return (v + to - 1) / to * to; }

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

/// CUDA_VISIBLE_DEVICES: indices or UUIDs (or unique UUID prefixes); the first entry that names
/// no device ends the list (documented), and a device listed twice hides all (observed).
std::vector<int> visible(const std::vector<unit_info>& units, int mig) {
  std::vector<int> all;
  for (const auto& u : units) all.push_back(u.index);
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  std::vector<int> out;
  if (!env) {
    out = all;
  } else {
    std::string rest(env);
    std::size_t start = 0;
    while (start <= rest.size()) {
      const std::size_t comma = rest.find(',', start);
      const std::string token =
          trim(rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      start = comma == std::string::npos ? rest.size() + 1 : comma + 1;
      int found = -1;
      if (!token.empty() && token.find_first_not_of("0123456789") == std::string::npos) {
        const long index = std::strtol(token.c_str(), nullptr, 10);
        // In MIG mode an index names a GPU; its first instance is what CUDA can use.
        for (const auto& u : units)
          if ((mig > 0 ? (u.gpu == index && u.mig == 0) : u.index == index)) found = u.index;
      } else if (token.size() > 4) {
        int matches = 0;
        for (const auto& u : units)
          if (u.uuid.compare(0, token.size(), token) == 0) {
            found = u.index;
            ++matches;
          }
        if (matches != 1) found = -1;
      }
      if (found < 0) break; // an entry that names no device ends the list
      if (std::find(out.begin(), out.end(), found) != out.end()) {
        out.clear(); // a device listed twice: no device at all (the driver's observed behaviour)
        break;
      }
      out.push_back(found);
    }
  }
  // A CUDA process can use one MIG instance at most: the first one it sees.
  if (mig > 0 && out.size() > 1) out = std::vector<int>{out.front()};
  return out;
}

void close_contexts_at_exit() {
  runtime& rt = runtime::get();
  if (rt.init_pid.load() != ::getpid()) return;
  std::lock_guard<std::mutex> lock(rt.mutex);
  for (auto& c : rt.contexts)
    if (c && c->slot >= 0) shared::get().close_context(c->slot);
}

} // namespace

int& current_device() { return tl_device; }

cudaStreamCaptureMode& thread_capture_mode() { return tl_capture_mode; }

cudaError_t fail(cudaError_t e) {
  if (e != cudaSuccess) tl_last_error = e;
  return e;
}

cudaError_t fail_unless_not_ready(cudaError_t e) { return e == cudaErrorNotReady ? e : fail(e); }

cudaError_t& last_error() { return tl_last_error; }

runtime& runtime::get() {
  static runtime* instance = new runtime();
  return *instance;
}

cudaError_t enter(const char* name, bool initialise) {
  runtime& rt = runtime::get();
  rt.api_calls.fetch_add(1, std::memory_order_relaxed); // counted in a forked child too
  const pid_t owner = rt.init_pid.load();
  if (owner != 0 && owner != ::getpid()) return cudaErrorInitializationError; // forked child
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    ++rt.calls_by_name[name];
  }
  return initialise ? rt.init() : cudaSuccess;
}

cudaError_t runtime::init() {
  std::lock_guard<std::mutex> lock(mutex);
  if (init_pid.load() == ::getpid()) return init_result;
  const config& c = cfg();
  if (!c.error.empty()) return cudaErrorInitializationError; // reported on stderr by cfg()
  shared& sh = shared::get();
  if (!sh.ok()) {
    static bool reported = false;
    if (!reported) std::fprintf(stderr, "cudasim: %s\n", sh.error().c_str());
    reported = true;
    return cudaErrorInitializationError;
  }
  int mig = 0;
  for (const auto& u : sh.units()) mig = std::max(mig, u.mig + 1);
  visible_units = visible(sh.units(), mig);
  for (std::size_t i = 0; i < visible_units.size(); ++i) {
    auto ctx = std::make_unique<context>();
    ctx->ordinal = static_cast<int>(i);
    ctx->unit = visible_units[i];
    ctx->default_pool.ctx = ctx.get();
    ctx->pools.push_back(&ctx->default_pool);
    contexts.push_back(std::move(ctx));
  }
  init_result = visible_units.empty() ? cudaErrorNoDevice : cudaSuccess;
  init_pid.store(::getpid());
  std::atexit(close_contexts_at_exit);
  return init_result;
}

cudaError_t runtime::context_of(int ordinal, bool create, context*& out) {
  if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= contexts.size())
    return cudaErrorInvalidDevice;
  context* ctx = contexts[static_cast<std::size_t>(ordinal)].get();
  if (create && ctx->slot < 0) {
    if (cfg().context_delay_ns > 0) {
      const std::uint64_t ns = cfg().context_delay_ns;
      timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
      ::nanosleep(&ts, nullptr);
    }
    const int slot = shared::get().open_context(ctx->unit, cfg().context_bytes);
    if (slot < 0) return cudaErrorMemoryAllocation;
    ctx->slot = slot;
    auto* legacy = new stream_obj();
    legacy->type = stream_obj::legacy;
    legacy->ctx = ctx;
    ctx->legacy = legacy;
    ctx->streams.push_back(legacy);
  }
  out = ctx;
  return cudaSuccess;
}

cudaError_t runtime::resolve(cudaStream_t handle, bool per_thread_default, stream_obj*& out) {
  if (handle == nullptr) handle = per_thread_default ? cudaStreamPerThread : cudaStreamLegacy;
  if (handle == cudaStreamLegacy || handle == cudaStreamPerThread) {
    context* ctx = nullptr;
    if (const cudaError_t e = context_of(tl_device, true, ctx); e != cudaSuccess) return e;
    if (handle == cudaStreamLegacy) {
      out = ctx->legacy;
      return cudaSuccess;
    }
    stream_obj*& mine = tl_per_thread[tl_device];
    if (!mine) {
      mine = new stream_obj();
      mine->type = stream_obj::per_thread;
      mine->ctx = ctx;
      ctx->streams.push_back(mine);
    }
    out = mine;
    return cudaSuccess;
  }
  auto* s = reinterpret_cast<stream_obj*>(handle);
  if (!streams.count(s) || s->destroyed) return cudaErrorInvalidResourceHandle;
  out = s;
  return cudaSuccess;
}

cudaError_t runtime::check_unsafe_call() {
  cudaStreamCaptureMode mode = thread_capture_mode();
  if (mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  const auto me = std::this_thread::get_id();
  std::vector<capture*> offending;
  for (capture* c : captures) {
    if (c->mode == cudaStreamCaptureModeRelaxed) continue;
    if (c->thread == me ||
        (mode == cudaStreamCaptureModeGlobal && c->mode == cudaStreamCaptureModeGlobal))
      offending.push_back(c);
  }
  if (offending.empty()) return cudaSuccess;
  for (capture* c : offending) c->invalidated = true;
  return cudaErrorStreamCaptureUnsupported;
}

cudaError_t runtime::check_legacy(stream_obj* s, bool invalidate) {
  if (s->type != stream_obj::legacy) return cudaSuccess;
  bool found = false;
  for (stream_obj* t : s->ctx->streams)
    if (t != s && t->cap && t->blocking()) {
      found = true;
      if (invalidate) t->cap->invalidated = true;
    }
  return found ? cudaErrorStreamCaptureImplicit : cudaSuccess;
}

done_ptr runtime::submit(stream_obj* s, work w) {
  // Called with `mutex` held.
  if (s->cap) {
    if (!s->cap->invalidated) capture_node(s, std::move(w));
    return nullptr;
  }
  std::vector<done_ptr> deps;
  if (w.wait_for) deps.push_back(w.wait_for);
  auto last_of = [](stream_obj* t) {
    std::lock_guard<std::mutex> lock(t->m);
    return t->last;
  };
  if (s->type == stream_obj::legacy) {
    for (stream_obj* t : s->ctx->streams)
      if (t != s && t->blocking())
        if (auto d = last_of(t)) deps.push_back(std::move(d));
  } else if (s->blocking()) {
    if (auto d = last_of(s->ctx->legacy)) deps.push_back(std::move(d));
  }
  auto done = std::make_shared<completion>();
  {
    std::lock_guard<std::mutex> lock(s->m);
    s->queue.push_back({std::move(w), std::move(deps), done});
    s->last = done;
    if (!s->worker) {
      s->worker = true;
      std::thread([this, s] { run_worker(s); }).detach();
    }
  }
  s->cv.notify_one();
  return done;
}

void runtime::run_worker(stream_obj* s) {
  // Kernels are sleeps: without this, Linux's default 50 us timer slack would lengthen every
  // short kernel by tens of microseconds.
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  for (;;) {
    stream_obj::item it;
    {
      std::unique_lock<std::mutex> lock(s->m);
      s->cv.wait(lock,
                 [s] { return !s->queue.empty() || (s->destroyed && s->blocked_launches == 0); });
      if (s->queue.empty()) { // destroyed, and all its work is done
        lock.unlock();
        if (retire(s)) return;
        continue;
      }
      it = std::move(s->queue.front());
      s->queue.pop_front();
    }
    s->space.notify_all();
    for (const auto& d : it.deps) d->wait();
    execute(s, it.w);
    it.done->finish(now_ns());
  }
}

bool runtime::retire(stream_obj* s) {
  std::lock_guard<std::mutex> lock(mutex); // no submission can come in while it is held
  {
    std::lock_guard<std::mutex> q(s->m);
    if (!s->queue.empty() || s->blocked_launches > 0) return false;
    s->worker = false;
  }
  // A stream destroyed while capturing stays, as its capture does (it still counts for the
  // capture rules); only its thread ends.
  if (!s->cap) forget(s);
  return true;
}

void runtime::forget(stream_obj* s) {
  auto& list = s->ctx->streams;
  list.erase(std::remove(list.begin(), list.end(), s), list.end());
  delete s;
}

void runtime::destroy_stream(stream_obj* s) {
  streams.erase(s);
  bool idle = false;
  {
    std::lock_guard<std::mutex> q(s->m);
    s->destroyed = true;
    idle = !s->worker; // never had work: no thread to end
  }
  if (!idle)
    s->cv.notify_all(); // the worker ends once its queue is done
  else if (!s->cap)
    forget(s);
}

void runtime::execute(stream_obj* s, work& w) {
  context* ctx = s->ctx;
  const bool faulted = ctx->sticky.load() != cudaSuccess;
  switch (w.kind) {
  case work::kernel: {
    if (faulted) return;
    shared::get().execute(ctx->unit, ctx->slot, w.ns);
    if (w.fault) {
      ctx->sticky.store(cudaErrorLaunchFailure);
      return;
    }
    if (w.execute) {
      std::vector<void*> argv;
      for (auto& a : w.args) argv.push_back(a.data());
      const cudasimLaunch launch{argv.data(), w.grid, w.block, w.shared_mem};
      w.execute(&launch);
    }
    ++kernels_done;
    kernel_ns += w.ns;
    return;
  }
  case work::host_fn:
    if (!faulted) w.fn(w.user);
    return;
  case work::copy:
    if (!faulted && w.bytes) std::memmove(w.dst, w.src, w.bytes);
    return;
  case work::copy2d:
    if (!faulted)
      for (std::size_t row = 0; row < w.height; ++row)
        std::memmove(static_cast<char*>(w.dst) + row * w.dpitch,
                     static_cast<const char*>(w.src) + row * w.spitch, w.width);
    return;
  case work::set:
    if (!faulted && w.bytes) std::memset(w.dst, w.value, w.bytes);
    return;
  case work::free_async:
  case work::graph_end: execute_memory_node(w); return;
  case work::alloc:
  case work::event_record:
  case work::wait: return;
  }
}

void runtime::execute_memory_node(const work& w) {
  std::lock_guard<std::mutex> lock(mutex);
  if (w.kind == work::graph_end) { // the launch no longer uses its allocations' memory
    for (void* p : w.allocs)
      if (auto it = allocations.find(p); it != allocations.end() && it->second.runs > 0)
        --it->second.runs;
    return;
  }
  auto it = allocations.find(w.ptr);
  if (it == allocations.end()) return;
  allocation& a = it->second;
  if (a.kind == allocation::async) {
    const std::uint64_t bytes = std::min<std::uint64_t>(a.pool->used, round_up(a.size, 512));
    a.pool->used -= bytes;
    a.pool->unobserved += bytes; // until a synchronisation observes it (release_pools)
    ::madvise(w.ptr, a.size, MADV_DONTNEED);
    allocations.erase(it);
  } else if (a.kind == allocation::graph) {
    a.live = false; // its memory stays in the graph pool (see trim_graph_memory)
  }
}

void runtime::wait(const done_ptr& d, bool blocking_sync) {
  if (!d) return;
  const std::uint64_t t0 = now_ns();
  d->wait();
  const std::uint64_t waited = now_ns() - t0;
  (blocking_sync ? blocking_wait_ns : spin_wait_ns) += waited;
}

void runtime::synchronize(context* ctx) {
  std::vector<done_ptr> pending;
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (stream_obj* t : ctx->streams) {
      std::lock_guard<std::mutex> l(t->m);
      if (t->last) pending.push_back(t->last);
    }
  }
  for (const auto& d : pending) wait(d, false);
}

void runtime::release_pools(context* ctx) {
  // Called with `mutex` held.
  for (pool_obj* p : ctx->pools) {
    p->unobserved = 0;
    if (p->reserved <= p->threshold) continue;
    const std::uint64_t keep = std::max(p->threshold, round_up(p->used, pool_granule));
    if (p->reserved > keep) {
      if (ctx->slot >= 0) shared::get().uncharge(ctx->slot, p->reserved - keep);
      p->reserved = keep;
    }
  }
}

cudaError_t runtime::back_graph_memory(context* ctx, const std::vector<void*>& ptrs) {
  // Called with `mutex` held. Physical memory is mapped for a launch's allocations that have
  // none (first launch, or after a trim), from the pool's unused reservation first.
  graph_pool& gp = ctx->graph_mem;
  std::uint64_t need = 0;
  std::vector<allocation*> todo;
  for (void* p : ptrs) {
    const auto it = allocations.find(p);
    if (it == allocations.end()) continue;
    todo.push_back(&it->second);
    if (!it->second.backed) need += round_up(it->second.size, 512);
  }
  if (gp.used + need > gp.reserved) {
    const std::uint64_t grow = round_up(gp.used + need - gp.reserved, pool_granule);
    if (!charge(ctx, grow)) return cudaErrorMemoryAllocation;
    gp.reserved += grow;
    gp.reserved_high = std::max(gp.reserved_high, gp.reserved);
  }
  for (allocation* a : todo) {
    a->backed = true;
    a->live = true;
    ++a->runs; // until the launch's graph_end
  }
  gp.used += need;
  gp.used_high = std::max(gp.used_high, gp.used);
  return cudaSuccess;
}

void runtime::trim_graph_memory(context* ctx, const std::vector<void*>* only, bool release) {
  // Called with `mutex` held. In use: allocations not freed yet, and those of launches
  // scheduled or running (cudaDeviceGraphMemTrim's documentation).
  for (auto& [p, a] : allocations) {
    if (a.kind != allocation::graph || !a.backed || a.live || a.runs > 0) continue;
    if (ctx && a.ctx != ctx) continue;
    if (only && std::find(only->begin(), only->end(), p) == only->end()) continue;
    a.backed = false;
    graph_pool& gp = a.ctx->graph_mem;
    gp.used -= std::min<std::uint64_t>(gp.used, round_up(a.size, 512));
  }
  if (!release || !ctx) return;
  graph_pool& gp = ctx->graph_mem;
  const std::uint64_t keep = round_up(gp.used, pool_granule);
  if (gp.reserved > keep) {
    if (ctx->slot >= 0) shared::get().uncharge(ctx->slot, gp.reserved - keep);
    gp.reserved = keep;
  }
}

bool runtime::charge(context* ctx, std::uint64_t bytes) {
  // Called with `mutex` held.
  const config& c = cfg();
  ++allocation_calls;
  if (allocation_calls > c.fail_alloc_after_calls) return false;
  if (c.fail_alloc_after_bytes != UINT64_MAX &&
      (allocated_bytes + bytes > c.fail_alloc_after_bytes))
    return false;
  if (!shared::get().charge(ctx->slot, bytes)) return false;
  allocated_bytes += bytes;
  return true;
}

void* map_memory(std::size_t bytes) {
  void* p = ::mmap(nullptr, std::max<std::size_t>(bytes, 1), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void unmap_memory(void* p, std::size_t bytes) { ::munmap(p, std::max<std::size_t>(bytes, 1)); }

} // namespace cudasim
