#!/usr/bin/env bash
# build-release.sh OUTDIR: builds the two CSI sidecars the Go module proxy
# does not serve, node-driver-registrar and livenessprobe, from their
# upstream release sources at the tags charts/nfsdir/values.yaml names, into
# OUTDIR/csi-node-driver-registrar and OUTDIR/livenessprobe (static, with
# the vendored modules of the release).
#
# The sources come from a source archive of the release when one is found
# (NFSDIR_THIRDPARTY, else a shared/thirdparty directory beside or above
# the checkout or the local repository it was cloned from), checked against
# the pinned sha256; otherwise from a
# shallow git clone of the upstream tag, checked against the pinned commit.
# A binary already built from the same pinned source is kept.
set -euo pipefail
out=$(mkdir -p "$1" && cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
values=$root/charts/nfsdir/values.yaml

# name  repository  tag  commit  archive-sha256  main-package  binary
releases=(
	"node-driver-registrar github.com/kubernetes-csi/node-driver-registrar v2.15.0 87d60a92e312fefe7965ccf2c2b88d6184e30077 9466608d6f8d2dcd1a200fa74ce5827e99c1f1ab26cc6a247140c05c62adbbf7 ./cmd/csi-node-driver-registrar csi-node-driver-registrar"
	"livenessprobe github.com/kubernetes-csi/livenessprobe v2.17.0 064a1024b6280bd5c57b936afee96e441208d7af 62b5481137546e033445549d046b79354a8444e4521f44a25316ccefec3d5126 ./cmd/livenessprobe livenessprobe"
)

# above DIR: the first shared/thirdparty directory in DIR's parents.
above() {
	local d=$1
	while [ "$d" != / ]; do
		d=$(dirname "$d")
		if [ -d "$d/shared/thirdparty" ]; then echo "$d/shared/thirdparty"; return; fi
	done
}

# archives: where the source archives are: NFSDIR_THIRDPARTY, else above
# the checkout, else above the local repository it was cloned from.
archives() {
	if [ -n "${NFSDIR_THIRDPARTY:-}" ]; then echo "$NFSDIR_THIRDPARTY"; return; fi
	local found origin
	found=$(above "$root")
	if [ -z "$found" ]; then
		origin=$(git -C "$root" remote get-url origin 2>/dev/null || true)
		if [ -n "$origin" ] && [ -d "$origin" ]; then found=$(above "$(cd "$origin" && pwd)/."); fi
	fi
	echo "$found"
}

tp=$(archives)
for r in "${releases[@]}"; do
	read -r name repo tag commit sum pkg bin <<<"$r"
	# The chart must run the very version built here.
	if ! grep -A1 "sig-storage/$bin\$" "$values" | grep -q "tag: $tag\$"; then
		echo "build-release.sh: values.yaml names another $bin than $tag" >&2
		exit 1
	fi
	stamp="$out/$bin.source"
	want="$repo $tag $commit"
	if [ -x "$out/$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
		continue
	fi
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	archive="$tp/$name-$tag.src.tar.gz"
	if [ -n "$tp" ] && [ -f "$archive" ]; then
		got=$(sha256sum "$archive" | cut -d' ' -f1)
		if [ "$got" != "$sum" ]; then
			echo "build-release.sh: $archive has sha256 $got, not $sum" >&2
			exit 1
		fi
		tar -xzf "$archive" -C "$work"
		src="$work/$name-$tag"
	else
		git clone -q --depth 1 --branch "$tag" "https://$repo" "$work/src"
		got=$(git -C "$work/src" rev-parse HEAD)
		if [ "$got" != "$commit" ]; then
			echo "build-release.sh: $repo $tag is commit $got, not $commit" >&2
			exit 1
		fi
		src="$work/src"
	fi
	(cd "$src" && CGO_ENABLED=0 go build -mod=vendor -trimpath -ldflags "-s -w -X main.version=$tag" -o "$out/$bin" "$pkg")
	echo "$want" >"$stamp"
	rm -rf "$work"
	trap - EXIT
	echo "built $bin $tag from $([ -f "$archive" ] && echo "$archive" || echo "$repo")"
done
