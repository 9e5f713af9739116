# SPDX-License-Identifier: Apache-2.0
# The start-up lock from Python (Session.startup, gpushare.startup) and the engine translator
# (gpushare.engines): one holder at a time, released by ready() or the block's end, passed on
# when its holder is SIGKILLed, a wait ended by Ctrl-C leaves no waiter counted; the flags for a
# budget, and what is missing named.
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import gpushare
import gpushare.engines as engines
from conftest import DOMAIN, GiB, MiB


def holder_of(session):
    h = session.snapshot().startup
    return None if h is None else h.name


def test_one_holder_and_the_timeout_names_it(key, settings):
    with gpushare.Session(key, name="engine-a", **settings) as a, \
            gpushare.Session(key, name="engine-b", **settings) as b:
        hold = a.startup(timeout=5)
        assert hold.held
        assert a.info().holds_startup
        assert holder_of(b) == "engine-a"
        with pytest.raises(gpushare.Timeout) as e:
            b.startup(timeout=0.2)
        assert "engine-a" in str(e.value)
        assert f"pid {os.getpid()}" in str(e.value)
        assert isinstance(e.value, TimeoutError)
        assert b.snapshot().startup_waiters == 0
        hold.ready()
        assert not hold.held
        hold.ready()  # idempotent
        with b.startup(timeout=5) as h2:
            assert h2.held
            assert holder_of(a) == "engine-b"
        assert holder_of(a) is None
        assert a.snapshot().startup_takes == 2


def test_holding_twice_is_refused(key, settings):
    with gpushare.Session(key, **settings) as a:
        with a.startup(timeout=5):
            with pytest.raises(gpushare.InvalidArgument, match="already holds"):
                a.startup(timeout=1)


def test_the_module_level_startup_opens_and_leaves_a_session(key):
    with gpushare.startup(key, timeout=5, name="starter", domain=DOMAIN) as s:
        assert s.held
        assert s.session.joined
        assert holder_of(s.session) == "starter"
    assert not s.held
    assert not s.session.joined
    with gpushare.Session(key, domain=DOMAIN) as other:
        assert holder_of(other) is None
        assert [x.name for x in other.snapshot().sessions] == [other.name]


def test_a_killed_holder_passes_the_lock_on(key, settings):
    code = (
        "import gpushare, sys, time\n"
        f"s = gpushare.Session({key!r}, name='doomed', domain={DOMAIN!r})\n"
        "h = s.startup(timeout=10)\n"
        "print('held', flush=True)\n"
        "time.sleep(120)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with gpushare.Session(key, name="next", **settings) as b:
            assert holder_of(b) == "doomed"
            with pytest.raises(gpushare.Timeout):
                b.startup(timeout=0.1)
            child.send_signal(signal.SIGKILL)
            child.wait(30)
            start = time.monotonic()
            with b.startup(timeout=30) as h:
                assert h.held
            assert time.monotonic() - start < 30
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


@pytest.fixture
def default_sigint_handler():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_ends_a_startup_wait(key, settings, default_sigint_handler):
    with gpushare.Session(key, name="holder", **settings) as a, \
            gpushare.Session(key, name="waiter", **settings) as b:
        hold = a.startup(timeout=5)
        sent = threading.Event()

        def interrupt():
            end = time.monotonic() + 60
            while time.monotonic() < end:
                if b.info().waiting_for_startup == 1:
                    sent.set()
                    os.kill(os.getpid(), signal.SIGINT)
                    return
                time.sleep(0.01)

        t = threading.Thread(target=interrupt, daemon=True)
        t.start()
        with pytest.raises(KeyboardInterrupt):
            b.startup(timeout=None)
        t.join(10)
        assert sent.is_set()
        assert b.info().waiting_for_startup == 0
        assert a.snapshot().startup_waiters == 0
        hold.ready()
        with b.startup(timeout=5) as h:
            assert h.held


def test_vllm_flags_from_a_budget():
    p = engines.plan_vllm(budget="256MiB", weights="100MiB", activation_peak=20 * MiB,
                          cuda_graphs="10MiB", margin="6MiB", device_total=GiB)
    assert p.kv_cache_memory_bytes == 120 * MiB
    assert p.gpu_memory_utilization == pytest.approx(0.25)
    assert p.flags == ["--kv-cache-memory-bytes", str(120 * MiB), "--gpu-memory-utilization",
                       "0.2500"]
    eager = engines.plan_vllm(budget="256MiB", weights="100MiB", activation_peak="20MiB",
                              enforce_eager=True, margin="6MiB")
    assert eager.kv_cache_memory_bytes == 130 * MiB
    assert eager.gpu_memory_utilization is None


def test_the_budget_may_be_a_session(key, settings):
    with gpushare.Session(key, memory_limit="512MiB", **settings) as s:
        p = engines.plan_vllm(budget=s, weights="100MiB", activation_peak="20MiB",
                              cuda_graphs="10MiB", margin="6MiB")
        assert p.kv_cache_memory_bytes == (512 - 136) * MiB
    class NoLimit:
        def info(self):
            return None

    with pytest.raises(gpushare.InvalidArgument, match="no memory limit"):
        engines.plan_vllm(budget=NoLimit(), weights=1, activation_peak=1, cuda_graphs=1, margin=1)


def test_sglang_fraction_and_tokens():
    p = engines.plan_sglang(budget="256MiB", weights="100MiB", free_at_start="800MiB",
                            activation_peak="20MiB", cuda_graphs="10MiB", margin="6MiB",
                            layers=4, kv_heads=8, head_dim=128, dtype_bytes=2)
    assert p.mem_fraction_static == pytest.approx(220 / 800, abs=1e-6)
    assert p.mem_fraction_static <= 220 / 800
    per_token = 2 * 4 * 8 * 128 * 2
    assert p.max_total_tokens == p.kv_budget // per_token
    assert 0 < p.kv_budget <= 120 * MiB
    assert p.flags[:2] == ["--mem-fraction-static", f"{p.mem_fraction_static:.6f}"]
    assert p.flags[2:] == ["--max-total-tokens", str(p.max_total_tokens)]


def test_missing_and_wrong_inputs_are_named():
    with pytest.raises(gpushare.InvalidArgument) as e:
        engines.plan_vllm(budget="1GiB", weights="100MiB")
    assert "activation_peak" in str(e.value) and "margin" in str(e.value)
    with pytest.raises(gpushare.InvalidArgument, match="leaves no KV cache"):
        engines.plan_vllm(budget="100MiB", weights="100MiB", activation_peak=1, cuda_graphs=1,
                          margin=1)
    with pytest.raises(TypeError, match="weight"):
        engines.plan_vllm(budget="1GiB", weight="100MiB")
    with pytest.raises(gpushare.InvalidArgument, match="banana"):
        engines.plan_vllm(budget="banana", weights=1, activation_peak=1, cuda_graphs=1, margin=1)
    with pytest.raises(gpushare.InvalidArgument, match="layers"):
        engines.plan_sglang(budget="1GiB", weights=1, free_at_start="2GiB", activation_peak=1,
                            cuda_graphs=1, margin=1, layers=0)
