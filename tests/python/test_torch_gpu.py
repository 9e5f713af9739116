# SPDX-License-Identifier: Apache-2.0
"""gpushare.torch against a real CUDA build of PyTorch on a real GPU. Skipped by name where
PyTorch is missing or has no CUDA device (CI, Debian's CPU-only python3-torch).

Runs under pytest (PYTHONPATH=<build>/python) or alone:
    GPUSHARE_TEST_BUILD_DIR=build python3 tests/python/test_torch_gpu.py
Every case uses one process's allocator, so the cases share one set of settings (SETTINGS) and a
gpushare domain of their own, whose tables are removed at the end.
"""

import gc
import glob
import os
import sys

import pytest

if __name__ == "__main__":  # run alone: under pytest, which imports this file again
    if os.environ.get("GPUSHARE_TEST_BUILD_DIR"):
        sys.path.insert(0, os.path.join(os.environ["GPUSHARE_TEST_BUILD_DIR"], "python"))
    sys.exit(pytest.main([os.path.abspath(__file__), "-v", "-p", "no:cacheprovider"]))

try:
    import torch
except ImportError:
    torch = None
# Each test is collected and skipped by name (not the module), so that pytest reports them.
pytestmark = pytest.mark.skipif(
    torch is None or not torch.cuda.is_available(),
    reason="no PyTorch here" if torch is None else
    "PyTorch %s has no CUDA device here" % torch.__version__,
)

import gpushare.torch as gt  # noqa: E402

GiB = 1 << 30
MiB = 1 << 20
DOMAIN = "pytorchgpu-%d" % os.getpid()
SETTINGS = {"name": "torch-gpu-test", "memory_limit": "4GiB", "domain": DOMAIN}


@pytest.fixture(scope="module", autouse=True)
def own_domain():
    yield
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    try:
        gt.shutdown()
    finally:
        for path in glob.glob("/dev/shm/gpushare.%s.*" % DOMAIN):
            os.unlink(path)


def allocated():
    s = gt.stats(torch.cuda.current_device())
    return 0 if s is None else s["allocated"]


def test_a_tensor_in_a_budgeted_pool_is_charged_and_returned_after_empty_cache():
    before = allocated()
    with gt.budgeted_pool(**SETTINGS) as pool:
        x = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
        x.fill_(7)
        during = gt.stats(pool.device)
    assert during["allocated"] >= before + 256 * MiB
    assert during["charged"] >= 256 * MiB
    assert int(x[-1]) == 7
    del x, pool
    gc.collect()
    torch.cuda.synchronize()
    gt.empty_cache()
    assert allocated() == before, gt.stats(torch.cuda.current_device())


def test_over_the_budget_raises_out_of_memory_with_gpushare_reason():
    with gt.budgeted_pool(**SETTINGS):
        with pytest.raises(torch.cuda.OutOfMemoryError):
            torch.empty(8 * GiB, dtype=torch.uint8, device="cuda")
    assert "memory limit" in gt.last_error()
    gc.collect()
    gt.empty_cache()


def test_work_on_a_side_stream_survives_the_free_of_its_tensor():
    with gt.budgeted_pool(**SETTINGS):
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            a = torch.ones(64 * MiB // 4, device="cuda")
            b = (a * 2).sum()
        del a  # freed on `side`, stream-ordered after the kernels that use it
    torch.cuda.synchronize()
    assert float(b) == 2.0 * (64 * MiB // 4)
    gc.collect()
    gt.empty_cache()


def test_budget_mode_publishes_reserved_memory():
    if not gt.stats(torch.cuda.current_device()):
        gt.configure(**SETTINGS)
    mode = gt.budget_mode(None, interval=0)
    try:
        x = torch.empty(128 * MiB, dtype=torch.uint8, device="cuda")
        published = mode.publish()
        assert published >= 128 * MiB
        s = gt.stats(mode.device)
        assert s["external"] >= published
        total = torch.cuda.get_device_properties(mode.device).total_memory
        assert mode.fraction == pytest.approx((s["memory_limit"] - s["context_overhead"]) / total)
        del x
    finally:
        mode.stop()
        torch.cuda.set_per_process_memory_fraction(1.0, mode.device)
        torch.cuda.empty_cache()
        mode.publish()



def test_a_device_session_guards_work_on_torch_s_stream_and_plans_an_engine():
    import gpushare.cuda as gcuda
    import gpushare.engines as engines

    device = torch.cuda.current_device()
    with gcuda.DeviceSession(device, name="guarded", domain=DOMAIN, memory_limit="2GiB") as ds:
        assert ds.device.total_memory == torch.cuda.get_device_properties(device).total_memory
        stream = torch.cuda.current_stream().cuda_stream
        x = torch.randn(2048, 2048, device="cuda")
        with ds.kernel(stream) as g:
            assert g.active and g.stream == stream
            y = x @ x
        ds.synchronize()
        assert ds.info().guards >= 1
        ref = (x.double() @ x.double()).float()
        assert float((y - ref).norm() / ref.norm()) < 1e-2
        plan = engines.plan_vllm(budget=ds, weights="1GiB", activation_peak="256MiB",
                                 enforce_eager=True, margin="128MiB",
                                 device_total=ds.device.total_memory)
        assert plan.kv_cache_memory_bytes == 2 * GiB - GiB - 256 * MiB - 128 * MiB
        with ds.host.startup(timeout=5) as hold:
            assert hold.held
