# SPDX-License-Identifier: Apache-2.0
"""`pip install --no-build-isolation .`: the gpushare Python module into the active interpreter.

setuptools builds the wheel; its build_ext step runs the project's own CMake (python/
CMakeLists.txt) with nothing but the Python module enabled, in setuptools' build_temp
(build/temp.<platform>-<python>/; never the CMake build directory build/ itself), then
`cmake --install --component python` into the wheel's tree: the same files the CMake install
puts in a site directory (the extensions, the pure-Python files, the stubs and, where CMake
builds it, the PyTorch allocator). A second `pip install .` of the same tree rebuilds only what
changed. See docs/python.md, "Build and install".

Environment:
  CMAKE                         the cmake program (default: cmake on PATH)
  CMAKE_ARGS                    more configure arguments, e.g. "-DCMAKE_CXX_COMPILER=clang++"
                                (CMake keeps them in build/temp.*/CMakeCache.txt: remove that
                                directory to drop one)
  CMAKE_BUILD_PARALLEL_LEVEL    parallel compile jobs (default: the CPU count)
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.egg_info import egg_info

ROOT = Path(__file__).resolve().parent

# setuptools before 70.1 builds wheels with the `wheel` package, and without it says only
# "invalid command 'bdist_wheel'".
try:
    import wheel  # noqa: F401
except ImportError:
    try:
        import setuptools.command.bdist_wheel  # noqa: F401 (setuptools 70.1 and later)
    except ImportError:
        if {"bdist_wheel", "dist_info"} & set(sys.argv):
            sys.exit("gpushare: building a wheel needs the `wheel` package in this interpreter,"
                     f" {sys.executable} (Debian/Ubuntu: apt-get install python3-wheel, and a "
                     "venv made with --system-site-packages; elsewhere: pip install wheel)")


def project_version():
    """The version of CMakeLists.txt's project(), the one source of it (gpushare.__version__)."""
    text = (ROOT / "CMakeLists.txt").read_text()
    match = re.search(r"project\(\s*gpushare\s+VERSION\s+([0-9][0-9.]*)", text)
    if not match:
        sys.exit("setup.py: no `project(gpushare VERSION x.y.z` in CMakeLists.txt")
    return match.group(1)


class CMakeExtension(Extension):
    """The CMake build of python/: one entry for all it builds (setuptools needs one to know
    that the wheel is platform-specific)."""

    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        cmake = os.environ.get("CMAKE") or shutil.which("cmake")
        if not cmake:
            sys.exit("gpushare: building the Python module needs CMake 3.25 or newer "
                     "(Debian/Ubuntu: apt-get install cmake)")
        build_dir = Path(self.build_temp).resolve()
        # The directory that holds the package gpushare/ in the wheel's tree (build_lib).
        package_root = Path(self.get_ext_fullpath(ext.name)).resolve().parent.parent
        build_dir.mkdir(parents=True, exist_ok=True)
        configure = [
            cmake, "-S", str(ROOT), "-B", str(build_dir),
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython3_EXECUTABLE={sys.executable}",
            # The module alone: no tests, tools, examples, benchmarks, simulated runtime or
            # install rules of the C++ package.
            "-DGPUSHARE_BUILD_PYTHON=ON", "-DGPUSHARE_BUILD_TESTS=OFF",
            "-DGPUSHARE_BUILD_EXAMPLES=OFF", "-DGPUSHARE_BUILD_BENCHMARKS=OFF",
            "-DGPUSHARE_BUILD_TOOLS=OFF", "-DGPUSHARE_BUILD_CUDASIM=OFF",
            "-DGPUSHARE_INSTALL=OFF",
            # A user's compiler: its warnings are not errors (python/CMakeLists.txt).
            "-DGPUSHARE_PYTHON_WERROR=OFF",
            # The package relative to the install prefix, which is the wheel's tree below.
            "-DGPUSHARE_PYTHON_INSTALL_DIR=.",
            # The module compiles no CUDA source (_gpushare_cuda and the allocator are C++
            # against the toolkit's headers and runtime, found without nvcc): skipping CMake's
            # checks of nvcc saves about 10 s of configuring.
            "-DCMAKE_CUDA_COMPILER=",
            # The CUDA runtime that _gpushare_cuda and the allocator were linked against stays
            # findable from the installed copies (the build tree's RPATH without the build tree).
            "-DCMAKE_INSTALL_RPATH_USE_LINK_PATH=ON",
        ] + shlex.split(os.environ.get("CMAKE_ARGS", ""))
        configured = subprocess.run(configure, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True)
        print(configured.stdout, end="", flush=True)
        if configured.returncode != 0:
            sys.exit("gpushare: configuring with CMake failed (output above): "
                     + shlex.join(configure))
        skipped = re.search(r"gpushare: Python module skipped: .*", configured.stdout)
        if skipped:
            # e.g. no Python headers (python3-dev) or no pybind11 (pybind11-dev).
            sys.exit(skipped.group(0))
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        self._run([cmake, "--build", str(build_dir), "--target", "gpushare_python",
                   "--parallel", jobs])
        self._run([cmake, "--install", str(build_dir), "--component", "python", "--prefix",
                   str(package_root)])
        built = Path(self.get_ext_fullpath(ext.name))
        if not built.exists():
            sys.exit(f"gpushare: the CMake build installed no {built.name} into {built.parent}")

    @staticmethod
    def _run(command):
        print("gpushare:", shlex.join(command), flush=True)
        if subprocess.run(command).returncode != 0:
            sys.exit(f"gpushare: command failed: {shlex.join(command)}")


class EggInfoInBuild(egg_info):
    """gpushare.egg-info (setuptools' working notes) under build/, not in the source root."""

    def finalize_options(self):
        if self.egg_base is None:  # pip's metadata step names a directory of its own
            self.egg_base = str(ROOT / "build")
            os.makedirs(self.egg_base, exist_ok=True)
        super().finalize_options()


setup(
    version=project_version(),
    packages=["gpushare"],
    package_dir={"gpushare": "python/gpushare"},
    package_data={"gpushare": ["*.pyi", "py.typed"]},
    ext_modules=[CMakeExtension("gpushare._gpushare")],
    cmdclass={"build_ext": CMakeBuild, "egg_info": EggInfoInBuild},
    zip_safe=False,
)
