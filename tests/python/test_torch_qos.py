# SPDX-License-Identifier: Apache-2.0
# bench/gpu/torch_qos.py, the PyTorch qos benchmark for a GPU machine (issue 41, item 6): its
# pure parts (percentiles, seeded Poisson arrivals, the per-phase figures, the table, argument
# errors), and the whole harness on the CPU (--backend sim: sleeps for GPU work, host gpushare
# sessions in the gpushare phase), which needs neither PyTorch nor a GPU.
import importlib.util
import json
import math
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "gpu" / "torch_qos.py"
spec = importlib.util.spec_from_file_location("torch_qos", SCRIPT)
tq = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tq)


def test_percentile_interpolates_and_is_nan_for_nothing():
    assert math.isnan(tq.percentile([], 99))
    assert tq.percentile([5.0], 99) == 5.0
    assert tq.percentile([1, 2, 3, 4], 50) == 2.5
    assert tq.percentile(list(range(101)), 99) == 99
    assert tq.percentile([3, 1, 2], 0) == 1 and tq.percentile([3, 1, 2], 100) == 3


def test_arrivals_are_seeded_poisson_at_the_rate():
    a = tq.arrivals(200.0, 50.0, 7)
    assert a == tq.arrivals(200.0, 50.0, 7)  # the same seed, the same schedule
    assert a != tq.arrivals(200.0, 50.0, 8)
    assert all(0 <= x < 50.0 for x in a) and a == sorted(a)
    assert abs(len(a) / 50.0 - 200.0) < 200.0 * 0.05  # 10,000 expected
    gaps = [b - x for x, b in zip(a, a[1:])]
    mean = sum(gaps) / len(gaps)
    var = sum((g - mean) ** 2 for g in gaps) / len(gaps)
    assert abs(math.sqrt(var) / mean - 1) < 0.05  # exponential gaps: sd = mean


def test_summarize_judges_against_solo_and_the_ceiling():
    runs = [{"latencies": [(0.1, 100.0)] + [(1.0 + i / 100, float(i % 10 + 1)) for i in range(100)],
             "train_rate": 30.0, "train_solo": 100.0},
            {"latencies": [(1.0 + i / 100, 2.0) for i in range(100)],
             "train_rate": 40.0, "train_solo": 100.0}]
    f = tq.summarize(runs, solo_p99_ms=2.0, load=0.5, warmup_s=0.5)
    # The 100 ms request arrived in the warm-up: not counted. Repeat 1: p99 of 1..10 = 10.
    assert f["p99_ms"] == pytest.approx((10.0 + 2.0) / 2)
    assert f["p99_over_solo"] == pytest.approx(3.0)
    assert f["p99_excess_ms"] == pytest.approx(4.0)
    assert f["training_kept"] == pytest.approx(0.35)
    assert f["training_ceiling"] == pytest.approx(0.5)
    assert f["training_of_ceiling"] == pytest.approx(0.7)
    solo = tq.summarize([{"latencies": [(1, 1.0)], "train_rate": None, "train_solo": 10}], 1.0,
                        0.2, 0)
    assert math.isnan(solo["training_kept"])


def test_table_labels_a_simulated_run_and_lists_the_phases():
    f = tq.summarize([{"latencies": [(1, 1.0)], "train_rate": 5, "train_solo": 10}], 1.0, 0.5, 0)
    text = tq.table("bert", 0.5, {p: f for p in tq.PHASES}, 0.8, "sim")
    assert "SIMULATED" in text and "floor (training layer) 0.800 ms" in text
    for phase in tq.PHASES:
        assert ("\n" + phase) in text
    assert "SIMULATED" not in tq.table("bert", 0.5, {"solo": f}, 0.8, "torch")


def test_no_nan_makes_json_valid():
    assert tq.no_nan({"a": math.nan, "b": {"c": 1.5, "d": math.nan}}) == \
        {"a": None, "b": {"c": 1.5, "d": None}}


@pytest.mark.parametrize("argv, says", [
    (["--load", "1"], "--load must be between 0 and 1"),
    (["--load", "0"], "--load must be between 0 and 1"),
    (["--repeats", "0"], "--repeats must be at least 1"),
    (["--phase-seconds", "1", "--warmup-seconds", "2"], "longer than --warmup-seconds"),
    (["--model", "gpt"], "invalid choice"),
])
def test_bad_arguments_exit_2_saying_what(argv, says):
    r = subprocess.run([sys.executable, str(SCRIPT)] + argv, capture_output=True, text=True,
                       check=False)
    assert r.returncode == 2
    assert says in r.stderr


def test_the_harness_runs_every_phase_on_the_cpu(tmp_path):
    out = tmp_path / "qos.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--backend", "sim", "--model", "resnet",
                        "--repeats", "1", "--phase-seconds", "2", "--warmup-seconds", "0.3",
                        "--load", "0.4", "--json", str(out)],
                       capture_output=True, text=True, check=False, timeout=240)
    assert r.returncode == 0, r.stderr
    assert "SIMULATED (sleeps, not GPU figures)" in r.stdout
    record = json.loads(out.read_text())
    assert record["backend"] == "sim" and record["model"] == "resnet"
    figures = record["figures"]
    assert set(figures) == set(tq.PHASES)
    for phase in tq.PHASES:
        assert figures[phase]["p50_ms"] >= 3.5  # a request sleeps 4 ms
        assert figures[phase]["p99_ms"] >= figures[phase]["p50_ms"]
    assert figures["solo"]["training_kept"] is None  # no training in the solo phase
    for phase in ("unmanaged", "gpushare", "oracle"):
        assert 0 < figures[phase]["training_kept"] <= 1.3
    # Host guards make training wait for requests (the CPU sleeps do not interfere otherwise).
    assert figures["gpushare"]["training_kept"] < figures["unmanaged"]["training_kept"]
    assert not list(pathlib.Path("/dev/shm").glob("gpushare.torchqos-*"))
