# SPDX-License-Identifier: Apache-2.0
# One process: sessions, reservations, guards, settings, info, snapshots and tables.
import datetime
import os
import threading
import time

import pytest

import gpushare
from conftest import DOMAIN, GiB, MiB


def test_session_joins_with_its_settings_and_leaves(key, settings):
    with gpushare.Session(key, name="alpha", priority="high", share="3", compute_limit="30%",
                          memory_limit="512MiB", memory_guarantee="10%", quantum="500us",
                          handover="yield", max_guard="30s", compute_guarantee=0.1,
                          pause_hold=0.5, **settings) as s:
        assert s.joined
        assert s.name == "alpha"
        assert s.table_name == gpushare.table_name(key, DOMAIN)
        i = s.info()
        assert (i.name, i.priority, i.share) == ("alpha", 2, 3)
        assert i.compute_limit_ppm == 300_000
        assert i.compute_guarantee_ppm == 100_000
        assert i.pause_hold_ppm == 500_000
        assert i.memory_limit == 512 * MiB
        assert i.memory_guarantee == GiB // 10
        assert i.quantum_ns == 500_000
        assert i.max_guard_ns == 30_000_000_000
        assert i.handover == "yield"
        assert i.state == "idle"
        assert i.id == s.id
        assert "name='alpha'" in repr(i)
        assert i.as_dict()["share"] == 3
        with pytest.raises(AttributeError):
            i.share = 4
    assert not s.joined
    with pytest.raises(gpushare.SessionClosed):
        s.reserve(MiB)


def test_reserve_and_try_reserve(key, settings):
    with gpushare.Session(key, name="a", **settings) as a, \
            gpushare.Session(key, name="b", **settings) as b:
        with a.reserve("768MiB", timeout=1) as r:
            assert r.bytes == 768 * MiB and r
            assert a.info().reserved == 768 * MiB
            assert b.try_reserve(512 * MiB) is None  # does not fit now
            small = b.try_reserve("256MiB")
            assert small is not None and small.bytes == 256 * MiB
            with pytest.raises(gpushare.Timeout) as e:
                b.reserve(MiB, timeout=datetime.timedelta(milliseconds=50))
            assert e.value.code == "timeout"
            assert isinstance(e.value, TimeoutError)
            small.release()
            assert small.bytes == 0 and not small
            assert b.info().reserved == 0
        assert r.bytes == 0
        assert a.info().reserved == 0
        assert a.info().reservations_granted == 1


def test_reservation_grows_and_shrinks(key, settings):
    with gpushare.Session(key, **settings) as s, gpushare.Session(key, **settings) as other:
        held = other.reserve(768 * MiB)
        r = s.reserve(100 * MiB, timeout=0.5)
        r.grow("28MiB", timeout="1s")
        assert r.bytes == 128 * MiB
        assert r.try_grow(256 * MiB) is False
        held.release()
        r.shrink(100 * MiB)
        assert r.bytes == 28 * MiB
        assert s.info().reserved == 28 * MiB
        del r
        assert s.info().reserved == 0


def test_never_fitting_requests_raise_at_once(key, settings):
    with gpushare.Session(key, memory_limit="256MiB", **settings) as s:
        with pytest.raises(gpushare.OverLimit) as e:
            s.reserve("512MiB")
        assert e.value.code == "over_limit"
        with pytest.raises(gpushare.OverLimit):
            s.try_reserve("512MiB")
    with gpushare.Session(key, **settings) as s:
        with pytest.raises(gpushare.ExceedsCapacity):
            s.reserve(2 * GiB)


def test_kernel_guard_counts_a_guard(key, settings):
    with gpushare.Session(key, **settings) as s:
        with s.kernel() as g:
            assert g.active
            assert s.info().state == "running"
            assert s.info().active_guards == 1
            assert isinstance(g.waited, datetime.timedelta)
            assert not g.revoked
        assert not g.active
        with s.kernel(timeout=1.0) as g2:
            g2.set_device_time(0.25)
        i = s.info()
        assert i.guards == 2 and i.active_guards == 0
        assert i.device_ns >= 250_000_000
        s.yield_()


def test_linger_keeps_the_gaps_from_a_lower_class(key, settings):
    with gpushare.Session(key, name="high", priority="high", **settings) as a, \
            gpushare.Session(key, name="low", priority="low", **settings) as b:
        with a.kernel():
            pass
        a.linger("50ms")  # more work is due: b (lower) does not take the gap (10 ms at most)
        start = time.monotonic()
        with b.kernel(timeout=5):
            waited = time.monotonic() - start
        assert waited >= 0.008  # 10 ms from a's last guard, just before
        a.linger(0.002)
        a.linger(datetime.timedelta(milliseconds=1))
        a.linger(0)
        with pytest.raises(TypeError):
            a.linger([1])
        with pytest.raises(gpushare.InvalidArgument):
            a.linger("soon")


def test_give_way_due_when_a_higher_class_waits(key, settings):
    with gpushare.Session(key, name="low", priority="low", **settings) as a, \
            gpushare.Session(key, name="high", priority="high", **settings) as b:
        assert a.give_way_due() is False  # nobody waits
        granted = threading.Event()

        def wait_for_device():
            with b.kernel(timeout=10):
                granted.set()

        with a.kernel():
            t = threading.Thread(target=wait_for_device)
            t.start()
            deadline = time.monotonic() + 10
            while b.info().waiting_for_device == 0 and time.monotonic() < deadline:
                time.sleep(0.001)
            assert a.give_way_due() is True  # its guard's end hands the device over
            assert b.give_way_due() is False
            assert not granted.is_set()
        t.join()
        assert granted.is_set()
        assert a.give_way_due() is False


def test_a_guard_waits_for_the_holder_and_times_out(key, settings):
    with gpushare.Session(key, name="holder", **settings) as a, \
            gpushare.Session(key, name="waiter", **settings) as b:
        with a.kernel():
            with pytest.raises(gpushare.Timeout):
                with b.kernel(timeout="50ms"):
                    pass
            assert b.info().waiting_for_device == 0
        with b.kernel(timeout=5):
            assert b.info().active_guards == 1


def test_guard_entry_releases_the_gil(key, settings):
    """A thread blocked entering a guard lets other Python threads run, and gets in later."""
    with gpushare.Session(key, name="holder", **settings) as a, \
            gpushare.Session(key, name="waiter", **settings) as b:
        entered = threading.Event()

        def wait_for_device():
            with b.kernel(timeout=60):
                entered.set()

        with a.kernel():
            t = threading.Thread(target=wait_for_device)
            t.start()
            counted = False
            for _ in range(6000):  # runs only if the waiter released the GIL
                if b.info().waiting_for_device == 1:
                    counted = True
                    break
                threading.Event().wait(0.01)
            assert counted
            assert not entered.is_set()
        t.join(60)
        assert entered.is_set()


def test_configure_changes_settings(key, settings):
    with gpushare.Session(key, **settings) as s:
        s.configure(priority="critical", share=7, memory_limit="50%", compute_limit=0.5,
                    quantum=datetime.timedelta(milliseconds=2), handover="guard",
                    max_guard="none")
        i = s.info()
        assert (i.priority, i.share, i.memory_limit) == (3, 7, GiB // 2)
        assert i.compute_limit_ppm == 500_000
        assert i.quantum_ns == 2_000_000
        assert i.max_guard_ns == 0


def test_snapshot_and_table(key, settings):
    with gpushare.Session(key, name="seen", **settings) as s:
        r = s.reserve(64 * MiB)
        snap = s.snapshot()
        assert snap.key == key and snap.domain == DOMAIN
        assert snap.capacity == GiB
        assert snap.reserved_total == 64 * MiB
        assert [x.name for x in snap.sessions] == ["seen"]
        assert snap.holder is None
        t = gpushare.Table.open(key, "open_existing", domain=DOMAIN)
        assert t.object_name == s.table_name
        assert not t.created
        assert t.find("seen") == [s.id]
        t.configure(s.id, share=9)
        assert s.info().share == 9
        assert t.snapshot().sessions[0].reserved == 64 * MiB
        assert gpushare.Table.remove(key, domain=DOMAIN).status == "in_use"
        r.release()
    assert gpushare.Table.remove(key, domain=DOMAIN).status == "removed"
    with pytest.raises(gpushare.NoSuchTable):
        gpushare.Table.open(key, "open_existing", domain=DOMAIN)


def test_notices_and_helpers(key, settings):
    with gpushare.Session(key, **settings):
        pass
    other = dict(settings, capacity=2 * GiB)
    keeper = gpushare.Session(key, **settings)
    with gpushare.Session(key, **other) as s:  # the table keeps its capacity: a notice says so
        assert any("capacity" in n.text for n in s.notices())
        assert all(n.severity in ("note", "warning") for n in s.notices())
    keeper.leave()
    assert gpushare.format_bytes(3 * MiB // 2) == "1.50 MiB"
    # An unlimited amount reads as gpushare status shows it, never as "8.00 EiB".
    assert gpushare.UNLIMITED == 2**63
    assert gpushare.format_bytes(gpushare.UNLIMITED) == "unlimited"
    assert gpushare.format_bytes(2**64 - 1) == "unlimited"
    assert gpushare.format_bytes(gpushare.UNLIMITED - 1) == "7.99 EiB"
    assert gpushare.format_duration(500_000) == "500us"
    assert gpushare.format_percent(300_000) == "30%"
    assert gpushare.parse_bytes("4GiB") == 4 * GiB
    assert gpushare.errors_by_code["timeout"] is gpushare.Timeout


def test_a_table_directory_holds_the_table_and_lists_it(tmp_path):
    import pathlib
    d = tmp_path / "tables"
    d.mkdir(mode=0o700)
    key = "GPU-pydir-%d" % os.getpid()
    with gpushare.Session(key, name="in-dir", domain="pytest", directory=d, capacity="64MiB") as s:
        assert s.table_name == str(d / ("gpushare.pytest.u%d.%s" % (os.geteuid(), key)))
        assert (d / pathlib.Path(s.table_name).name).is_file()
        assert gpushare.list_tables(domain="pytest", directory=str(d)) == [s.table_name]
        assert gpushare.table_name(key, "pytest", "user", str(d)) == s.table_name
        t = gpushare.Table.open(key, "open_existing", domain="pytest", directory=str(d))
        assert [x.name for x in t.snapshot().sessions] == ["in-dir"]
    with pytest.raises(gpushare.BadDirectory) as e:
        gpushare.Session(key, domain="pytest", directory=str(d / "missing"))
    assert "does not exist" in str(e.value)
    with pytest.raises(gpushare.InvalidArgument):
        gpushare.Session(key, domain="pytest", directory="relative/dir")


def test_session_info_shows_the_platform_identity(key, settings, monkeypatch):
    # docs/cluster-env.md: the pod and Slurm variables of the environment, read when it joins.
    for var, value in {"GPUSHARE_POD_NAME": "infer-0", "POD_NAMESPACE": "team-a",
                       "GPUSHARE_CONTAINER_NAME": "server", "SLURM_JOB_ID": "4242",
                       "SLURM_STEP_ID": "4294967291"}.items():
        monkeypatch.setenv(var, value)
    for var in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(var, raising=False)
    with gpushare.Session(key, name="tagged", **settings) as s:
        i = s.info().identity
        assert (i.pod, i.pod_namespace, i.container) == ("infer-0", "team-a", "server")
        assert (i.slurm_job_id, i.slurm_step_id, i.slurm_step) == (4242, 4294967291, "batch")
        assert i.slurm_array_task_id is None
        assert i
        assert i.as_dict()["pod"] == "infer-0"
        assert s.snapshot().sessions[0].identity.container == "server"
    for var in ("GPUSHARE_POD_NAME", "POD_NAMESPACE", "GPUSHARE_CONTAINER_NAME", "SLURM_JOB_ID",
                "SLURM_STEP_ID", "POD_NAME", "SLURM_JOBID", "SLURM_STEPID"):
        monkeypatch.delenv(var, raising=False)
    with gpushare.Session(key, name="plain", **settings) as s:
        assert not s.info().identity
        assert s.info().identity.slurm_job_id is None


def test_identity_keywords_win_over_the_environment(key, settings, monkeypatch):
    monkeypatch.setenv("GPUSHARE_POD_NAME", "from-env")
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    with gpushare.Session(key, name="coded", pod="coded-0", pod_namespace="", container="c",
                          slurm_job_id=77, slurm_step_id="extern", slurm_array_job_id=70,
                          slurm_array_task_id=3, **settings) as s:
        i = s.info().identity
        assert (i.pod, i.pod_namespace, i.container) == ("coded-0", "", "c")
        assert (i.slurm_job_id, i.slurm_step, i.slurm_array_job_id, i.slurm_array_task_id) == (
            77, "extern", 70, 3)
    with pytest.raises(gpushare.InvalidArgument):
        gpushare.Session(key, pod="Bad_Pod", **settings)
    with pytest.raises(gpushare.InvalidArgument):
        gpushare.Session(key, slurm_step_id="later", **settings)
    with pytest.raises(gpushare.InvalidArgument):
        gpushare.Session(key, slurm_job_id=2**32, **settings)
    with pytest.raises(TypeError):
        gpushare.Session(key, slurm_job_id="77", **settings)


def test_a_group_shares_one_memory_limit_and_share(key, settings):
    # Sessions naming one group (a pod's containers, a job's ranks) share its memory limit and
    # compute share; the limit's members must agree (docs/design.md, "Session groups").
    with gpushare.Session(key, name="a", group="pod-a", group_memory_limit="100MiB",
                          group_share=3, **settings) as a, \
            gpushare.Session(key, name="b", group="pod-a", **settings) as b, \
            gpushare.Session(key, name="lone", **settings) as lone:
        held = a.reserve(70 * MiB)
        assert b.try_reserve(31 * MiB) is None  # the group's limit, not the table's
        assert lone.try_reserve(512 * MiB) is not None
        with pytest.raises(gpushare.OverLimit) as e:
            b.reserve(101 * MiB)
        assert "group 'pod-a'" in str(e.value)
        info = {i.name: i for i in b.snapshot().sessions}
        assert info["b"].group == "pod-a"
        assert info["b"].group_memory_limit == 100 * MiB
        assert info["b"].group_share == 3
        assert info["lone"].group == ""
        with pytest.raises(gpushare.InvalidArgument) as e:
            gpushare.Session(key, name="c", group="pod-a", group_share=4, **settings)
        assert "joined with 3" in str(e.value)
        held.release()
        assert b.try_reserve(100 * MiB) is not None
