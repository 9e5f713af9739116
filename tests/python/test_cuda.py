# SPDX-License-Identifier: Apache-2.0
# gpushare.cuda on the simulated CUDA runtime (tools/cudasim): a DeviceSession joins the table of
# the simulated device's UUID, reserves (also reclaimable memory), allocates, guards a stream, and
# leaves (stopping its reclaim watcher). Run in a child
# interpreter, which the simulated libcudart must be loaded into from its start.
import glob
import json
import os

import pytest

import gpushare
from conftest import DOMAIN, remove_table, run_python

CHILD = r"""
import json, gpushare
from gpushare.cuda import DeviceSession
out = {}
with DeviceSession(0, name="py-device", domain="%(domain)s", memory_limit="2GiB",
                   allocation_timeout="5s", headroom="1GiB", drain="stream",
                   reclaim_deadline="500ms", guard_timing="each") as ds:
    out["uuid"] = ds.device.uuid
    out["total"] = ds.device.total_memory
    out["capacity"] = ds.snapshot().capacity
    out["external"] = ds.info().external
    with ds.reserve("256MiB", timeout=5) as r:
        out["reserved"] = ds.info().reserved
    ptr = ds.malloc("64MiB")
    out["ptr_nonzero"] = ptr != 0
    out["after_malloc"] = ds.info().reserved
    with ds.kernel(0, timeout=5) as g:
        out["active"] = ds.info().active_guards
    ds.synchronize()
    ds.free(ptr)
    out["after_free"] = ds.info().reserved
    out["guards"] = ds.info().guards
    out["stats_keys"] = sorted(ds.statistics())
    out["stream_priority"] = ds.stream_priority
    with ds.reserve("128MiB", timeout=5, reclaimable=True) as cache:
        extra = ds.try_reserve("32MiB", reclaimable=True)
        out["reclaimable"] = [cache.reclaimable, extra.reclaimable, ds.info().reclaim.reclaimable]
        extra.release()
    ds.host.on_reclaim(lambda asked: 0)
    ds.host.watch_reclaim()  # leaving (the end of the block) stops it
    try:
        ds.reserve("3GiB")
    except gpushare.OverLimit as e:
        out["over_limit"] = e.code
out["joined_after"] = ds.joined
print(json.dumps(out))
"""


def cuda_extension_built():
    return bool(glob.glob(os.path.join(os.path.dirname(gpushare.__file__), "_gpushare_cuda*")))


def test_import_gpushare_needs_no_cuda():
    r = run_python("import gpushare, sys; print('gpushare._gpushare_cuda' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_device_session_on_cudasim(cudasim_env):
    if not cuda_extension_built():
        pytest.skip("gpushare._gpushare_cuda is not built (no CUDA toolkit at configure time)")
    r = run_python(CHILD % {"domain": DOMAIN}, env=cudasim_env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    try:
        GiB, MiB = 1 << 30, 1 << 20
        assert out["uuid"].startswith("GPU-")
        assert out["capacity"] == out["total"] - GiB
        assert out["external"] > 0  # the context, measured
        assert out["reserved"] == 256 * MiB
        assert out["ptr_nonzero"]
        assert out["after_malloc"] == 64 * MiB
        assert out["active"] == 1
        assert out["after_free"] == 0
        assert out["guards"] == 1
        assert "drains" in out["stats_keys"]
        assert "batched_guards" in out["stats_keys"]
        assert out["stream_priority"] == 0  # the normal class: the default priority
        assert out["over_limit"] == "over_limit"
        assert out["reclaimable"] == [True, True, 160 * MiB]
        assert out["joined_after"] is False
    finally:
        remove_table(out["uuid"])
