# SPDX-License-Identifier: Apache-2.0
# `pip install --no-build-isolation .` (pyproject.toml, setup.py; issue 42 B11) puts an importable
# gpushare into the active interpreter: here a fresh venv (with the system's site packages, for
# setuptools and wheel), then the interpreter's user site (`pip install --user`). Each time the
# module must come from where pip put it (never from the build tree), work (a session on a table
# of its own reserves memory and leaves), and `pip uninstall` must remove it.
#
# pip builds the module with CMake in the repository's build/temp.<platform>-<python>/: the first
# install of a tree compiles it (1-3 min on 2 CPUs), a later one rebuilds only what changed. So
# this file runs only when GPUSHARE_TEST_PIP=1 (CI's pip stage sets it, after its own install of
# the same clone); then a missing venv, pip, setuptools or wheel fails it instead of skipping it.
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DOMAIN, remove_table, unique_key

REPO = Path(__file__).resolve().parents[2]
REQUIRED = os.environ.get("GPUSHARE_TEST_PIP") == "1"

pytestmark = pytest.mark.skipif(
    not REQUIRED, reason="builds and installs the module with pip (1-3 min the first time): "
    "set GPUSHARE_TEST_PIP=1 to run it (CI's pip stage does)")

# A short real use: join a table of its own, reserve, leave; then say where everything came from.
USE = """
import json, sys
import gpushare, gpushare._gpushare as ext
key, domain = sys.argv[1], sys.argv[2]
with gpushare.Session(key, name="pip-install", domain=domain, capacity="1GiB") as s:
    with s.reserve("64MiB", timeout=10) as r:
        reserved = s.info().reserved
        assert r.bytes == 64 << 20 and reserved == 64 << 20, (r.bytes, reserved)
    assert s.info().reserved == 0
gpushare.Table.remove(key, domain=domain)
print(json.dumps({"package": gpushare.__file__, "extension": ext.__file__,
                  "version": gpushare.__version__, "reserved": reserved}))
"""


def unavailable(reason):
    if REQUIRED:
        pytest.fail(f"GPUSHARE_TEST_PIP=1 but {reason}")
    pytest.skip(reason)


def run(command, env, timeout=120):
    return subprocess.run([str(c) for c in command], env=env, cwd=env["HOME"],
                          capture_output=True, text=True, timeout=timeout)


def clean_env(home):
    """An environment without PYTHONPATH (the build tree's package), with a HOME of its own
    (pip's config, the user base)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "VIRTUAL_ENV")}
    env.update(HOME=str(home), PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1",
               PYTHONDONTWRITEBYTECODE="1")
    return env


def check_build_tools(python, env):
    # (setuptools before anything that imports distutils: pip does, and setuptools then fails.)
    tools = run([python, "-c", "import setuptools, wheel, pip"], env)
    if tools.returncode != 0:
        unavailable(f"{python} lacks pip, setuptools or wheel, which --no-build-isolation needs "
                    "(Debian/Ubuntu: apt-get install python3-pip python3-setuptools "
                    f"python3-wheel): {tools.stderr.strip()[-300:]}")


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh venv (with the system's site packages, for setuptools and wheel)."""
    root = tmp_path_factory.mktemp("pip")
    env = clean_env(root)
    made = run([sys.executable, "-m", "venv", "--system-site-packages", root / "venv"], env)
    if made.returncode != 0:
        unavailable(f"{sys.executable} -m venv failed (Debian/Ubuntu: apt-get install "
                    f"python3-venv): {made.stderr.strip()[-500:]}")
    python = root / "venv" / "bin" / "python"
    check_build_tools(python, env)
    return python, env


def pip(python, env, *args, timeout=120):
    r = run([python, "-m", "pip", *args], env, timeout=timeout)
    assert r.returncode == 0, f"pip {' '.join(args)}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def use(python, env):
    key = unique_key("pip")
    try:
        r = run([python, "-c", USE, key, DOMAIN], env, timeout=60)
    finally:
        remove_table(key)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def where(python, env):
    """Where the interpreter would import gpushare from now ("" when nowhere)."""
    code = "import importlib.util as u; s = u.find_spec('gpushare'); print(s.origin if s else '')"
    r = run([python, "-c", code], env)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def assert_installed_under(found, site):
    for path in (Path(found["package"]).resolve(), Path(found["extension"]).resolve()):
        assert path.is_relative_to(site.resolve()), (path, site)
        for tree in (REPO / "build", REPO / "python"):  # CMake's and pip's builds, the sources
            assert not path.is_relative_to(tree), (path, tree)


def test_pip_installs_into_a_fresh_venv_and_uninstalls(venv):
    python, env = venv
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_path('platlib'))"],
                    env).stdout.strip())
    assert site.is_relative_to(python.parent.parent), site
    pip(python, env, "install", "--no-build-isolation", "--no-deps", REPO, timeout=1200)

    found = use(python, env)
    assert_installed_under(found, site)
    assert found["reserved"] == 64 << 20
    names = {p.name for p in (site / "gpushare").iterdir()}
    assert {"__init__.py", "__init__.pyi", "engines.py", "torch.py", "py.typed"} <= names, names

    r = pip(python, env, "uninstall", "-y", "gpushare")
    assert "Successfully uninstalled gpushare" in r.stdout, r.stdout
    assert not (site / "gpushare").exists()
    assert not list(site.glob("gpushare-*.dist-info"))
    assert not where(python, env).startswith(str(python.parent.parent)), where(python, env)


def test_pip_install_user_puts_it_in_the_user_site(tmp_path):
    # The interpreter itself, not a venv (whose pip leaves a user site alone), with a user base
    # of this test's own. Debian marks its interpreter externally managed: pip then refuses
    # --user unless told --break-system-packages, which breaks nothing here (PYTHONUSERBASE).
    python = Path(getattr(sys, "_base_executable", sys.executable))
    env = dict(clean_env(tmp_path), PYTHONUSERBASE=str(tmp_path / "user"))
    check_build_tools(python, env)
    managed = run([python, "-c", "import sysconfig, os; print(os.path.exists(os.path.join("
                   "sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))"], env)
    extra = ["--break-system-packages"] if managed.stdout.strip() == "True" else []
    pip(python, env, "install", "--user", *extra, "--no-build-isolation", "--no-deps", REPO,
        timeout=1200)
    site = Path(run([python, "-c", "import site; print(site.getusersitepackages())"],
                    env).stdout.strip())
    assert site.is_relative_to(tmp_path / "user"), site
    found = use(python, env)
    assert_installed_under(found, site)
    r = pip(python, env, "uninstall", "-y", *extra, "gpushare")
    assert "Successfully uninstalled gpushare" in r.stdout, r.stdout
    assert not (site / "gpushare").exists()
    assert not where(python, env).startswith(env["PYTHONUSERBASE"])
