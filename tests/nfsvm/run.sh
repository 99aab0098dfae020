#!/usr/bin/env bash
# run.sh runs one static Linux binary inside the NFS lab guest and returns its
# exit code; its output streams to stdout as it is printed. It is meant for
# `go test -exec tests/nfsvm/run.sh`, and works for any static binary:
#
#   tests/nfsvm/run.sh ./bin/demo --flag
#
# The binary runs as root in the guest with a kernel NFS server on 127.0.0.1
# exporting /export (no_root_squash) and /export-squash (root_squash), and
# NFSDIR_LAB=1 in its environment. Environment variables named NFSDIR_* are
# passed through. With NFSDIR_LAB_NFS_SERVER=off the guest starts no NFS
# server (the kernel modules are still loaded): the Kubernetes lab serves
# its export from a pod. Files under $NFSDIR_LAB_BIN (a directory) are copied to
# /work/bin, which is on PATH. The package's testdata directory, if the
# current directory has one, is copied next to the binary (go test runs the
# binary in the package directory).
#
# The guest has $NFSDIR_LAB_CPUS (2) vCPUs and $NFSDIR_LAB_MEM (2048) MiB.
# NFSDIR_LAB_TCG=multi runs the vCPUs on host threads of their own
# (multi-threaded TCG); the default, single, is faster for the NFS tests.
#
# With NFSDIR_LAB_PEER=1 a second guest (the peer) boots beside the first,
# from the same image and payload, with $NFSDIR_LAB_PEER_MEM (2048) MiB and
# single-threaded TCG. Each guest gets one virtio NIC (eth0); the two are
# joined by qemu's socket netdev in its UDP mode on 127.0.0.1 (a private
# link: nothing else is on it, and either side may restart). The peer runs
# the same binary with NFSDIR_LAB_ROLE=peer and $NFSDIR_LAB_PEER_ARGS as
# its arguments; its output streams prefixed "[peer] ". The first guest
# controls it by printing a line of its own: NFSLAB-PEER=kill terminates
# the peer's qemu at once (a machine losing power), NFSLAB-PEER=start boots
# it again. The peer has a disk of its own that keeps its contents across
# these restarts, like a machine's disk across a power cut: /dev/vdc, a
# sparse $NFSDIR_LAB_PEER_DISK (4G) image, empty at the first boot.
#
# With NFSDIR_LAB_HOSTNET set, the first guest gets a second NIC on qemu's
# user-mode network, restricted (restrict=on: the guest reaches nothing of
# the host or beyond) but for the forwards the variable lists, qemu's
# comma-separated guestfwd=/hostfwd= options: the Kubernetes lab's host
# control plane reaches the kubelet through a hostfwd on 127.0.0.1, the
# guest reaches the API server through a guestfwd to 127.0.0.1. The NIC's
# MAC address is 52:54:00:c0:00:0c and its network $NFSDIR_LAB_HOSTNET_NET
# (198.51.100.128/25).
#
# Exit codes: the binary's own; 124 when $NFSDIR_LAB_TIMEOUT (seconds, default
# 1500) ran out; 125 when the guest failed to set up NFS; 126 when the guest
# never reported an exit code.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { echo "usage: run.sh BINARY [ARGS...]" >&2; exit 2; }
bin=$1; shift

img=$("$here/build-image.sh") || exit 125
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nfslab.XXXXXX")
peer=${NFSDIR_LAB_PEER:-0}
kill_peer() {
  [ -s "$tmp/peer.pid" ] || return 0
  kill -9 "$(cat "$tmp/peer.pid")" 2>/dev/null
  rm -f "$tmp/peer.pid"
}
cleanup() { kill_peer; rm -rf "$tmp"; }
trap cleanup EXIT

mkdir -p "$tmp/payload/pkg" "$tmp/payload/bin"
cp "$bin" "$tmp/payload/pkg/$(basename "$bin")"
[ -d testdata ] && cp -r testdata "$tmp/payload/pkg/testdata"
if [ -n "${NFSDIR_LAB_BIN:-}" ]; then cp -a "$NFSDIR_LAB_BIN"/. "$tmp/payload/bin/"; fi
[ "${NFSDIR_LAB_NFS_SERVER:-on}" = off ] && touch "$tmp/payload/no-nfs-server"
{
  echo "cd /work/pkg || exit 126"
  while IFS='=' read -r name _; do
    case "$name" in NFSDIR_LAB_BIN|NFSDIR_LAB_CACHE|NFSDIR_LAB_TIMEOUT|NFSDIR_LAB_TCG|NFSDIR_LAB_HOSTNET*) continue ;; esac
    printf 'export %s=%q\n' "$name" "${!name}"
  done < <(env | grep -E '^NFSDIR_[A-Za-z0-9_]*=' || true)
  printf 'exec ./%q' "$(basename "$bin")"
  for a in "$@"; do printf ' %q' "$a"; done
  echo
} >"$tmp/payload/run.sh"
if [ "$peer" = 1 ]; then
  sed -e '$d' "$tmp/payload/run.sh" >"$tmp/payload/run-peer.sh"
  echo "export NFSDIR_LAB_ROLE=peer" >>"$tmp/payload/run-peer.sh"
  printf 'exec ./%q %s\n' "$(basename "$bin")" "${NFSDIR_LAB_PEER_ARGS:-}" >>"$tmp/payload/run-peer.sh"
fi
# busybox ash has no printf %q quoting of $'..' form; keep args plain.
if grep -q "\$'" "$tmp/payload/run.sh"; then
  echo "run.sh: arguments with control characters are not supported" >&2; exit 2
fi
tar -cf "$tmp/payload.tar" -C "$tmp/payload" .
truncate -s 256M "$tmp/out.img"

lan=()
if [ "$peer" = 1 ]; then
  port=$((20000 + RANDOM % 20000))
  lan=(-netdev "socket,id=lan,udp=127.0.0.1:$((port + 1)),localaddr=127.0.0.1:$port"
    -device "virtio-net-pci,netdev=lan,mac=52:54:00:c0:00:0a")
fi
if [ -n "${NFSDIR_LAB_HOSTNET:-}" ]; then
  lan+=(-netdev "user,id=hostnet,restrict=on,net=${NFSDIR_LAB_HOSTNET_NET:-198.51.100.128/25},$NFSDIR_LAB_HOSTNET"
    -device "virtio-net-pci,netdev=hostnet,mac=52:54:00:c0:00:0c")
fi
# start_peer boots the peer guest in the background (its pid in peer.pid).
start_peer() {
  kill_peer
  truncate -s 0 "$tmp/peer-out.img" && truncate -s 64M "$tmp/peer-out.img"
  [ -e "$tmp/peer-disk.img" ] || truncate -s "${NFSDIR_LAB_PEER_DISK:-4G}" "$tmp/peer-disk.img"
  qemu-system-x86_64 -nodefaults -no-reboot -nographic -monitor none \
    -accel tcg,thread=single -cpu qemu64 -smp 2 -m "${NFSDIR_LAB_PEER_MEM:-2048}" \
    -kernel "$img/vmlinuz" -initrd "$img/initrd.gz" \
    -append "console=ttyS0 panic=-1 quiet loglevel=4 nfslab.role=peer" \
    -serial "file:$tmp/peer-console.log" -serial stdio \
    -drive "file=$tmp/payload.tar,format=raw,if=virtio,readonly=on" \
    -drive "file=$tmp/peer-out.img,format=raw,if=virtio" \
    -drive "file=$tmp/peer-disk.img,format=raw,if=virtio" \
    -netdev "socket,id=lan,udp=127.0.0.1:$port,localaddr=127.0.0.1:$((port + 1))" \
    -device "virtio-net-pci,netdev=lan,mac=52:54:00:c0:00:0b" </dev/null \
    > >(while IFS= read -r line || [ -n "$line" ]; do printf '[peer] %s\n' "${line%$'\r'}"; done) 2>&1 &
  echo $! >"$tmp/peer.pid"
  disown $!
}
[ "$peer" = 1 ] && start_peer

rcfile=$tmp/rc
timeout --kill-after=10 "${NFSDIR_LAB_TIMEOUT:-1500}" \
  qemu-system-x86_64 -nodefaults -no-reboot -nographic -monitor none "${lan[@]}" \
  -accel "tcg,thread=${NFSDIR_LAB_TCG:-single}" -cpu qemu64 -smp "${NFSDIR_LAB_CPUS:-2}" -m "${NFSDIR_LAB_MEM:-2048}" \
  -kernel "$img/vmlinuz" -initrd "$img/initrd.gz" \
  -append "console=ttyS0 panic=-1 quiet loglevel=4" \
  -serial "file:$tmp/console.log" -serial stdio \
  -drive "file=$tmp/payload.tar,format=raw,if=virtio,readonly=on" \
  -drive "file=$tmp/out.img,format=raw,if=virtio" </dev/null |
  # A shell loop, not awk: mawk reads pipes in large blocks, which would hold
  # the test's output back until the guest stops.
  while IFS= read -r line || [ -n "$line" ]; do
    line=${line%$'\r'}
    if [[ $line =~ ^EXIT=([0-9]+)$ ]]; then
      echo "${BASH_REMATCH[1]}" >"$rcfile"
    elif [ "$peer" = 1 ] && [ "$line" = NFSLAB-PEER=kill ]; then
      kill_peer
      echo "run.sh: peer guest killed"
    elif [ "$peer" = 1 ] && [ "$line" = NFSLAB-PEER=start ]; then
      start_peer
      echo "run.sh: peer guest booting"
    else
      printf '%s\n' "$line"
    fi
  done
qrc=${PIPESTATUS[0]}

if [ -s "$rcfile" ]; then
  rc=$(cat "$rcfile")
elif [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
  echo "run.sh: guest timed out after ${NFSDIR_LAB_TIMEOUT:-1500}s; kernel log tail:" >&2
  tail -n 30 "$tmp/console.log" >&2
  rc=124
else
  echo "run.sh: guest ended without reporting an exit code (qemu exit $qrc); kernel log tail:" >&2
  tail -n 30 "$tmp/console.log" >&2
  rc=126
fi
if [ -n "${NFSDIR_LAB_OUT:-}" ]; then
  mkdir -p "$NFSDIR_LAB_OUT"
  tar -xf "$tmp/out.img" -C "$NFSDIR_LAB_OUT" 2>/dev/null || true
fi
exit "$rc"
