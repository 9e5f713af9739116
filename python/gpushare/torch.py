# SPDX-License-Identifier: Apache-2.0
"""PyTorch memory under a gpushare budget (docs/python.md, "PyTorch").

Three ways, from the most to the least precise:

* ``budgeted_pool(device=None, **settings)``: a ``with`` block whose CUDA allocations (on the
  calling thread) come from a ``torch.cuda.MemPool`` backed by gpushare's allocator; every
  segment PyTorch takes is charged to this process's gpushare session for the device, and an
  allocation over the budget raises ``torch.cuda.OutOfMemoryError``. Needs PyTorch with
  ``torch.cuda.MemPool`` and ``torch.cuda.use_mem_pool``.
* ``install(**settings)``: the same allocator for the whole process
  (``torch.cuda.memory.change_current_allocator``); must run before PyTorch's first CUDA
  allocation. No caching: see the limitations in docs/python.md.
* ``budget_mode(session_or_settings=None, device=None, interval=1.0)``: PyTorch keeps its own
  caching allocator, capped at the session's memory limit
  (``torch.cuda.set_per_process_memory_fraction``), and PyTorch's reserved memory is published as
  the session's external usage, every ``interval`` seconds from a daemon thread and at each
  ``publish()``.

Settings (keyword arguments): name, memory_limit, memory_guarantee, priority, domain, capacity,
headroom, alloc_timeout, sync_on_free. Amounts take bytes (int) or the GPUSHARE_* forms
("2GiB", "25%"); a setting not given takes its GPUSHARE_* variable. alloc_timeout defaults to 0:
an allocation over the budget fails at once (PyTorch then frees its cache and retries, and raises
its out-of-memory error) rather than waiting with Python's GIL held.

Importing this module needs neither PyTorch nor a GPU; its functions that use PyTorch raise
ImportError when PyTorch is missing.
"""

import contextlib
import ctypes
import os
import threading

__all__ = [
    "budgeted_pool",
    "install",
    "budget_mode",
    "BudgetMode",
    "BudgetedPool",
    "configure",
    "stats",
    "synchronize",
    "empty_cache",
    "shutdown",
    "library_path",
    "set_library_path",
    "last_error",
    "GpushareTorchError",
]

LIBRARY_NAME = "libgpushare_torch_alloc.so"
MALLOC_NAME = "gpushare_torch_malloc"
FREE_NAME = "gpushare_torch_free"
SETTINGS = (
    "name",
    "memory_limit",
    "memory_guarantee",
    "priority",
    "domain",
    "capacity",
    "headroom",
    "alloc_timeout",
    "sync_on_free",
)


_lock = threading.RLock()
_native_instance = None


class GpushareTorchError(RuntimeError):
    """A call of gpushare's PyTorch allocator failed; the message says why."""


_library_override = None


def set_library_path(path):
    """Uses the allocator library at `path` instead of the one beside this module (before the
    first call that loads it)."""
    global _library_override
    if not os.path.isfile(path):
        raise FileNotFoundError("gpushare.torch.set_library_path: %r is not a file" % (path,))
    with _lock:
        if _native_instance is not None and _native_instance.path != path:
            raise RuntimeError(
                "gpushare.torch already loaded %s; set_library_path() must come first"
                % _native_instance.path
            )
        _library_override = path


def library_path():
    """The allocator's shared library: the one given to set_library_path(), else the file
    installed beside this module (the build copies it to <build>/python/gpushare/)."""
    if _library_override is not None:
        return _library_override
    beside = os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY_NAME)
    if not os.path.isfile(beside):
        raise FileNotFoundError(
            "%s is not installed beside gpushare.torch (%s): gpushare was built without the "
            "CUDA toolkit, or the library was not installed; build the target "
            "gpushare_torch_alloc, or give its path to gpushare.torch.set_library_path()"
            % (LIBRARY_NAME, os.path.dirname(beside))
        )
    return beside


class _Stats(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "allocated",
            "allocations",
            "failed_mallocs",
            "failed_frees",
            "charged",
            "external",
            "memory_limit",
            "context_overhead",
            "device_total",
        )
    ]


class _Native:
    """The C API of libgpushare_torch_alloc.so (gpushare_torch_alloc.h), through ctypes."""

    def __init__(self, path):
        self.path = path
        lib = ctypes.CDLL(path)
        lib.gpushare_torch_configure.argtypes = [ctypes.c_char_p]
        lib.gpushare_torch_open.argtypes = [ctypes.c_int]
        lib.gpushare_torch_get_stats.argtypes = [ctypes.c_int, ctypes.POINTER(_Stats)]
        lib.gpushare_torch_synchronize.argtypes = [ctypes.c_int]
        lib.gpushare_torch_set_external_usage.argtypes = [ctypes.c_int, ctypes.c_uint64]
        lib.gpushare_torch_last_error.restype = ctypes.c_char_p
        self.lib = lib

    def _check(self, rc, what):
        if rc < 0:
            reason = self.lib.gpushare_torch_last_error().decode("utf-8", "replace")
            raise GpushareTorchError("%s: %s" % (what, reason))
        return rc

    def configure(self, text):
        self._check(self.lib.gpushare_torch_configure(text.encode()), "configure")

    def open(self, device):
        what = "opening the session of device %d" % device
        self._check(self.lib.gpushare_torch_open(device), what)

    def stats(self, device):
        out = _Stats()
        rc = self._check(self.lib.gpushare_torch_get_stats(device, ctypes.byref(out)), "stats")
        return None if rc == 1 else {name: getattr(out, name) for name, _ in _Stats._fields_}

    def synchronize(self, device):
        self._check(self.lib.gpushare_torch_synchronize(device), "synchronize")

    def set_external_usage(self, device, nbytes):
        self._check(
            self.lib.gpushare_torch_set_external_usage(device, int(nbytes)), "set_external_usage"
        )

    def shutdown(self):
        self._check(self.lib.gpushare_torch_shutdown(), "shutdown")


_configured = None  # the settings text last given to configure(), None before any
_allocator = None  # one CUDAPluggableAllocator for the process, never released (pytorch#146431)


def _native():
    global _native_instance
    with _lock:
        if _native_instance is None:
            _native_instance = _Native(library_path())
        return _native_instance


def _settings_text(settings):
    parts = []
    for key in sorted(settings):
        value = settings[key]
        if key not in SETTINGS:
            raise TypeError(
                "unknown gpushare setting %r; the settings are %s" % (key, ", ".join(SETTINGS))
            )
        if isinstance(value, bool):
            value = "1" if value else "0"
        value = str(value)
        if any(c in value for c in ";,="):
            raise ValueError(
                "gpushare setting %s=%r may not contain ';', ',' or '='" % (key, value)
            )
        parts.append("%s=%s" % (key, value))
    return ";".join(parts)


def configure(**settings):
    """Sets the settings of the sessions the allocator opens from now on (see the module's
    docstring). Fails while sessions are open: call shutdown() first."""
    global _configured
    text = _settings_text(settings)
    with _lock:
        _native().configure(text)
        _configured = text


def _apply_settings(settings):
    """configure(**settings) unless they are those already in force (none given: leave them)."""
    if settings and _settings_text(settings) != _configured:
        configure(**settings)


def last_error():
    """What the allocator's last failing call on this thread reported ("" if none): after
    torch.cuda.OutOfMemoryError in a budgeted pool, why gpushare refused the memory."""
    return _native().lib.gpushare_torch_last_error().decode("utf-8", "replace")


def stats(device=0):
    """What the allocator charged on `device`: a dict (allocated, allocations, failed_mallocs,
    failed_frees, charged, external, memory_limit, context_overhead, device_total), or None when
    no session is open there."""
    return _native().stats(device)


def synchronize(device=0):
    """Waits for the allocator's frees in flight on `device` and returns their bytes to the
    budget (stream-ordered frees are otherwise returned lazily)."""
    _native().synchronize(device)


def shutdown():
    """Closes the allocator's sessions; fails while its allocations are live."""
    global _configured
    with _lock:
        _native().shutdown()
        _configured = None


def _torch():
    try:
        import torch  # noqa: PLC0415 (imported on use: gpushare does not need PyTorch)
    except ImportError as e:
        raise ImportError(
            "this gpushare.torch function needs PyTorch, which is not installed here (%s); "
            "install a CUDA build of PyTorch" % e
        ) from e
    return torch


def _device_index(torch, device):
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if getattr(device, "type", "cuda") != "cuda":
        raise ValueError("gpushare.torch: %r is not a CUDA device" % (device,))
    index = getattr(device, "index", None)
    return torch.cuda.current_device() if index is None else index


def _pluggable_allocator(torch):
    global _allocator
    with _lock:
        if _allocator is None:
            _allocator = torch.cuda.memory.CUDAPluggableAllocator(
                _native().path, MALLOC_NAME, FREE_NAME
            )
        return _allocator


def empty_cache():
    """torch.cuda.empty_cache(), then the allocator's frees are returned to the budget on every
    device it has a session on. Segments of a MemPool are freed once the pool is gone (the
    budgeted_pool block has ended and its handle is dropped) and none of its tensors is left."""
    torch = _torch()
    torch.cuda.empty_cache()
    for device in range(torch.cuda.device_count()):
        if _native().stats(device) is not None:
            _native().synchronize(device)


class BudgetedPool:
    """What ``with budgeted_pool(...) as p`` gives: the device, the torch.cuda.MemPool and the
    allocator. Keep it only as long as the pool should keep its cached segments."""

    def __init__(self, device, pool, allocator):
        self.device = device
        self.pool = pool
        self.allocator = allocator

    def stats(self):
        return stats(self.device)


@contextlib.contextmanager
def budgeted_pool(device=None, **settings):
    """Routes the calling thread's CUDA allocations on `device` (default: the current device)
    through a MemPool whose segments gpushare's allocator charges to the device's session.
    Threads PyTorch starts itself (autograd's backward threads) are not routed."""
    torch = _torch()
    if not (hasattr(torch.cuda, "MemPool") and hasattr(torch.cuda, "use_mem_pool")):
        raise RuntimeError(
            "gpushare.torch.budgeted_pool needs torch.cuda.MemPool and torch.cuda.use_mem_pool, "
            "which PyTorch %s lacks; upgrade PyTorch, or call gpushare.torch.install() before "
            "the first CUDA allocation, or use gpushare.torch.budget_mode()"
            % getattr(torch, "__version__", "?")
        )
    index = _device_index(torch, device)
    _apply_settings(settings)
    _native().open(index)  # a bad setting or a missing device fails here, with its reason
    allocator = _pluggable_allocator(torch)
    pool = torch.cuda.MemPool(allocator.allocator())
    handle = BudgetedPool(index, pool, allocator)
    with _without_expandable_segments(torch), torch.cuda.use_mem_pool(pool, device=index):
        yield handle


def _expandable_segments_on():
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        conf = os.environ.get(name, "").replace(" ", "").lower()
        if "expandable_segments:true" in conf:
            return True
    return False


@contextlib.contextmanager
def _without_expandable_segments(torch):
    """Expandable segments off inside a pluggable MemPool (pytorch#147851), as vLLM does, where
    the environment turned them on and PyTorch has the (private) setter."""
    setter = getattr(torch.cuda.memory, "_set_allocator_settings", None)
    if setter is None or not _expandable_segments_on():
        yield
        return
    setter("expandable_segments:False")
    try:
        yield
    finally:
        setter("expandable_segments:True")


def install(**settings):
    """Makes gpushare's allocator PyTorch's CUDA allocator for the whole process. Call it before
    anything allocates CUDA memory through PyTorch."""
    torch = _torch()
    _apply_settings(settings)
    allocator = _pluggable_allocator(torch)
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as e:
        raise RuntimeError(
            "gpushare.torch.install() must be called before PyTorch's first CUDA allocation "
            "(PyTorch cannot swap an allocator it has used, pytorch#140687); call it at the top "
            "of the program, or use gpushare.torch.budgeted_pool() or budget_mode(). PyTorch "
            "said: %s" % e
        ) from e
    return allocator


def _session_limit(session):
    """The memory limit of a Python gpushare session object (its memory_limit attribute, or
    that of its info())."""
    for source in (session, getattr(session, "info", None)):
        if callable(source) and source is not session:
            source = source()
        value = source.get("memory_limit") if isinstance(source, dict) else None
        value = getattr(source, "memory_limit", value)
        if callable(value):
            value = value()
        if value is not None:
            return int(value)
    raise TypeError(
        "budget_mode: %r has no memory_limit (as an attribute or in its info()); pass the "
        "settings instead" % (session,)
    )


class _NativeSession:
    """budget_mode's view of the allocator library's own session for a device."""

    def __init__(self, device):
        self.device = device
        _native().open(device)

    def limits(self):
        s = _native().stats(self.device)
        return s["memory_limit"], s["context_overhead"]

    def set_external_usage(self, nbytes):
        _native().set_external_usage(self.device, nbytes)


class BudgetMode:
    """PyTorch's caching allocator capped at a session's memory limit, its reserved memory
    published as the session's external usage. Made by budget_mode(); stop() ends the
    publishing thread (the cap stays)."""

    def __init__(self, torch, session, device, interval):
        self._torch = torch
        self.session = session
        self.device = device
        total = torch.cuda.get_device_properties(device).total_memory
        if isinstance(session, _NativeSession):
            limit, overhead = session.limits()
        else:
            limit, overhead = _session_limit(session), 0
        usable = max(0, limit - overhead)
        # The cap applies to what the caching allocator reserves; the context's overhead is
        # charged to the session besides.
        self.fraction = min(1.0, usable / total) if total else 1.0
        torch.cuda.set_per_process_memory_fraction(self.fraction, device)
        self.published = None
        self._stop = threading.Event()
        self._thread = None
        self.publish()
        if interval and interval > 0:
            self._thread = threading.Thread(
                target=self._run, args=(float(interval),), name="gpushare-budget-mode", daemon=True
            )
            self._thread.start()

    def publish(self):
        """Publishes torch.cuda.memory_reserved(device) as the session's external usage now;
        returns the bytes published."""
        reserved = int(self._torch.cuda.memory_reserved(self.device))
        self.session.set_external_usage(reserved)
        self.published = reserved
        return reserved

    def _run(self, interval):
        while not self._stop.wait(interval):
            try:
                self.publish()
            except Exception:  # noqa: BLE001 (the next round tries again; publish() reports)
                pass

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def budget_mode(session_or_settings=None, device=None, interval=1.0):
    """Caps PyTorch's caching allocator on `device` at the session's memory limit (less the
    context overhead it carries) and publishes PyTorch's reserved memory as the session's
    external usage: at once, then every `interval` seconds from a daemon thread (0 or None: only
    at explicit publish() calls). `session_or_settings`: a gpushare session object with
    set_external_usage() and a memory_limit (attribute or info()), or a dict of settings (or
    None) for the allocator library's own session on the device."""
    torch = _torch()
    index = _device_index(torch, device)
    if session_or_settings is not None and hasattr(session_or_settings, "set_external_usage"):
        session = session_or_settings
    else:
        _apply_settings(dict(session_or_settings or {}))
        session = _NativeSession(index)
    return BudgetMode(torch, session, index, interval)
