#!/usr/bin/env bash
# rootfs.sh DEST assembles the lab's NFS server image contents from Debian
# packages (nfs-kernel-server's rpc.nfsd, rpc.mountd and exportfs,
# nfs-common's rpc.statd, rpcbind and rpcinfo, busybox for the entry
# script), without installing anything on the host.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../../nfsvm/userspace.sh"
dest=${1:?usage: rootfs.sh DEST}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fetch_debs "$work/debs" "$work/tree" nfs-kernel-server nfs-common rpcbind libtirpc3 libtirpc-common \
  libnfsidmap1 libkeyutils1 libevent-core-2.1-7 libwrap0 netbase
mkdir -p "$dest/bin"
copy_with_libs "$work/tree" "$dest" sbin/rpcbind sbin/rpc.statd usr/sbin/rpcinfo usr/sbin/rpc.nfsd usr/sbin/rpc.mountd usr/sbin/exportfs
cp "$(command -v busybox)" "$dest/bin/busybox"
for a in $("$dest/bin/busybox" --list); do [ -e "$dest/bin/$a" ] || ln -s busybox "$dest/bin/$a"; done
mkdir -p "$dest/etc" "$dest/tmp" "$dest/run" "$dest/var/lib/nfs" "$dest/proc" "$dest/exports"
# netconfig for the RPC library, protocols for the protocol names.
cp "$work/tree/etc/netconfig" "$work/tree/etc/protocols" "$dest/etc/"
# The RPC programs look their ports up by service name.
printf '%s\n' 'sunrpc 111/tcp portmapper' 'sunrpc 111/udp portmapper' 'nfs 2049/tcp' 'nfs 2049/udp' >"$dest/etc/services"
printf 'root:x:0:0:root:/root:/bin/sh\n_rpc:x:100:65534::/run/rpcbind:/bin/false\n' >"$dest/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$dest/etc/group"
cp "$here/nfs-server.sh" "$dest/nfs-server"
