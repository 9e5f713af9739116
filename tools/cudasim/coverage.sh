#!/usr/bin/env bash
# Line coverage of the CUDA layer (include/gpushare/cuda/, detail/ included) reached by the CUDA
# tests on the simulated runtime (ctest -L cudasim), measured with gcc's --coverage and gcovr.
#
#   tools/cudasim/coverage.sh [--build-dir DIR] [--jobs N] [--min PERCENT] [--cudasim-only]
#
#   --build-dir DIR  build tree (default: build-coverage in the repository), configured Debug
#                    with -DGPUSHARE_COVERAGE=ON (cmake/coverage.cmake), no benchmarks/examples
#   --jobs N         parallel build and gcov jobs (default: the number of cores)
#   --min PERCENT    fail (exit 2) if the total line coverage is below PERCENT
#   --cudasim-only   count the cudasim tests alone (default: also unit-device and unit-nvml,
#                    the layer's CUDA-free rules tested with g++)
#
# It builds only what the cudasim tests run (cuda-device, cuda-identity, cuda-layer, cuda-faults,
# cuda-capture, cuda-thrust, the simulator's own tests, the helpers, the simulated libcudart and
# libnvidia-ml), removes earlier runs' counters (*.gcda), runs the tests, and prints gcovr's
# per-file table (with the uncovered lines) and the totals. The reports stay in DIR/coverage/:
# coverage.txt (the table), coverage.json, index.html (annotated sources).
# Exits non-zero if the build or a test fails (the report is still printed), or the coverage is
# below --min. Needs cmake, ctest, gcovr (tested with Debian's 5.2) and the compiler's gcov
# (GCOV=... to choose another).
#
# nvcc-compiled objects. The .cu files' host code is compiled by gcc under nvcc
# (-Xcompiler=--coverage); its #line directives attribute the lines to the .cu file and the
# headers (absolute paths), so gcovr sums them with the g++ objects' counts. Two things need
# mending on the way, which this script does by running gcov through itself (--as-gcov):
#   - the kernels' host stubs are attributed to nvcc's deleted temporary
#     /tmp/tmpxft_*.cudafe1.stub.c; gcov's "Cannot open source file" for it makes gcovr drop the
#     whole object's data (every header line only a .cu file runs, all of thrust.hpp). That one
#     message is removed; any other missing source still makes gcovr warn.
#   - cudafe++ moves some lambdas up a line or two (to the line of the call they are passed to),
#     so a header lambda's function record starts on another line than in a g++ object, and
#     gcovr 5.2 stops on the mismatch (merge_function: assert left.lineno == right.lineno).
#     nvcc objects' lambda function records are dropped: their lines are still counted, only
#     the function summary of a lambda run from .cu files alone is lost.
set -euo pipefail

# --as-gcov ARGS: gcov ARGS, mended as above (gcovr runs it in the directory it reads from).
if [[ ${1-} == --as-gcov ]]; then
  shift
  err=$(mktemp)
  trap 'rm -f "$err"' EXIT
  status=0
  out=$("${GCOV:-gcov}" "$@" 2> "$err") || status=$?
  grep -v -E '^Cannot open source file /.*/tmpxft_[^/]*\.cudafe1\.' "$err" >&2 || true
  printf '%s\n' "$out"
  if [[ " $* " == *.cu.gcda\ * || " $* " == *.cu.gcno\ * ]]; then
    sed -n "s/^Creating '\(.*\)'\$/\1/p" <<< "$out" | while IFS= read -r gcov_file; do
      sed -i '/^function .*{lambda(.* called [0-9]* returned /d' "$gcov_file"
    done
  fi
  exit "$status"
fi

self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
repo=$(cd "$(dirname "$self")/../.." && pwd)
build_dir=${repo}/build-coverage
jobs=$(nproc)
min=
cudasim_only=

usage() { # usage STATUS: to stdout for --help, else to stderr
  if (($1 == 0)); then
    sed -n '5,12p' "$self" | sed 's/^# \{0,1\}//'
  else
    sed -n '5,12p' "$self" | sed 's/^# \{0,1\}//' >&2
  fi
  exit "$1"
}

while (($#)); do
  case $1 in
    --build-dir) build_dir=${2:?--build-dir needs a directory} && shift 2 ;;
    --jobs | -j) jobs=${2:?--jobs needs a number} && shift 2 ;;
    --min) min=${2:?--min needs a percentage} && shift 2 ;;
    --cudasim-only) cudasim_only=1 && shift ;;
    -h | --help) usage 0 ;;
    *) echo "coverage.sh: unknown argument: $1" >&2 && usage 64 ;;
  esac
done

for tool in cmake ctest gcovr "${GCOV:-gcov}"; do
  command -v "$tool" > /dev/null || {
    echo "coverage.sh: $tool not found (gcovr: apt-get install gcovr, or pip install gcovr)" >&2
    exit 69
  }
done

build_dir=$(mkdir -p "$build_dir" && cd "$build_dir" && pwd)
report_dir=${build_dir}/coverage

cmake -S "$repo" -B "$build_dir" -DCMAKE_BUILD_TYPE=Debug -DGPUSHARE_COVERAGE=ON \
  -DGPUSHARE_BUILD_BENCHMARKS=OFF -DGPUSHARE_BUILD_EXAMPLES=OFF

# The programs the cudasim tests run (gpushare_cuda_tests, tests/CMakeLists.txt), and the unit
# tests' program with its tests listed (gpushare_unit_tests_list), for the layer's pure parts.
cmake --build "$build_dir" --parallel "$jobs" --target gpushare_cuda_tests gpushare_unit_tests_list

# Counters of earlier runs would add up: start from zero.
find "$build_dir" -name '*.gcda' -delete
rm -rf "$report_dir"
mkdir -p "$report_dir"

test_status=0
# (The demos' and benchmark's smoke tests are not built here: examples and benchmarks are off.)
(cd "$build_dir" && ctest -L cudasim -E '^cudasim/smoke/' --output-on-failure) || test_status=$?
# The layer's CUDA-free rules (options, messages, UUID forms, NVML records) are unit-tested
# with g++ alone (unit-device, unit-nvml): counted too, unless --cudasim-only.
if [[ -z $cudasim_only ]]; then
  (cd "$build_dir" && ctest -R '^unit-(device|nvml)/' --output-on-failure) || test_status=$?
fi

# gcovr's filters are relative to its working directory: run it from the repository root. The
# text table goes to stdout and to coverage.txt.
gcovr_args=(--root "$repo" --object-directory "$build_dir" --filter 'include/gpushare/cuda/'
  --gcov-executable "$(printf '%q --as-gcov' "$self")" --txt --json "$report_dir/coverage.json"
  --html-details "$report_dir/index.html" --html-title "gpushare CUDA layer on cudasim"
  --print-summary -j "$jobs")
if [[ -n $min ]]; then
  gcovr_args+=(--fail-under-line "$min")
fi
gcovr_status=0
(cd "$repo" && gcovr "${gcovr_args[@]}") | tee "$report_dir/coverage.txt" || gcovr_status=$?

echo "coverage.sh: reports in $report_dir (coverage.txt, coverage.json, index.html)"
if ((test_status != 0)); then
  echo "coverage.sh: the cudasim tests failed (ctest exit status $test_status)" >&2
  exit "$test_status"
fi
if ((gcovr_status != 0)); then
  echo "coverage.sh: gcovr exit status $gcovr_status${min:+ (2: line coverage below $min%)}" >&2
  exit "$gcovr_status"
fi
