#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for `make test-slurm`: Debian's slurm-wlm + munge, a slurm.conf templated
# from `nproc` and the memory, every piece of state (config, munge key and socket, spool, state, logs) under one
# temporary directory, the daemons started as root and stopped again at the end -- also on failure or Ctrl-C.
#
#   tools/slurm/cluster.sh -- CMD ...   bring the cluster up, run CMD with SLURM_CONF pointing at it, tear it down
#
# Nothing under /etc is changed and no system service is started: the clients find the cluster through SLURM_CONF,
# munge through the socket named in the config (AuthInfo). Exit 0 with one "skip" line where root or apt is missing.
set -uo pipefail
skip() { echo "test-slurm: SKIP: $*"; exit 0; }
die() { echo "test-slurm: $*" >&2; exit 1; }
[ "${1:-}" = "--" ] || die "usage: tools/slurm/cluster.sh -- CMD ..."
shift
[ $# -gt 0 ] || die "usage: tools/slurm/cluster.sh -- CMD ..."

[ "$(id -u)" = 0 ] || skip "needs root to start slurmctld, slurmd and munged (running as $(id -un))"
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmd >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1 \
   || ! command -v sbatch >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || skip "slurm-wlm and munge are not installed and there is no apt-get"
  echo "test-slurm: installing slurm-wlm and munge (apt, once)"
  # Debian's postinst scripts try to start the system services; keep them from doing so (we run our own daemons).
  policy=/usr/sbin/policy-rc.d; own_policy=
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && own_policy=1; fi
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      slurm-wlm munge >/dev/null; } || { [ -n "$own_policy" ] && rm -f "$policy"; skip "apt-get could not install slurm-wlm munge"; }
  [ -n "$own_policy" ] && rm -f "$policy"
fi

BASE=$(mktemp -d "${TMPDIR:-/tmp}/test-slurm.XXXXXX") || die "cannot create a temporary directory"
chmod 755 "$BASE"
PIDS=()
# slurmstepd processes of this cluster (their working directory is under $BASE)
ours() {
  local p
  for p in $(pgrep -x slurmstepd 2>/dev/null); do
    case "$(readlink "/proc/$p/cwd" 2>/dev/null)" in "$BASE"/*) echo "$p" ;; esac
  done
}
cleanup() {
  local rc=$?
  # Jobs first, while the daemons still run, so the step daemons (slurmstepd) finish their teardown themselves.
  if [ -n "${SLURM_CONF:-}" ]; then
    scancel --user=root 2>/dev/null
    for _ in $(seq 50); do [ -z "$(ours)" ] && [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  if [ "$rc" -ne 0 ] && [ -z "${KEEP_SLURM_LOGS:-}" ]; then
    for f in "$BASE"/log/*.log; do [ -s "$f" ] && { echo "--- $f (last lines)"; tail -n 15 "$f"; }; done
  fi
  # A step daemon left over (slurmd gone before it reported) is ours when it runs in our directory: nothing else is.
  for pid in $(ours); do kill -9 "$pid" 2>/dev/null; done
  rm -rf "$BASE"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$BASE"/{etc,state,spool,log,run,munge}
HOST=$(hostname -s)
CPUS=$(nproc)
# RealMemory in MiB, a little below the total so slurmd does not drain the node for "low RealMemory"
MEM=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.95}' /proc/meminfo)
# Ports away from the defaults (6817/6818) so a site's own Slurm on this host is not disturbed; override if taken.
CTLD_PORT=${SLURMCTLD_PORT:-16817}
SLURMD_PORT=${SLURMD_PORT:-16818}

# munge: our own key and socket (the system's munged, if any, is left alone)
mungekey --create --keyfile="$BASE/munge/munge.key" >/dev/null 2>&1 \
  || dd if=/dev/urandom of="$BASE/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 600 "$BASE/munge/munge.key"
MUNGE_SOCKET="$BASE/munge/munge.socket"
munged --force --key-file="$BASE/munge/munge.key" --socket="$MUNGE_SOCKET" \
  --pid-file="$BASE/munge/munged.pid" --log-file="$BASE/log/munged.log" --seed-file="$BASE/munge/seed" \
  || die "munged did not start (see above)"
PIDS+=("$(cat "$BASE/munge/munged.pid")")

sed -e "s|@BASE@|$BASE|g" -e "s|@HOST@|$HOST|g" -e "s|@CPUS@|$CPUS|g" -e "s|@MEM@|$MEM|g" \
    -e "s|@CTLD_PORT@|$CTLD_PORT|g" -e "s|@SLURMD_PORT@|$SLURMD_PORT|g" -e "s|@MUNGE_SOCKET@|$MUNGE_SOCKET|g" \
    "$(dirname "$0")/slurm.conf.in" >"$BASE/etc/slurm.conf"
printf 'ConstrainCores=no\nConstrainRAMSpace=no\n' >"$BASE/etc/cgroup.conf"
export SLURM_CONF="$BASE/etc/slurm.conf"

slurmctld -f "$SLURM_CONF" -i || die "slurmctld did not start: $(tail -n 3 "$BASE/log/slurmctld.log" 2>/dev/null)"
for _ in $(seq 50); do [ -s "$BASE/run/slurmctld.pid" ] && break; sleep 0.1; done
PIDS+=("$(cat "$BASE/run/slurmctld.pid")")
slurmd -f "$SLURM_CONF" -N "$HOST" || die "slurmd did not start: $(tail -n 3 "$BASE/log/slurmd.log" 2>/dev/null)"
for _ in $(seq 50); do [ -s "$BASE/run/slurmd.pid" ] && break; sleep 0.1; done
PIDS+=("$(cat "$BASE/run/slurmd.pid")")

# Wait until the node takes jobs (idle), at most 60 s.
state=
for _ in $(seq 120); do
  state=$(sinfo -h -N -o %T 2>/dev/null | head -n 1)
  case "$state" in idle*) break ;; esac
  sleep 0.5
done
case "$state" in idle*) ;; *) die "the node did not become idle within 60 s (state: ${state:-none})";; esac
echo "test-slurm: one-node cluster up: $HOST, $CPUS CPUs, ${MEM} MiB, SLURM_CONF=$SLURM_CONF"
export TEST_SLURM_BASE="$BASE"
"$@"
