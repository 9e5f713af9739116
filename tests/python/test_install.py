# SPDX-License-Identifier: Apache-2.0
# `cmake --install <build> --component python --prefix P` puts an importable package under P
# (nothing outside it), with the extension, the pure-Python files, the stubs and, where built,
# the PyTorch allocator.
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
