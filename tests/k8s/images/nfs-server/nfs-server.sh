#!/bin/sh
# Entry point of the lab's NFS server image: the node's kernel NFS server
# (NFS v3, v4.1, v4.2) exporting $EXPORT_DIR (default /exports) to everyone,
# with no_root_squash so the driver can create directories owned by any uid.
# It needs a privileged pod (it mounts the nfsd file system and starts kernel
# threads) and the host network (the kernel server serves the network
# namespace that started it; a host-network server outlives nothing that a
# node's mounts depend on). On SIGTERM it stops the server and unexports.
set -u
dir=${EXPORT_DIR:-/exports}
say() { echo "nfs-server: $*"; }
die() { say "$*"; exit 1; }

mkdir -p "$dir" /var/lib/nfs/v4recovery /run/rpcbind
grep -q ' /proc/fs/nfsd ' /proc/mounts || mount -t nfsd nfsd /proc/fs/nfsd || die "cannot mount the nfsd file system (is the pod privileged and the nfsd module loaded?)"
# fsid=0 makes the export the root of the NFSv4 namespace (clients mount
# "server:/"), as in the volume-nfs image deploy/example uses.
echo "$dir *(rw,sync,no_subtree_check,no_root_squash,insecure,fsid=0)" >/etc/exports
# A file system mounted below it (the lab's XFS with project quotas) is an
# export of its own, with its own fsid.
n=10
for m in $(awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/mounts); do
  echo "$m *(rw,sync,no_subtree_check,no_root_squash,insecure,fsid=$n)" >>/etc/exports
  n=$((n+1))
done

# The daemons' PIDs, empty until each is started: a SIGTERM may come first.
rpcbind= mountd=
stop() {
  say "stopping"
  rpc.nfsd 0
  exportfs -ua
  for pid in $mountd $rpcbind; do kill "$pid" 2>/dev/null; done
  # Its own rpc.statd, if it started one (the pid file names it).
  [ -s /run/rpc.statd.pid ] && kill "$(cat /run/rpc.statd.pid)" 2>/dev/null
  exit 0
}
trap stop TERM INT

# The pod starts rpcbind and rpc.statd unless the node runs them already
# (they are in the host network, so the node's NFSv3 mounts use the pod's
# too). rpc.statd is what NFSv3 locks (NLM) need on the server side: lockd
# asks it to watch every client that locks.
if ! rpcinfo -p 127.0.0.1 >/dev/null 2>&1; then
  rpcbind -f -w & rpcbind=$!
  sleep 1
fi
if ! rpcinfo -p 127.0.0.1 2>/dev/null | grep -qw 100024; then # rpc.statd (status)
  mkdir -p /var/lib/nfs/sm /var/lib/nfs/sm.bak
  rpc.statd --no-notify || say "rpc.statd failed: NFSv3 clients cannot lock"
fi
exportfs -ra || die "exportfs failed"
rpc.mountd -F & mountd=$!
# No stable storage for client state survives this pod, so a grace period
# would only delay the first opens: keep it short and end it at once.
echo 10 >/proc/fs/nfsd/nfsv4leasetime 2>/dev/null
echo 10 >/proc/fs/nfsd/nfsv4gracetime 2>/dev/null
rpc.nfsd 8 || die "rpc.nfsd failed"
echo Y >/proc/fs/nfsd/v4_end_grace 2>/dev/null
say "serving $dir"
while :; do sleep 5 & wait $!; done
