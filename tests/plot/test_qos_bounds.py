# SPDX-License-Identifier: Apache-2.0
# bench/gpu/qos_bounds.py, which CI runs on the simulated benchmark (tools/gpu-check.sh): a
# recorded run meets the bounds; a run made worse in each figure misses the bound it should and
# exits 1; a run with nothing to judge exits 0 and says so; unreadable input exits 2.
import copy
import json
import pathlib
import subprocess
import sys

from plot_util import fixture

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "gpu" / "qos_bounds.py"


def check(record, tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(record) if not isinstance(record, str) else record)
    return subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True,
                          text=True, check=False)


def recorded():
    with open(fixture("bench-gpu-cudasim.json"), encoding="utf-8") as f:
        return json.load(f)


def test_recorded_run_meets_the_bounds(tmp_path):
    r = check(recorded(), tmp_path)
    assert r.returncode == 0, r.stdout
    assert r.stdout.count(": met") == 3
    assert "p99" in r.stdout and "not judged" in r.stdout
    assert "SIMULATED" in r.stdout


def worse(figure, factor):
    rec = copy.deepcopy(recorded())
    for rep in rec["results"]["qos"]:
        rep["figures"][figure] *= factor
    return rec


def test_each_bound_catches_a_worse_run(tmp_path):
    cases = [("qos.p50_ms.unmanaged", 0.01, "p50 with gpushare / unmanaged"),
             ("qos.p50_ms.solo", 0.3, "p50 with gpushare / solo"),
             ("qos.training_kept.gpushare", 0.3, "training kept")]
    for figure, factor, what in cases:
        r = check(worse(figure, factor), tmp_path)
        assert r.returncode == 1, (figure, r.stdout)
        missed = [line for line in r.stdout.splitlines() if "MISSED" in line]
        assert len(missed) == 1 and what in missed[0], (figure, r.stdout)
    # The p99 alone is not judged (a quick phase's p99 is one or two requests).
    r = check(worse("qos.p99_ms.gpushare", 50.0), tmp_path)
    assert r.returncode == 0, r.stdout


def test_nothing_to_judge(tmp_path):
    rec = recorded()
    del rec["results"]["qos"]
    r = check(rec, tmp_path)
    assert r.returncode == 0 and "not judged" in r.stdout
    rec = recorded()
    for rep in rec["results"]["qos"]:
        rep["trustworthy"] = False
    r = check(rec, tmp_path)
    assert r.returncode == 0 and "not judged" in r.stdout


def test_unreadable_input(tmp_path):
    r = check("{ not json", tmp_path)
    assert r.returncode == 2 and "cannot read" in r.stderr
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "usage" in r.stderr
