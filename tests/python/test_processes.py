# SPDX-License-Identifier: Apache-2.0
# Several processes (multiprocessing, spawn): a waiter gets the memory another process releases;
# the memory of a SIGKILLed holder is reclaimed.
import multiprocessing
import os
import signal
import time

import gpushare
from conftest import DOMAIN, GiB, MiB

ctx = multiprocessing.get_context("spawn")


def wait_until(predicate, limit_s=60.0):
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def waiter(key, results):
    with gpushare.Session(key, name="waiter", domain=DOMAIN, capacity=GiB) as s:
        with s.reserve(512 * MiB, timeout=60) as r:
            info = s.info()
            results.put((r.bytes, info.reserve_waits, info.waiting_for_memory))


def holder(key, ready):
    s = gpushare.Session(key, name="holder", domain=DOMAIN, capacity=GiB)
    r = s.reserve(GiB, timeout=10)
    ready.put(r.bytes)
    while True:
        time.sleep(60)


def test_a_process_waits_for_memory_another_releases(key, settings):
    with gpushare.Session(key, name="owner", **settings) as s:
        r = s.reserve(768 * MiB)
        results = ctx.Queue()
        p = ctx.Process(target=waiter, args=(key, results))
        p.start()
        try:
            assert wait_until(
                lambda: any(x.name == "waiter" and x.waiting_for_memory == 1
                            for x in s.snapshot().sessions))
            assert results.empty()
            r.release()
            got, waits, still_waiting = results.get(timeout=60)
            assert got == 512 * MiB
            assert waits == 1
            assert still_waiting == 0
        finally:
            p.join(60)
            if p.is_alive():
                p.kill()
        assert p.exitcode == 0
        assert s.snapshot().reserved_total == 0


def test_a_killed_holders_memory_is_reclaimed(key, settings):
    ready = ctx.Queue()
    p = ctx.Process(target=holder, args=(key, ready))
    p.start()
    try:
        assert ready.get(timeout=60) == GiB
        with gpushare.Session(key, name="survivor", **settings) as s:
            assert s.try_reserve(MiB) is None
            os.kill(p.pid, signal.SIGKILL)
            p.join(60)
            with s.reserve(GiB, timeout=60) as r:
                assert r.bytes == GiB
            snap = s.snapshot()
            assert [x.name for x in snap.sessions] == ["survivor"]
            assert snap.sessions_reclaimed >= 1
    finally:
        if p.is_alive():
            p.kill()
            p.join(10)
    assert p.exitcode == -signal.SIGKILL
