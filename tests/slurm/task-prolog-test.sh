#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The test slurm/task_prolog_environment (label slurm; needs neither root nor Slurm): what
# deploy/slurm/gpushare-task-prolog prints for chosen job environments, where the scripts find
# their settings, and that the names agree across code and docs: every GPUSHARE_SLURM_* setting
# the scripts read is in docs/slurm.md and in gpushare-slurm.env.example (and nothing else is),
# and every GPUSHARE_* variable the TaskProlog exports is one README's "Configuration" documents
# (or GPUSHARE_KEY, which `gpushare run` reads, or GPUSHARE_SLURM_DIRS, docs/slurm.md's own).
# Also: the Prolog fails for a missing group (naming the fix) and does nothing for a job
# without GPUs; the Epilog exits 0 without its directory.
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

# GPUSHARE_SLURM_KEYS=uuid: the UUID of the GPU whose minor number is Slurm's id, from
# nvidia-smi (a stand-in here, printing what `nvidia-smi --query-gpu=minor_number,uuid
# --format=csv,noheader` prints); a GPU nvidia-smi does not list keeps gpu<id>.
mkdir "$tmp/bin"
printf '%s\n' '#!/bin/sh' \
  '[ "$*" = "--query-gpu=minor_number,uuid --format=csv,noheader" ] || exit 9' \
  "printf '0, GPU-11111111-aaaa\\n2, GPU-22222222-bbbb\\n'" >"$tmp/bin/nvidia-smi"
chmod +x "$tmp/bin/nvidia-smi"
printf 'GPUSHARE_SLURM_BASE=/b\nGPUSHARE_SLURM_KEYS=uuid\nGPUSHARE_SLURM_LOG=%s\n' \
  "$tmp/scripts.log" >"$tmp/uuid.env"
for case in "2 GPU-22222222-bbbb" "0 GPU-11111111-aaaa" "1 gpu1"; do
  read -r id key <<<"$case"
  got="$(env -i PATH="$tmp/bin:$PATH" GPUSHARE_SLURM_CONFIG="$tmp/uuid.env" \
    SLURM_JOB_GPUS="$id" "$deploy/gpushare-task-prolog")"
  [[ "$got" == "export GPUSHARE_DIR=/b/$key"$'\n'"export GPUSHARE_KEY=$key" ]] ||
    fail "uuid keys, GPU $id: got '$got', expected directory and key $key"
done

# Where the settings are found: beside slurm.conf when GPUSHARE_SLURM_CONFIG is unset.
mkdir "$tmp/etc"
printf 'GPUSHARE_SLURM_BASE=/beside\n' >"$tmp/etc/gpushare-slurm.env"
got="$(env -i PATH="$PATH" SLURM_CONF="$tmp/etc/slurm.conf" SLURM_JOB_GPUS=3 \
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
