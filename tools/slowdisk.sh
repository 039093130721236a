#!/usr/bin/env bash
# A storage target whose bandwidth is shared, as the clients of one OST share it on a cluster: a file-backed loop
# device (direct I/O, so the backing file's pages do not sit in the page cache twice) with ext4 on it, mounted at DIR,
# and a cgroup-v1 blkio group capped to MBPS (10^6 bytes/s) for reads and for writes on that device. Every process
# run with `run` lands in that one group, so training ranks and a noise generator draw from the same token bucket.
#
#   tools/slowdisk.sh up DIR MBPS          mount it (or re-cap one already up); image DIR.slowdisk.img, SLOWDISK_SIZE (2G)
#   tools/slowdisk.sh run DIR -- CMD ...   run CMD (and all its children) in the capped group
#   tools/slowdisk.sh down DIR             unmount, detach the loop device, remove the group, the image and DIR if empty
#
# Only I/O that reaches the device is capped: page-cache hits are not, and buffered writes left to the kernel's
# flusher threads are not (cgroup v1 does not charge writeback to the writer's group); fsync'ed and O_DIRECT writes
# are. Method, checks and limits: docs/noise.md, "Emulating a shared storage target".
set -uo pipefail
die() { echo "slowdisk: $*" >&2; exit 1; }
usage="usage: tools/slowdisk.sh up DIR MBPS | down DIR | run DIR -- CMD ..."
BLKIO=${SLOWDISK_BLKIO:-/sys/fs/cgroup/blkio}

[ $# -ge 2 ] || die "$usage"
cmd=$1
DIR=$(realpath -m -- "$2") || die "bad directory: $2"
shift 2
IMG="$DIR.slowdisk.img"
# One group per mount point: the path's checksum keeps the name short and free of slashes.
CG="$BLKIO/slowdisk-$(printf %s "$DIR" | cksum | cut -d' ' -f1)"

[ "$(id -u)" = 0 ] || die "needs root (losetup, mount and the blkio cgroup); running as $(id -un)"
[ -w "$BLKIO/cgroup.procs" ] && [ -e "$BLKIO/blkio.throttle.read_bps_device" ] ||
  die "no cgroup-v1 blkio controller with throttling at $BLKIO"

loops() { losetup -n -O NAME -j "$IMG" 2>/dev/null; }
mounted_from() { findmnt -n -o SOURCE --mountpoint "$DIR" 2>/dev/null; }

# keep_image: set when a failed `up` cleans up after itself and the image was already there (it holds data)
down() {
  local src dev keep_image=${1:-}
  src=$(mounted_from)
  if [ -n "$src" ]; then
    loops | grep -qx "$src" || die "$DIR is mounted from $src, not from $IMG: not ours, left alone"
    umount "$DIR" || die "cannot unmount $DIR (busy? $(fuser -m "$DIR" 2>/dev/null | xargs))"
  fi
  for dev in $(loops); do losetup -d "$dev" || die "cannot detach $dev"; done
  if [ -d "$CG" ]; then
    [ -z "$(cat "$CG/cgroup.procs")" ] || die "processes still in $CG: $(xargs <"$CG/cgroup.procs")"
    rmdir "$CG" || die "cannot remove $CG"
  fi
  [ -n "$keep_image" ] || rm -f "$IMG"
  [ -d "$DIR" ] && rmdir "$DIR" 2>/dev/null
  return 0
}

case "$cmd" in
  up)
    [ $# -eq 1 ] || die "$usage"
    mbps=$1
    [[ "$mbps" =~ ^[1-9][0-9]*$ ]] || die "MBPS must be a positive whole number of MB/s, not '$mbps'"
    [ -e /dev/loop-control ] || die "no loop devices here (/dev/loop-control is missing)"
    src=$(mounted_from)
    if [ -z "$src" ]; then
      mkdir -p "$DIR" || die "cannot create $DIR"
      [ -z "$(ls -A "$DIR")" ] || die "$DIR is not empty: mounting over it would hide its files"
      keep=
      [ -e "$IMG" ] && keep=1  # left by an earlier `up` without `down`: reused with its files
      # Anything failing from here on leaves a half-built target: take it down again before saying why.
      trap '[ $? -ne 0 ] && down "$keep" >/dev/null 2>&1' EXIT
      [ -n "$keep" ] || truncate -s "${SLOWDISK_SIZE:-2G}" "$IMG" || die "cannot create $IMG"
      src=$(loops | head -n1)
      [ -n "$src" ] || src=$(losetup --direct-io=on -f --show "$IMG" 2>&1) ||
        die "no free loop device ($src)"
      if [ -z "$keep" ]; then mkfs.ext4 -q -F "$src" >/dev/null || die "mkfs.ext4 failed on $src"; fi
      mount "$src" "$DIR" || die "cannot mount $src at $DIR"
    else
      loops | grep -qx "$src" || die "$DIR is already mounted from $src (not a slowdisk)"
    fi
    majmin=$(lsblk -dn -o MAJ:MIN "$src" | tr -d ' ') || die "no major:minor for $src"
    mkdir -p "$CG" || die "cannot create $CG"
    bytes=$((mbps * 1000000))
    for f in read_bps_device write_bps_device; do
      echo "$majmin $bytes" >"$CG/blkio.throttle.$f" || die "cannot set $CG/blkio.throttle.$f"
    done
    trap - EXIT
    echo "slowdisk: $DIR on $src ($majmin, direct I/O), $mbps MB/s read and $mbps MB/s write for the processes of $CG"
    ;;
  run)
    [ "${1:-}" = "--" ] && [ $# -ge 2 ] || die "$usage"
    shift
    [ -n "$(mounted_from)" ] && [ -d "$CG" ] || die "$DIR is not up (tools/slowdisk.sh up $DIR MBPS first)"
    echo $$ >"$CG/cgroup.procs" || die "cannot join $CG"
    exec "$@"
    ;;
  down)
    [ $# -eq 0 ] || die "$usage"
    down
    ;;
  *) die "$usage" ;;
esac
