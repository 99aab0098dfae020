#!/usr/bin/env bash
# fetch-runtime.sh DEST puts containerd, its runc shim, ctr and runc from
# Debian packages into DEST/, the CNI plugins the lab's pod network uses into
# DEST/cni, and the libraries they need beyond the lab guest's into
# DEST/lib, without installing anything on the host.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../nfsvm/userspace.sh"
dest=${1:?usage: fetch-runtime.sh DEST}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fetch_debs "$work/debs" "$work/tree" containerd runc libseccomp2 containernetworking-plugins
mkdir -p "$dest/lib"
for b in usr/bin/containerd usr/bin/containerd-shim-runc-v2 usr/bin/ctr usr/sbin/runc; do
  cp -a "$work/tree/$b" "$dest/"
done
mkdir -p "$dest/cni"
for p in bridge host-local loopback portmap; do cp -a "$work/tree/usr/lib/cni/$p" "$dest/cni/"; done
cp -L "$work/tree/lib/x86_64-linux-gnu/libseccomp.so.2" "$dest/lib/" 2>/dev/null ||
  cp -L "$work/tree/usr/lib/x86_64-linux-gnu/libseccomp.so.2" "$dest/lib/"
