# shellcheck shell=bash
# SPDX-License-Identifier: Apache-2.0
# Shared by gpushare-prolog, gpushare-task-prolog and gpushare-epilog (docs/slurm.md): reads the
# site's settings and maps the job's GPUs to table directories. Sourced, not run.

# Slurm starts Prolog and Epilog with an almost empty environment (no PATH).
PATH="${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}"

# The settings: GPUSHARE_SLURM_CONFIG if set, else gpushare-slurm.env beside slurm.conf (Slurm
# gives every prolog and epilog SLURM_CONF), else /etc/gpushare/slurm.env. A shell file of
# NAME=value lines, owned by root (the prolog and epilog run as root and source it).
gpushare_slurm_config() {
  if [[ -n "${GPUSHARE_SLURM_CONFIG:-}" ]]; then
    echo "$GPUSHARE_SLURM_CONFIG"
  elif [[ -n "${SLURM_CONF:-}" && -f "$(dirname "$SLURM_CONF")/gpushare-slurm.env" ]]; then
    echo "$(dirname "$SLURM_CONF")/gpushare-slurm.env"
  elif [[ -f /etc/gpushare/slurm.env ]]; then
    echo /etc/gpushare/slurm.env
  fi
}

gpushare_slurm_load() {
  local config
  config="$(gpushare_slurm_config)"
  if [[ -n "$config" ]]; then
    if [[ ! -r "$config" ]]; then
      echo "gpushare-slurm: cannot read the settings $config" >&2
      return 1
    fi
    # shellcheck disable=SC1090
    source "$config"
  fi
  # The defaults (docs/slurm.md, "Settings").
  GPUSHARE_SLURM_BASE="${GPUSHARE_SLURM_BASE:-/run/gpushare}"
  GPUSHARE_SLURM_GROUP="${GPUSHARE_SLURM_GROUP:-gpushare}"
  GPUSHARE_SLURM_CLI="${GPUSHARE_SLURM_CLI:-gpushare}"
  GPUSHARE_SLURM_KEYS="${GPUSHARE_SLURM_KEYS:-auto}"
  GPUSHARE_SLURM_SHARDS_PER_GPU="${GPUSHARE_SLURM_SHARDS_PER_GPU:-}"
  GPUSHARE_SLURM_CAPACITY="${GPUSHARE_SLURM_CAPACITY:-}"
  GPUSHARE_SLURM_LOG="${GPUSHARE_SLURM_LOG:-}"
}

# One line for the site's log: GPUSHARE_SLURM_LOG if set, else syslog where logger exists.
gpushare_slurm_log() {
  local line
  line="$(date -u +%FT%TZ) ${SLURM_SCRIPT_CONTEXT:-gpushare-slurm} job ${SLURM_JOB_ID:-?}: $*"
  if [[ -n "${GPUSHARE_SLURM_LOG:-}" ]]; then
    echo "$line" >>"$GPUSHARE_SLURM_LOG" 2>/dev/null || true
  elif command -v logger >/dev/null 2>&1; then
    logger -t gpushare-slurm -- "$line" 2>/dev/null || true
  fi
}

# The job's GPU ids, one a line, from SLURM_JOB_GPUS (set in Prolog, Epilog and tasks for jobs
# with gres/gpu or gres/shard; a comma-separated list of Slurm's GPU ids).
gpushare_slurm_gpu_ids() {
  local ids="${SLURM_JOB_GPUS:-}"
  [[ -z "$ids" ]] && return 0
  tr ',' '\n' <<<"$ids" | grep -E '^[0-9]+$' || true
}

# What a script warns of goes to the site's log at once, and is kept: the TaskProlog also prints
# it into the job's output (Slurm's "print" lines), where the job's owner sees it.
gpushare_slurm_warnings=()
gpushare_slurm_warn() {
  gpushare_slurm_warnings+=("$*")
  gpushare_slurm_log "warning: $*"
}

# nvidia-smi "$@", at most 20 s: a GPU that hangs the driver must not hang the job's start.
# Exit 127 when there is no nvidia-smi.
gpushare_slurm_smi() {
  command -v nvidia-smi >/dev/null 2>&1 || return 127
  if command -v timeout >/dev/null 2>&1; then
    timeout 20 nvidia-smi "$@"
  else
    nvidia-smi "$@"
  fi
}

# Why a query of nvidia-smi gave nothing, from its exit status $1.
gpushare_slurm_smi_failure() {
  case "$1" in
  127) echo "there is no nvidia-smi in $PATH" ;;
  124) echo "nvidia-smi did not answer within 20 s" ;;
  *) echo "nvidia-smi failed (exit $1)" ;;
  esac
}

# Fills gpushare_slurm_key_of[<id>] for each of the job's GPU ids: the key that names the GPU's
# directory and table. GPUSHARE_SLURM_KEYS=index: "gpu<id>". auto (the default) and uuid: the
# GPU's UUID from nvidia-smi, matching Slurm's id with the GPU's minor number, as Slurm's ids are
# for gres.conf File=/dev/nvidia<N> and AutoDetect=nvml; it is the key a CUDA device session
# gives its table, so both kinds of program meet in one table. Where the UUID cannot be learned
# the key is "gpu<id>", with a warning: the CUDA sessions on that GPU will use another table.
declare -A gpushare_slurm_key_of=()
# shellcheck disable=SC2034 # gpushare_slurm_key_of: read by the scripts that source this file
gpushare_slurm_map_keys() {
  local mode="$GPUSHARE_SLURM_KEYS" listed="" rc=0 failure="" why id uuid
  case "$mode" in
  index | uuid | auto) ;;
  *)
    gpushare_slurm_warn "GPUSHARE_SLURM_KEYS=$mode is none of auto, uuid and index; using auto"
    mode=auto
    ;;
  esac
  if [[ "$mode" != index ]]; then
    listed="$(gpushare_slurm_smi --query-gpu=minor_number,uuid --format=csv,noheader \
      2>/dev/null)" || rc=$?
    ((rc == 0)) || failure="$(gpushare_slurm_smi_failure "$rc")"
  fi
  while read -r id; do
    [[ -z "$id" ]] && continue
    gpushare_slurm_key_of[$id]="gpu$id"
    [[ "$mode" == index ]] && continue
    uuid="$(awk -F', *' -v id="$id" '$1 == id { print $2; exit }' <<<"$listed")"
    if [[ "$uuid" =~ ^GPU-[0-9A-Fa-f-]+$ ]]; then
      gpushare_slurm_key_of[$id]="$uuid"
      continue
    fi
    why="${failure:-nvidia-smi lists no GPU of minor number $id}"
    gpushare_slurm_warn "GPU $id: its UUID could not be learned ($why), so its table" \
      "directory and GPUSHARE_KEY are gpu$id; a CUDA device session" \
      "(gpushare::cuda::device_session) keys its table by the GPU's UUID and will use another" \
      "table, which is not arbitrated" \
      "against this one. Make nvidia-smi available to Slurm's scripts, or set" \
      "GPUSHARE_SLURM_KEYS=index in the settings to choose gpu<id> deliberately (no warning)."
  done < <(gpushare_slurm_gpu_ids)
}

# The capacity, in bytes, that the TaskProlog exports for GPU ids "$@" when the site sets none:
# what a CUDA device session would give a new table of the GPU (include/gpushare/cuda/options.hpp,
# capacity_for_device): its memory less the default headroom, 2% and at least 256 MiB. The memory
# is nvidia-smi's memory.total less memory.reserved (the driver's and firmware's share, which CUDA
# does not offer either; an nvidia-smi too old to know that field gives memory.total alone). Every
# job on the GPU computes the same figure, so the table's capacity no longer depends on which job
# created it. Several GPUs: only if they all give the same. On failure prints why and returns 1.
gpushare_slurm_capacity() {
  local listed rc=0 id line total reserved usable headroom capacity="" one
  listed="$(gpushare_slurm_smi --query-gpu=minor_number,memory.total,memory.reserved \
    --format=csv,noheader,nounits 2>/dev/null)" || rc=$?
  if ((rc != 0 && rc != 124 && rc != 127)); then
    rc=0
    listed="$(gpushare_slurm_smi --query-gpu=minor_number,memory.total \
      --format=csv,noheader,nounits 2>/dev/null)" || rc=$?
  fi
  if ((rc != 0)); then
    gpushare_slurm_smi_failure "$rc"
    return 1
  fi
  for id in "$@"; do
    line="$(awk -F', *' -v id="$id" '$1 == id { print $2, $3; exit }' <<<"$listed")"
    read -r total reserved <<<"$line"
    if [[ ! "$total" =~ ^[0-9]+$ ]]; then
      echo "nvidia-smi gives no memory.total for the GPU of minor number $id"
      return 1
    fi
    [[ "$reserved" =~ ^[0-9]+$ ]] || reserved=0
    usable=$(((total - reserved) * 1048576))
    headroom=$((usable * 20000 / 1000000))
    ((headroom >= 268435456)) || headroom=268435456
    if ((usable <= headroom)); then
      echo "the GPU of minor number $id has $usable bytes, no more than the headroom"
      return 1
    fi
    one=$((usable - headroom))
    if [[ -n "$capacity" && "$one" != "$capacity" ]]; then
      echo "the job's GPUs differ in memory"
      return 1
    fi
    capacity="$one"
  done
  [[ -n "$capacity" ]] || { echo "the job has no GPU"; return 1; }
  echo "$capacity"
}
