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

# in_tree TREE NAME: the path, relative to TREE, of the program NAME in one
# of the directories a Debian package puts programs in.
in_tree() {
  local d
  for d in usr/sbin sbin usr/bin bin; do
    [ -f "$1/$d/$2" ] && { echo "$d/$2"; return 0; }
  done
  return 1
}

# copy_with_libs TREE ROOT BIN...: copy each BIN (a path relative to TREE)
# to the same path under ROOT, with the shared libraries it loads and the
# dynamic loader. When TREE holds a C library of its own (a release other
# than the host's), its loader lists the libraries and every one must come
# from TREE; otherwise the host's ldd does, from TREE first, then from the
# host, which runs the same Debian release. Fails when a library cannot be
# found.
copy_with_libs() {
  local tree=$1 root=$2 b line lib dest libpath loader
  shift 2
  # The package tree's library directories, whatever the architecture
  # (x86_64-linux-gnu, aarch64-linux-gnu, ...).
  libpath=$( (ls -d "$tree"/lib/*-linux-gnu "$tree"/usr/lib/*-linux-gnu 2>/dev/null || true) | paste -sd: -)
  loader=$( (ls "$tree"/usr/lib/*-linux-gnu/ld-linux*.so.* "$tree"/lib/*-linux-gnu/ld-linux*.so.* 2>/dev/null || true) | head -n1)
  local -A libs=()
  for b in "$@"; do
    [ -f "$tree/$b" ] || { echo "package tree lacks $b" >&2; return 1; }
    mkdir -p "$root/$(dirname "$b")"
    rm -f "$root/$b"
    cp -a "$tree/$b" "$root/$b"
    while read -r line; do
      case "$line" in
        *"not found"*) echo "$b needs a library nobody provides: $line" >&2; return 1 ;;
        *"not a dynamic executable"* | *"statically linked"*) continue ;;
      esac
      lib=$(echo "$line" | awk '/=>/ {print $3} !/=>/ && /^\// {print $1}')
      [ -n "$lib" ] || continue
      if [ -n "$loader" ]; then
        case "$lib" in
          "$tree"/*) ;;
          */ld-linux*) continue ;; # the loader itself, copied below
          *) echo "$b loads $lib, which is not of its release" >&2; return 1 ;;
        esac
      fi
      libs[$lib]=1
    done < <(if [ -n "$loader" ]; then "$loader" --library-path "$libpath" --list "$tree/$b" 2>&1; else LD_LIBRARY_PATH="$libpath" ldd "$tree/$b"; fi)
  done
  for lib in "${!libs[@]}"; do
    dest=${lib#"$tree"}
    dest=/${dest#/}
    mkdir -p "$root$(dirname "$dest")"
    cp -L "$lib" "$root$dest"
  done
  # Programs name the loader by its absolute path (/lib64/... on x86_64).
  if [ -n "$loader" ]; then
    dest=${loader#"$tree"}
    mkdir -p "$root$(dirname "$dest")" "$root/lib64"
    cp -L "$loader" "$root$dest"
    [ -e "$root/lib64/$(basename "$loader")" ] || cp -L "$loader" "$root/lib64/"
  elif [ -e /lib64/ld-linux-x86-64.so.2 ] && [ ! -e "$root/lib64/ld-linux-x86-64.so.2" ]; then
    mkdir -p "$root/lib64"
    cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
  fi
}

# use_release DIR SUITE: point apt-get and apt-cache of this shell (through
# APT_CONFIG) at Debian's SUITE, with package lists, cache and an empty
# dpkg status of their own under DIR, so that packages of a release other
# than the host's are resolved and downloaded without touching the host's
# apt set-up. The lists are fetched by the caller's first apt-get update.
use_release() {
  local dir=$1 suite=$2
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/sources.list.d" "$dir/preferences.d"
  : >"$dir/status"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $suite main" >"$dir/sources.list"
  cat >"$dir/apt.conf" <<CONF
Dir::Etc::SourceList "$dir/sources.list";
Dir::Etc::SourceParts "$dir/sources.list.d";
Dir::Etc::Preferences "$dir/preferences";
Dir::Etc::PreferencesParts "$dir/preferences.d";
Dir::State::Lists "$dir/lists";
Dir::State::status "$dir/status";
Dir::Cache "$dir/cache";
Acquire::Languages "none";
Acquire::IndexTargets::deb::DEP-11::DefaultEnabled "false";
Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled "false";
APT::Sandbox::User "root";
CONF
  export APT_CONFIG=$dir/apt.conf
}

# closure PKG...: the packages PKG... need to run (their Depends and
# Pre-Depends, recursively), one name a line, virtual packages left out.
closure() {
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "$@" | grep -E '^[a-z0-9]' | sort -u
}
