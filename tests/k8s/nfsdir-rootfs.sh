#!/usr/bin/env bash
# nfsdir-rootfs.sh DEST assembles the runtime contents of the nfsdir image
# that the Dockerfile installs with apt (nfs-common's mount.nfs, util-linux's
# mount and umount, with their libraries, netbase's /etc/protocols) from
# Debian packages, without installing anything on the host. The end-to-end
# lab adds the nfsdir binary and packs it with imagebuild.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../nfsvm/userspace.sh"
dest=${1:?usage: nfsdir-rootfs.sh DEST}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fetch_debs "$work/debs" "$work/tree" nfs-common mount libtirpc3 libtirpc-common libnfsidmap1 libkeyutils1 libevent-core-2.1-7 libwrap0 netbase
mkdir -p "$dest"
copy_with_libs "$work/tree" "$dest" sbin/mount.nfs bin/mount bin/umount
for link in mount.nfs4 umount.nfs umount.nfs4; do ln -sf mount.nfs "$dest/sbin/$link"; done
mkdir -p "$dest/etc" "$dest/tmp" "$dest/var/lib/nfs" "$dest/run"
cp "$work/tree/etc/netconfig" "$dest/etc/netconfig"
# mount.nfs looks the transport up by name (getprotobyname): without
# netbase's /etc/protocols every NFSv3 mount fails with "Protocol not
# supported" (NFSv4 needs no lookup); make e2e-multinode's NFSv3 locks
# found it.
cp "$work/tree/etc/protocols" "$dest/etc/protocols"
# The RPC programs look their ports up by service name.
printf '%s\n' 'sunrpc 111/tcp portmapper' 'sunrpc 111/udp portmapper' 'nfs 2049/tcp' 'nfs 2049/udp' >"$dest/etc/services"
printf 'root:x:0:0:root:/root:/nonexistent\n' >"$dest/etc/passwd"
printf 'root:x:0:\n' >"$dest/etc/group"
