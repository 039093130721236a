#!/bin/bash
# Sourced by the batch scripts of both benchmarks (benchmarks/*/slurm/): environment for a profiled run.
# docs/cluster.md walks through it; the settings (export before sbatch, sbatch passes the environment on):
#   VENV      the toolkit's environment (a venv with TF, Horovod, mpi4py, h5py), required
#   DATA      the data directory (on Lustre on a real system), required
#   RUNS      where run directories go (default $SCRATCH/io-runs, else $HOME/io-runs)
#   PRESET    full (default: the original study's sizes) or smoke (seconds; what `make test-slurm` runs)
#   SRUN_MPI  srun's PMI plugin for the ranks (default pmi2, which MPICH's PMI client speaks; `srun --mpi=list`)
#   POSIX     1: DFTracer's POSIX layer (timelogger --posix); default 1 without Darshan, 0 with it
#   DARSHAN_ROOT  Darshan's install (the site's `module load darshan`); unset: no Darshan layer
#   TOOLKIT   this checkout (default: found from the submit directory, benchmarks/<name>/slurm/)
set -euo pipefail
: "${VENV:?set VENV to the toolkit environment (a venv with TF, Horovod, mpi4py, h5py)}"
: "${DATA:?set DATA to the data directory (on Lustre)}"
: "${RUNS:=${SCRATCH:-$HOME}/io-runs}"
PRESET=${PRESET:-full}
case "$PRESET" in full|smoke) ;; *) echo "slurm.sh: PRESET=$PRESET: use full or smoke" >&2; exit 2 ;; esac
[ -x "$VENV/bin/python" ] || { echo "slurm.sh: VENV=$VENV: no bin/python there" >&2; exit 2; }
export PATH="$VENV/bin:$PATH"
# The benchmarks and the toolkit of this checkout, also when the venv holds an older installed copy.
export PYTHONPATH="$TOOLKIT${PYTHONPATH:+:$PYTHONPATH}"
# HDF5's file locking is not supported (or slow) on Lustre mounts.
export HDF5_USE_FILE_LOCKING=FALSE
export TF_CPP_MIN_LOG_LEVEL=2
SRUN_MPI=${SRUN_MPI:-pmi2}

# One stripe of 1 MiB per file, as in the original study. New files inherit the directory's layout, so this must be
# set before the data is generated or copied in (`lfs migrate` re-stripes existing files). Without `lfs` (not a
# Lustre client) or on a directory that is not on Lustre: one line, and the job goes on with the default layout.
stripe_data() {
  if ! command -v lfs >/dev/null 2>&1; then
    echo "stripe_data: no lfs command (not a Lustre client): $DATA keeps its file system's default layout"
    return 0
  fi
  local out
  if ! out=$(lfs setstripe -S 1m -c 1 "$DATA" 2>&1); then
    echo "stripe_data: lfs setstripe failed on $DATA (not on Lustre?): ${out//$'\n'/ }; default layout"
    return 0
  fi
  lfs getstripe -d "$DATA" || true
}

# A fresh run directory, created before the ranks start so every rank writes into the same one.
new_run_dir() {
  local name=$1
  local run="$RUNS/${name}-${SLURM_JOB_ID:-manual}"
  mkdir -p "$run"
  echo "$run"
}

# Darshan with DXT tracing for every process (also non-MPI helpers), logs into RUN/darshan/. Darshan is configured at
# launch and cannot be switched on mid-run. DARSHAN_ROOT comes from the site's module (e.g. `module load darshan`);
# without it there is no Darshan layer (one line) and the POSIX layer comes from DFTracer (POSIX=1).
# Sets SRUN_EXPORT (srun's --export) and TL_FLAGS (timelogger run's layer flags). Usage: darshan_env RUN_DIR
darshan_env() {
  SRUN_EXPORT=ALL
  TL_FLAGS=()
  if [ -n "${DARSHAN_ROOT:-}" ]; then
    mkdir -p "$1/darshan"
    export DARSHAN_ENABLE_NONMPI=1
    export DXT_ENABLE_IO_TRACE=1
    export DARSHAN_LOGPATH="$1/darshan"
    export DARSHAN_LOGFILE_DIR="$1/darshan"   # older Darshan releases
    export DARSHAN_LD_PRELOAD="$DARSHAN_ROOT/lib/libdarshan.so"
    SRUN_EXPORT="ALL,LD_PRELOAD=$DARSHAN_LD_PRELOAD"
  else
    echo "darshan_env: no DARSHAN_ROOT (module load darshan): no Darshan layer, POSIX layer from DFTracer"
  fi
  if [ "${POSIX:-$([ -n "${DARSHAN_ROOT:-}" ] && echo 0 || echo 1)}" = 1 ]; then
    TL_FLAGS+=(--posix --posix-filter "$DATA")
  fi
}

# Start the ranks of one job step: srun with the PMI MPICH speaks (SRUN_MPI), with Darshan preloaded when on.
# Usage: launch [srun options] -- CMD ...
launch() {
  local opts=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do opts+=("$1"); shift; done
  shift
  srun --mpi="$SRUN_MPI" --export="$SRUN_EXPORT" "${opts[@]}" "$@"
}
