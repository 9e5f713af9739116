# SPDX-License-Identifier: Apache-2.0
# Cooperative reclaim from Python (docs/python.md, "Giving memory back"): reclaimable
# reservations and their figures; a low-priority process's callback, run by its watcher, gives
# back what a high-priority reserve lacks; without a callback the reserve times out and the request
# is skipped; a callback's exception propagates from answer_reclaim() and goes to
# sys.unraisablehook on the watcher; an interpreter exits cleanly while its watcher answers; a
# borrower with a callback and a watcher is lent a guaranteed session's idle guarantee, and the
# loan is called back (answered, or written off at the deadline while the borrower is stopped).
import multiprocessing
import os
import signal
import sys
import threading
import time

import pytest

import gpushare
from conftest import DOMAIN, GiB, MiB, run_python

ctx = multiprocessing.get_context("spawn")


def wait_until(predicate, limit_s=60.0):
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def named(snapshot, name):
    return next(x for x in snapshot.sessions if x.name == name)


def test_reclaimable_reservations_and_their_figures(key, settings):
    with gpushare.Session(key, name="cache", reclaim_deadline="500ms", **settings) as s:
        r = s.reserve("100MiB", timeout=1, reclaimable=True)
        assert r.reclaimable and r.bytes == 100 * MiB
        assert repr(r) == f"Reservation(bytes={100 * MiB}, reclaimable=True)"
        fixed = s.try_reserve(10 * MiB)
        assert not fixed.reclaimable
        assert repr(fixed) == f"Reservation(bytes={10 * MiB})"
        more = s.try_reserve(5 * MiB, reclaimable=True)
        assert more.reclaimable
        forever = s.reserve(MiB, reclaimable=True)  # no timeout
        assert forever.reclaimable and forever.bytes == MiB
        info = s.info()
        assert info.reserved == 116 * MiB
        assert info.reclaim.reclaimable == 106 * MiB
        fixed.set_reclaimable()
        r.set_reclaimable(False)
        assert fixed.reclaimable and not r.reclaimable
        assert s.info().reclaim.reclaimable == 16 * MiB
        r.grow(MiB)  # a fixed reservation grows fixed bytes
        more.grow(MiB)  # a reclaimable one reclaimable bytes
        assert s.info().reclaim.reclaimable == 17 * MiB
        more.release()
        assert s.info().reclaim.reclaimable == 11 * MiB
        figures = s.info().reclaim
        assert (figures.asked, figures.deadline_in_ns, figures.asked_by_slot) == (0, 0, None)
        assert (figures.requests, figures.answered, figures.skipped, figures.given) == (0, 0, 0, 0)
        assert figures.wanted == 0 and figures.skipped_now is False
        assert figures.as_dict()["reclaimable"] == 11 * MiB
        assert "reclaimable=" in repr(figures)
        assert s.info().as_dict()["reclaim"].reclaimable == 11 * MiB
        counters = s.snapshot().reclaim
        assert counters._fields == ("requests", "answered", "skipped", "withdrawn", "given",
                                    "grants", "grant_ns", "grant_max_ns")
        assert counters.requests == 0 and counters.grants == 0
        # Nothing is asked: no request, nothing answered, whatever the callback would do.
        assert s.reclaim_requested == 0
        assert s.answer_reclaim() == 0
        assert s.on_reclaim(lambda asked: asked) is not None
        assert s.answer_reclaim() == 0
        assert s.on_reclaim(None) is None
        with pytest.raises(TypeError, match="callable"):
            s.on_reclaim(42)
        s.watch_reclaim()
        s.watch_reclaim()  # idempotent
    assert not s.joined
    assert s.reclaim_requested == 0
    with pytest.raises(gpushare.SessionClosed):
        s.on_reclaim(lambda asked: 0)


def test_the_reclaim_deadline_keyword(key, settings):
    with gpushare.Session(key, reclaim_deadline=0.25, **settings):
        pass
    with gpushare.Session(key, reclaim_deadline="1500ms", **settings):
        pass
    with pytest.raises(gpushare.InvalidArgument, match="reclaim"):
        gpushare.Session(key, reclaim_deadline="2h", **settings)
    with pytest.raises(gpushare.InvalidArgument, match="reclaim_deadline"):
        gpushare.Session(key, reclaim_deadline=7200, **settings)
    with pytest.raises(TypeError, match="reclaim_deadline"):
        gpushare.Session(key, reclaim_deadline=[1], **settings)


def cache_holder(key, with_callback, ready, stop, figures):
    """A low-priority process holding 800 MiB of reclaimable cache; its callback, on the watcher
    thread, gives back what is asked. Reports its own figures when told to stop."""
    with gpushare.Session(key, name="cache", priority="low", domain=DOMAIN, capacity=GiB) as s:
        cache = s.reserve(800 * MiB, timeout=10, reclaimable=True)

        def give_back(asked):
            given = min(asked, cache.bytes)
            cache.shrink(given)
            return given

        if with_callback:
            s.on_reclaim(give_back)
            s.watch_reclaim()
        ready.set()
        stop.wait(120)
        info = s.info()
        figures.put((cache.bytes, info.reclaim.requests, info.reclaim.answered,
                     info.reclaim.given))


def start_holder(key, with_callback):
    ready, stop, figures = ctx.Event(), ctx.Event(), ctx.Queue()
    p = ctx.Process(target=cache_holder, args=(key, with_callback, ready, stop, figures))
    p.start()
    assert ready.wait(60)
    return p, stop, figures


def end_holder(p, stop):
    stop.set()
    p.join(60)
    if p.is_alive():
        p.kill()
        p.join(10)


def test_a_low_priority_callback_gives_back_what_a_high_priority_reserve_lacks(key, settings):
    p, stop, figures = start_holder(key, with_callback=True)
    try:
        with gpushare.Session(key, name="urgent", priority="high", **settings) as s:
            # 600 MiB: 376 MiB more than the table has free; the cache is asked for exactly that.
            with s.reserve(600 * MiB, timeout=30) as r:
                assert r.bytes == 600 * MiB
                # The answer is recorded right after the callback's release, which may wake the
                # reserve first.
                assert wait_until(lambda: named(s.snapshot(), "cache").reclaim.answered == 1)
                snap = s.snapshot()
                cache = named(snap, "cache")
                assert cache.reserved == 424 * MiB
                assert cache.reclaim.reclaimable == 424 * MiB
                assert (cache.reclaim.requests, cache.reclaim.given) == (1, 376 * MiB)
                assert cache.reclaim.asked == 0
                assert (snap.reclaim.requests, snap.reclaim.answered) == (1, 1)
                assert (snap.reclaim.skipped, snap.reclaim.grants) == (0, 1)
                assert snap.reclaim.given == 376 * MiB
                assert 0 < snap.reclaim.grant_max_ns <= snap.reclaim.grant_ns
                assert named(snap, "urgent").reclaim.wanted == 0
                stop.set()
                assert figures.get(timeout=60) == (424 * MiB, 1, 1, 376 * MiB)
    finally:
        end_holder(p, stop)
    assert p.exitcode == 0


def test_without_a_callback_the_reserve_times_out_and_the_request_is_skipped(key, settings):
    p, stop, figures = start_holder(key, with_callback=False)
    try:
        with gpushare.Session(key, name="urgent", priority="high", reclaim_deadline="300ms",
                              **settings) as s:
            with pytest.raises(gpushare.Timeout):
                s.reserve(600 * MiB, timeout=1.5)
            snap = s.snapshot()
            cache = named(snap, "cache")
            assert cache.reserved == 800 * MiB  # skipping takes nothing away
            assert cache.reclaim.reclaimable == 800 * MiB
            assert cache.reclaim.requests >= 1 and cache.reclaim.skipped >= 1
            assert (cache.reclaim.answered, cache.reclaim.given) == (0, 0)
            assert snap.reclaim.skipped >= 1 and snap.reclaim.answered == 0
            assert snap.reclaim.grants == 0
            stop.set()
            held, requests, answered, given = figures.get(timeout=60)
            assert (held, answered, given) == (800 * MiB, 0, 0)
            assert requests >= 1
    finally:
        end_holder(p, stop)
    assert p.exitcode == 0


def borrower(key, ready, stop, figures):
    """A low-priority process with 256 MiB of its own and a callback on the watcher thread that
    gives back what is asked, then 512 MiB of reclaimable cache beyond the table's free memory:
    lent out of the lender's idle guarantee. Reports its own figures when told to stop."""
    with gpushare.Session(key, name="cache", priority="low", domain=DOMAIN, capacity=GiB) as s:
        own = s.reserve(256 * MiB, timeout=10)
        held = []

        def give_back(asked):
            given = min(asked, held[0].bytes) if held else 0
            if given:
                held[0].shrink(given)
            return given

        s.on_reclaim(give_back)
        s.watch_reclaim()
        cache = s.try_reserve(512 * MiB, reclaimable=True)
        if cache is not None:
            held.append(cache)
        ready.set()
        stop.wait(120)
        r = s.info().reclaim
        figures.put((own.bytes, cache is not None, r.borrowed, r.loans, r.write_offs))


def lent_to_a_borrower(key, settings, deadline):
    """A lender guaranteed 768 MiB of the table's 1 GiB, holding nothing, and a borrower started
    beside it: returns the lender, the borrower's process and its stop event and queue."""
    lender = gpushare.Session(key, name="lender", priority="normal", memory_guarantee="768MiB",
                              reclaim_deadline=deadline, **settings)
    ready, stop, figures = ctx.Event(), ctx.Event(), ctx.Queue()
    p = ctx.Process(target=borrower, args=(key, ready, stop, figures))
    p.start()
    return lender, p, stop, figures, ready


def check_lent(lender, ready):
    """The borrower is lent 512 MiB of the lender's idle guarantee: its figures and the table's."""
    assert ready.wait(60)
    snap = lender.snapshot()
    cache = named(snap, "cache")
    assert cache.reserved == 768 * MiB
    r = cache.reclaim
    assert (r.borrowed, r.loans, r.write_offs, r.loan_call) == (512 * MiB, 1, 0, False)
    assert named(snap, "lender").reclaim.borrowed == 0
    loans = snap.loans
    assert loans._fields == ("idle_guarantees", "lent", "held", "loans", "calls", "write_offs",
                             "written_off")
    assert (loans.idle_guarantees, loans.lent, loans.held) == (768 * MiB, 512 * MiB, 768 * MiB)
    assert (loans.loans, loans.calls, loans.write_offs, loans.written_off) == (1, 0, 0, 0)
    assert snap.as_dict()["loans"].lent == 512 * MiB
    assert r.as_dict()["borrowed"] == 512 * MiB


def test_a_borrower_with_a_watcher_is_lent_an_idle_guarantee_and_answers_its_call(key, settings):
    lender, p, stop, figures, ready = lent_to_a_borrower(key, settings, "2s")
    try:
        check_lent(lender, ready)
        with lender, lender.reserve(600 * MiB, timeout=30) as r:
            assert r.bytes == 600 * MiB
            assert wait_until(lambda: named(lender.snapshot(), "cache").reclaim.answered == 1)
            snap = lender.snapshot()
            cache = named(snap, "cache")
            assert cache.reserved == (256 + 168) * MiB
            assert (cache.reclaim.borrowed, cache.reclaim.given) == (168 * MiB, 344 * MiB)
            assert (cache.reclaim.loans, cache.reclaim.write_offs) == (1, 0)
            assert cache.reclaim.loan_call is False
            assert (snap.loans.calls, snap.loans.write_offs, snap.loans.written_off) == (1, 0, 0)
            assert (snap.loans.idle_guarantees, snap.loans.lent) == (168 * MiB, 168 * MiB)
            assert snap.loans.held == GiB
            stop.set()
            assert figures.get(timeout=60) == (256 * MiB, True, 168 * MiB, 1, 0)
    finally:
        end_holder(p, stop)
        lender.leave()
    assert p.exitcode == 0


def test_a_stopped_borrower_has_its_loan_call_written_off_at_the_deadline(key, settings):
    lender, p, stop, figures, ready = lent_to_a_borrower(key, settings, "2s")
    try:
        check_lent(lender, ready)
        os.kill(p.pid, signal.SIGSTOP)
        with lender:
            outcome = []
            waiter = threading.Thread(
                target=lambda: outcome.append(lender.reserve(600 * MiB, timeout=30)))
            waiter.start()
            # The call is counted for good; the call itself stands for one deadline only, which a
            # poll on a loaded machine may miss (a CI run did): its figures are checked while it
            # stands, and what it asked for is checked after, written off.
            assert wait_until(lambda: lender.snapshot().loans.calls == 1)
            called = named(lender.snapshot(), "cache").reclaim
            if called.loan_call:
                assert (called.asked, called.borrowed) == (344 * MiB, 512 * MiB)
            waiter.join(60)
            assert outcome and outcome[0].bytes == 600 * MiB
            snap = lender.snapshot()
            cache = named(snap, "cache")
            assert cache.reserved == (256 + 168) * MiB
            assert (cache.reclaim.borrowed, cache.reclaim.write_offs) == (168 * MiB, 1)
            assert (cache.reclaim.asked, cache.reclaim.loan_call) == (0, False)
            assert (snap.loans.write_offs, snap.loans.written_off) == (1, 344 * MiB)
            os.kill(p.pid, signal.SIGCONT)
            stop.set()
            assert figures.get(timeout=60) == (256 * MiB, True, 168 * MiB, 1, 1)
            outcome[0].release()
    finally:
        os.kill(p.pid, signal.SIGCONT)
        end_holder(p, stop)
        lender.leave()
    assert p.exitcode == 0


class CacheFull(Exception):
    pass


def raising(asked):
    raise CacheFull(f"asked for {asked}")


def asked_in_a_thread(key, settings, timeout, deadline="2s"):
    """A high-priority session whose reserve of 600 MiB waits (in a thread) for `timeout`, its
    requests lasting `deadline`: returns the session, the thread and the list its outcome goes
    to."""
    urgent = gpushare.Session(key, name="urgent", priority="high", reclaim_deadline=deadline,
                              **settings)
    outcome = []

    def wait():
        try:
            urgent.reserve(600 * MiB, timeout=timeout)
            outcome.append("granted")
        except gpushare.Timeout:
            outcome.append("timeout")

    t = threading.Thread(target=wait)
    t.start()
    return urgent, t, outcome


@pytest.mark.parametrize("answer", ["answer_reclaim", "yield_"])
def test_a_callbacks_exception_propagates(key, settings, answer):
    with gpushare.Session(key, name="cache", priority="low", **settings) as low:
        cache = low.reserve(800 * MiB, reclaimable=True)
        low.on_reclaim(raising)
        urgent, t, outcome = asked_in_a_thread(key, settings, timeout=8, deadline="5s")
        try:
            assert wait_until(lambda: low.reclaim_requested == 376 * MiB)
            with pytest.raises(CacheFull, match=f"asked for {376 * MiB}"):
                getattr(low, answer)()
            assert low.answer_reclaim() == 0  # answered already: not asked again
            low.yield_()
            assert low.reclaim_requested == 376 * MiB  # the request stands until its deadline
        finally:
            t.join(60)
            urgent.leave()
        assert outcome == ["timeout"]
        assert cache.bytes == 800 * MiB
        assert low.info().reclaim.answered == 0
        assert low.info().reclaim.skipped >= 1


def test_a_callbacks_exception_on_the_watcher_goes_to_unraisablehook(key, settings, monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_type))
    with gpushare.Session(key, name="cache", priority="low", **settings) as low:
        cache = low.reserve(800 * MiB, reclaimable=True)
        low.on_reclaim(raising)
        low.watch_reclaim()
        urgent, t, outcome = asked_in_a_thread(key, settings, timeout=3)
        try:
            assert wait_until(lambda: seen == [CacheFull])
        finally:
            t.join(60)
            urgent.leave()
        assert outcome == ["timeout"]
        assert cache.bytes == 800 * MiB


def test_a_guard_exit_answers_and_a_string_is_bytes(key, settings):
    with gpushare.Session(key, name="cache", priority="low", **settings) as low:
        cache = low.reserve(800 * MiB, reclaimable=True)

        def give(asked):
            cache.shrink(asked)
            return f"{asked // MiB}MiB"

        low.on_reclaim(give)
        urgent, t, outcome = asked_in_a_thread(key, settings, timeout=30)
        try:
            assert wait_until(lambda: low.reclaim_requested > 0)
            with low.kernel():
                pass  # a guard's exit answers the request too
            assert cache.bytes == 424 * MiB
        finally:
            t.join(60)
            urgent.leave()
        assert outcome == ["granted"]
        assert low.info().reclaim.given == 376 * MiB


EXIT_WHILE_ANSWERING = """
import threading, time, gpushare
settings = dict(domain={domain!r}, capacity={capacity})
low = gpushare.Session({key!r}, name="cache", priority="low", **settings)
cache = low.reserve(800 << 20, reclaimable=True)
def slow(asked):
    time.sleep(1.5)
    print("answered", flush=True)
    return 0
low.on_reclaim(slow)
low.watch_reclaim()
urgent = gpushare.Session({key!r}, name="urgent", priority="high", **settings)
def wait():
    try:
        urgent.reserve(600 << 20, timeout=0.5)
    except gpushare.Timeout:
        print("timeout", flush=True)
t = threading.Thread(target=wait)
t.start()
while low.reclaim_requested == 0:
    time.sleep(0.01)
print("asked", flush=True)
# The interpreter exits now, with both sessions joined and the callback running on the watcher.
"""


def test_the_interpreter_exits_while_the_watcher_answers(key):
    code = EXIT_WHILE_ANSWERING.format(domain=DOMAIN, capacity=GiB, key=key)
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["asked", "timeout", "answered"]
    assert "Fatal" not in done.stderr and "terminate" not in done.stderr


LEAVE_WHILE_THE_WATCHER_WAITS_FOR_THE_GIL = """
import subprocess, sys, time, gpushare
settings = dict(domain={domain!r}, capacity={capacity})
low = gpushare.Session({key!r}, name="cache", priority="low", **settings)
cache = low.reserve(800 << 20, reclaimable=True)
calls = []
def give_back(asked):
    calls.append(asked)
    cache.release()
    return asked
low.on_reclaim(give_back)
low.watch_reclaim()
# The request comes from another process, which needs nothing of this one.
urgent = subprocess.Popen([sys.executable, "-c", {urgent!r}])
sys.setswitchinterval(100)  # this thread keeps the GIL while it computes
while low.reclaim_requested == 0:
    pass
end = time.monotonic() + 1
while time.monotonic() < end:
    pass  # the watcher's callback waits for the GIL meanwhile
del low  # leaving joins the watcher: it must let the callback have the GIL
print("left", calls, flush=True)
sys.exit(urgent.wait(60))  # 0: its reserve was granted
"""

URGENT = """
import gpushare
s = gpushare.Session({key!r}, name="urgent", priority="high", domain={domain!r},
                     capacity={capacity})
assert s.reserve(600 << 20, timeout=60).bytes == 600 << 20  # else exit status 1
"""


def test_a_session_left_while_its_watcher_waits_for_the_gil(key):
    values = dict(domain=DOMAIN, capacity=GiB, key=key)
    code = LEAVE_WHILE_THE_WATCHER_WAITS_FOR_THE_GIL.format(urgent=URGENT.format(**values),
                                                           **values)
    done = run_python(code, timeout=120)  # a deadlock ends as TimeoutExpired
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"left [{376 * MiB}]\n"


def test_a_session_that_declines_loans_is_lent_nothing(key, settings):
    with gpushare.Session(key, name="lender", memory_guarantee="768MiB", **settings) as lender:
        with gpushare.Session(key, name="decliner", **settings) as s:
            own = s.reserve(256 * MiB, timeout=10)
            s.on_reclaim(lambda asked: 0)
            s.watch_reclaim()
            s.accept_loans(False)
            assert s.try_reserve(100 * MiB, reclaimable=True) is None
            s.accept_loans(True)
            lent = s.try_reserve(100 * MiB, reclaimable=True)
            assert lent is not None
            assert s.info().reclaim.borrowed == 100 * MiB
            assert lender.snapshot().loans.lent == 100 * MiB
            lent.release()
            own.release()
