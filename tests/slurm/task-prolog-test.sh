#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The test slurm/task_prolog_environment (label slurm; needs neither root nor Slurm): what
# deploy/slurm/gpushare-task-prolog prints for chosen job environments, where the scripts find
# their settings, and that the names agree across code and docs: every GPUSHARE_SLURM_* setting
# the scripts read is in docs/slurm.md and in gpushare-slurm.env.example (and nothing else is),
# and every GPUSHARE_* variable the TaskProlog exports is one README's "Configuration" documents
# (or GPUSHARE_KEY, which `gpushare run` reads, or GPUSHARE_SLURM_DIRS, docs/slurm.md's own).
# Also: the Prolog fails for a missing group (naming the fix) and does nothing for a job
# without GPUs; the Epilog exits 0 without its directory. Against stand-ins for nvidia-smi (one
# that answers, one that fails, one too old for memory.reserved, and none): the default keys
# (auto) are the GPUs' UUIDs, and gpu<id> with a warning in the job's output where the UUID
# cannot be learned; index is gpu<id> without one; a job with a percentage limit and no
# GPUSHARE_SLURM_CAPACITY gets the capacity a CUDA device session would give the GPU, the same
# for every job on it, or a warning where the GPU's memory cannot be learned. As root, the Prolog
# and Epilog use the same keys.
#
#   task-prolog-test.sh SOURCE_DIR
set -euo pipefail
src="$(readlink -f "$1")"
deploy="$src/deploy/slurm"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

cat >"$tmp/settings.env" <<EOF
GPUSHARE_SLURM_LOG=$tmp/scripts.log
GPUSHARE_SLURM_BASE=/run/gpushare-test
GPUSHARE_SLURM_KEYS=index
GPUSHARE_SLURM_SHARDS_PER_GPU=3
GPUSHARE_SLURM_CAPACITY=80GiB
EOF
# check NAME EXPECTED_OUTPUT VAR=VALUE...: the TaskProlog's output in a clean environment.
check() {
  local name="$1" expected="$2" got
  shift 2
  got="$(env -i PATH="$PATH" GPUSHARE_SLURM_CONFIG="$tmp/settings.env" "$@" \
    "$deploy/gpushare-task-prolog")"
  [[ "$got" == "$expected" ]] || fail "$name: got
$got
expected
$expected"
}

check "one GPU, 1 of 3 shards" "export GPUSHARE_DIR=/run/gpushare-test/gpu2
export GPUSHARE_KEY=gpu2
export GPUSHARE_NAME=slurm-7
export GPUSHARE_SHARE=1
export GPUSHARE_MEMORY_LIMIT=33.333333%
export GPUSHARE_CAPACITY=80GiB" SLURM_JOB_ID=7 SLURM_JOB_GPUS=2 SLURM_SHARDS_ON_NODE=1
check "2 of 3 shards, rounded down" "export GPUSHARE_DIR=/run/gpushare-test/gpu0
export GPUSHARE_KEY=gpu0
export GPUSHARE_NAME=slurm-8
export GPUSHARE_SHARE=2
export GPUSHARE_MEMORY_LIMIT=66.666666%
export GPUSHARE_CAPACITY=80GiB" SLURM_JOB_ID=8 SLURM_JOB_GPUS=0 SLURM_SHARDS_ON_NODE=2
check "all shards: 100%" "export GPUSHARE_DIR=/run/gpushare-test/gpu0
export GPUSHARE_KEY=gpu0
export GPUSHARE_SHARE=3
export GPUSHARE_MEMORY_LIMIT=100%
export GPUSHARE_CAPACITY=80GiB" SLURM_JOB_ID=9 SLURM_JOB_GPUS=0 SLURM_SHARDS_ON_NODE=3 \
  GPUSHARE_NAME=mine
check "a whole GPU, no shards" "export GPUSHARE_DIR=/run/gpushare-test/gpu1
export GPUSHARE_KEY=gpu1
export GPUSHARE_NAME=slurm-10
export GPUSHARE_CAPACITY=80GiB" SLURM_JOB_ID=10 SLURM_JOB_GPUS=1
check "two GPUs" "export GPUSHARE_SLURM_DIRS=/run/gpushare-test/gpu0 /run/gpushare-test/gpu1
export GPUSHARE_NAME=slurm-11
export GPUSHARE_CAPACITY=80GiB" SLURM_JOB_ID=11 SLURM_JOB_GPUS=0,1 SLURM_SHARDS_ON_NODE=2
check "no GPU" "export GPUSHARE_NAME=slurm-12
export GPUSHARE_CAPACITY=80GiB" SLURM_JOB_ID=12

# Stand-ins for nvidia-smi, each in a directory of its own, printing what the real one prints for
# the scripts' queries: bin/ answers (GPUs of minor numbers 0, 2 and 3; 2 is an H100's 81559 MiB
# of which the driver reserves 584; 3 has 8 GiB), failing/ exits 3, old/ knows no
# memory.reserved (drivers before it was added). nosmi/ is PATH without any nvidia-smi: links to
# every other program on it, so that a machine's own nvidia-smi decides nothing here.
mkdir "$tmp/bin" "$tmp/failing" "$tmp/old" "$tmp/nosmi"
printf '%s\n' '#!/bin/sh' 'case "$*" in' \
  '"--query-gpu=minor_number,uuid --format=csv,noheader")' \
  "  printf '0, GPU-11111111-aaaa\\n2, GPU-22222222-bbbb\\n3, GPU-33333333-cccc\\n' ;;" \
  '"--query-gpu=minor_number,memory.total,memory.reserved --format=csv,noheader,nounits")' \
  "  printf '0, 81559, 584\\n2, 81559, 584\\n3, 8192, 0\\n' ;;" \
  '"--query-gpu=minor_number,memory.total --format=csv,noheader,nounits")' \
  "  printf '0, 81559\\n2, 81559\\n3, 8192\\n' ;;" \
  '*) exit 9 ;;' 'esac' >"$tmp/bin/nvidia-smi"
printf '%s\n' '#!/bin/sh' 'echo "NVIDIA-SMI has failed" >&2' 'exit 3' >"$tmp/failing/nvidia-smi"
printf '%s\n' '#!/bin/sh' 'case "$*" in' '*memory.reserved*)' \
  '  echo "Field \"memory.reserved\" is not a valid field to query." >&2; exit 2 ;;' \
  "*) exec '$tmp/bin/nvidia-smi' \"\$@\" ;;" 'esac' >"$tmp/old/nvidia-smi"
chmod +x "$tmp/bin/nvidia-smi" "$tmp/failing/nvidia-smi" "$tmp/old/nvidia-smi"
IFS=: read -ra path_dirs <<<"$PATH"
for ((i = ${#path_dirs[@]} - 1; i >= 0; i--)); do # the first on PATH links last, and wins
  [[ -d "${path_dirs[i]}" ]] || continue
  find "${path_dirs[i]}" -mindepth 1 -maxdepth 1 ! -type d -exec ln -sf -t "$tmp/nosmi" {} +
done
rm -f "$tmp/nosmi/nvidia-smi"
[[ -x "$tmp/nosmi/bash" && ! -e "$tmp/nosmi/nvidia-smi" ]] ||
  fail "nosmi/ is not a PATH without nvidia-smi"
# shellcheck disable=SC2034 # failing_smi: read as ${!path_name}
with_smi="$tmp/bin:$tmp/nosmi" failing_smi="$tmp/failing:$tmp/nosmi" old_smi="$tmp/old:$tmp/nosmi"
no_smi="$tmp/nosmi"

# task_prolog SETTINGS PATH VAR=VALUE...: the TaskProlog's output in a clean environment.
task_prolog() {
  local settings="$1" path="$2"
  shift 2
  env -i PATH="$path" GPUSHARE_SLURM_CONFIG="$settings" "$@" "$deploy/gpushare-task-prolog"
}
# expect NAME GOT EXPECTED
expect() {
  [[ "$2" == "$3" ]] || fail "$1: got
$2
expected
$3"
}
# expect_match NAME GOT PATTERN: GOT matches the glob PATTERN.
expect_match() {
  # shellcheck disable=SC2053 # $3 is a pattern
  [[ "$2" == $3 ]] || fail "$1: got
$2
which does not match
$3"
}
settings() { # settings FILE LINE...: a settings file of these lines and the test's log
  printf '%s\n' "GPUSHARE_SLURM_LOG=$tmp/scripts.log" "${@:2}" >"$1"
}
settings "$tmp/default.env" GPUSHARE_SLURM_BASE=/b GPUSHARE_SLURM_SHARDS_PER_GPU=4
settings "$tmp/index.env" GPUSHARE_SLURM_BASE=/b GPUSHARE_SLURM_SHARDS_PER_GPU=4 \
  GPUSHARE_SLURM_KEYS=index
settings "$tmp/uuid.env" GPUSHARE_SLURM_BASE=/b GPUSHARE_SLURM_KEYS=uuid
settings "$tmp/typo.env" GPUSHARE_SLURM_BASE=/b GPUSHARE_SLURM_KEYS=UUID
# 81559 - 584 MiB less 2% (1698168832 B, above the 256 MiB least): what a CUDA device session
# would give GPU 2's table.
h100_capacity=83210272768
key_warning="print gpushare-slurm: warning: GPU 2: its UUID could not be learned (*), so its \
table directory and GPUSHARE_KEY are gpu2; a CUDA device session \
(gpushare::cuda::device_session) keys its table by the GPU's UUID and will use another table, \
*set GPUSHARE_SLURM_KEYS=index in the settings*"
capacity_warning="print gpushare-slurm: warning: GPUSHARE_MEMORY_LIMIT=25% is a fraction of the \
table's capacity, but the GPU's memory could not be learned (*) and GPUSHARE_SLURM_CAPACITY is \
not set, so no GPUSHARE_CAPACITY is exported*this job's join is refused. Set \
GPUSHARE_SLURM_CAPACITY in the settings*"

# The default keys (auto), nvidia-smi answering: the GPU's UUID, the key of its CUDA sessions'
# table. Two jobs on GPU 2 (1 and 3 of 4 shards) get one key and one capacity, whichever of them
# comes first (each computes it from the GPU alone).
expect "default keys, nvidia-smi there, 1 of 4 shards" \
  "$(task_prolog "$tmp/default.env" "$with_smi" SLURM_JOB_ID=21 SLURM_JOB_GPUS=2 \
    SLURM_SHARDS_ON_NODE=1)" "export GPUSHARE_DIR=/b/GPU-22222222-bbbb
export GPUSHARE_KEY=GPU-22222222-bbbb
export GPUSHARE_NAME=slurm-21
export GPUSHARE_SHARE=1
export GPUSHARE_MEMORY_LIMIT=25%
export GPUSHARE_CAPACITY=$h100_capacity"
expect "default keys, nvidia-smi there, 3 of 4 shards" \
  "$(task_prolog "$tmp/default.env" "$with_smi" SLURM_JOB_ID=22 SLURM_JOB_GPUS=2 \
    SLURM_SHARDS_ON_NODE=3)" "export GPUSHARE_DIR=/b/GPU-22222222-bbbb
export GPUSHARE_KEY=GPU-22222222-bbbb
export GPUSHARE_NAME=slurm-22
export GPUSHARE_SHARE=3
export GPUSHARE_MEMORY_LIMIT=75%
export GPUSHARE_CAPACITY=$h100_capacity"
# Several GPUs: their UUIDs' directories, and the capacity where they agree (0 and 2 do).
expect "default keys, GPUs 0 and 2" \
  "$(task_prolog "$tmp/default.env" "$with_smi" SLURM_JOB_GPUS=0,2)" \
  "export GPUSHARE_SLURM_DIRS=/b/GPU-11111111-aaaa /b/GPU-22222222-bbbb
export GPUSHARE_CAPACITY=$h100_capacity"
expect "default keys, GPUs 0 and 3 (memory differs: no capacity, no limit to warn of)" \
  "$(task_prolog "$tmp/default.env" "$with_smi" SLURM_JOB_GPUS=0,3)" \
  "export GPUSHARE_SLURM_DIRS=/b/GPU-11111111-aaaa /b/GPU-33333333-cccc"
# The least headroom, 256 MiB, for an 8 GiB GPU (2% would be 164 MiB).
expect "default keys, an 8 GiB GPU" \
  "$(task_prolog "$tmp/default.env" "$with_smi" SLURM_JOB_GPUS=3)" \
  "export GPUSHARE_DIR=/b/GPU-33333333-cccc
export GPUSHARE_KEY=GPU-33333333-cccc
export GPUSHARE_CAPACITY=8321499136"
# An nvidia-smi without memory.reserved: memory.total less 2% (81559 MiB - 1710416199 B).
expect "an nvidia-smi without memory.reserved" \
  "$(task_prolog "$tmp/index.env" "$old_smi" SLURM_JOB_GPUS=2)" \
  "export GPUSHARE_DIR=/b/gpu2
export GPUSHARE_KEY=gpu2
export GPUSHARE_CAPACITY=83810393785"

# The default keys without nvidia-smi, or with one that fails: gpu<id>, and a warning in the job's
# output (Slurm's "print" lines) and in the log saying what follows and what to do; with a
# percentage limit and no capacity, a second warning.
: >"$tmp/scripts.log"
for case in "no_smi|there is no nvidia-smi in $no_smi" "failing_smi|nvidia-smi failed (exit 3)"; do
  path_name="${case%%|*}" why="${case#*|}"
  got="$(task_prolog "$tmp/default.env" "${!path_name}" SLURM_JOB_ID=23 SLURM_JOB_GPUS=2 \
    SLURM_SHARDS_ON_NODE=1)"
  mapfile -t lines <<<"$got"
  expect "default keys, $path_name: the exports" "$(printf '%s\n' "${lines[@]:0:5}")" \
    "export GPUSHARE_DIR=/b/gpu2
export GPUSHARE_KEY=gpu2
export GPUSHARE_NAME=slurm-23
export GPUSHARE_SHARE=1
export GPUSHARE_MEMORY_LIMIT=25%"
  expect "default keys, $path_name: lines" "${#lines[@]}" 7
  expect_match "default keys, $path_name: the key's warning" "${lines[5]:-}" "$key_warning"
  expect_match "default keys, $path_name: why" "${lines[5]:-}" "*learned ($why), so*"
  expect_match "default keys, $path_name: the capacity's warning" "${lines[6]:-}" \
    "$capacity_warning"
  expect_match "default keys, $path_name: why not the capacity" "${lines[6]:-}" \
    "*could not be learned ($why)*"
done
expect "key warnings in the log" \
  "$(grep -c ': warning: GPU 2: its UUID could not be learned' "$tmp/scripts.log")" 2
expect "capacity warnings in the log" \
  "$(grep -c ': warning: GPUSHARE_MEMORY_LIMIT=25% is a fraction' "$tmp/scripts.log")" 2
# No percentage limit (a whole GPU): nothing depends on the capacity, so only the key's warning.
got="$(task_prolog "$tmp/default.env" "$no_smi" SLURM_JOB_GPUS=2)"
mapfile -t lines <<<"$got"
expect "default keys, no nvidia-smi, a whole GPU: the exports" \
  "$(printf '%s\n' "${lines[@]:0:2}")" "export GPUSHARE_DIR=/b/gpu2
export GPUSHARE_KEY=gpu2"
expect "default keys, no nvidia-smi, a whole GPU: lines" "${#lines[@]}" 3
expect_match "default keys, no nvidia-smi, a whole GPU: the warning" "${lines[2]:-}" \
  "$key_warning"
# A GPU that nvidia-smi does not list: gpu<id>, warned of, and no capacity for it.
expect_match "default keys, GPU 1 unlisted" \
  "$(task_prolog "$tmp/default.env" "$with_smi" SLURM_JOB_GPUS=1 SLURM_SHARDS_ON_NODE=1)" \
  "export GPUSHARE_DIR=/b/gpu1
export GPUSHARE_KEY=gpu1
export GPUSHARE_SHARE=1
export GPUSHARE_MEMORY_LIMIT=25%
print gpushare-slurm: warning: GPU 1: its UUID could not be learned (nvidia-smi lists no GPU \
of minor number 1), so *
print gpushare-slurm: warning: GPUSHARE_MEMORY_LIMIT=25% is a fraction of the table's \
capacity, but the GPU's memory could not be learned (nvidia-smi gives no memory.total for the \
GPU of minor number 1) *"
# Two GPUs nvidia-smi does not list: each its own warning, naming its own minor number.
expect_match "default keys, GPUs 1 and 4 unlisted" \
  "$(task_prolog "$tmp/default.env" "$with_smi" SLURM_JOB_GPUS=1,4)" \
  "export GPUSHARE_SLURM_DIRS=/b/gpu1 /b/gpu4
print gpushare-slurm: warning: GPU 1: its UUID could not be learned (nvidia-smi lists no GPU \
of minor number 1), so its table directory and GPUSHARE_KEY are gpu1; *
print gpushare-slurm: warning: GPU 4: its UUID could not be learned (nvidia-smi lists no GPU \
of minor number 4), so its table directory and GPUSHARE_KEY are gpu4; *"
# A value of GPUSHARE_SLURM_KEYS that is none of the three: auto, with a warning.
expect "GPUSHARE_SLURM_KEYS=UUID" "$(task_prolog "$tmp/typo.env" "$with_smi" SLURM_JOB_GPUS=0)" \
  "export GPUSHARE_DIR=/b/GPU-11111111-aaaa
export GPUSHARE_KEY=GPU-11111111-aaaa
export GPUSHARE_CAPACITY=$h100_capacity
print gpushare-slurm: warning: GPUSHARE_SLURM_KEYS=UUID is none of auto, uuid and index; \
using auto"

# GPUSHARE_SLURM_KEYS=index, chosen: gpu<id> and no warning, with or without nvidia-smi (which
# still gives the capacity where it is there).
expect "index keys, nvidia-smi there" \
  "$(task_prolog "$tmp/index.env" "$with_smi" SLURM_JOB_ID=24 SLURM_JOB_GPUS=2 \
    SLURM_SHARDS_ON_NODE=1)" "export GPUSHARE_DIR=/b/gpu2
export GPUSHARE_KEY=gpu2
export GPUSHARE_NAME=slurm-24
export GPUSHARE_SHARE=1
export GPUSHARE_MEMORY_LIMIT=25%
export GPUSHARE_CAPACITY=$h100_capacity"
expect "index keys, no nvidia-smi, a whole GPU" \
  "$(task_prolog "$tmp/index.env" "$no_smi" SLURM_JOB_GPUS=2)" "export GPUSHARE_DIR=/b/gpu2
export GPUSHARE_KEY=gpu2"
# GPUSHARE_SLURM_KEYS=uuid: as auto, the UUID of the GPU whose minor number is Slurm's id; a GPU
# nvidia-smi does not list keeps gpu<id>, with the warning.
for case in "2 GPU-22222222-bbbb" "0 GPU-11111111-aaaa"; do
  read -r id key <<<"$case"
  expect "uuid keys, GPU $id" "$(task_prolog "$tmp/uuid.env" "$with_smi" SLURM_JOB_GPUS="$id")" \
    "export GPUSHARE_DIR=/b/$key
export GPUSHARE_KEY=$key
export GPUSHARE_CAPACITY=$h100_capacity"
done
expect_match "uuid keys, GPU 1 unlisted" \
  "$(task_prolog "$tmp/uuid.env" "$with_smi" SLURM_JOB_GPUS=1)" "export GPUSHARE_DIR=/b/gpu1
export GPUSHARE_KEY=gpu1
print gpushare-slurm: warning: GPU 1: its UUID could not be learned (nvidia-smi lists no GPU \
of minor number 1), so its table directory and GPUSHARE_KEY are gpu1; *"

# As root: the Prolog makes the directory of the key the TaskProlog exports, and the Epilog
# cleans that one (its `gpushare clean` is a stand-in that prints its arguments).
if ((EUID == 0)); then
  printf '%s\n' '#!/bin/sh' 'echo "clean args: $*"' >"$tmp/cli"
  chmod +x "$tmp/cli"
  group="$(id -gn)"
  for case in "with_smi GPU-22222222-bbbb" "no_smi gpu2"; do
    read -r path_name key <<<"$case"
    base="$tmp/tables-$path_name"
    settings "$tmp/root.env" "GPUSHARE_SLURM_BASE=$base" "GPUSHARE_SLURM_GROUP=$group" \
      "GPUSHARE_SLURM_CLI=$tmp/cli"
    : >"$tmp/scripts.log"
    env -i PATH="${!path_name}" GPUSHARE_SLURM_CONFIG="$tmp/root.env" SLURM_JOB_ID=25 \
      SLURM_JOB_GPUS=2 "$deploy/gpushare-prolog" || fail "the Prolog failed ($path_name)"
    expect "the Prolog's directory ($path_name)" "$(cd "$base" && stat -c '%n %a %G' -- *)" \
      "$key 2770 $group"
    env -i PATH="${!path_name}" GPUSHARE_SLURM_CONFIG="$tmp/root.env" SLURM_JOB_ID=25 \
      SLURM_JOB_GPUS=2 "$deploy/gpushare-epilog" || fail "the Epilog failed ($path_name)"
    grep -qF "GPU 2: clean --dir $base/$key: clean args: clean --all-domains --dir $base/$key;" \
      "$tmp/scripts.log" ||
      fail "the Epilog did not clean $key ($path_name): $(cat "$tmp/scripts.log")"
    if [[ "$path_name" == no_smi ]]; then
      expect "the Prolog's and the Epilog's warnings" \
        "$(grep -c "warning: GPU 2: its UUID could not be learned" "$tmp/scripts.log")" 2
    else
      expect "warnings with nvidia-smi" "$(grep -c warning "$tmp/scripts.log" || true)" 0
    fi
  done
fi

# Where the settings are found: beside slurm.conf when GPUSHARE_SLURM_CONFIG is unset.
mkdir "$tmp/etc"
printf 'GPUSHARE_SLURM_BASE=/beside\n' >"$tmp/etc/gpushare-slurm.env"
got="$(env -i PATH="$no_smi" SLURM_CONF="$tmp/etc/slurm.conf" SLURM_JOB_GPUS=3 \
  "$deploy/gpushare-task-prolog")"
[[ "${got%%$'\n'*}" == "export GPUSHARE_DIR=/beside/gpu3" ]] ||
  fail "settings beside slurm.conf: got '$got'"

# The Prolog refuses a group that does not exist (exit 1: Slurm drains the node, and the message
# says what to do); without GPUs it does nothing. The Epilog never fails.
if err="$(env -i PATH="$PATH" GPUSHARE_SLURM_CONFIG="$tmp/settings.env" SLURM_JOB_GPUS=0 \
  GPUSHARE_SLURM_GROUP=gpushare-no-such-group "$deploy/gpushare-prolog" 2>&1)"; then
  fail "the Prolog accepted a missing group"
fi
[[ "$err" == *"groupadd --system gpushare-no-such-group"* ]] ||
  fail "the Prolog's message for a missing group: '$err'"
env -i PATH="$PATH" GPUSHARE_SLURM_CONFIG="$tmp/settings.env" GPUSHARE_SLURM_GROUP=none-x \
  "$deploy/gpushare-prolog" || fail "the Prolog failed for a job without GPUs"
[[ ! -e /run/gpushare-test ]] || fail "/run/gpushare-test exists: this test needs it not to"
env -i PATH="$PATH" GPUSHARE_SLURM_CONFIG="$tmp/settings.env" SLURM_JOB_GPUS=0 \
  "$deploy/gpushare-epilog" || fail "the Epilog failed without its directory"

# The names agree.
read_by_scripts="$(grep -ohE 'GPUSHARE_SLURM_[A-Z_]+' "$deploy"/gpushare-* |
  grep -vxE 'GPUSHARE_SLURM_(CONFIG|DIRS)' | sort -u)"
[[ -n "$read_by_scripts" ]] || fail "found no GPUSHARE_SLURM_ setting in $deploy"
for doc in "$src/docs/slurm.md" "$deploy/gpushare-slurm.env.example"; do
  named="$(grep -ohE 'GPUSHARE_SLURM_[A-Z_]+' "$doc" | grep -vxE 'GPUSHARE_SLURM_(CONFIG|DIRS)' |
    sort -u)"
  [[ "$named" == "$read_by_scripts" ]] || fail "$doc names the settings
$named
but the scripts read
$read_by_scripts"
done
while read -r v; do
  case "$v" in
  GPUSHARE_KEY | GPUSHARE_SLURM_DIRS) ;;
  *) grep -qE "^\| \`[a-z_]+\` \| \`$v\` \|" "$src/README.md" ||
    fail "the TaskProlog exports $v, which README's Configuration table does not document" ;;
  esac
done < <(grep -ohE 'export GPUSHARE_[A-Z_]+' "$deploy/gpushare-task-prolog" | cut -d' ' -f2 |
  sort -u)

((failures == 0)) || exit 1
echo "PASS: the TaskProlog's environment and the settings' names"
