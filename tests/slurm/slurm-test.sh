#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The test slurm/two_jobs_share_a_gpu (label slurm; docs/slurm.md, "What the test proves"): a
# one-node Slurm cluster on localhost (Debian's slurm-wlm 22.05 and munge), everything in a
# private temporary directory (configuration, state, spool, logs, munge key and socket, table
# directories), with the shipped deploy/slurm/ Prolog, TaskProlog and Epilog. Two jobs share the
# node's one GPU through gres/shard (1 and 3 of 4 shards); each runs gpushare_slurm_job. Checks:
# both joined one table in the prolog's directory and saw each other; `gpushare status --dir
# --json` listed both jobs by name while they ran; each job's memory limit was its shards'
# fraction of the capacity, its whole budget was granted and one byte more refused, and the
# reservations summed to the capacity and never above it; device time split by shares (1:3);
# the epilog removed the table once both jobs had ended, and again after a job that scancel killed
# inside the table.
#
#   slurm-test.sh core JOB_PROGRAM GPUSHARE_CLI DEPLOY_DIR
#   slurm-test.sh cudasim CUDA_JOB_PROGRAM GPUSHARE_CLI DEPLOY_DIR CUDASIM_LIB_DIR
#
# core: the jobs are gpushare_slurm_job (gpushare::session, key GPUSHARE_KEY), run as two
# different users (daemon and nobody, base-passwd's, present on every Debian) whose jobs get
# group `users` (sbatch --gid), the table directory's group: the multi-user convention, and an
# epilog that removes another user's table. cudasim: they are gpushare_slurm_cuda_job
# (gpushare::cuda::device_session) on the simulated CUDA runtime, both on one simulated GPU (one
# CUDASIM_STATE, a /dev/shm object of one user: so both run as root), the table keyed by that
# GPU's UUID.
#
# Skipped (GPUSHARE_SKIP) when not root or when Slurm or munge is not installed. Takes over
# nothing global: no /etc/slurm, /etc/munge or systemctl; its own ports; it stops what it
# started and removes its directory, also on failure.
set -euo pipefail

skip() {
  echo "GPUSHARE_SKIP: $*"
  exit 0
}
((EUID == 0)) || skip "not root: slurmd and the Prolog/Epilog must run as root"
for tool in slurmctld slurmd munged sbatch squeue scontrol sinfo setpriv; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (Debian: slurm-wlm, munge)"
done
mode="${1:-}"
if ! { [[ "$mode" == core ]] && (($# == 4)); } &&
  ! { [[ "$mode" == cudasim ]] && (($# == 5)); }; then
  echo "usage: $0 core JOB_PROGRAM GPUSHARE_CLI DEPLOY_DIR" >&2
  echo "       $0 cudasim CUDA_JOB_PROGRAM GPUSHARE_CLI DEPLOY_DIR CUDASIM_LIB_DIR" >&2
  exit 2
fi
job_program="$(readlink -f "$2")" cli="$(readlink -f "$3")" deploy="$(readlink -f "$4")"
job_env=ALL
cudasim_state=""
job_users=(daemon nobody) job_group=users
if [[ "$mode" == cudasim ]]; then
  # Both jobs on one simulated GPU: cudasim's libraries first, one state of this run's own.
  cudasim_state="gpushare-slurm-test-$$"
  job_env="ALL,LD_LIBRARY_PATH=$(readlink -f "$5"),CUDASIM_STATE=$cudasim_state"
  job_users=(root root) job_group=root
fi
for user in "${job_users[@]}"; do
  getent passwd "$user" >/dev/null || skip "user $user does not exist"
done
getent group "$job_group" >/dev/null || skip "group $job_group does not exist"
readonly window_s=6 shards_total=4 capacity=8589934592 # 8 GiB
node="$(hostname -s)"

tmp="$(mktemp -d /tmp/gpushare-slurm.XXXXXX)"
mkdir -p "$tmp"/{state,spool,log,run,munge,dev,out,bin,deploy}
# The scripts as docs/slurm.md installs them, in a directory of their own that every job's user
# can read (the TaskProlog runs as the job's user, wherever the source tree is).
install -m 0755 "$deploy"/gpushare-* "$tmp/deploy/"
deploy="$tmp/deploy"
# The jobs' users reach the table directory, the program and their output through $tmp.
chmod 0711 "$tmp" "$tmp/munge"
chmod 1777 "$tmp/out"
pids=()
failed=1
any_alive() { # any_alive PID...: whether one of them still runs
  local p
  for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done
  return 1
}
cleanup() {
  set +e
  if [[ -f "$tmp/slurm.conf" ]]; then
    SLURM_CONF="$tmp/slurm.conf" scancel --quiet --full "${job_ids[@]:-0}" 2>/dev/null
  fi
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  # slurmd may linger over job steps it still tracks (after a failure): 10 s, then SIGKILL.
  local waited=0
  while ((waited < 100)) && any_alive "${pids[@]}"; do
    sleep 0.1
    waited=$((waited + 1))
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  [[ -n "$cudasim_state" ]] && "$cli" clean --cudasim "$cudasim_state" >/dev/null 2>&1
  if ((failed)); then
    for f in "$tmp"/log/*.log "$tmp"/out/*; do
      [[ -f "$f" ]] && { echo "--- $f (last 25 lines)"; tail -n 25 "$f"; }
    done
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

exec 3>&2 # fail() reports here, also from a check whose output wait_for() discards
# (the daemons started below get no fd 3: a job step they leave behind after a failure must not
# hold CTest's output pipe open until the test times out)
fail() {
  echo "FAIL: $*" >&3
  exit 1
}
# A TCP port on localhost that nothing listens on (a connection is refused), not one a system
# Slurm may use.
free_port() {
  local port
  for _ in $(seq 200); do
    port=$((20000 + RANDOM % 30000))
    if ! (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
  fail "no free port found"
}
# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.2 s until it succeeds.
wait_for() {
  local limit="$1" what="$2"
  local deadline=$((SECONDS + limit))
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "timed out after ${limit}s waiting for $what"
    sleep 0.2
  done
}

# ---- munge, on a private socket with a private key ---------------------------------------------
dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none
chmod 0400 "$tmp/munge/munge.key"
munged --foreground --force --socket="$tmp/munge/munge.sock" --key-file="$tmp/munge/munge.key" \
  --log-file="$tmp/log/munged.log" --pid-file="$tmp/run/munged.pid" \
  --seed-file="$tmp/munge/munged.seed" >>"$tmp/log/munged.log" 2>&1 3>&- &
pids+=($!)
wait_for 20 "munged's socket" test -S "$tmp/munge/munge.sock"

# ---- Slurm's configuration ---------------------------------------------------------------------
# The GPU: gres/shard needs a gres/gpu with a device File (slurmd: 'SHARING configuration lacks
# "File" specification' otherwise), and slurmd only looks the file up. A link to /dev/null stands
# for /dev/nvidia0; no program opens it (the jobs use no CUDA).
ln -s /dev/null "$tmp/dev/gpu0"
gres="gpu:1,shard:$shards_total"
ctld_port="$(free_port)"
slurmd_port="$(free_port)"
while [[ "$slurmd_port" == "$ctld_port" ]]; do slurmd_port="$(free_port)"; done
cat >"$tmp/gres.conf" <<EOF
AutoDetect=off
Name=gpu File=$tmp/dev/gpu0
Name=shard Count=$shards_total File=$tmp/dev/gpu0 Flags=one_sharing
EOF
cat >"$tmp/slurm.conf" <<EOF
ClusterName=gpusharetest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/run/slurmctld.pid
SlurmdPidFile=$tmp/run/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
GresTypes=gpu,shard
Prolog=$deploy/gpushare-prolog
TaskProlog=$deploy/gpushare-task-prolog
Epilog=$deploy/gpushare-epilog
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=256 Gres=$gres State=UNKNOWN
PartitionName=gpu Nodes=ALL Default=YES MaxTime=10 OverSubscribe=FORCE:4 State=UP
EOF
# The deploy scripts' settings, where they look first: beside slurm.conf.
cat >"$tmp/gpushare-slurm.env" <<EOF
GPUSHARE_SLURM_BASE=$tmp/tables
GPUSHARE_SLURM_GROUP=$job_group
GPUSHARE_SLURM_CLI=$cli
GPUSHARE_SLURM_KEYS=index
GPUSHARE_SLURM_SHARDS_PER_GPU=$shards_total
GPUSHARE_SLURM_CAPACITY=8GiB
GPUSHARE_SLURM_LOG=$tmp/log/gpushare-slurm.log
EOF
export SLURM_CONF="$tmp/slurm.conf"
# The jobs inherit this environment (sbatch --export=ALL): nothing of the caller's gpushare
# settings may reach them.
for v in "${!GPUSHARE_@}"; do unset "$v"; done

slurmctld -D -i -f "$SLURM_CONF" >>"$tmp/log/slurmctld.out" 2>&1 3>&- &
pids+=($!)
wait_for 30 "slurmctld to answer" bash -c 'scontrol ping | grep -q UP'
slurmd -D -f "$SLURM_CONF" >>"$tmp/log/slurmd.out" 2>&1 3>&- &
pids+=($!)
wait_for 60 "node $node to be idle" bash -c "sinfo -h -N -n '$node' -o %T | grep -qx idle"

# ---- two jobs on one GPU: 1 and 3 of its 4 shards ---------------------------------------------
# A copy of the program the jobs' users may run wherever the build tree is (/root/...).
install -m 0755 "$job_program" "$tmp/bin/"
job_program="$tmp/bin/$(basename "$job_program")"
job_ids=()
for i in 0 1; do
  shards=$((i == 0 ? 1 : 3))
  job_ids+=("$(sbatch --parsable --gres="shard:$shards" --oversubscribe --time=5 -D "$tmp/out" \
    --uid="${job_users[$i]}" --gid="$job_group" --export="$job_env" -o "$tmp/out/%j.log" \
    --wrap "'$job_program' '$tmp/out/job-$shards.txt' $window_s")")
done
echo "jobs ${job_ids[*]} submitted (1 and 3 shards, users ${job_users[*]}, group $job_group)"
dir="$tmp/tables/gpu0"

# Both jobs are in the table (each writes .ready once it sees the other), or one ended early.
both_ready() {
  [[ -f "$tmp/out/job-1.txt.ready" && -f "$tmp/out/job-3.txt.ready" ]] && return 0
  [[ -n "$(squeue -h -j "${job_ids[0]},${job_ids[1]}" -t PD,CF,R)" ]] ||
    fail "a job ended before both were in the table"
  return 1
}
wait_for 120 "both jobs to be in the table" both_ready
# While they run: `gpushare status` lists both jobs' sessions, by the names the TaskProlog gave.
"$cli" status --dir "$dir" --json >"$tmp/out/status.json"
for id in "${job_ids[@]}"; do
  grep -q "\"slurm-$id\"" "$tmp/out/status.json" || fail "status --json does not list slurm-$id"
done
echo "status --dir --json listed slurm-${job_ids[0]} and slurm-${job_ids[1]}"
# ... and each session's identity, which the library read from Slurm's own variables: its job id,
# and its step where the batch script's environment names one (docs/cluster-env.md).
steps="$(/usr/bin/python3 - "$tmp/out/status.json" "${job_ids[@]}" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
sessions = {s["name"]: s for t in doc["tables"] for s in t.get("sessions", [])}
for job in sys.argv[2:]:
    ident = sessions["slurm-" + job]["identity"]
    assert ident["slurm_job_id"] == int(job), ident
    assert ident["slurm_step"] in ("batch", None), ident
    print(ident["slurm_step"] or "none")
PY
)" || fail "status --json lacks the jobs' identities"
echo "their identities: Slurm jobs ${job_ids[0]} and ${job_ids[1]}, steps: $(echo $steps)"

wait_for 120 "both jobs to end" bash -c "[[ -z \"\$(squeue -h -j ${job_ids[0]},${job_ids[1]})\" ]]"
# The Epilog runs once the job's processes are gone; the last one removes the table.
wait_for 30 "the epilog to remove the table" bash -c \
  "! compgen -G '$dir/gpushare.*' >/dev/null"

# ---- what the jobs saw ------------------------------------------------------------------------
field() { # field FILE KEY
  local line
  line="$(grep -m1 "^$2=" "$1")" || fail "$1 has no $2"
  echo "${line#*=}"
}
expect() { # expect WHAT ACTUAL EXPECTED
  [[ "$2" == "$3" ]] || fail "$1: got '$2', expected '$3'"
}
expect "table directory mode and group" "$(stat -c '%a %G' "$dir")" "2770 $job_group"
group_id="$(getent group "$job_group" | cut -d: -f3)"
expected_peers="$(printf 'slurm-%s\n' "${job_ids[@]}" | sort | paste -sd,)"
tables=()
for i in 0 1; do
  shards=$((i == 0 ? 1 : 3)) id="${job_ids[$i]}"
  report="$tmp/out/job-$shards.txt"
  [[ -f "$report" ]] || fail "job $id wrote no report (its log: $tmp/out/$id.log)"
  expect "job $id done" "$(field "$report" "done")" yes
  expect "job $id SLURM_SHARDS_ON_NODE" "$(field "$report" env_SLURM_SHARDS_ON_NODE)" "$shards"
  expect "job $id GPUSHARE_DIR" "$(field "$report" env_GPUSHARE_DIR)" "$dir"
  expect "job $id session name" "$(field "$report" name)" "slurm-$id"
  expect "job $id user and group" "$(field "$report" uid) $(field "$report" egid)" \
    "$(id -u "${job_users[$i]}") $(getent group "$job_group" | cut -d: -f3)"
  expect "job $id share" "$(field "$report" share)" "$shards"
  expect "job $id GPUSHARE_MEMORY_LIMIT" "$(field "$report" env_GPUSHARE_MEMORY_LIMIT)" \
    "$((shards * 25))%"
  expect "job $id capacity" "$(field "$report" capacity)" "$capacity"
  expect "job $id memory limit" "$(field "$report" memory_limit)" \
    "$((capacity * shards / shards_total))"
  # Its whole budget was granted: its reservations and (CUDA) its context's memory, which
  # counts against its limit.
  expect "job $id reserved + external" \
    "$(($(field "$report" reserved) + $(field "$report" external)))" \
    "$(field "$report" memory_limit)"
  expect "job $id one byte over its limit" "$(field "$report" one_more_byte)" over_limit
  expect "job $id saw" "$(field "$report" peers)" "$expected_peers"
  table="$(field "$report" table)"
  expect "job $id table's directory" "$(dirname "$table")" "$dir"
  # A group table, named after the directory's group (docs/design.md, section 13).
  [[ "$(basename "$table")" == *".g$group_id."* ]] ||
    fail "job $id: table $table is not a table of group $job_group (gid $group_id)"
  # Both held their whole budgets during the window: together exactly the capacity.
  expect "job $id: most committed in the table" "$(field "$report" max_committed_total)" \
    "$capacity"
  if [[ "$mode" == core ]]; then
    expect "job $id GPUSHARE_KEY" "$(field "$report" env_GPUSHARE_KEY)" gpu0
  else
    key="$(field "$report" key)"
    [[ "$key" == GPU-* ]] || fail "job $id: the simulated GPU's UUID is '$key'"
    expect "job $id: its table's key" "${table##*.}" "$key"
    expect "job $id: simulated kernels ran" "$(field "$report" kernels_ran)" yes
  fi
  tables+=("$table")
  # Device time over the window: 1/4 and 3/4 by shares. The bound is generous (10 points): the
  # jobs start their windows a few ms apart and each sample is taken at a guard's end.
  split="$(field "$report" window_split_ppm)"
  want=$((shards * 250000))
  ((split > want - 100000 && split < want + 100000)) ||
    fail "job $id: device-time split ${split} ppm, expected ${want} +- 100000 (shares 1:3)"
  echo "job $id: $shards shards, limit $(field "$report" memory_limit) B, split $split ppm"
done
expect "one table for both jobs" "${tables[1]}" "${tables[0]}"
grep -qE "job (${job_ids[0]}|${job_ids[1]}): GPU 0: clean --dir $dir: .*removed 1 of 1 table" \
  "$tmp/log/gpushare-slurm.log" ||
  fail "no epilog removed the table (log: $(cat "$tmp/log/gpushare-slurm.log"))"

# ---- a cancelled job: Slurm kills it inside the table, and its Epilog still cleans up ----------
# Alone, it joins, reserves its budget and waits for a peer that never comes; scancel kills it
# there. Its session dies with it, so the table it leaves is unused and the Epilog removes it.
kill_id="$(sbatch --parsable --gres=shard:1 --oversubscribe --time=5 -D "$tmp/out" \
  --uid="${job_users[0]}" --gid="$job_group" --export="$job_env" -o "$tmp/out/%j.log" \
  --wrap "'$job_program' '$tmp/out/job-cancelled.txt' $window_s")"
job_ids+=("$kill_id")
wait_for 60 "the job to be cancelled to join" bash -c "compgen -G '$dir/gpushare.*'"
scancel "$kill_id"
wait_for 60 "the cancelled job to end" bash -c "[[ -z \"\$(squeue -h -j $kill_id)\" ]]"
wait_for 30 "the epilog to remove the cancelled job's table" bash -c \
  "! compgen -G '$dir/gpushare.*' >/dev/null"
[[ ! -e "$tmp/out/job-cancelled.txt" ]] || fail "the cancelled job $kill_id ran to its end"
grep -q "job $kill_id: GPU 0: clean --dir $dir: .*removed 1 of 1 table" \
  "$tmp/log/gpushare-slurm.log" || fail "job $kill_id's Epilog did not remove the table"
echo "cancelled job $kill_id: its Epilog removed the table it left:"
grep "job $kill_id: GPU 0: clean" "$tmp/log/gpushare-slurm.log"

failed=0
echo "PASS ($mode): two Slurm jobs shared one table, budgets and shares held, the epilog cleaned up"
