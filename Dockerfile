# nfsdir container image: the static Go binary on a root file system that
# holds only what mounting NFS needs: util-linux's mount and umount,
# nfs-common's mount.nfs, their shared libraries and the few /etc files they
# read. No shell, no package manager, no RPC daemons. The same script
# (tests/k8s/nfsdir-rootfs.sh) assembles the image the lab tests run, so
# the shipped user space is the tested one (tests/chart TestDockerfile).
# Build with `make image` (docker buildx, multi-arch). The driver runs as
# root because mount(2) requires it.
FROM --platform=$BUILDPLATFORM golang:1.26-bookworm AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=v0.1.0
ARG COMMIT=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd/ cmd/
COPY pkg/ pkg/
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build \
      -ldflags "-X github.com/nfsdir/nfsdir/pkg/version.Version=${VERSION} -X github.com/nfsdir/nfsdir/pkg/version.Commit=${COMMIT}" \
      -o /out/nfsdir ./cmd/nfsdir

# The target architecture's Debian packages, unpacked (not installed) and
# reduced to the binaries with their libraries.
FROM debian:bookworm-slim AS rootfs
WORKDIR /src
COPY tests/nfsvm/userspace.sh tests/nfsvm/userspace.sh
COPY tests/k8s/nfsdir-rootfs.sh tests/k8s/nfsdir-rootfs.sh
RUN apt-get update \
 && bash tests/k8s/nfsdir-rootfs.sh /rootfs \
 && rm -rf /var/lib/apt/lists/*

# The daemons image (nfsdir-daemons, `docker build --target daemons`): the
# chart's optional sidecars for NFS over TLS and Kerberos, tlshd and
# rpc.gssd from Debian 13's packages (ktls-utils is not in Debian 12),
# started by `nfsdir daemon` from a Secret's files.
FROM debian:trixie-slim AS daemons-rootfs
WORKDIR /src
COPY tests/nfsvm/userspace.sh tests/nfsvm/userspace.sh
COPY tests/k8s/daemons-rootfs.sh tests/k8s/daemons-rootfs.sh
RUN apt-get update \
 && bash tests/k8s/daemons-rootfs.sh /rootfs \
 && rm -rf /var/lib/apt/lists/*

FROM scratch AS daemons
ARG VERSION=v0.1.0
LABEL org.opencontainers.image.title="nfsdir-daemons" \
      org.opencontainers.image.description="tlshd and rpc.gssd for nfsdir's NFS over TLS and Kerberos mounts" \
      org.opencontainers.image.source="https://github.com/nfsdir/nfsdir" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=daemons-rootfs /rootfs/ /
COPY --from=build /out/nfsdir /nfsdir
ENTRYPOINT ["/nfsdir", "daemon"]

FROM scratch
ARG VERSION=v0.1.0
LABEL org.opencontainers.image.title="nfsdir" \
      org.opencontainers.image.description="CSI driver that turns one NFS export into many volumes" \
      org.opencontainers.image.source="https://github.com/nfsdir/nfsdir" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=rootfs /rootfs/ /
COPY --from=build /out/nfsdir /nfsdir
ENTRYPOINT ["/nfsdir"]
