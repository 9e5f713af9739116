# SPDX-License-Identifier: Apache-2.0
"""gpushare.torch's helpers against a fake, minimal ``torch`` module put in sys.modules: which
PyTorch functions they call, in which order, with which arguments. The allocator library is
replaced by a fake too, so these run anywhere (no PyTorch, no CUDA). The same helpers against a
real CUDA build of PyTorch: test_torch_gpu.py."""

import contextlib
import subprocess
import sys
import time
import types

import pytest

import gpushare.torch as gt

GiB = 1 << 30
MiB = 1 << 20


class FakeNative:
    """Stands for libgpushare_torch_alloc.so (gpushare.torch._Native)."""

    path = "/fake/lib/libgpushare_torch_alloc.so"

    def __init__(self, calls, limit=8 * GiB, overhead=512 * MiB):
        self.calls = calls
        self.limit = limit
        self.overhead = overhead

    def configure(self, text):
        self.calls.append(("configure", text))

    def open(self, device):
        self.calls.append(("open", device))

    def stats(self, device):
        return {"memory_limit": self.limit, "context_overhead": self.overhead}

    def synchronize(self, device):
        self.calls.append(("synchronize", device))

    def set_external_usage(self, device, nbytes):
        self.calls.append(("set_external_usage", device, nbytes))


def fake_torch(calls, mem_pool=True, swap_error=None):
    torch = types.ModuleType("torch")
    cuda = types.ModuleType("torch.cuda")
    memory = types.ModuleType("torch.cuda.memory")
    torch.cuda, cuda.memory, torch.__version__ = cuda, memory, "0.0-fake"
    torch.reserved = 0

    class CUDAPluggableAllocator:
        def __init__(self, path, alloc_fn_name, free_fn_name):
            calls.append(("CUDAPluggableAllocator", path, alloc_fn_name, free_fn_name))
            self.raw = object()

        def allocator(self):
            return self.raw

    memory.CUDAPluggableAllocator = CUDAPluggableAllocator

    def change_current_allocator(allocator):
        calls.append(("change_current_allocator", allocator))
        if swap_error:
            raise RuntimeError(swap_error)

    memory.change_current_allocator = change_current_allocator
    if mem_pool:

        class MemPool:
            def __init__(self, allocator=None):
                calls.append(("MemPool", allocator))

        @contextlib.contextmanager
        def use_mem_pool(pool, device=None):
            calls.append(("use_mem_pool", pool, device))
            yield
            calls.append(("use_mem_pool exit",))

        cuda.MemPool, cuda.use_mem_pool = MemPool, use_mem_pool
    cuda.current_device = lambda: 0
    cuda.device_count = lambda: 1
    cuda.empty_cache = lambda: calls.append(("empty_cache",))
    cuda.set_per_process_memory_fraction = lambda f, device=None: calls.append(
        ("set_per_process_memory_fraction", f, device)
    )
    cuda.memory_reserved = lambda device=None: torch.reserved
    cuda.get_device_properties = lambda d: types.SimpleNamespace(total_memory=80 * GiB)
    return torch


@pytest.fixture
def calls(monkeypatch):
    """The calls the helpers make, with a fresh fake library and no allocator made yet."""
    log = []
    monkeypatch.setattr(gt, "_native_instance", FakeNative(log))
    monkeypatch.setattr(gt, "_configured", None)
    monkeypatch.setattr(gt, "_allocator", None)
    return log


def use_torch(monkeypatch, torch):
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


def test_budgeted_pool_routes_through_a_mempool_of_the_pluggable_allocator(calls, monkeypatch):
    torch = use_torch(monkeypatch, fake_torch(calls))
    with gt.budgeted_pool(memory_limit="2GiB", name="trainer") as p:
        calls.append(("body",))
    allocator = p.allocator
    assert isinstance(allocator, torch.cuda.memory.CUDAPluggableAllocator)
    assert calls == [
        ("configure", "memory_limit=2GiB;name=trainer"),
        ("open", 0),
        ("CUDAPluggableAllocator", FakeNative.path, "gpushare_torch_malloc", "gpushare_torch_free"),
        ("MemPool", allocator.raw),
        ("use_mem_pool", p.pool, 0),
        ("body",),
        ("use_mem_pool exit",),
    ]
    # The same settings again: not configured again, the same allocator, a new pool, device 1.
    del calls[:]
    with gt.budgeted_pool(device=1, memory_limit="2GiB", name="trainer") as q:
        pass
    assert q.allocator is allocator and q.device == 1
    assert calls == [
        ("open", 1),
        ("MemPool", allocator.raw),
        ("use_mem_pool", q.pool, 1),
        ("use_mem_pool exit",),
    ]


def test_budgeted_pool_turns_expandable_segments_off_inside(calls, monkeypatch):
    torch = use_torch(monkeypatch, fake_torch(calls))
    torch.cuda.memory._set_allocator_settings = lambda s: calls.append(("settings", s))
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    with gt.budgeted_pool() as p:
        calls.append(("body",))
    assert calls[-5:] == [
        ("settings", "expandable_segments:False"),
        ("use_mem_pool", p.pool, 0),
        ("body",),
        ("use_mem_pool exit",),
        ("settings", "expandable_segments:True"),
    ]
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    del calls[:]
    with gt.budgeted_pool():
        pass
    assert not any(c[0] == "settings" for c in calls)


def test_budgeted_pool_without_mempool_names_the_alternatives(calls, monkeypatch):
    use_torch(monkeypatch, fake_torch(calls, mem_pool=False))
    with pytest.raises(RuntimeError, match=r"MemPool.*0\.0-fake.*install\(\)"):
        with gt.budgeted_pool():
            pass
    assert calls == []


def test_install_swaps_the_process_allocator(calls, monkeypatch):
    use_torch(monkeypatch, fake_torch(calls))
    allocator = gt.install(alloc_timeout="500ms")
    assert calls == [
        ("configure", "alloc_timeout=500ms"),
        ("CUDAPluggableAllocator", FakeNative.path, "gpushare_torch_malloc", "gpushare_torch_free"),
        ("change_current_allocator", allocator),
    ]


def test_install_after_cuda_use_says_to_call_it_first(calls, monkeypatch):
    swap_error = "Can't swap an already initialized allocator"
    use_torch(monkeypatch, fake_torch(calls, swap_error=swap_error))
    with pytest.raises(RuntimeError) as e:
        gt.install()
    assert "must be called before PyTorch's first CUDA allocation" in str(e.value)
    assert "Can't swap an already initialized allocator" in str(e.value)


def test_budget_mode_caps_the_caching_allocator_and_publishes_reserved(calls, monkeypatch):
    torch = use_torch(monkeypatch, fake_torch(calls))
    torch.reserved = 3 * GiB
    mode = gt.budget_mode({"memory_limit": "8GiB"}, interval=0)
    expected = (8 * GiB - 512 * MiB) / (80 * GiB)
    assert mode.fraction == pytest.approx(expected)
    assert calls == [
        ("configure", "memory_limit=8GiB"),
        ("open", 0),
        ("set_per_process_memory_fraction", pytest.approx(expected), 0),
        ("set_external_usage", 0, 3 * GiB),
    ]
    torch.reserved = 5 * GiB
    assert mode.publish() == 5 * GiB
    assert calls[-1] == ("set_external_usage", 0, 5 * GiB)
    assert mode._thread is None  # interval 0: published only when asked
    mode.stop()


class FakeSession:
    def __init__(self, limit):
        self.memory_limit = limit
        self.published = []

    def set_external_usage(self, nbytes):
        self.published.append(nbytes)


def test_budget_mode_with_a_session_publishes_from_a_daemon_thread(calls, monkeypatch):
    torch = use_torch(monkeypatch, fake_torch(calls))
    torch.reserved = 1 * GiB
    session = FakeSession(20 * GiB)
    with gt.budget_mode(session, device=0, interval=0.01) as mode:
        assert mode.fraction == pytest.approx(0.25)
        assert mode._thread.daemon
        torch.reserved = 2 * GiB
        deadline = time.monotonic() + 30
        while 2 * GiB not in session.published and time.monotonic() < deadline:
            time.sleep(0.01)
    assert session.published[0] == 1 * GiB and 2 * GiB in session.published
    assert mode._thread is None
    count = len(session.published)
    time.sleep(0.05)
    assert len(session.published) == count, "stop() ended the publishing thread"
    assert ("set_per_process_memory_fraction", pytest.approx(0.25), 0) in calls
    assert not any(c[0] in ("configure", "open") for c in calls)


def test_budget_mode_reads_the_limit_from_a_session_info(calls, monkeypatch):
    use_torch(monkeypatch, fake_torch(calls))

    class InfoSession:
        def info(self):
            return types.SimpleNamespace(memory_limit=40 * GiB)

        def set_external_usage(self, nbytes):
            calls.append(("published", nbytes))

    mode = gt.budget_mode(InfoSession(), interval=0)
    assert mode.fraction == pytest.approx(0.5)
    assert calls[-1] == ("published", 0)


def test_a_session_without_a_limit_is_refused(calls, monkeypatch):
    use_torch(monkeypatch, fake_torch(calls))

    class NoLimit:
        def set_external_usage(self, nbytes):
            pass

    with pytest.raises(TypeError, match="memory_limit"):
        gt.budget_mode(NoLimit(), interval=0)


def test_without_torch_the_helpers_raise_import_error(calls, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # "import torch" raises ImportError
    for call in (lambda: gt.install(), lambda: gt.budget_mode(None), gt.empty_cache):
        with pytest.raises(ImportError, match="needs PyTorch"):
            call()
    with pytest.raises(ImportError, match="needs PyTorch"):
        with gt.budgeted_pool():
            pass
    assert calls == []


def test_settings_are_checked_before_the_library_sees_them(calls):
    with pytest.raises(TypeError, match="unknown gpushare setting 'limit'"):
        gt.configure(limit="1GiB")
    with pytest.raises(ValueError, match="may not contain"):
        gt.configure(name="a;b")
    gt.configure(sync_on_free=True, memory_limit=1 << 30)
    assert calls == [("configure", "memory_limit=1073741824;sync_on_free=1")]


def test_empty_cache_returns_the_frees_of_open_sessions(calls, monkeypatch):
    use_torch(monkeypatch, fake_torch(calls))
    gt.empty_cache()
    assert calls == [("empty_cache",), ("synchronize", 0)]


def test_the_module_imports_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import gpushare.torch as gt\n"
        "assert callable(gt.budgeted_pool)\n"
        "print('imported')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "imported", out.stderr
