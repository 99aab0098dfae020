#!/usr/bin/env bash
# daemons-rootfs.sh DEST assembles the runtime contents of the nfsdir-daemons
# image, the chart's sidecars for NFS over TLS and Kerberos: tlshd
# (ktls-utils) and rpc.gssd (nfs-common), with every library they
# load, from Debian 13's packages (ktls-utils is not in Debian 12), without
# installing anything on the host. On a host of another release the
# packages come through an apt configuration of their own under the lab's
# cache. The nfsdir binary, the sidecars' entry point (`nfsdir daemon`), is
# added by the Dockerfile and by the lab.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../nfsvm/userspace.sh"
dest=${1:?usage: daemons-rootfs.sh DEST}
release=trixie
if ! grep -qx "VERSION_CODENAME=$release" /etc/os-release 2>/dev/null; then
  cache=${NFSDIR_LAB_CACHE:-$HOME/.cache/nfsdir-lab}
  use_release "$cache/apt-$release" "$release"
  [ -n "$(ls "$cache/apt-$release/lists" 2>/dev/null | grep -v partial || true)" ] || apt-get update -qq >&2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mapfile -t pkgs < <(closure ktls-utils nfs-common libc6)
[ ${#pkgs[@]} -gt 0 ] || { echo "cannot resolve the packages of ktls-utils and nfs-common" >&2; exit 1; }
fetch_debs "$work/debs" "$work/tree" "${pkgs[@]}"
tree=$work/tree
rm -rf "$dest"
mkdir -p "$dest"/usr/{bin,sbin,lib,lib64}
for d in bin sbin lib lib64; do ln -s "usr/$d" "$dest/$d"; done
paths=()
for b in tlshd rpc.gssd; do
  p=$(in_tree "$tree" "$b") || { echo "no package has $b" >&2; exit 1; }
  paths+=("$p")
done
copy_with_libs "$tree" "$dest" "${paths[@]}"
# Loaded at run time, where no ldd sees them: Kerberos's plug-ins and
# libgcc_s (glibc loads it when a thread ends).
mapfile -t plugins < <(cd "$tree" && find usr/lib/*-linux-gnu/krb5 -name '*.so*' -type f 2>/dev/null; cd "$tree" && find usr/lib lib -name 'libgcc_s.so.1' -type f 2>/dev/null)
[ ${#plugins[@]} -eq 0 ] || copy_with_libs "$tree" "$dest" "${plugins[@]}"
mkdir -p "$dest"/{etc,tmp,run,var/tmp,var/lib/nfs}
chmod 1777 "$dest/tmp" "$dest/var/tmp"
cp "$tree/etc/netconfig" "$dest/etc/netconfig"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$dest/etc/nsswitch.conf"
printf 'root:x:0:0:root:/root:/nonexistent\n' >"$dest/etc/passwd"
printf 'root:x:0:\n' >"$dest/etc/group"
