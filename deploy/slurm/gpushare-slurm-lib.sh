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
  GPUSHARE_SLURM_KEYS="${GPUSHARE_SLURM_KEYS:-index}"
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

# The key of GPU id $1: "gpu<id>" (GPUSHARE_SLURM_KEYS=index), or its UUID by nvidia-smi
# (GPUSHARE_SLURM_KEYS=uuid), matching Slurm's id with the GPU's minor number, as Slurm's ids are
# for gres.conf File=/dev/nvidia<N> and AutoDetect=nvml.
gpushare_slurm_key() {
  local id="$1"
  if [[ "$GPUSHARE_SLURM_KEYS" == uuid ]]; then
    local uuid
    uuid="$(nvidia-smi --query-gpu=minor_number,uuid --format=csv,noheader 2>/dev/null |
      awk -F', *' -v id="$id" '$1 == id { print $2; exit }')"
    if [[ -n "$uuid" ]]; then
      echo "$uuid"
      return 0
    fi
    gpushare_slurm_log "no UUID for GPU $id from nvidia-smi; using gpu$id"
  fi
  echo "gpu$id"
}
