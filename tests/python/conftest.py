# SPDX-License-Identifier: Apache-2.0
# Fixtures of the Python module's tests (tests/python/CMakeLists.txt runs each file under CTest).
#   key           a table key of this test alone, in domain "gpusharetest"; removed afterwards
#   settings      Session keywords for that table: domain and a 1 GiB capacity
#   cudasim_env   an environment for a child process on the simulated CUDA runtime (a state of
#                 its own, removed afterwards); skips the test where cudasim is not built
import os
import re
import subprocess
import sys
import uuid

import pytest

import gpushare

DOMAIN = "gpusharetest"
GiB = 1 << 30
MiB = 1 << 20

# The platform's variables a session reads (docs/cluster-env.md: a pod's or Slurm job's identity,
# a cluster scheduler's limits) are unset, as the C++ tests' main() does, so that the tests run
# alike in a pod, in a Slurm job and on a desktop; a test that wants them sets them.
_PLATFORM = ("GPUSHARE_POD_NAME", "POD_NAME", "GPUSHARE_POD_NAMESPACE", "POD_NAMESPACE",
             "GPUSHARE_CONTAINER_NAME", "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID",
             "SLURM_STEPID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
             "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
for _name in list(os.environ):
    if _name in _PLATFORM or re.fullmatch(r"CUDA_DEVICE_(MEMORY|SM)_LIMIT(_.*)?", _name):
        del os.environ[_name]


def unique_key(what="pytest"):
    return f"{what}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def remove_table(key, domain=DOMAIN):
    """Removes the table of `key`; one that a leaked session keeps is unlinked all the same."""
    try:
        if gpushare.Table.remove(key, domain=domain).status == "in_use":
            os.unlink("/dev/shm" + gpushare.table_name(key, domain))
    except (gpushare.Error, FileNotFoundError):
        pass


@pytest.fixture
def key():
    k = unique_key()
    yield k
    remove_table(k)


@pytest.fixture
def settings():
    return {"domain": DOMAIN, "capacity": GiB}


def cudasim_lib():
    """The simulated libcudart's directory, or None where it is not built."""
    lib = os.environ.get("GPUSHARE_TEST_CUDASIM_LIB")
    if not lib:
        build = os.environ.get("GPUSHARE_TEST_BUILD_DIR")
        lib = os.path.join(build, "tools", "cudasim", "lib") if build else None
    return lib if lib and os.path.isdir(lib) else None


@pytest.fixture
def cudasim_env():
    lib = cudasim_lib()
    if lib is None:
        pytest.skip("the simulated CUDA runtime is not built (GPUSHARE_TEST_CUDASIM_LIB unset)")
    state = f"gpushare-pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["CUDASIM_STATE"] = state
    yield env
    try:
        os.unlink("/dev/shm/" + state)
    except FileNotFoundError:
        pass


def run_python(code, env=None, timeout=120):
    """Runs `code` in a fresh interpreter (this one), returning the CompletedProcess."""
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout)
