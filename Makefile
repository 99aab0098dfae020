# nfsdir build and test entry points. `make test` is what CI runs.
SHELL := /bin/bash
GO ?= go
# The release is the chart's appVersion (CHANGELOG.md; tests/chart
# TestVersionsAgree); the commit tells builds apart.
APP_VERSION := $(shell sed -n 's/^appVersion: "\(.*\)"$$/\1/p' charts/nfsdir/Chart.yaml)
VERSION ?= v$(APP_VERSION)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/nfsdir/nfsdir/pkg/version.Version=$(VERSION) -X github.com/nfsdir/nfsdir/pkg/version.Commit=$(COMMIT)
LAB := $(CURDIR)/tests/nfsvm/run.sh
# Packages whose tests need the NFS lab guest.
LAB_PKGS := ./tests/sanity/ ./tests/sanity/stage/ ./tests/e2e/
# Fuzz targets run for FUZZTIME each in `make test` (longer in `make fuzz`).
FUZZ_TARGETS := pkg/safepath:FuzzCheckVolumePath pkg/subdir:FuzzExpand pkg/volumeid:FuzzParse \
	pkg/params:FuzzParseCreate pkg/mountopts:FuzzParse pkg/mounttable:FuzzUnescape \
	pkg/targetpath:FuzzCheck pkg/provision:FuzzTuner pkg/capacity:FuzzTallyCountsEachFileOnce pkg/capacity:FuzzDecode \
	pkg/params:FuzzParseMutable pkg/safepath:FuzzArchiveEntry pkg/migrate:FuzzPlanStaysInsideTheShare \
	pkg/publock:FuzzParse pkg/mounttable:FuzzParseStats pkg/mountsec:FuzzAskedAndVerify pkg/secdaemons:FuzzParse \
	pkg/export:FuzzParseNamed pkg/placement:FuzzChoose
FUZZTIME ?= 300000x
# Targets that make files (a temporary directory per input) run for
# FUZZTIME_FS each: some 1,500 inputs a second instead of hundreds of
# thousands.
FUZZ_FS_TARGETS := pkg/treecopy:FuzzUnpack
FUZZTIME_FS ?= 20000x
# Tools built from source (tests/tools pins the module versions).
HELM_VERSION := v3.22.0
HELM_K8S_MINOR := 35
HELM := $(CURDIR)/bin/helm
HELM_LDFLAGS := -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$(HELM_K8S_MINOR) \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$(HELM_K8S_MINOR)

export CGO_ENABLED := 0

.PHONY: all build test e2e-payload test-quick fuzz-smoke test-nfs-sanity check unit fuzz-short fuzz test-nfs test-secure demo bench bench-bound lab-deps lab-image clean helm manifests image push k8s-bins k8s-all-bins k8s-kube-lane k8s-kube-bins k8s-other-bins k8s-e2e-bins lab-images e2e-smoke e2e e2e-storage e2e-multinode e2e-secure

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/nfsdir ./cmd/nfsdir

## test: everything: static checks, unit tests (with the fake-mounter csi-sanity run and
## the real node-driver-registrar and livenessprobe), short fuzzing, the real-NFS lab tests
## (csi-sanity and e2e in the qemu guest), the Kubernetes end-to-end scenarios on one node
## followed by Kubernetes' own storage suite with one spec of each kind (make e2e;
## tests/k8s quickSpecs; `make e2e-storage` runs all of them) and the scenarios on two
## nodes with the suite's specs across nodes (make e2e-multinode), and NFS over TLS and
## Kerberos on a Kubernetes node of Debian 13 (make e2e-secure). The stages run one
## after another (tests/stages); it ends with a table of them (seconds, result, what
## passed and failed), also written to _output/test-timings.json.
TEST_STAGES := check helm unit fuzz-short test-nfs test-secure e2e e2e-multinode e2e-secure
test:
	$(GO) run ./tests/stages -json _output/test-timings.json -make '$(MAKE)' $(TEST_STAGES)

## test-quick: the day-to-day subset (a few minutes): the checks, the unit tests, a fuzz
## smoke of every target (FUZZ_SMOKE executions each) and csi-sanity against the kernel NFS
## server in one lab guest. make test stays the whole thing and what CI runs.
QUICK_STAGES := check helm unit fuzz-smoke test-nfs-sanity
FUZZ_SMOKE := 20000x
test-quick:
	$(GO) run ./tests/stages -json _output/test-quick-timings.json -make '$(MAKE)' $(QUICK_STAGES)

fuzz-smoke:
	@$(MAKE) --no-print-directory fuzz-short FUZZTIME=$(FUZZ_SMOKE) FUZZTIME_FS=2000x

check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet ./...
	cd tests/k8s && $(GO) vet ./...
	cd tests/k8s/sidecars/resizer && $(GO) vet ./...

## unit needs openssl: tests/docs runs the certificate commands of docs/capacity-and-quotas.md.
unit:
	@command -v openssl >/dev/null || { echo "installing openssl"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssl; }
	tests/k8s/sidecars/build-release.sh bin/k8s
	NFSDIR_HELM=$(HELM) NFSDIR_SIDECARS=$(CURDIR)/bin/k8s $(GO) test -count=1 ./...
	cd tests/k8s && $(GO) test -count=1 ./...
	cd tests/k8s/sidecars/resizer && $(GO) test -count=1 ./...

## helm: build helm $(HELM_VERSION) from source (no prebuilt download).
helm: $(HELM)
$(HELM): tests/tools/go.mod tests/tools/go.sum Makefile
	cd tests/tools && grep -q 'helm.sh/helm/v3 $(HELM_VERSION)' go.mod && $(GO) build -ldflags '$(HELM_LDFLAGS)' -o $(HELM) helm.sh/helm/v3/cmd/helm

fuzz-short:
	@set -e; for t in $(FUZZ_TARGETS) $(addsuffix @fs,$(FUZZ_FS_TARGETS)); do \
		budget=$(FUZZTIME); case $$t in *@fs) t=$${t%@fs}; budget=$(FUZZTIME_FS);; esac; \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "fuzz $$pkg $$fn ($$budget)"; \
		log=$$(mktemp); \
		$(GO) test ./$$pkg -run '^$$' -fuzz "^$$fn$$" -fuzztime $$budget >$$log 2>&1 || { cat $$log; rm -f $$log; exit 1; }; \
		grep -o 'elapsed: [^,]*, execs: [0-9]*' $$log | tail -n 1; rm -f $$log; \
	done

fuzz:
	$(MAKE) fuzz-short FUZZTIME=2m FUZZTIME_FS=2m

## test-nfs: the lab tests, each test binary in its own qemu guest with a kernel NFS server.
## One scenario alone: make test-nfs RUN=TestDeadServer (a -run pattern). The whole set
## runs in two lanes side by side, a guest each (a guest's single-threaded TCG keeps one
## host core busy): LAB_LANE2's tests of tests/e2e in one, everything else in the other.
RUN ?= .
# About half the lab's guest time: the longest tests of tests/e2e.
LAB_LANE2_TESTS := TestPurgeOfADeepChainHoldsFewDescriptors TestSnapshotAndRestoreResumeAfterAKill \
	TestControllerKilledMidOperations TestSingleNodeVolumeOnOneNodeAtATime \
	TestDeadServerWithMountedVolumes TestHungShareStallsNothingElse \
	TestUnpublishDuringOutageLeavesOtherWritersAlone TestDeadServer
space := $(subst ,, )
LAB_LANE2 := $(subst $(space),|,$(strip $(LAB_LANE2_TESTS)))
LAB_TEST = NFSDIR_LAB_BIN=$(CURDIR)/bin/lab $(GO) test -count=1 -timeout 20m -exec $(LAB) -v
LAB_FILTER = grep --line-buffered -E '^(=== RUN|--- |PASS|FAIL|ok|panic|\s+\S+_test.go)|Ran [0-9]+ of|Passed|nfslab:'
test-nfs: lab-image
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/lab/nfsdir ./cmd/nfsdir
	$(GO) test -count=1 -run '^$$' $(LAB_PKGS) >/dev/null
	@if [ '$(RUN)' != . ]; then \
		$(LAB_TEST) -run '$(RUN)' $(LAB_PKGS) 2>&1 | tee bin/lab-test.log | $(LAB_FILTER); exit $${PIPESTATUS[0]}; \
	fi; \
	{ $(LAB_TEST) -run '^($(LAB_LANE2))$$' ./tests/e2e/ >bin/lab-test-2.log 2>&1; echo $$? >bin/lab-test-2.rc; } & \
	$(LAB_TEST) -p 1 -skip '^($(LAB_LANE2))$$' $(LAB_PKGS) 2>&1 | tee bin/lab-test.log | $(LAB_FILTER); rc=$${PIPESTATUS[0]}; \
	wait; echo "--- lane 2 ($(LAB_LANE2))"; $(LAB_FILTER) bin/lab-test-2.log; \
	rc2=$$(cat bin/lab-test-2.rc); echo "lane 1: exit $$rc, lane 2: exit $$rc2"; [ $$rc = 0 ] && [ $$rc2 = 0 ]

## test-nfs-sanity: csi-sanity against the kernel NFS server, a lab guest each for the
## default node plugin and one in NodeStage mode.
test-nfs-sanity: lab-image
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/lab/nfsdir ./cmd/nfsdir
	$(LAB_TEST) ./tests/sanity/ ./tests/sanity/stage/ 2>&1 | tee bin/lab-test-sanity.log | $(LAB_FILTER); exit $${PIPESTATUS[0]}

## test-secure: NFS over TLS and Kerberos (tests/secure) in a lab guest made of Debian 13
## (kernel 6.12, tlshd, a KDC, gssproxy, rpc.gssd): NFSDIR_LAB_RELEASE=trixie. One test alone:
## make test-secure RUN=TestMutualTLSExport.
## The secure lab also carries the daemons image's root file system (bin/lab-secure/daemons),
## whose tlshd and rpc.gssd the chart's sidecars run.
test-secure: lab-deps
	@NFSDIR_LAB_RELEASE=trixie tests/nfsvm/build-image.sh >/dev/null
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/lab-secure/nfsdir ./cmd/nfsdir
	@[ -x bin/lab-secure/daemons/usr/sbin/tlshd ] && [ bin/lab-secure/daemons -nt tests/k8s/daemons-rootfs.sh ] || tests/k8s/daemons-rootfs.sh bin/lab-secure/daemons
	cp bin/lab-secure/nfsdir bin/lab-secure/daemons/nfsdir
	NFSDIR_LAB_RELEASE=trixie $(LAB_TEST:bin/lab=bin/lab-secure) -run '$(RUN)' ./tests/secure/ 2>&1 | tee bin/lab-test-secure.log | $(LAB_FILTER); exit $${PIPESTATUS[0]}

## lab-deps: the host packages the lab needs (installed when missing; needs root).
lab-deps:
	@command -v qemu-system-x86_64 >/dev/null && command -v busybox >/dev/null || { \
		echo "installing qemu-system-x86 and busybox-static"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-system-x86 busybox-static; }

lab-image: lab-deps
	@tests/nfsvm/build-image.sh >/dev/null

## demo: start the lab, provision a volume, mount it on two targets, write/read, unmount, delete.
demo: lab-image
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/lab/nfsdir ./cmd/nfsdir
	$(GO) build -o bin/demo ./tests/demo
	NFSDIR_LAB_BIN=$(CURDIR)/bin/lab $(LAB) bin/demo

## k8s-bins: Kubernetes $(K8S_VERSION) binaries for the end-to-end lab, built from the
## module proxy in pinned wrapper modules (tests/k8s/bins, tests/k8s/etcd, tests/k8s/sidecars):
## the Kubernetes programs beside etcd and the sidecars (modules with dependencies of their
## own), two builds at a time so that one compiles while the other links.
K8S_VERSION := v1.35.4
# The agnhost image the v1.35 storage e2e suite names (test/utils/image/manifest.go).
E2E_AGNHOST := registry.k8s.io/e2e-test-images/agnhost:2.59
K8S_BINS := kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl
K8S_LDFLAGS := -s -w -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=35
ETCD_VERSION := v3.6.16
CSI_PROVISIONER_VERSION := v5.3.0
CSI_RESIZER_VERSION := v1.14.0
CSI_SNAPSHOTTER_VERSION := v8.7.0
# Built from release sources by tests/k8s/sidecars/build-release.sh, which pins them.
NODE_DRIVER_REGISTRAR_VERSION := v2.15.0
LIVENESSPROBE_VERSION := v2.17.0
k8s-bins:
	$(MAKE) --no-print-directory -j2 k8s-kube-bins k8s-other-bins
# Everything the Kubernetes runs need: the Kubernetes module's programs and then its
# e2e.test (which gets most of their packages from the build cache), beside the rest.
k8s-all-bins:
	$(MAKE) --no-print-directory -j2 k8s-kube-lane k8s-other-bins
k8s-kube-lane: k8s-kube-bins
	$(MAKE) --no-print-directory k8s-e2e-bins
k8s-kube-bins:
	mkdir -p bin/k8s && cd tests/k8s/bins && grep -q 'k8s.io/kubernetes $(K8S_VERSION)' go.mod && \
		$(GO) build -trimpath -ldflags '$(K8S_LDFLAGS)' -o $(CURDIR)/bin/k8s/ $(addprefix k8s.io/kubernetes/cmd/,$(K8S_BINS))
k8s-other-bins:
	mkdir -p bin/k8s
	cd tests/k8s/etcd && grep -q 'go.etcd.io/etcd/server/v3 $(ETCD_VERSION)' go.mod && \
		$(GO) build -trimpath -ldflags '-s -w' -o $(CURDIR)/bin/k8s/etcd go.etcd.io/etcd/server/v3
	cd tests/k8s/sidecars/provisioner && grep -q 'external-provisioner/v5 $(CSI_PROVISIONER_VERSION)' go.mod && \
		$(GO) build -trimpath -ldflags '-s -w -X main.version=$(CSI_PROVISIONER_VERSION)' -o $(CURDIR)/bin/k8s/csi-provisioner \
		github.com/kubernetes-csi/external-provisioner/v5/cmd/csi-provisioner
	cd tests/k8s/sidecars/resizer && grep -q 'external-resizer $(CSI_RESIZER_VERSION)' go.mod && \
		$(GO) build -trimpath -ldflags '-s -w -X main.version=$(CSI_RESIZER_VERSION)' -o $(CURDIR)/bin/k8s/csi-resizer \
		github.com/kubernetes-csi/external-resizer/cmd/csi-resizer
	cd tests/k8s/sidecars/snapshotter && grep -q 'external-snapshotter/v8 $(CSI_SNAPSHOTTER_VERSION)' go.mod && \
		$(GO) build -trimpath -ldflags '-s -w -X main.version=$(CSI_SNAPSHOTTER_VERSION)' -o $(CURDIR)/bin/k8s/ \
		github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller

## k8s-e2e-bins: Kubernetes' e2e.test with its storage suite for external drivers only
## (tests/k8s/bins/storagee2e: the framework and test/e2e/storage/external, which runs
## nfsdir), the agnhost test image program and the Ginkgo CLI that runs e2e.test in
## parallel processes, from the same pinned module.
k8s-e2e-bins:
	cd tests/k8s/bins && grep -q 'k8s.io/kubernetes $(K8S_VERSION)' go.mod && \
		$(GO) build -trimpath -o $(CURDIR)/bin/k8s/ginkgo github.com/onsi/ginkgo/v2/ginkgo && \
		$(GO) build -trimpath -ldflags '-s -w' -o $(CURDIR)/bin/k8s/agnhost k8s.io/kubernetes/test/images/agnhost && \
		$(GO) test -c -trimpath -ldflags '$(K8S_LDFLAGS)' -o $(CURDIR)/bin/k8s/e2e.test ./storagee2e

## lab-images: container images for the end-to-end lab as docker-archive tarballs
## (no Docker engine, no registry): nfsdir (the static binary plus the runtime
## contents the Dockerfile installs), pause, busybox (with the lab's lablock, for
## the lock scenarios: Debian's busybox has no flock), and node-driver-registrar and
## livenessprobe built from their release sources (tests/k8s/sidecars/build-release.sh).
# Images are kept by content in IMAGE_CACHE between runs (the latest of each tag):
# one whose contents did not change is copied rather than compressed again.
IMAGE_CACHE ?= $(HOME)/.cache/nfsdir-lab/images
IMAGEBUILD = bin/k8s-tools/imagebuild -cache $(IMAGE_CACHE)
lab-images: lab-deps
	mkdir -p bin/images bin/k8s-tools bin/lab
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/lab/nfsdir ./cmd/nfsdir
	cd tests/k8s && for p in imagebuild pause lablock; do \
		$(GO) build -o $(CURDIR)/bin/k8s-tools/$$p ./images/$$p || exit 1; done
	tests/k8s/sidecars/build-release.sh bin/k8s
	$(IMAGEBUILD) -o bin/images/pause.tar -tag lab.local/pause:3.10 -entrypoint /pause -file bin/k8s-tools/pause:/pause
	$(IMAGEBUILD) -o bin/images/registrar.tar -tag lab.local/csi-node-driver-registrar:$(NODE_DRIVER_REGISTRAR_VERSION) \
		-entrypoint /csi-node-driver-registrar -file bin/k8s/csi-node-driver-registrar:/csi-node-driver-registrar
	$(IMAGEBUILD) -o bin/images/livenessprobe.tar -tag lab.local/livenessprobe:$(LIVENESSPROBE_VERSION) \
		-entrypoint /livenessprobe -file bin/k8s/livenessprobe:/livenessprobe
	rm -rf bin/images/nfsdir-rootfs && tests/k8s/nfsdir-rootfs.sh bin/images/nfsdir-rootfs
	$(IMAGEBUILD) -o bin/images/nfsdir.tar -tag lab.local/nfsdir:lab -entrypoint /nfsdir \
		-file bin/lab/nfsdir:/nfsdir -tree bin/images/nfsdir-rootfs:/
	rm -rf bin/images/busybox-rootfs && mkdir -p bin/images/busybox-rootfs/bin && cp $$(command -v busybox) bin/images/busybox-rootfs/bin/busybox && \
		for a in $$(busybox --list); do [ -e bin/images/busybox-rootfs/bin/$$a ] || ln -s busybox bin/images/busybox-rootfs/bin/$$a; done && \
		cp bin/k8s-tools/lablock bin/images/busybox-rootfs/bin/lablock
	$(IMAGEBUILD) -o bin/images/busybox.tar -tag lab.local/busybox:lab -entrypoint /bin/sh -tree bin/images/busybox-rootfs:/
	rm -rf bin/images/nfs-server-rootfs && tests/k8s/images/nfs-server/rootfs.sh bin/images/nfs-server-rootfs
	$(IMAGEBUILD) -o bin/images/nfs-server.tar -tag lab.local/nfs-server:lab -entrypoint /nfs-server \
		-tree bin/images/nfs-server-rootfs:/
	if [ -x bin/k8s/agnhost ]; then $(IMAGEBUILD) -o bin/images/agnhost.tar -tag $(E2E_AGNHOST) \
		-entrypoint /agnhost -file bin/k8s/agnhost:/agnhost -tree bin/images/busybox-rootfs:/; fi
	if [ -x bin/k8s/csi-provisioner ]; then $(IMAGEBUILD) -o bin/images/csi-provisioner.tar \
		-tag lab.local/csi-provisioner:$(CSI_PROVISIONER_VERSION) -entrypoint /csi-provisioner -file bin/k8s/csi-provisioner:/csi-provisioner; fi
	if [ -x bin/k8s/csi-resizer ]; then $(IMAGEBUILD) -o bin/images/csi-resizer.tar \
		-tag lab.local/csi-resizer:$(CSI_RESIZER_VERSION) -entrypoint /csi-resizer -file bin/k8s/csi-resizer:/csi-resizer; fi
	if [ -x bin/k8s/csi-snapshotter ]; then $(IMAGEBUILD) -o bin/images/csi-snapshotter.tar \
		-tag lab.local/csi-snapshotter:$(CSI_SNAPSHOTTER_VERSION) -entrypoint /csi-snapshotter -file bin/k8s/csi-snapshotter:/csi-snapshotter; fi

## e2e-smoke: containerd and runc (Debian packages) in the lab guest import and run the
## lab images: the first step of the Kubernetes end-to-end lab, a quick check while
## working on the images (not in make test: make e2e runs every image it checks).
e2e-smoke: lab-image lab-images
	rm -rf bin/e2e-bin && mkdir -p bin/e2e-bin/images
	tests/k8s/fetch-runtime.sh bin/e2e-bin
	cp bin/images/*.tar bin/e2e-bin/images/
	cd tests/k8s && NFSDIR_LAB_BIN=$(CURDIR)/bin/e2e-bin NFSDIR_E2E_SMOKE=1 $(GO) test -count=1 -v -run TestContainerdRunsLabImages -exec $(LAB) .

## e2e: the Kubernetes end-to-end lab. A single-node cluster: its control plane (etcd,
## kube-apiserver, controller-manager, scheduler, snapshot-controller) on the host, on
## 127.0.0.1 only (tests/k8s/hostplane_test.go); containerd with CRI and the CNI bridge and
## the kubelet in the lab guest, an NFS server pod, nfsdir installed with `helm install` of charts/nfsdir
## (image overrides only), and the workload scenarios of tests/k8s/driver_test.go.
# The control plane's programs run on the host from bin/k8s; the guest gets the kubelet.
E2E_PLANE_BINS := etcd kube-apiserver kube-controller-manager kube-scheduler kubectl snapshot-controller
E2E_RUN ?= TestDriverOnKubernetes
# The cluster keeps both vCPUs busy: multi-threaded TCG brought the driver up in
# 121 s instead of 178-316 s. 6 GiB: containerd keeps a copy of each
# container's image below /tmp (a tmpfs of half the guest's memory), and
# with a second release (DropInForCSIDriverNFS) 2 GiB ran out.
E2E_ENV = NFSDIR_LAB_NFS_SERVER=off NFSDIR_LAB_MEM=6144 NFSDIR_LAB_TCG=multi
# The control plane runs on the host (tests/k8s/hostplane_test.go's
# TestHostPlane), the lab guest runs the tests NFSDIR_E2E_GUEST_RUN names.
# The storage suite's e2e.test runs there too (tests/k8s/suite_host_test.go),
# its reports in SUITE_OUT (set per target).
HOST_PLANE_ENV = NFSDIR_E2E_HOST_PLANE=1 NFSDIR_LAB_RUNNER=$(LAB) NFSDIR_E2E_HOST_BIN=$(CURDIR)/bin/k8s \
	NFSDIR_E2E_SUITE_OUT=$(CURDIR)/$(SUITE_OUT)
# e2e-payload PAYLOAD=DIR: what the lab guest of a Kubernetes run gets in /work/bin,
# with the host's programs in bin/k8s. The Kubernetes runs make theirs under a lock,
# so that two of them started at once (each on ports of its own) do not mix their files.
PAYLOAD ?= bin/e2e
e2e-payload:
	for b in $(E2E_PLANE_BINS) kubelet csi-provisioner csi-resizer csi-snapshotter e2e.test agnhost ginkgo; do \
		test -x bin/k8s/$$b || { $(MAKE) --no-print-directory k8s-all-bins; break; }; done
	$(MAKE) lab-images
	rm -rf $(PAYLOAD) bin/k8s/snapshot-crds && mkdir -p $(PAYLOAD)/images $(PAYLOAD)/chart bin/k8s/snapshot-crds
	tests/k8s/fetch-runtime.sh $(PAYLOAD)
	cp bin/k8s/kubelet bin/k8s/kubectl $(PAYLOAD)/
	crds=$$(cd tests/k8s/sidecars/snapshotter && $(GO) mod download github.com/kubernetes-csi/external-snapshotter/client/v8 && \
		$(GO) list -m -f '{{.Dir}}' github.com/kubernetes-csi/external-snapshotter/client/v8)/config/crd && \
		cp $$crds/snapshot.storage.k8s.io_*.yaml bin/k8s/snapshot-crds/
	cp $(HELM) $(PAYLOAD)/helm
	cp bin/lab/nfsdir $(PAYLOAD)/nfsdir
	cp -r charts/nfsdir $(PAYLOAD)/chart/ && cp -r deploy/example $(PAYLOAD)/example
	mkdir -p $(PAYLOAD)/pages/docs && cp README.md $(PAYLOAD)/pages/ && cp docs/*.md $(PAYLOAD)/pages/docs/
	cp bin/images/*.tar $(PAYLOAD)/images/
E2E_PAYLOAD = mkdir -p bin && flock bin/.e2e-payload.lock $(MAKE) --no-print-directory e2e-payload PAYLOAD=$(1)
e2e: SUITE_OUT = bin/e2e-storage-out
e2e: lab-image $(HELM)
	$(call E2E_PAYLOAD,bin/e2e)
	rm -rf $(SUITE_OUT)
	cd tests/k8s && NFSDIR_LAB_BIN=$(CURDIR)/bin/e2e $(E2E_ENV) $(HOST_PLANE_ENV) NFSDIR_E2E_GUEST_RUN='$(E2E_RUN)' \
		NFSDIR_E2E_K8S=1 NFSDIR_LAB_TIMEOUT=2700 \
		$(GO) test -count=1 -v -timeout 45m -run TestHostPlane . 2>&1 | tee $(CURDIR)/bin/e2e.log; exit $${PIPESTATUS[0]}

## e2e-secure: NFS over TLS and Kerberos on Kubernetes (tests/k8s TestSecureDriverOnKubernetes):
## a single-node cluster in a lab guest made of Debian 13 (kernel 6.12), whose own kernel NFS
## server exports a share that allows only xprtsec=mtls and one that allows only sec=krb5p
## (a KDC and gssproxy in the guest); the chart runs tlshd and rpc.gssd from the
## nfsdir-daemons image (lab.local/nfsdir-daemons:lab) with Secrets of certificates and a keytab.
E2E_SECURE_RUN ?= TestSecureDriverOnKubernetes
e2e-secure: SUITE_OUT = bin/e2e-secure-out
e2e-secure: lab-deps $(HELM)
	@NFSDIR_LAB_RELEASE=trixie tests/nfsvm/build-image.sh >/dev/null
	$(call E2E_PAYLOAD,bin/e2e-secure)
	@[ -x bin/images/daemons-rootfs/usr/sbin/tlshd ] && [ bin/images/daemons-rootfs -nt tests/k8s/daemons-rootfs.sh ] || \
		{ rm -rf bin/images/daemons-rootfs && tests/k8s/daemons-rootfs.sh bin/images/daemons-rootfs; }
	$(IMAGEBUILD) -o bin/e2e-secure/images/nfsdir-daemons.tar -tag lab.local/nfsdir-daemons:lab -entrypoint "/nfsdir daemon" \
		-file bin/lab/nfsdir:/nfsdir -tree bin/images/daemons-rootfs:/
	cd tests/k8s && NFSDIR_LAB_BIN=$(CURDIR)/bin/e2e-secure NFSDIR_LAB_RELEASE=trixie NFSDIR_LAB_MEM=6144 NFSDIR_LAB_TCG=multi \
		$(HOST_PLANE_ENV) NFSDIR_E2E_GUEST_RUN='$(E2E_SECURE_RUN)' NFSDIR_E2E_SECURE=1 NFSDIR_LAB_TIMEOUT=1800 \
		$(GO) test -count=1 -v -timeout 30m -run TestHostPlane . 2>&1 | tee $(CURDIR)/bin/e2e-secure.log; exit $${PIPESTATUS[0]}

## e2e-multinode: a two-node cluster, its control plane on the host. The first lab guest
## runs node lab-node and the NFS server pod; a second guest (run.sh's peer, joined by qemu's
## socket netdev over UDP on 127.0.0.1) runs lab-node-2 (containerd, kubelet); nfsdir
## is installed with helm on both, and tests/k8s/multinode_test.go's scenarios run
## (MULTINODE_RUN picks some: 'TestDriverOnTwoNodes/(ReadWriteMany|Locks)').
E2E_MULTINODE_ENV = NFSDIR_LAB_PEER=1 NFSDIR_LAB_PEER_MEM=3072 NFSDIR_E2E_MULTINODE=1 \
	NFSDIR_LAB_PEER_ARGS='-test.run=^TestWorkerNode$$ -test.v=true -test.timeout=0'
MULTINODE_RUN ?= TestDriverOnTwoNodes
e2e-multinode: SUITE_OUT = bin/e2e-multinode-storage-out
e2e-multinode: lab-image $(HELM)
	$(call E2E_PAYLOAD,bin/e2e-multinode)
	rm -rf $(SUITE_OUT) bin/e2e-multinode/images/agnhost.tar
	cd tests/k8s && NFSDIR_LAB_BIN=$(CURDIR)/bin/e2e-multinode $(E2E_ENV) $(E2E_MULTINODE_ENV) $(HOST_PLANE_ENV) \
		NFSDIR_E2E_GUEST_RUN='$(MULTINODE_RUN)' NFSDIR_LAB_TIMEOUT=2700 \
		$(GO) test -count=1 -v -timeout 45m -run TestHostPlane . 2>&1 | tee $(CURDIR)/bin/e2e-multinode.log; exit $${PIPESTATUS[0]}

## e2e-storage: Kubernetes' own storage e2e suite (e2e.test of $(K8S_VERSION), its
## External Storage tests for nfsdir.csi.io), all of its specs that apply, on a lab
## cluster of its own, at most E2E_STORAGE_MINUTES; e2e.test runs on the host beside the
## control plane. The full output and the JUnit report land in bin/e2e-storage-out.
## NFSDIR_E2E_FOCUS / NFSDIR_E2E_SKIP change the selection, NFSDIR_E2E_REPEAT=N runs it N
## more times unless it fails, NFSDIR_E2E_PROCS (default 3)
## how many specs run at once; E2E_STORAGE_QUICK=1 runs only one spec of each kind
## (tests/k8s quickSpecs, which make e2e runs after its scenarios).
E2E_STORAGE_MINUTES ?= 50
E2E_STORAGE_QUICK ?= 0
e2e-storage: SUITE_OUT = bin/e2e-storage-out
e2e-storage: lab-image $(HELM)
	$(call E2E_PAYLOAD,bin/e2e-storage)
	rm -rf $(SUITE_OUT)
	cd tests/k8s && NFSDIR_LAB_BIN=$(CURDIR)/bin/e2e-storage $(E2E_ENV) \
		NFSDIR_LAB_MEM=6144 NFSDIR_E2E_STORAGE=1 NFSDIR_E2E_MINUTES=$(E2E_STORAGE_MINUTES) NFSDIR_E2E_QUICK=$(E2E_STORAGE_QUICK) \
		NFSDIR_LAB_TIMEOUT=$$(( ($(E2E_STORAGE_MINUTES) + 15) * 60 )) $(HOST_PLANE_ENV) NFSDIR_E2E_GUEST_RUN=TestKubernetesStorageSuite \
		$(GO) test -count=1 -v -timeout $$(( $(E2E_STORAGE_MINUTES) + 20 ))m -run TestHostPlane . 2>&1 | \
		tee $(CURDIR)/bin/e2e-storage.log; exit $${PIPESTATUS[0]}

## manifests: render deploy/nfsdir.yaml from the chart (a test fails when they drift).
manifests: $(HELM)
	{ echo "# Rendered from charts/nfsdir by 'make manifests'; do not edit."; \
	  $(HELM) template nfsdir charts/nfsdir --namespace kube-system; } > deploy/nfsdir.yaml

## image / push: multi-arch container image with docker buildx (needs a Docker engine).
IMAGE ?= ghcr.io/nfsdir/nfsdir
PLATFORMS ?= linux/amd64,linux/arm64
## The daemons image ($(IMAGE)-daemons: tlshd and rpc.gssd) is the Dockerfile's daemons stage.
image:
	docker buildx build --platform $(PLATFORMS) --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMAGE):$(APP_VERSION) .
	docker buildx build --platform $(PLATFORMS) --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) --target daemons -t $(IMAGE)-daemons:$(APP_VERSION) .
push:
	docker buildx build --platform $(PLATFORMS) --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMAGE):$(APP_VERSION) --push .
	docker buildx build --platform $(PLATFORMS) --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) --target daemons -t $(IMAGE)-daemons:$(APP_VERSION) --push .

clean:
	rm -rf bin

## bench: measure nfsdir against csi-driver-nfs's method and the bare NFS operations in the lab,
## then write the tables of docs/benchmarks.md from what it measured (tests/bench/results.json
## keeps the run; not part of test). BENCH_ARGS sets the sizes (bin/bench -h lists them).
BENCH_ARGS ?= -files 20000 -creates 100 -publishes 5 -scale 5000 -stat-files 20000 -copy-files 1000
# The commit measured, taken when the recipe starts: the tree may change during a run.
BENCH_COMMIT = $(shell git rev-parse --short=12 HEAD)$(if $(shell git status --porcelain --untracked-files=no), with local changes)
bench: lab-image
	$(GO) build -o bin/bench ./tests/bench
	NFSDIR_LAB_TIMEOUT=2700 $(LAB) bin/bench $(BENCH_ARGS) 2>&1 | tee bin/bench.log; exit $${PIPESTATUS[0]}
	$(GO) run ./tests/bench/page -log bin/bench.log -command "make bench" -args "$(BENCH_ARGS)" -commit "$(BENCH_COMMIT)"

## bench-bound: BENCH_CLAIMS claims created at once in the Kubernetes lab (single node, control
## plane on the host), the time until all are Bound and until all are deleted and gone, for
## nfsdir's class and for a driver whose CreateVolume returns at once (tests/k8s/images/noopcsi)
## behind the same csi-provisioner: the ratio is what nfsdir adds; then a pod's start on a
## volume of BENCH_FSGROUP_FILES files for each fsGroup policy against a pod without fsGroup;
## writes its tables of docs/benchmarks.md (not part of test).
BENCH_CLAIMS ?= 200
BENCH_ROUNDS ?= 2
BENCH_FSGROUP_FILES ?= 10000
bench-bound: SUITE_OUT = bin/bench-bound-out
bench-bound: lab-image $(HELM)
	$(call E2E_PAYLOAD,bin/bench-bound)
	cd tests/k8s && $(GO) build -o $(CURDIR)/bin/k8s-tools/noopcsi ./images/noopcsi
	$(IMAGEBUILD) -o bin/bench-bound/images/noopcsi.tar -tag lab.local/noopcsi:lab -entrypoint /noopcsi -file bin/k8s-tools/noopcsi:/noopcsi
	cd tests/k8s && NFSDIR_LAB_BIN=$(CURDIR)/bin/bench-bound $(E2E_ENV) $(HOST_PLANE_ENV) NFSDIR_E2E_GUEST_RUN='TestClaimsBoundBench' \
		NFSDIR_E2E_BENCH=1 NFSDIR_BENCH_CLAIMS=$(BENCH_CLAIMS) NFSDIR_BENCH_ROUNDS=$(BENCH_ROUNDS) NFSDIR_BENCH_FSGROUP_FILES=$(BENCH_FSGROUP_FILES) NFSDIR_LAB_TIMEOUT=2700 \
		$(GO) test -count=1 -v -timeout 45m -run TestHostPlane . 2>&1 | tee $(CURDIR)/bin/bench-bound.log; exit $${PIPESTATUS[0]}
	$(GO) run ./tests/bench/page -log bin/bench-bound.log -command "make bench-bound" -args "BENCH_CLAIMS=$(BENCH_CLAIMS) BENCH_ROUNDS=$(BENCH_ROUNDS) BENCH_FSGROUP_FILES=$(BENCH_FSGROUP_FILES)" -commit "$(BENCH_COMMIT)"
