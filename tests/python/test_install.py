# SPDX-License-Identifier: Apache-2.0
# `cmake --install <build> --component python --prefix P` puts an importable package under P
# (nothing outside it), with the extension, the pure-Python files, the stubs and, where built,
# the PyTorch allocator; with DESTDIR, all of it under DESTDIR once (issue 42 B7: the .py files
# went under DESTDIR twice).
import glob
import os
import shutil
import subprocess
import sys

import pytest


def test_the_installed_package_imports_from_the_prefix(tmp_path):
    build = os.environ.get("GPUSHARE_TEST_BUILD_DIR")
    cmake = shutil.which("cmake")
    if not build or not cmake:
        pytest.skip("needs GPUSHARE_TEST_BUILD_DIR and cmake on PATH")
    prefix = tmp_path / "prefix"
    r = subprocess.run([cmake, "--install", build, "--component", "python", "--prefix",
                        str(prefix)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    inits = glob.glob(str(prefix / "**" / "gpushare" / "__init__.py"), recursive=True)
    assert len(inits) == 1, r.stdout
    package = os.path.dirname(inits[0])
    names = set(os.listdir(package))
    assert {"__init__.py", "__init__.pyi", "engines.py", "torch.py", "py.typed"} <= names
    assert any(n.startswith("_gpushare.") and n.endswith(".so") for n in names)
    if os.path.exists(os.path.join(build, "python", "gpushare", "libgpushare_torch_alloc.so")):
        assert "libgpushare_torch_alloc.so" in names
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.path.dirname(package)
    code = "import gpushare, gpushare.engines; print(gpushare.__file__, gpushare.__version__)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(package), out.stdout


def test_destdir_holds_the_whole_package_once(tmp_path):
    build = os.environ.get("GPUSHARE_TEST_BUILD_DIR")
    cmake = shutil.which("cmake")
    if not build or not cmake:
        pytest.skip("needs GPUSHARE_TEST_BUILD_DIR and cmake on PATH")
    stage = tmp_path / "stage"
    prefix = "/opt/gpushare-destdir-test"
    env = dict(os.environ, DESTDIR=str(stage))
    r = subprocess.run([cmake, "--install", build, "--component", "python", "--prefix", prefix],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not os.path.exists(prefix)  # nothing outside DESTDIR
    files = [os.path.relpath(f, stage) for f in glob.glob(str(stage / "**" / "*"), recursive=True)
             if os.path.isfile(f)]
    assert files, r.stdout
    for f in files:
        assert f.startswith(prefix.lstrip("/") + "/"), f  # under DESTDIR + prefix
        assert str(stage).lstrip("/") not in f, f  # and DESTDIR only once
    names = {os.path.basename(f) for f in files}
    assert {"__init__.py", "__init__.pyi", "engines.py", "py.typed"} <= names
    assert any(n.startswith("_gpushare.") and n.endswith(".so") for n in names)
    packages = {os.path.dirname(f) for f in files if f.endswith(("__init__.py", ".so"))}
    assert len(packages) == 1, packages  # the .py files beside the extension
