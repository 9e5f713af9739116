# SPDX-License-Identifier: Apache-2.0
# tmp_path: a temporary folder removed after each test (pytest's own keeps the last runs');
# test_render.py is skipped (exit status 77) where matplotlib is missing.
import pathlib
import tempfile

import pytest


@pytest.fixture
def tmp_path():
    with tempfile.TemporaryDirectory(prefix="gpushare-plot-test-") as d:
        yield pathlib.Path(d)


def pytest_collection_modifyitems(config, items):
    """test_render.py needs matplotlib: without it, the run stops with exit status 77 (skipped)."""
    if not any(item.path.name == "test_render.py" for item in items):
        return
    try:
        import matplotlib

        del matplotlib
    except ImportError:
        pytest.exit("skipped: matplotlib is not installed (Debian/Ubuntu: apt-get install "
                    "python3-matplotlib)", returncode=77)
