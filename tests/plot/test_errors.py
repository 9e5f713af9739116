# SPDX-License-Identifier: Apache-2.0
# tools/plot/gpushare-plot's errors: a missing, malformed, unrecognised or wrong-kind JSON file
# gives one clear line on stderr and exit status 2 (no traceback); without matplotlib, one line
# naming the Debian package and exit status 3. These need no matplotlib: the input is checked
# before it is imported.
import os

import pytest

from plot_util import fixture, plot

BENCH = fixture("bench-gpu-simulated.json")
HOST = fixture("bench-host-handoff.json")


def one_line_error(r, *words):
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("gpushare-plot: "), lines
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def test_missing_file(tmp_path):
    missing = str(tmp_path / "nothing.json")
    one_line_error(plot("latency", missing, "-o", str(tmp_path / "x.png")), missing, "no such file")


@pytest.mark.parametrize("content", ["", "{\"schema\": \"gpushare-bench-gpu/1\", ", "[1, 2,]",
                                     "\x00\x01binary"])
def test_malformed_json(tmp_path, content):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    one_line_error(plot("share", str(bad), "-o", str(tmp_path / "x.png")), "not valid JSON")
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("content", ["{\"a\": 1}", "[]", "42", "{\"schema\": \"other/1\"}"])
def test_unrecognised_json(tmp_path, content):
    odd = tmp_path / "odd.json"
    odd.write_text(content)
    one_line_error(plot("memory", str(odd), "-o", str(tmp_path / "x.png")),
                   "not a JSON gpushare-plot knows")


def test_wrong_kind(tmp_path):
    out = str(tmp_path / "x.png")
    one_line_error(plot("latency", HOST, "-o", out), "needs gpushare_bench_gpu --json")
    one_line_error(plot("handoff", BENCH, "-o", out), "needs gpushare_bench_host")
    assert not os.path.exists(out)


def test_scenario_missing(tmp_path):
    only_memory = tmp_path / "memory-only.json"
    only_memory.write_text('{"schema": "gpushare-bench-gpu/1", "mode": "simulated", '
                           '"results": {"memory": [{"repeat": 1, "figures": {}}]}}')
    one_line_error(plot("latency", str(only_memory), "-o", str(tmp_path / "x.png")),
                   "has no qos results")


def test_failed_scenario(tmp_path):
    failed = tmp_path / "failed.json"
    failed.write_text('{"schema": "gpushare-bench-gpu/1", "mode": "simulated", '
                      '"results": {"qos": [{"repeat": 1, "error": "worker died"}]}}')
    one_line_error(plot("latency", str(failed), "-o", str(tmp_path / "x.png")), "worker died")


def test_odd_layout(tmp_path):
    odd = tmp_path / "odd.json"
    odd.write_text('{"schema": "gpushare-bench-gpu/1", "mode": "simulated", "results": '
                   '{"qos": [{"repeat": 1, "series": {"qos.latency_ms.gpushare": "x"}}]}}')
    one_line_error(plot("latency", str(odd), "-o", str(tmp_path / "x.png")),
                   "not a list of numbers")


def test_unwritable_output(tmp_path):
    out = str(tmp_path / "no" / "such" / "dir" / "x.png")
    r = plot("memory", BENCH, "-o", out)
    if r.returncode == 3:
        pytest.skip("matplotlib is not installed: the image is never drawn")
    one_line_error(r, "cannot write the image")


def test_without_matplotlib(tmp_path):
    fake = tmp_path / "matplotlib"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    r = plot("memory", BENCH, "-o", str(tmp_path / "x.png"), env=env)
    assert r.returncode == 3, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    assert r.stderr.strip() == ("gpushare-plot: matplotlib is not installed (Debian/Ubuntu: "
                                "apt-get install python3-matplotlib)")


def test_help_documents_every_kind():
    r = plot("--help")
    assert r.returncode == 0
    for word in ("latency", "share", "memory", "handoff", "all", "SIMULATED", "python3-matplotlib"):
        assert word in r.stdout, word


def test_all_into_a_file_or_an_uncreatable_folder(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("")
    one_line_error(plot("all", BENCH, "-d", str(a_file)), str(a_file), "not a folder")
    one_line_error(plot("all", BENCH, "-d", str(a_file / "sub")), "cannot create the folder")
