#!/usr/bin/env bash
# build-image.sh assembles the NFS lab guest: Debian's cloud kernel plus an
# initramfs holding busybox, the kernel NFS server/client user space and the
# guest init. Everything comes from Debian packages fetched with
# `apt-get download`; nothing kernel- or NFS-related is installed on the host.
#
# Usage: build-image.sh            (prints the image directory on stdout)
# $NFSDIR_LAB_RELEASE picks the Debian release the guest is made of:
# bookworm (the default: the host's own release, kernel 6.1) or trixie
# (kernel 6.12, with RPC-with-TLS: tlshd from ktls-utils, and a Kerberos
# KDC and gssproxy for the secure lab). A release other than the host's is
# fetched with an apt configuration of its own under the cache; the host's
# apt sources are not changed.
# The image is cached under $NFSDIR_LAB_CACHE (default ~/.cache/nfsdir-lab),
# keyed by the release, the kernel version and the hash of this script and
# the guest init, so a second call returns at once.
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

release=${NFSDIR_LAB_RELEASE:-bookworm}
case $release in
  bookworm) ;;
  trixie) use_release "$cache/apt-$release" "$release" ;;
  *) die "NFSDIR_LAB_RELEASE=$release: the lab is made of bookworm or trixie" ;;
esac

# Resolve the cloud kernel metapackage to its versioned package, and the
# image it makes.
resolve() { apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'; }
locate() {
  kpkg=$(resolve || true)
  kver=${kpkg#linux-image-}
  key=$( (echo "$release $kpkg"; cat "$here/build-image.sh" "$here/userspace.sh" "$here/init") | sha256sum | cut -c1-16)
  [ "$release" = bookworm ] || key=$release-$key
  img="$cache/image-$key"
}
cached() { [ -n "$kpkg" ] && [ -f "$img/initrd.gz" ] && [ -f "$img/vmlinuz" ]; }
locate
if cached; then
  echo "$img"
  exit 0
fi
# Before a build the package lists are fetched again where they are the
# lab's own (another release: what they name may have left the mirror
# since) or empty (the host's, as root).
if [ -n "${APT_CONFIG:-}" ] || { [ -z "$kpkg" ] && [ "$(id -u)" = 0 ]; }; then
  log "fetching the package lists of $release"
  apt-get update -qq >&2 || true
  locate
  if cached; then
    echo "$img"
    exit 0
  fi
fi
[ -n "$kpkg" ] || die "cannot resolve linux-image-cloud-amd64 of $release (run apt-get update)"

log "building lab image $key (kernel $kver)"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Packages whose files the guest needs. On the host's own release the
# libraries the host already has are taken from the host and the others are
# listed here; on another release every package the user space needs
# (libc6 and its loader included) comes from that release.
tools=(nfs-kernel-server nfs-common rpcbind mount xfsprogs e2fsprogs)
bins=(rpcbind rpc.statd sm-notify mount.nfs showmount rpc.nfsd rpc.mountd exportfs nfsdcld
  rpcinfo nfsstat rpc.gssd mount umount mkfs.xfs mke2fs)
case $release in
  bookworm)
    pkgs=("${tools[@]}" libtirpc3 libevent-core-2.1-7 libnfsidmap1 libwrap0 libkeyutils1
      libinih1 liburcu8 libext2fs2 libcom-err2 libss2
      libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0) ;;
  *)
    # tlshd for RPC-with-TLS; a KDC, its admin tools and gssproxy for
    # Kerberos on both ends of a mount.
    tools+=(ktls-utils krb5-kdc krb5-admin-server krb5-user gssproxy keyutils libc6)
    bins+=(tlshd krb5kdc kdb5_util kadmin.local klist.mit gssproxy keyctl)
    mapfile -t pkgs < <(closure "${tools[@]}")
    [ ${#pkgs[@]} -gt 0 ] || die "cannot resolve the packages of ${tools[*]}" ;;
esac
mkdir -p "$work/root"
fetch_debs "$work/debs" "$work/pkgroot" "$kpkg" "${pkgs[@]}" || die "apt-get download failed"

src=$work/pkgroot
root=$work/root
# A merged /usr, as Debian lays it out: /bin, /sbin, /lib and /lib64 are
# links into /usr, whichever of them a package puts its files in.
mkdir -p "$root"/usr/{bin,sbin,lib,lib64}
for d in bin sbin lib lib64; do ln -s "usr/$d" "$root/$d"; done
mkdir -p "$root"/{etc,proc,sys,dev,tmp,var/tmp,run,var/lib/nfs/rpc_pipefs,var/lib/nfs/v4recovery,var/lib/nfs/nfsdcld,lib/modules,work,out,export}
ln -s ../run "$root/var/run" # where the kernel finds gssproxy's socket

# busybox applets.
cp "$(command -v busybox)" "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
  [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done

# NFS, mount and security user space, with the shared libraries they load.
paths=()
for b in "${bins[@]}"; do
  p=$(in_tree "$src" "$b") || die "no package of ${tools[*]} has $b"
  paths+=("$p")
done
copy_with_libs "$src" "$root" "${paths[@]}" || die "collecting user space failed"
cp "$src/etc/mke2fs.conf" "$root/etc/mke2fs.conf" || die "e2fsprogs has no mke2fs.conf"
# Plug-ins loaded at run time, which no ldd sees: the KDC's database back
# end, the GSS mechanisms and gssproxy's event loop (libverto's back ends)
for d in usr/lib/x86_64-linux-gnu/krb5 usr/lib/x86_64-linux-gnu/gssproxy; do
  [ -d "$src/$d" ] || continue
  mkdir -p "$root/$d"
  cp -a "$src/$d/." "$root/$d/"
  mapfile -t plugins < <(cd "$src" && find "$d" -name '*.so*' -type f)
  [ ${#plugins[@]} -eq 0 ] || copy_with_libs "$src" "$root" "${plugins[@]}" || die "collecting plug-ins failed"
done
# (and libgcc_s, which glibc loads for pthread_exit).
mapfile -t plugins < <(cd "$src" && find usr/lib lib -name 'libverto-*.so*' -type f -o -name 'libgcc_s.so.1' 2>/dev/null)
if [ ${#plugins[@]} -gt 0 ]; then
  copy_with_libs "$src" "$root" "${plugins[@]}" || die "collecting libverto's back ends failed"
  (cd "$src" && find usr/lib -name 'libverto-*.so*' -type l) | while read -r l; do cp -a "$src/$l" "$root/$l"; done
fi
for link in mount.nfs4 umount.nfs umount.nfs4; do ln -sf mount.nfs "$root/sbin/$link"; done

# GNU cp, tar and gzip under /opt/gnu, for make bench's baselines (what
# csi-driver-nfs's Debian-based image runs for clones and snapshots); the
# guest's own tools stay busybox's.
gnupkgs=(coreutils tar gzip)
[ "$release" = bookworm ] || mapfile -t gnupkgs < <(closure "${gnupkgs[@]}" libc6)
fetch_debs "$work/gnudebs" "$work/gnutree" "${gnupkgs[@]}" || die "apt-get download of GNU tools failed"
gnu=()
for b in cp tar gzip; do gnu+=("$(in_tree "$work/gnutree" $b)") || die "no GNU $b"; done
copy_with_libs "$work/gnutree" "$work/gnuroot" "${gnu[@]}" || die "collecting GNU tools failed"
mkdir -p "$root/opt/gnu"
for b in "${gnu[@]}"; do mv "$work/gnuroot/$b" "$root/opt/gnu/"; done
find "$work/gnuroot" -type d -empty -delete
tar -C "$work/gnuroot" -cf - . | tar -C "$root" --keep-directory-symlink -xf -

# Kernel modules: NFS client and server, virtio, kernel TLS and Kerberos for
# RPC, with their dependencies. Compressed modules (.ko.xz, .ko.zst) are
# unpacked, so that busybox's depmod and modprobe read them.
kmod=$work/kbase/lib/modules/$kver
mkdir -p "$work/kbase/lib/modules"
for d in "$src/lib/modules/$kver" "$src/usr/lib/modules/$kver"; do
  [ -d "$d" ] && [ ! -L "$d" ] && { mv "$d" "$kmod"; break; }
done
[ -d "$kmod" ] || die "kernel package has no modules for $kver"
find "$kmod" -name '*.ko.xz' -exec xz -d {} +
find "$kmod" -name '*.ko.zst' -exec zstd -q -d --rm {} +
busybox depmod -b "$work/kbase" "$kver"
want=(nfsd nfsv3 nfsv4 nfs lockd sunrpc virtio_pci virtio_blk overlay bridge veth br_netfilter dummy xfs loop ext4 quota_v2 virtio_net
  tls rpcsec_gss_krb5 gcm ghash_generic aes_generic ctr ccm chacha20poly1305 cts cbc hmac sha1_generic sha256_generic sha512_generic authenc cmac)
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
