# SPDX-License-Identifier: Apache-2.0
# Ctrl-C (SIGINT) ends a wait for memory or the device with KeyboardInterrupt; the wait is no
# longer counted and later calls work. The signal is sent by another thread once the table shows
# the main thread waiting, which also proves the wait released the GIL.
import os
import signal
import threading
import time

import pytest

import gpushare
from conftest import GiB, MiB


def interrupt_when(predicate, sent):
    def run():
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if predicate():
                sent.set()
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.01)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.fixture(autouse=True)
def default_sigint_handler():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_ends_a_memory_wait(key, settings):
    with gpushare.Session(key, name="holder", **settings) as a, \
            gpushare.Session(key, name="waiter", **settings) as b:
        r = a.reserve(GiB)
        sent = threading.Event()
        t = interrupt_when(lambda: b.info().waiting_for_memory == 1, sent)
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            b.reserve(256 * MiB, timeout=None)
        t.join(10)
        assert sent.is_set()
        assert time.monotonic() - start < 60
        assert b.info().waiting_for_memory == 0
        assert b.info().reserved == 0
        assert sum(x.waiting_for_memory for x in a.snapshot().sessions) == 0
        r.release()
        with b.reserve(256 * MiB, timeout=10) as got:
            assert got.bytes == 256 * MiB


def test_ctrl_c_ends_a_device_wait(key, settings):
    with gpushare.Session(key, name="holder", **settings) as a, \
            gpushare.Session(key, name="waiter", **settings) as b:
        g = a.kernel()
        g.__enter__()
        sent = threading.Event()
        t = interrupt_when(lambda: b.info().waiting_for_device == 1, sent)
        with pytest.raises(KeyboardInterrupt):
            with b.kernel():
                pass
        t.join(10)
        assert sent.is_set()
        assert b.info().waiting_for_device == 0
        assert b.info().active_guards == 0
        g.finish()
        with b.kernel(timeout=10):
            assert b.info().active_guards == 1
