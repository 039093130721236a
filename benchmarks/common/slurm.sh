#!/bin/bash
# Sourced by the batch scripts of both benchmarks (benchmarks/*/slurm/): environment for a profiled run on a Lustre
# system.
# Site settings (override before sbatch or edit here): VENV, DATA, RUNS, DARSHAN_ROOT.
set -euo pipefail
: "${VENV:?set VENV to the toolkit environment (a venv with TF, Horovod, mpi4py, h5py)}"
: "${DATA:?set DATA to the data directory on Lustre}"
: "${RUNS:=${SCRATCH:-$HOME}/io-runs}"
export PATH="$VENV/bin:$PATH"
# HDF5's file locking is not supported (or slow) on Lustre mounts.
export HDF5_USE_FILE_LOCKING=FALSE
export TF_CPP_MIN_LOG_LEVEL=2

# One stripe of 1 MiB per file, as in the original study. New files inherit the directory's layout, so this must be
# set before the data is generated or copied in (`lfs migrate` re-stripes existing files).
stripe_data() {
  lfs setstripe -S 1m -c 1 "$DATA"
  lfs getstripe -d "$DATA"
}

# A fresh run directory, created before the ranks start so every rank writes into the same one.
new_run_dir() {
  local name=$1
  local run="$RUNS/${name}-${SLURM_JOB_ID:-manual}"
  mkdir -p "$run"
  echo "$run"
}

# Darshan with DXT tracing for every process (also non-MPI helpers), logs into RUN/darshan/. Darshan is configured at
# launch and cannot be switched on mid-run. DARSHAN_ROOT comes from the site's module (e.g. `module load darshan`).
# Usage: darshan_env RUN_DIR
darshan_env() {
  : "${DARSHAN_ROOT:?load the darshan module of the site or set DARSHAN_ROOT}"
  mkdir -p "$1/darshan"
  export DARSHAN_ENABLE_NONMPI=1
  export DXT_ENABLE_IO_TRACE=1
  export DARSHAN_LOGPATH="$1/darshan"
  export DARSHAN_LOGFILE_DIR="$1/darshan"   # older Darshan releases
  export DARSHAN_LD_PRELOAD="$DARSHAN_ROOT/lib/libdarshan.so"
}
