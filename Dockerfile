# nfsdir container image: a static Go binary on a small Debian base that
# carries exactly what mounting NFS needs. Build with `make image` (docker
# buildx, multi-arch). The driver runs as root because mount(2) requires it.
FROM --platform=$BUILDPLATFORM golang:1.26-bookworm AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=v0.0.0-dev
ARG COMMIT=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd/ cmd/
COPY pkg/ pkg/
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build \
      -ldflags "-X github.com/nfsdir/nfsdir/pkg/version.Version=${VERSION} -X github.com/nfsdir/nfsdir/pkg/version.Commit=${COMMIT}" \
      -o /out/nfsdir ./cmd/nfsdir

FROM debian:bookworm-slim
# mount.nfs (nfs-common), mount/umount (mount), CA certificates for TLS.
RUN apt-get update \
 && apt-get install -y --no-install-recommends nfs-common mount ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/nfsdir /nfsdir
ENTRYPOINT ["/nfsdir"]
