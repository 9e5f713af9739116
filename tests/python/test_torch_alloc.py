# SPDX-License-Identifier: Apache-2.0
"""gpushare's PyTorch allocator (python/torch_alloc/gpushare_torch_alloc.h), its C functions
called through ctypes, on the simulated CUDA runtime (docs/cudasim.md).

Each case runs in a child Python process started with cudasim first on LD_LIBRARY_PATH (the
loader reads it at start-up), a simulated device state and a gpushare domain of its own (both
removed afterwards), and two simulated GPUs. The child prints one JSON line of results.

Needs GPUSHARE_TEST_BUILD_DIR (a build with the CUDA toolkit: cudasim and the allocator built);
skipped by name otherwise.
"""

import glob
import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

BUILD = os.environ.get("GPUSHARE_TEST_BUILD_DIR", "")
LIBRARY = os.path.join(BUILD, "python", "gpushare", "libgpushare_torch_alloc.so")
CUDASIM_LIB = os.path.join(BUILD, "tools", "cudasim", "lib")
CLI = os.path.join(BUILD, "tools", "gpushare")
GiB = 1 << 30
MiB = 1 << 20

pytestmark = pytest.mark.skipif(
    not (BUILD and os.path.isfile(LIBRARY) and os.path.isdir(CUDASIM_LIB)),
    reason="needs GPUSHARE_TEST_BUILD_DIR with cudasim and libgpushare_torch_alloc.so built "
    "(a build with the CUDA toolkit)",
)

# The child's prologue: the library through ctypes, with the C signatures of the header.
PRELUDE = textwrap.dedent(
    """
    import ctypes, json, os, sys, threading
    lib = ctypes.CDLL(os.environ["TORCH_ALLOC_LIBRARY"])
    lib.gpushare_torch_malloc.restype = ctypes.c_void_p
    lib.gpushare_torch_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    lib.gpushare_torch_free.restype = None
    lib.gpushare_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                        ctypes.c_void_p]
    lib.gpushare_torch_configure.argtypes = [ctypes.c_char_p]
    lib.gpushare_torch_last_error.restype = ctypes.c_char_p
    lib.gpushare_torch_set_external_usage.argtypes = [ctypes.c_int, ctypes.c_uint64]
    FIELDS = ("allocated", "allocations", "failed_mallocs", "failed_frees", "charged",
              "external", "memory_limit", "context_overhead", "device_total")
    class Stats(ctypes.Structure):
        _fields_ = [(f, ctypes.c_uint64) for f in FIELDS]
    def stats(device):
        s = Stats()
        rc = lib.gpushare_torch_get_stats(device, ctypes.byref(s))
        return {"rc": rc, **{f: getattr(s, f) for f in FIELDS}}
    def error():
        return lib.gpushare_torch_last_error().decode()
    def configure(text):
        return lib.gpushare_torch_configure(text.encode())
    def done(**result):
        print(json.dumps(result), flush=True)
    GiB, MiB = 1 << 30, 1 << 20
    """
)

_counter = itertools.count()


class Sim:
    """A simulated device state and a gpushare domain of one test's own."""

    def __init__(self):
        tag = "%d-%d" % (os.getpid(), next(_counter))
        self.state = "pytorchalloc-" + tag
        self.domain = "pytorchalloc-" + tag

        self.extra_env = {}

    def env(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSHARE_", "CUDASIM_"))}
        env.update(
            LD_LIBRARY_PATH=CUDASIM_LIB,
            CUDASIM_STATE=self.state,
            CUDASIM_DEVICES="2",
            GPUSHARE_DOMAIN=self.domain,
            TORCH_ALLOC_LIBRARY=LIBRARY,
        )
        env.update(self.extra_env)
        return env

    def start(self, body):
        return subprocess.Popen(
            [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
            env=self.env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, body):
        child = self.start(body)
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, "child failed (%d): %s%s" % (child.returncode, out, err)
        return json.loads(out.strip().splitlines()[-1])

    def status(self):
        out = subprocess.run(
            [CLI, "status", "--json"], env=self.env(), capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def tables(self, domain=None):
        return glob.glob("/dev/shm/gpushare.%s.*" % (domain or self.domain))

    def cleanup(self):
        for path in self.tables() + self.tables(self.domain + "-set"):
            os.unlink(path)
        if os.path.exists("/dev/shm/" + self.state):
            os.unlink("/dev/shm/" + self.state)


@pytest.fixture
def sim():
    s = Sim()
    try:
        yield s
    finally:
        s.cleanup()


def test_an_allocation_is_charged_to_the_session_and_its_free_returns_it(sim):
    r = sim.run(
        """
        assert configure("name=charge-test;memory_limit=4GiB") == 0, error()
        p = lib.gpushare_torch_malloc(1 * GiB, 0, None)
        during = stats(0)
        lib.gpushare_torch_free(p, 1 * GiB, 0, None)
        after_free = stats(0)
        assert lib.gpushare_torch_synchronize(0) == 0, error()
        done(ptr=p or 0, during=during, after_free=after_free, after_sync=stats(0))
        """
    )
    assert r["ptr"] != 0
    assert r["during"]["rc"] == 0
    assert r["during"]["allocated"] == GiB and r["during"]["allocations"] == 1
    assert r["during"]["charged"] == GiB
    assert r["during"]["memory_limit"] == 4 * GiB
    assert r["after_free"]["allocated"] == 0 and r["after_free"]["allocations"] == 0
    assert r["after_sync"]["charged"] == 0
    assert r["after_sync"]["failed_mallocs"] == 0 and r["after_sync"]["failed_frees"] == 0


def test_the_table_shows_the_charge_to_other_processes(sim):
    child = sim.start(
        """
        assert configure("name=cli-visible") == 0, error()
        p = lib.gpushare_torch_malloc(96 * MiB, 0, None)
        done(ptr=p or 0)
        sys.stdin.read()  # held until the test closes stdin or kills it
        """
    )
    try:
        line = child.stdout.readline()
        assert json.loads(line)["ptr"] != 0
        tables = sim.status()["tables"]
        assert len(tables) == 1
        assert tables[0]["reserved_bytes"] == 96 * MiB
        assert [s["name"] for s in tables[0]["sessions"]] == ["cli-visible"]
    finally:
        child.kill()
        child.communicate(timeout=60)


def test_over_the_budget_malloc_returns_null_and_says_why(sim):
    r = sim.run(
        """
        assert configure("name=over-budget;memory_limit=1GiB") == 0, error()
        big = lib.gpushare_torch_malloc(1 * GiB, 0, None)
        why = error()
        small = lib.gpushare_torch_malloc(16 * MiB, 0, None)
        done(big=big or 0, why=why, small=small or 0, stats=stats(0))
        """
    )
    assert r["big"] == 0
    assert "over-budget" in r["why"] and "memory limit of 1.00 GiB" in r["why"]
    assert r["small"] != 0, "an allocation within the budget still succeeds after a refusal"
    assert r["stats"]["failed_mallocs"] == 1
    assert r["stats"]["allocated"] == 16 * MiB


def test_a_zero_byte_malloc_returns_null_and_opens_nothing(sim):
    r = sim.run(
        """
        p = lib.gpushare_torch_malloc(0, 0, None)
        done(p=p or 0, stats=stats(0), error=error())
        """
    )
    assert r["p"] == 0 and r["stats"]["rc"] == 1 and r["error"] == ""


def test_sessions_open_lazily_one_per_device(sim):
    r = sim.run(
        """
        before = [stats(0)["rc"], stats(1)["rc"]]
        p = lib.gpushare_torch_malloc(64 * MiB, 1, None)
        middle = [stats(0)["rc"], stats(1)["rc"]]
        q = lib.gpushare_torch_malloc(32 * MiB, 0, None)
        done(before=before, middle=middle, on0=stats(0), on1=stats(1), p=p or 0, q=q or 0)
        """
    )
    assert r["before"] == [1, 1]
    assert r["middle"] == [1, 0], "device 1's allocation opened device 1's session only"
    assert r["p"] and r["q"]
    assert r["on0"]["allocated"] == 32 * MiB and r["on1"]["allocated"] == 64 * MiB
    # Two tables, one per simulated GPU (named by its UUID), were created.
    assert len(glob.glob("/dev/shm/gpushare.%s.*" % sim.domain)) == 2


def test_threads_allocate_and_free_concurrently(sim):
    r = sim.run(
        """
        threads, rounds = 8, 40
        barrier = threading.Barrier(threads + 1)
        held = []
        failures = []
        def work(i):
            try:
                for k in range(rounds):
                    p = lib.gpushare_torch_malloc((i + 1) * MiB, i % 2, None)
                    assert p, error()
                    lib.gpushare_torch_free(p, (i + 1) * MiB, i % 2, None)
                p = lib.gpushare_torch_malloc((i + 1) * MiB, i % 2, None)
                assert p, error()
                held.append(p)
            except AssertionError as e:
                failures.append(str(e))
            barrier.wait()
        ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for t in ts: t.start()
        barrier.wait()
        for t in ts: t.join()
        done(failures=failures, held=len(held), on0=stats(0), on1=stats(1))
        """
    )
    assert r["failures"] == []
    assert r["held"] == 8
    # Device 0: threads 0,2,4,6 hold 1+3+5+7 MiB; device 1: threads 1,3,5,7 hold 2+4+6+8 MiB.
    assert r["on0"]["allocations"] == 4 and r["on0"]["allocated"] == 16 * MiB
    assert r["on1"]["allocations"] == 4 and r["on1"]["allocated"] == 20 * MiB
    assert r["on0"]["failed_frees"] == 0 and r["on1"]["failed_frees"] == 0


def test_a_killed_process_charges_are_reclaimed_by_the_table(sim):
    holder = sim.start(
        """
        assert configure("name=killed;capacity=3GiB") == 0, error()
        p = lib.gpushare_torch_malloc(2 * GiB, 0, None)
        assert p, error()
        done(ptr=p)
        sys.stdin.read()  # held until the test closes stdin or kills it
        """
    )
    try:
        assert json.loads(holder.stdout.readline())["ptr"] != 0
        assert sim.status()["tables"][0]["reserved_bytes"] == 2 * GiB
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.communicate(timeout=60)
    # 2 GiB again fits in the 3 GiB table only once the killed session's 2 GiB is reclaimed.
    r = sim.run(
        """
        assert configure("name=after-kill") == 0, error()
        p = lib.gpushare_torch_malloc(2 * GiB, 0, None)
        done(ptr=p or 0, error=error(), stats=stats(0))
        """
    )
    assert r["ptr"] != 0, r["error"]
    assert r["stats"]["charged"] == 2 * GiB
    assert sim.status()["tables"][0]["sessions_reclaimed"] >= 1


def test_configuration_errors_say_what_to_do(sim):
    r = sim.run(
        """
        out = {}
        out["bad_key"] = [configure("colour=blue"), error()]
        out["bad_value"] = [configure("memory_limit=lots"), error()]
        out["no_equals"] = [configure("memory_limit"), error()]
        assert configure("name=configured;alloc_timeout=0") == 0, error()
        p = lib.gpushare_torch_malloc(8 * MiB, 0, None)
        out["while_open"] = [configure("name=other"), error()]
        out["shutdown_live"] = [lib.gpushare_torch_shutdown(), error()]
        lib.gpushare_torch_free(p, 8 * MiB, 0, None)
        out["shutdown"] = lib.gpushare_torch_shutdown()
        out["after"] = stats(0)["rc"]
        out["reconfigure"] = configure("name=again")
        done(**out)
        """
    )
    assert r["bad_key"][0] == -1 and 'unknown setting "colour"' in r["bad_key"][1]
    assert "memory_limit" in r["bad_key"][1]
    assert r["bad_value"][0] == -1 and "lots" in r["bad_value"][1]
    assert r["no_equals"][0] == -1 and "key=value" in r["no_equals"][1]
    assert r["while_open"][0] == -1 and "gpushare_torch_shutdown()" in r["while_open"][1]
    assert r["shutdown_live"][0] == -1 and "8.00 MiB" in r["shutdown_live"][1]
    assert r["shutdown"] == 0 and r["after"] == 1 and r["reconfigure"] == 0


def test_a_foreign_pointer_is_refused_and_counted(sim):
    r = sim.run(
        """
        p = lib.gpushare_torch_malloc(4 * MiB, 0, None)
        lib.gpushare_torch_free(p + 4096, 4 * MiB, 0, None)
        bad = error()
        lib.gpushare_torch_free(12345, 4 * MiB, 1, None)
        no_session = error()
        done(bad=bad, no_session=no_session, stats=stats(0))
        """
    )
    assert r["bad"] != "" and r["stats"]["failed_frees"] == 1
    assert r["stats"]["allocated"] == 4 * MiB, "a refused free returns nothing"
    assert "no session is open on device 1" in r["no_session"]


def test_stream_ordered_on_a_stream_with_sync_on_free(sim):
    r = sim.run(
        """
        cudart = ctypes.CDLL("libcudart.so.13")
        stream = ctypes.c_void_p()
        assert cudart.cudaStreamCreate(ctypes.byref(stream)) == 0
        assert configure("sync_on_free=1") == 0, error()
        p = lib.gpushare_torch_malloc(32 * MiB, 0, stream)
        lib.gpushare_torch_free(p, 32 * MiB, 0, stream)
        assert lib.gpushare_torch_synchronize(0) == 0, error()
        done(p=p or 0, stats=stats(0))
        """
    )
    assert r["p"] != 0
    assert r["stats"]["allocated"] == 0 and r["stats"]["charged"] == 0
    assert r["stats"]["failed_frees"] == 0


def test_external_usage_is_published_to_the_table(sim):
    r = sim.run(
        """
        assert lib.gpushare_torch_set_external_usage(0, 300 * MiB) == 0, error()
        done(stats=stats(0))
        """
    )
    s = r["stats"]
    assert s["external"] == 300 * MiB + s["context_overhead"]
    assert s["context_overhead"] > 0


def test_an_allocation_waits_for_memory_up_to_its_timeout_only_when_asked(sim):
    holder = sim.start(
        """
        assert configure("name=holder;capacity=3GiB") == 0, error()
        assert lib.gpushare_torch_malloc(2 * GiB, 0, None), error()
        done(ok=1)
        sys.stdin.read()  # held until the test closes stdin
        """
    )
    try:
        assert json.loads(holder.stdout.readline())["ok"] == 1
        waits = """
        import time
        t0 = time.monotonic()
        p = lib.gpushare_torch_malloc(1 * GiB, 0, None)
        done(p=p or 0, waited=time.monotonic() - t0, error=error())
        """
        timed = sim.run(
            'assert configure("name=waiter;alloc_timeout=300ms") == 0\n' + textwrap.dedent(waits)
        )
        default = sim.run(waits)
    finally:
        holder.communicate(timeout=60)
    assert timed["p"] == 0 and timed["waited"] >= 0.29, timed
    assert default["p"] == 0, default
    # Without alloc_timeout (and GPUSHARE_ALLOC_TIMEOUT) it fails without waiting, where a
    # device_session would wait 60 s; a generous bound for a busy machine.
    assert default["waited"] < 30.0, default
    assert timed["error"] != "" and default["error"] != ""


def test_settings_choose_the_domain_over_the_environment(sim):
    r = sim.run(
        """
        assert configure("domain=%s-set;name=elsewhere") == 0, error()
        done(p=lib.gpushare_torch_malloc(8 * MiB, 0, None) or 0)
        """
        % sim.domain
    )
    assert r["p"] != 0
    assert sim.tables() == [] and len(sim.tables(sim.domain + "-set")) == 1


def test_a_malformed_variable_makes_malloc_fail_naming_it(sim):
    sim.extra_env["GPUSHARE_MEMORY_LIMIT"] = "plenty"
    r = sim.run(
        """
        p = lib.gpushare_torch_malloc(8 * MiB, 0, None)
        done(p=p or 0, error=error(), open=lib.gpushare_torch_open(0))
        """
    )
    assert r["p"] == 0 and r["open"] == -1
    assert "GPUSHARE_MEMORY_LIMIT" in r["error"] and "plenty" in r["error"]


def test_without_a_device_malloc_fails_with_the_reason(sim):
    sim.extra_env["CUDASIM_DEVICES"] = "0"
    r = sim.run(
        """
        p = lib.gpushare_torch_malloc(8 * MiB, 0, None)
        done(p=p or 0, error=error(), stats=stats(0)["rc"])
        """
    )
    assert r["p"] == 0 and r["stats"] == 1
    # Where an NVIDIA driver is loaded (a GPU machine running the simulation), no device is a
    # visibility matter, not a missing driver (cuda/detail/no_device.hpp).
    if os.path.exists("/proc/driver/nvidia/version"):
        assert "no CUDA device available: cudaErrorNoDevice" in r["error"]
        assert "CUDA_VISIBLE_DEVICES" in r["error"]
    else:
        assert "no NVIDIA driver or GPU found (cudaErrorNoDevice" in r["error"]


def test_the_python_bindings_drive_the_real_library(sim):
    module = os.path.join(BUILD, "python", "gpushare", "torch.py")
    r = sim.run(
        """
        import importlib.util
        spec = importlib.util.spec_from_file_location("gpushare_torch", %r)
        gt = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(gt)
        gt.set_library_path(os.environ["TORCH_ALLOC_LIBRARY"])
        gt.configure(memory_limit="3GiB", name="bindings", sync_on_free=True)
        before = gt.stats(0)
        gt._native().open(0)
        gt._native().set_external_usage(0, 64 * MiB)
        p = lib.gpushare_torch_malloc(1 * GiB, 0, None)
        opened = gt.stats(0)
        try:
            gt.configure(name="too-late")
            refused = ""
        except gt.GpushareTorchError as e:
            refused = str(e)
        lib.gpushare_torch_free(p, 1 * GiB, 0, None)
        gt.synchronize(0)
        after = gt.stats(0)
        gt.shutdown()
        done(before=before, opened=opened, after=after, refused=refused, last=gt.last_error(),
             closed=gt.stats(0))
        """
        % module
    )
    assert r["before"] is None and r["closed"] is None
    o = r["opened"]
    assert o["allocated"] == GiB and o["charged"] == GiB and o["memory_limit"] == 3 * GiB
    assert o["external"] == 64 * MiB + o["context_overhead"] and o["device_total"] > 0
    assert r["after"]["allocated"] == 0 and r["after"]["charged"] == 0
    assert r["refused"].startswith("configure: ") and "already open" in r["refused"]
    assert "already open" in r["last"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
