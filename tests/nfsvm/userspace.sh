# userspace.sh is sourced by the lab's image builders. It fetches Debian
# packages without installing them and copies binaries from them, with every
# shared library they load, into a root file system.

# fetch_debs DIR TREE PKG...: apt-get download the packages into DIR and
# unpack them all into TREE.
fetch_debs() {
  local dir=$1 tree=$2 deb
  shift 2
  mkdir -p "$dir" "$tree"
  (cd "$dir" && apt-get download "$@" >/dev/null 2>&1) ||
    (cd "$dir" && apt-get download "$@") || { echo "apt-get download $* failed" >&2; return 1; }
  for deb in "$dir"/*.deb; do dpkg-deb -x "$deb" "$tree"; done
}

# copy_with_libs TREE ROOT BIN...: copy each BIN (a path relative to TREE)
# to the same path under ROOT, with the shared libraries ldd resolves for it
# (from TREE first, then from the host, which runs the same Debian release),
# and the dynamic loader. Fails when a library cannot be found.
copy_with_libs() {
  local tree=$1 root=$2 b line lib dest libpath
  shift 2
  # The package tree's library directories, whatever the architecture
  # (x86_64-linux-gnu, aarch64-linux-gnu, ...).
  libpath=$(ls -d "$tree"/lib/*-linux-gnu "$tree"/usr/lib/*-linux-gnu 2>/dev/null | paste -sd: -)
  local -A libs=()
  for b in "$@"; do
    [ -f "$tree/$b" ] || { echo "package tree lacks $b" >&2; return 1; }
    mkdir -p "$root/$(dirname "$b")"
    rm -f "$root/$b"
    cp -a "$tree/$b" "$root/$b"
    while read -r line; do
      case "$line" in
        *"not found"*) echo "$b needs a library nobody provides: $line" >&2; return 1 ;;
      esac
      lib=$(echo "$line" | awk '/=>/ {print $3} !/=>/ && /^\// {print $1}')
      [ -n "$lib" ] && libs[$lib]=1
    done < <(LD_LIBRARY_PATH="$libpath" ldd "$tree/$b")
  done
  for lib in "${!libs[@]}"; do
    dest=${lib#"$tree"}
    dest=/${dest#/}
    mkdir -p "$root$(dirname "$dest")"
    cp -L "$lib" "$root$dest"
  done
  # ldd lists the dynamic loader by its absolute path, so it is copied
  # above; on x86_64 make sure of it.
  if [ -e /lib64/ld-linux-x86-64.so.2 ] && [ ! -e "$root/lib64/ld-linux-x86-64.so.2" ]; then
    mkdir -p "$root/lib64"
    cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
  fi
}
