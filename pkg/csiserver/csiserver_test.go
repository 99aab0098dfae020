package csiserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/kubeapi"
	"github.com/nfsdir/nfsdir/pkg/kubeapi/kubeapitest"
	"github.com/nfsdir/nfsdir/pkg/nfsmount/nfsmounttest"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/serveragent"
	"github.com/nfsdir/nfsdir/pkg/shares"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

var ctx = context.Background()

func mountCap(mode csi.VolumeCapability_AccessMode_Mode, flags ...string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: flags}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

var blockCap = &csi.VolumeCapability{
	AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
}

func TestCreateVolumeRejectsBadInputAndTouchesNothing(t *testing.T) {
	conn, m := startFake(t)
	ctl := csi.NewControllerClient(conn)
	good := map[string]string{"server": "nfs.example", "share": "/export"}
	with := func(k, v string) map[string]string {
		p := map[string]string{"server": "nfs.example", "share": "/export"}
		p[k] = v
		return p
	}
	tests := []struct {
		name string
		req  *csi.CreateVolumeRequest
		code codes.Code
		msg  string
	}{
		{"no name", &csi.CreateVolumeRequest{Parameters: good, VolumeCapabilities: []*csi.VolumeCapability{rwx}}, codes.InvalidArgument, "name"},
		{"no caps", &csi.CreateVolumeRequest{Name: "v", Parameters: good}, codes.InvalidArgument, "capabilities"},
		{"block", &csi.CreateVolumeRequest{Name: "v", Parameters: good, VolumeCapabilities: []*csi.VolumeCapability{blockCap}}, codes.InvalidArgument, "block"},
		{"unknown key", &csi.CreateVolumeRequest{Name: "v", Parameters: with("colour", "red"), VolumeCapabilities: []*csi.VolumeCapability{rwx}}, codes.InvalidArgument, `"colour"`},
		{"relative share", &csi.CreateVolumeRequest{Name: "v", Parameters: with("share", "export"), VolumeCapabilities: []*csi.VolumeCapability{rwx}}, codes.InvalidArgument, "absolute"},
		{"root subDir", &csi.CreateVolumeRequest{Name: "v", Parameters: with("subDir", "/"), VolumeCapabilities: []*csi.VolumeCapability{rwx}}, codes.InvalidArgument, "share root"},
		{"escaping subDir", &csi.CreateVolumeRequest{Name: "v", Parameters: with("subDir", "a/../../etc"), VolumeCapabilities: []*csi.VolumeCapability{rwx}}, codes.InvalidArgument, ".."},
		{"bad mount option", &csi.CreateVolumeRequest{Name: "v", Parameters: good, VolumeCapabilities: []*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, "nfsvers=3", "vers=4")}}, codes.InvalidArgument, "twice"},
		{"limit below required", &csi.CreateVolumeRequest{Name: "v", Parameters: good, VolumeCapabilities: []*csi.VolumeCapability{rwx}, CapacityRange: &csi.CapacityRange{RequiredBytes: 10, LimitBytes: 5}}, codes.OutOfRange, "exceed"},
		{"content source", &csi.CreateVolumeRequest{Name: "v", Parameters: good, VolumeCapabilities: []*csi.VolumeCapability{rwx},
			VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "x"}}}}, codes.NotFound, "does not exist"},
		{"source on another share", &csi.CreateVolumeRequest{Name: "v", Parameters: good, VolumeCapabilities: []*csi.VolumeCapability{rwx},
			VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{
				SnapshotId: "s1|nfs.example|/other|aaaaaaaaaaaaaaaaaaaa.bbbbbbbb|"}}}}, codes.InvalidArgument, "one share"},
	}
	for _, tt := range tests {
		_, err := ctl.CreateVolume(ctx, tt.req)
		if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: %v, want %s containing %q", tt.name, err, tt.code, tt.msg)
		}
	}
	if acts := m.Actions(); len(acts) != 0 {
		t.Errorf("bad requests mounted something: %v", acts)
	}
}

// newDriver returns a driver of both services on a fake mounter, not
// serving.
func newDriver(t *testing.T) *Driver {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.NodeID, cfg.StateDir = "n", filepath.Join(dir, "state")
	d, err := New(cfg, nfsmounttest.New(dir))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestProbeIsReadyOnlyWhenServing(t *testing.T) {
	d := newDriver(t)
	if d.ready() == nil {
		t.Error("ready before serving")
	}
	conn, _ := startFake(t)
	r, err := csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{})
	if err != nil || !r.GetReady().GetValue() {
		t.Errorf("Probe while serving: %v %v", r, err)
	}
}

func TestDeleteVolumeNeverActsOnForeignIDs(t *testing.T) {
	conn, m := startFake(t)
	ctl := csi.NewControllerClient(conn)
	exp := m.ExportDir("nfs.example", "/export")
	os.MkdirAll(filepath.Join(exp, "pvc-legacy"), 0o755)
	_, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "nfs.example#export#pvc-legacy#pvc-legacy#delete"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "by hand") {
		t.Errorf("legacy ID: %v", err)
	}
	for _, id := range []string{"pvc-legacy", "../../etc", "n1|nfs.example|/export|x.y|"} {
		if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Errorf("DeleteVolume(%q) = %v, want OK (nothing to delete)", id, err)
		}
	}
	if _, err := os.Stat(filepath.Join(exp, "pvc-legacy")); err != nil {
		t.Fatal("legacy volume directory removed")
	}
	if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "nfs.example#export#pvc-gone#pvc-gone#"}); err != nil {
		t.Errorf("legacy ID of a missing directory: %v, want OK", err)
	}
	if _, err := os.Stat(filepath.Join(exp, ".nfsdir")); err == nil {
		t.Error("a legacy ID made nfsdir write its metadata area")
	}
}

func TestLongMountOptionsSurviveInStateDirectory(t *testing.T) {
	conn, m := startFake(t)
	ctl := csi.NewControllerClient(conn)
	long := []string{"nfsvers=4.2", "hard", "timeo=600", "retrans=5", "rsize=1048576", "wsize=1048576", "sec=sys", "noresvport", "lookupcache=positive"}
	vc := mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, long...)
	r, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-long", VolumeCapabilities: []*csi.VolumeCapability{vc},
		Parameters: map[string]string{"server": "nfs.example", "share": "/export"}})
	if err != nil {
		t.Fatal(err)
	}
	id, err := volumeid.Parse(r.GetVolume().GetVolumeId())
	if err != nil || id.OptionsRef == "" || len(r.GetVolume().GetVolumeId()) > volumeid.MaxLen {
		t.Fatalf("ID %q: %+v %v", r.GetVolume().GetVolumeId(), id, err)
	}
	if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: r.GetVolume().GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	// The class options, with the controller's own lookupcache=none.
	want := strings.Join(long[:len(long)-1], ",") + ",lookupcache=none"
	var mounted bool
	for _, a := range m.Actions() {
		mounted = mounted || strings.HasSuffix(a, " "+want)
	}
	if !mounted {
		t.Errorf("share never mounted with the class options %s: %v", want, m.Actions())
	}
}

func TestValidateVolumeCapabilities(t *testing.T) {
	conn, _ := startFake(t)
	ctl := csi.NewControllerClient(conn)
	r, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-v", VolumeCapabilities: []*csi.VolumeCapability{rwx},
		Parameters: map[string]string{"server": "nfs.example", "share": "/export"}})
	if err != nil {
		t.Fatal(err)
	}
	id := r.GetVolume().GetVolumeId()
	ok, err := ctl.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csi.VolumeCapability{rwx}})
	if err != nil || ok.GetConfirmed() == nil {
		t.Errorf("RWX not confirmed: %v %v", ok, err)
	}
	no, err := ctl.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csi.VolumeCapability{blockCap}})
	if err != nil || no.GetConfirmed() != nil || !strings.Contains(no.GetMessage(), "block") {
		t.Errorf("block: %v %v", no, err)
	}
	if _, err := ctl.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "nope", VolumeCapabilities: []*csi.VolumeCapability{rwx}}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown volume: %v", err)
	}
}

func TestNodePublishReadOnlyMismatchIsAlreadyExists(t *testing.T) {
	conn, m := startFake(t)
	ctl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	r, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-ro", VolumeCapabilities: []*csi.VolumeCapability{rwx},
		Parameters: map[string]string{"server": "nfs.example", "share": "/export"}})
	if err != nil {
		t.Fatal(err)
	}
	v := r.GetVolume()
	target := filepath.Join(t.TempDir(), "t")
	pub := func(ro bool) error {
		_, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: target,
			VolumeCapability: rwx, VolumeContext: v.VolumeContext, Readonly: ro})
		return err
	}
	if err := pub(true); err != nil {
		t.Fatal(err)
	}
	if err := pub(true); err != nil {
		t.Errorf("same publish again: %v", err)
	}
	if err := pub(false); status.Code(err) != codes.AlreadyExists {
		t.Errorf("read-write over read-only: %v", err)
	}
	if e, _ := m.Mounted(target); e == nil || !strings.Contains(strings.Join(e.Options, ","), "ro") {
		t.Errorf("mount entry %+v", e)
	}
}

// TestSequentialRetriesAreNeverAborted: a call that returned has released
// its volume's lock, so the next call for the volume is served, not Aborted.
func TestSequentialRetriesAreNeverAborted(t *testing.T) {
	conn, _ := startFake(t)
	ctl := csi.NewControllerClient(conn)
	p := map[string]string{"server": "nfs.example", "share": "/export"}
	for i := 0; i < 200; i++ {
		r, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-retry", Parameters: p, VolumeCapabilities: []*csi.VolumeCapability{rwx}})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: r.GetVolume().GetVolumeId()}); err != nil {
			t.Fatalf("delete %d: %v", i, err)
		}
		if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: r.GetVolume().GetVolumeId()}); err != nil {
			t.Fatalf("delete again %d: %v", i, err)
		}
	}
}

func TestBoundedReleasesBeforeAnswering(t *testing.T) {
	var c Controller
	for i := 0; i < 20000; i++ {
		if err := c.bounded(ctx, "v", func() error { return nil }); err != nil {
			t.Fatal(err)
		}
		if !c.locks.TryAcquire("v") {
			t.Fatalf("round %d: lock still held after the call returned", i)
		}
		c.locks.Release("v")
	}
}

// TestControllerExpandVolume: the new capacity is recorded and answered,
// with no node step; shrinking is OutOfRange; a replayed CreateVolume of the
// original size still returns the volume; a csi-driver-nfs volume's
// expansion is accepted as a no-op.
func TestControllerExpandVolume(t *testing.T) {
	conn, _ := startFake(t)
	ctl := csi.NewControllerClient(conn)
	params := map[string]string{"server": "nfs.example", "share": "/export"}
	create := func() *csi.Volume {
		r, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-grow", Parameters: params,
			VolumeCapabilities: []*csi.VolumeCapability{rwx}, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetVolume()
	}
	v := create()
	expand := func(id string, bytes int64) (*csi.ControllerExpandVolumeResponse, error) {
		return ctl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: bytes}})
	}
	r, err := expand(v.VolumeId, 2<<30)
	if err != nil || r.CapacityBytes != 2<<30 || r.NodeExpansionRequired {
		t.Fatalf("expand: %v %v", r, err)
	}
	if _, err := expand(v.VolumeId, 1<<30); status.Code(err) != codes.OutOfRange {
		t.Errorf("shrink: %v", err)
	}
	if again := create(); again.VolumeId != v.VolumeId || again.CapacityBytes != 2<<30 {
		t.Errorf("CreateVolume replayed after expand: %v", again)
	}
	if _, err := ctl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: v.VolumeId}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("no capacity range: %v", err)
	}
	if _, err := expand("no-such-volume", 1<<30); status.Code(err) != codes.NotFound {
		t.Errorf("unknown volume: %v", err)
	}
	if r, err := expand("nfs.example#export#x#uuid#delete", 5<<30); err != nil || r.CapacityBytes != 5<<30 {
		t.Errorf("csi-driver-nfs volume: %v %v", r, err)
	}
	if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.VolumeId}); err != nil {
		t.Fatal(err)
	}
	if _, err := expand(v.VolumeId, 3<<30); status.Code(err) != codes.NotFound {
		t.Errorf("deleted volume: %v", err)
	}
}

func TestSubDirTemplatesWithClaimLabelsAndAnnotations(t *testing.T) {
	kube := kubeapi.New(kubeapitest.Dynamic(t, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "data",
		Labels: map[string]string{"team": "blue"}, Annotations: map[string]string{"nfs.io/storage-path": "a/b"}}}))
	conn, m, _ := startFakeWith(t, nil, func(d *Driver) { d.controller.claims = kube })
	ctl := csi.NewControllerClient(conn)
	create := func(subDir, claim string) (*csi.CreateVolumeResponse, error) {
		return ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-" + claim, VolumeCapabilities: []*csi.VolumeCapability{rwx},
			Parameters: map[string]string{"server": "nfs.example", "share": "/export", "subDir": subDir,
				"csi.storage.k8s.io/pvc/name": claim, "csi.storage.k8s.io/pvc/namespace": "team-a"}})
	}
	if _, err := create("${pvc.metadata.labels['team']}/${pvc.metadata.name}", "data"); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(m.ExportDir("nfs.example", "/export"), "blue", "data")); err != nil || !st.IsDir() {
		t.Errorf("labelled directory: %v", err)
	}
	for _, tt := range []struct {
		subDir, claim string
		code          codes.Code
		msg           string
	}{
		{"${pvc.metadata.labels['missing']}", "data", codes.InvalidArgument, `no label "missing"`},
		{"${.PVC.annotations.nfs.io/storage-path}", "data", codes.InvalidArgument, "single directory name"},
		{"${pvc.metadata.labels['team']}", "gone", codes.NotFound, "team-a/gone"},
	} {
		if _, err := create(tt.subDir, tt.claim); status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: %v, want %s containing %q", tt.subDir, err, tt.code, tt.msg)
		}
	}

	// Off (the default): the template is refused before anything is mounted.
	conn, m = startFake(t)
	_, err := csi.NewControllerClient(conn).CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwx},
		Parameters: map[string]string{"server": "nfs.example", "share": "/export", "subDir": "${pvc.metadata.labels['team']}",
			"csi.storage.k8s.io/pvc/name": "data", "csi.storage.k8s.io/pvc/namespace": "team-a"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "--read-claim-metadata") || len(m.Actions()) != 0 {
		t.Errorf("reading off: %v, actions %v", err, m.Actions())
	}
}

func TestLegacyIDsFollowTheirAdoption(t *testing.T) {
	var d *Driver
	conn, m, _ := startFakeWith(t, nil, func(dr *Driver) { d = dr })
	ctl := csi.NewControllerClient(conn)
	exp := m.ExportDir("nfs.example", "/export")
	for _, dir := range []string{"pvc-a", "pvc-b"} {
		if err := os.WriteFile(filepath.Join(exp, dir+".keep"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(exp, dir), 0o755)
		os.WriteFile(filepath.Join(exp, dir, "data"), []byte("tenant"), 0o644)
	}
	const id = "nfs.example#export#pvc-a#pvc-a#archive"
	e, _ := export.New("nfs.example", "/export")
	adopt := func(req provision.Request) error {
		return d.shares.On(ctx, e, nil, true, func(a *provision.Area, _ *shares.Share) error {
			_, err := a.Adoptions().Adopt(req)
			return err
		})
	}
	req := provision.Request{Name: "pvc-a", SubDir: "pvc-a", OnDelete: params.Archive, LegacyID: id}
	if err := adopt(req); err != nil {
		t.Fatal(err)
	}
	if err := adopt(req); err != nil {
		t.Errorf("the same adoption again: %v, want its record", err)
	}
	if err := adopt(provision.Request{Name: "pvc-a", SubDir: "pvc-a", LegacyID: "nfs.example#export#pvc-b#pvc-b#delete"}); status.Code(toStatus(err)) != codes.InvalidArgument {
		t.Errorf("a legacy ID of another directory: %v", err)
	}
	// Another ID for the adopted directory is not the adopted volume.
	if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "nfs.example#export#pvc-a#other-pv#delete"}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("another ID for the adopted directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(exp, "pvc-a", "data")); err != nil {
		t.Fatal("adopted data gone after a foreign ID's delete")
	}
	for range 2 { // the retry finds nothing left to do
		if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Fatalf("DeleteVolume of the adopted ID: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(exp, "pvc-a")); !os.IsNotExist(err) {
		t.Errorf("archived directory still in place: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(exp, "archived-pvc-a", "data")); err != nil || string(b) != "tenant" {
		t.Errorf("archived data: %q, %v", b, err)
	}
	// A csi-driver-nfs ID that asks to retain: nothing is touched, OK.
	if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "nfs.example#export#pvc-b#pvc-b#retain"}); err != nil {
		t.Errorf("legacy retain: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(exp, "pvc-b", "data")); err != nil || string(b) != "tenant" {
		t.Errorf("retained data: %q, %v", b, err)
	}
}

// fakeQuotas records what the controller asks of quota agents.
type fakeQuotas struct {
	calls []string
	fail  error
}

func (f *fakeQuotas) Set(_ context.Context, endpoint string, v serveragent.Volume, bytes, _ uint64) (*serveragent.Usage, error) {
	f.calls = append(f.calls, fmt.Sprintf("set %s %s %s %d", endpoint, v.Share, v.SubDir, bytes))
	if f.fail != nil {
		return nil, f.fail
	}
	return &serveragent.Usage{Project: 7, LimitBytes: bytes}, nil
}

func (f *fakeQuotas) Clear(_ context.Context, endpoint string, v serveragent.Volume) error {
	f.calls = append(f.calls, fmt.Sprintf("clear %s %s %s", endpoint, v.Share, v.SubDir))
	return f.fail
}

func TestQuotaAgentFollowsTheVolume(t *testing.T) {
	q := &fakeQuotas{}
	conn, m, _ := startFakeWith(t, nil, func(d *Driver) { d.controller.quotas = q })
	ctl := csi.NewControllerClient(conn)
	exp := m.ExportDir("nfs.example", "/export")
	req := func(name string) *csi.CreateVolumeRequest {
		return &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{rwx}, CapacityRange: &csi.CapacityRange{RequiredBytes: 64 << 20},
			Parameters: map[string]string{"server": "nfs.example", "share": "/export", "quotaAgent": "agent.example:29700"}}
	}
	// The agent down: Unavailable, and the volume is not handed out.
	q.fail = status.Error(codes.Unavailable, "connection refused")
	if _, err := ctl.CreateVolume(ctx, req("pvc-q")); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("agent down: %v", err)
	}
	q.fail = nil
	v, err := ctl.CreateVolume(ctx, req("pvc-q"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: v.Volume.VolumeId, CapacityRange: &csi.CapacityRange{RequiredBytes: 128 << 20}}); err != nil {
		t.Fatal(err)
	}
	// The agent refuses the clear: the volume stays, with its data.
	os.WriteFile(filepath.Join(exp, "pvc-q", "data"), []byte("x"), 0o644)
	q.fail = status.Error(codes.Unavailable, "agent restarting")
	if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.Volume.VolumeId}); status.Code(err) != codes.Unavailable {
		t.Errorf("delete with the agent down: %v", err)
	}
	if _, err := os.Stat(filepath.Join(exp, "pvc-q", "data")); err != nil {
		t.Fatalf("the volume went although its quota was not cleared: %v", err)
	}
	q.fail = nil
	if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.Volume.VolumeId}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"set agent.example:29700 /export pvc-q 67108864", // refused
		"set agent.example:29700 /export pvc-q 67108864",
		"set agent.example:29700 /export pvc-q 134217728",
		"clear agent.example:29700 /export pvc-q", // refused
		"clear agent.example:29700 /export pvc-q",
	}
	if strings.Join(q.calls, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(q.calls, "\n"), strings.Join(want, "\n"))
	}
	// No client certificate: refused before anything is made.
	conn, m = startFake(t)
	if _, err := csi.NewControllerClient(conn).CreateVolume(ctx, req("pvc-q2")); status.Code(err) != codes.FailedPrecondition || len(m.Actions()) != 0 {
		t.Errorf("without a client certificate: %v, actions %v", err, m.Actions())
	}
	for _, bad := range []string{"agent.example", "agent.example:0", "-x:1", ":29700"} {
		r := req("pvc-bad")
		r.Parameters["quotaAgent"] = bad
		if _, err := ctl.CreateVolume(ctx, r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("quotaAgent %q: %v", bad, err)
		}
	}
}
