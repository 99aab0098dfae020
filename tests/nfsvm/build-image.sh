#!/usr/bin/env bash
# build-image.sh assembles the NFS lab guest: Debian's cloud kernel plus an
# initramfs holding busybox, the kernel NFS server/client user space and the
# guest init. Everything comes from Debian packages fetched with
# `apt-get download`; nothing kernel- or NFS-related is installed on the host.
#
# Usage: build-image.sh            (prints the image directory on stdout)
# The image is cached under $NFSDIR_LAB_CACHE (default ~/.cache/nfsdir-lab),
# keyed by the kernel version and the hash of this script and the guest init,
# so a second call returns at once.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/userspace.sh"
cache=${NFSDIR_LAB_CACHE:-$HOME/.cache/nfsdir-lab}
mkdir -p "$cache"

log() { echo "build-image: $*" >&2; }
die() { echo "build-image: $*" >&2; exit 1; }

for tool in qemu-system-x86_64 busybox apt-get dpkg-deb ldd gzip; do
  command -v "$tool" >/dev/null || die "missing host tool $tool (run: apt-get install qemu-system-x86 busybox-static cpio)"
done

# Resolve the cloud kernel metapackage to its versioned package.
resolve() { apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'; }
kpkg=$(resolve)
if [ -z "$kpkg" ] && [ "$(id -u)" = 0 ]; then
  log "package lists are empty or stale; running apt-get update"
  apt-get update -qq >&2 || true
  kpkg=$(resolve)
fi
[ -n "$kpkg" ] || die "cannot resolve linux-image-cloud-amd64 (run apt-get update)"
kver=${kpkg#linux-image-}

key=$( (echo "$kpkg"; cat "$here/build-image.sh" "$here/userspace.sh" "$here/init") | sha256sum | cut -c1-16)
img="$cache/image-$key"
if [ -f "$img/initrd.gz" ] && [ -f "$img/vmlinuz" ]; then
  echo "$img"
  exit 0
fi

log "building lab image $key (kernel $kver)"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Packages whose files the guest needs. Libraries the host already has are
# taken from the host (same Debian release); the others are listed here.
pkgs=("$kpkg" nfs-kernel-server nfs-common rpcbind mount
  libtirpc3 libevent-core-2.1-7 libnfsidmap1 libwrap0 libkeyutils1
  xfsprogs libinih1 liburcu8 e2fsprogs libext2fs2 libcom-err2 libss2
  libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0)
mkdir -p "$work/root"
fetch_debs "$work/debs" "$work/pkgroot" "${pkgs[@]}" || die "apt-get download failed"

src=$work/pkgroot
root=$work/root
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,tmp,run,var/lib/nfs/rpc_pipefs,var/lib/nfs/v4recovery,var/lib/nfs/nfsdcld,lib/modules,work,out,export}

# busybox applets.
cp "$(command -v busybox)" "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
  [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done

# NFS and mount user space, with the shared libraries they load.
copy_with_libs "$src" "$root" sbin/rpcbind sbin/rpc.statd sbin/sm-notify sbin/mount.nfs sbin/showmount \
  usr/sbin/rpc.nfsd usr/sbin/rpc.mountd usr/sbin/exportfs usr/sbin/nfsdcld \
  usr/sbin/rpcinfo usr/sbin/nfsstat usr/sbin/rpc.gssd bin/mount bin/umount sbin/mkfs.xfs sbin/mke2fs || die "collecting user space failed"
cp "$src/etc/mke2fs.conf" "$root/etc/mke2fs.conf" || die "e2fsprogs has no mke2fs.conf"
for link in mount.nfs4 umount.nfs umount.nfs4; do ln -sf mount.nfs "$root/sbin/$link"; done

# GNU cp, tar and gzip under /opt/gnu, for make bench's baselines (what
# csi-driver-nfs's Debian-based image runs for clones and snapshots); the
# guest's own tools stay busybox's.
fetch_debs "$work/gnudebs" "$work/gnutree" coreutils tar gzip || die "apt-get download of GNU tools failed"
copy_with_libs "$work/gnutree" "$work/gnuroot" bin/cp bin/tar bin/gzip || die "collecting GNU tools failed"
mkdir -p "$root/opt/gnu"
for b in cp tar gzip; do mv "$work/gnuroot/bin/$b" "$root/opt/gnu/$b"; done
rmdir "$work/gnuroot/bin"
cp -a "$work/gnuroot/." "$root/"

# Kernel modules: NFS client and server, virtio, with their dependencies.
kmod=$src/lib/modules/$kver
[ -d "$kmod" ] || die "kernel package has no modules for $kver"
busybox depmod -b "$src" "$kver"
want=(nfsd nfsv3 nfsv4 nfs lockd sunrpc virtio_pci virtio_blk overlay bridge veth br_netfilter dummy xfs loop ext4 quota_v2 virtio_net)
declare -A mods=()
add_mod() {
  local name=$1 line path dep
  line=$(grep -E "(^|/)${name//_/[_-]}\.ko(\.[a-z]+)?:" "$kmod/modules.dep" | head -n1) || true
  [ -n "$line" ] || return 0 # built in
  path=${line%%:*}
  [ -n "${mods[$path]:-}" ] && return 0
  mods[$path]=1
  for dep in ${line#*:}; do
    dep=$(basename "$dep"); dep=${dep%%.ko*}
    add_mod "$dep"
  done
}
for m in "${want[@]}"; do add_mod "$m"; done
mkdir -p "$root/lib/modules/$kver"
for path in "${!mods[@]}"; do
  mkdir -p "$root/lib/modules/$kver/$(dirname "$path")"
  cp "$kmod/$path" "$root/lib/modules/$kver/$path"
done
cp "$kmod"/modules.dep "$kmod"/modules.alias "$root/lib/modules/$kver/" 2>/dev/null || true
busybox depmod -b "$root" "$kver"

# Configuration files the RPC daemons read.
for f in netconfig services protocols rpc; do
  if [ -f "$src/etc/$f" ]; then cp "$src/etc/$f" "$root/etc/$f"; elif [ -f "/etc/$f" ]; then cp "/etc/$f" "$root/etc/$f"; fi
done
[ -f "$root/etc/netconfig" ] || die "no /etc/netconfig in libtirpc3"
cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
_rpc:x:100:65534::/run/rpcbind:/bin/false
statd:x:101:65534::/var/lib/nfs:/bin/false
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF
echo "hosts: files" >"$root/etc/nsswitch.conf"
printf '127.0.0.1 localhost nfslab\n::1 localhost ip6-localhost\n' >"$root/etc/hosts"
: >"$root/etc/exports"
cp "$here/init" "$root/init"
chmod 0755 "$root/init"

mkdir -p "$work/out"
(cd "$root" && find . | busybox cpio -o -H newc | gzip -1 >"$work/out/initrd.gz")
cp "$src/boot/vmlinuz-$kver" "$work/out/vmlinuz"
echo "$kver" >"$work/out/kernel-version"
rm -rf "$img"
mv "$work/out" "$img"
log "image ready: $img ($(du -sh "$img/initrd.gz" | cut -f1) initrd)"
echo "$img"
