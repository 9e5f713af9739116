# SPDX-License-Identifier: Apache-2.0
# Renders every image of tools/plot/gpushare-plot from the committed fixtures (fixtures/README.md:
# recorded runs of gpushare_bench_gpu --simulate, of it on cudasim and of gpushare_bench_host,
# trimmed) and checks each is a valid PNG of sensible size whose title says SIMULATED exactly
# when the run was simulated. Needs matplotlib: without it pytest exits 77 (conftest.py), which
# CTest reports as skipped.
import json
import os

import pytest

from plot_util import fixture, plot, read_png

BENCH = fixture("bench-gpu-simulated.json")
CUDASIM = fixture("bench-gpu-cudasim.json")
HOST = fixture("bench-host-handoff.json")


def check_png(path):
    width, height, size, text = read_png(path)
    assert 500 <= width <= 2000, (path, width)
    assert 300 <= height <= 1500, (path, height)
    assert size > 8 * 1024, (path, size)
    return text


@pytest.mark.parametrize("kind", ["latency", "share", "memory", "memory-time"])
def test_bench_images(kind, tmp_path):
    out = tmp_path / f"{kind}.png"
    r = plot(kind, BENCH, "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    text = check_png(out)
    assert text["Title"].endswith("(SIMULATED)"), text
    assert "SIMULATED: simulated GPU" in text["Description"], text


def test_handoff_image(tmp_path):
    out = tmp_path / "handoff.png"
    r = plot("handoff", HOST, "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = check_png(out)
    assert "futex" in text["Title"] and "SIMULATED" not in text["Title"], text


def test_gpu_run_is_not_labelled_simulated(tmp_path):
    with open(BENCH, encoding="utf-8") as f:
        doc = json.load(f)
    doc["mode"] = "gpu"
    doc["device"] = {"name": "Test GPU"}
    src = tmp_path / "gpu.json"
    src.write_text(json.dumps(doc))
    out = tmp_path / "latency.png"
    r = plot("latency", str(src), "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = check_png(out)
    assert "SIMULATED" not in text["Title"] and "GPU: Test GPU" in text["Description"], text


@pytest.mark.parametrize("kind", ["latency", "share", "memory", "memory-time"])
def test_cudasim_images(kind, tmp_path):
    out = tmp_path / f"{kind}.png"
    r = plot(kind, CUDASIM, "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = check_png(out)
    assert "(SIMULATED, cudasim)" in text["Title"], text
    assert "cudasim, the simulated CUDA runtime" in text["Description"], text


def test_all_writes_every_image(tmp_path):
    r = plot("all", BENCH, HOST, "-d", str(tmp_path))
    assert r.returncode == 0, r.stderr
    names = sorted(os.path.basename(line) for line in r.stdout.split())
    assert names == ["handoff.png", "latency.png", "memory-time.png", "memory.png", "share.png"]
    for name in names:
        check_png(tmp_path / name)


def test_all_makes_a_missing_folder(tmp_path):
    folder = tmp_path / "new" / "images"  # (issue 42, B10: was "no such folder")
    r = plot("all", BENCH, "-d", str(folder))
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(folder)) == ["latency.png", "memory-time.png", "memory.png",
                                          "share.png"]


def test_null_values_are_drawn_around(tmp_path):
    """The benchmark writes null for a value that was not finite; the images still render."""
    with open(BENCH, encoding="utf-8") as f:
        doc = json.load(f)
    run = doc["results"]["qos"][0]
    run["series"]["qos.latency_ms.gpushare"][0] = None
    doc["results"]["share"][0]["series"]["share.3to1.windows_events_pct.gpushare"][0] = None
    doc["results"]["memory"][0]["figures"]["memory.max_wait_s.gpushare"] = None
    doc["results"]["memory"][0]["series"]["memory.timeline.ended_s.gpushare"][1] = None
    doc["results"]["memory"][0]["series"]["memory.timeline.asked_s.unmanaged"][0] = None
    src = tmp_path / "nulls.json"
    src.write_text(json.dumps(doc))
    for kind in ("latency", "share", "memory", "memory-time"):
        out = tmp_path / f"{kind}.png"
        r = plot(kind, str(src), "-o", str(out))
        assert r.returncode == 0, (kind, r.stderr)
        check_png(out)


def without_timeline(tmp_path):
    with open(BENCH, encoding="utf-8") as f:
        doc = json.load(f)
    for run in doc["results"]["memory"]:
        run["series"] = {k: v for k, v in run.get("series", {}).items()
                         if not k.startswith("memory.timeline.")}
    src = tmp_path / "old.json"
    src.write_text(json.dumps(doc))
    return doc, src


def test_memory_time_needs_the_timeline(tmp_path):
    """A JSON from a benchmark older than the timeline: memory-time says so; 'all' leaves it out."""
    _, src = without_timeline(tmp_path)
    r = plot("memory-time", str(src), "-o", str(tmp_path / "x.png"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "has no timeline" in r.stderr and "run the memory scenario again" in r.stderr, r.stderr
    assert not (tmp_path / "x.png").exists()
    folder = tmp_path / "all"
    folder.mkdir()
    r = plot("all", str(src), "-d", str(folder))
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(folder)) == ["latency.png", "memory.png", "share.png"]


def test_memory_time_series_of_different_lengths(tmp_path):
    with open(BENCH, encoding="utf-8") as f:
        doc = json.load(f)
    doc["results"]["memory"][0]["series"]["memory.timeline.granted_s.gpushare"].pop()
    src = tmp_path / "short.json"
    src.write_text(json.dumps(doc))
    r = plot("memory-time", str(src), "-o", str(tmp_path / "x.png"))
    assert r.returncode == 2 and "differ in length" in r.stderr, r.stderr


def test_memory_steps_add_up():
    """The stacked memory is the jobs' fractions held at each moment (checked on random jobs)."""
    import importlib.machinery
    import importlib.util
    import random

    path = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "plot", "gpushare-plot")
    loader = importlib.machinery.SourceFileLoader("gpushare_plot", path)
    spec = importlib.util.spec_from_loader("gpushare_plot", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    rng = random.Random(30)
    for _ in range(200):
        jobs = []
        for _ in range(rng.randint(1, 6)):
            asked = rng.uniform(0, 2)
            granted = asked + rng.uniform(0, 1) if rng.random() < 0.7 else float("nan")
            ended = (granted if granted == granted else asked) + rng.uniform(0, 1)
            jobs.append((asked, granted, ended, 0.0))
        fraction = rng.uniform(0.05, 0.5)
        times, held = mod.memory_steps(jobs, fraction)
        assert times == sorted(times)
        for k, t in enumerate(times):
            expect = sum(fraction * 100 for _, g, e, _ in jobs if g == g and g <= t < e)
            assert abs(sum(h[k] for h in held) - expect) < 1e-9
