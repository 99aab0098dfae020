package csiserver

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/shares"
	"github.com/nfsdir/nfsdir/pkg/targetpath"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// createFake provisions one volume on the fake share with parameters p
// added to server and share.
func createFake(t *testing.T, ctl csi.ControllerClient, name string, p map[string]string) *csi.Volume {
	t.Helper()
	params := map[string]string{"server": "nfs.example", "share": "/export"}
	for k, v := range p {
		params[k] = v
	}
	r, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{rwx}, Parameters: params})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetVolume()
}

// TestNodeActsOnlyOnKubeletTargets: with kubelet's layout enforced, targets
// outside it, with ".." or through a symlink are InvalidArgument and
// nothing is created or mounted; a kubelet target is published and
// unpublished, its directory removed.
func TestNodeActsOnlyOnKubeletTargets(t *testing.T) {
	kubelet := t.TempDir()
	conn, m, _ := startFakeWith(t, func(c *config.Config) { c.PublishRoot, c.KubeletDir = "", kubelet })
	ctl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	v := createFake(t, ctl, "pvc-k", nil)
	pub := func(target string) error {
		_, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: target,
			VolumeCapability: rwx, VolumeContext: v.VolumeContext})
		return err
	}
	outside := t.TempDir()
	vols := filepath.Join(kubelet, "pods/u1/volumes/kubernetes.io~csi")
	os.MkdirAll(filepath.Join(vols, "pvc-k"), 0o750)
	os.Symlink(outside, filepath.Join(vols, "linked"))
	for _, target := range []string{
		filepath.Join(outside, "mount"),
		kubelet + "/pods/u1/volumes/kubernetes.io~csi/pvc-k/../../../../../../" + filepath.Base(outside) + "/mount",
		filepath.Join(vols, "linked/mount"),
		filepath.Join(vols, "pvc-k/mount/deeper"),
		"relative/mount",
	} {
		if err := pub(target); status.Code(err) != codes.InvalidArgument {
			t.Errorf("publish on %q = %v, want InvalidArgument", target, err)
		}
		if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: target}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("unpublish of %q = %v, want InvalidArgument", target, err)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("publish created %v outside kubelet's directories", ents)
	}
	for _, a := range m.Actions() {
		if strings.Contains(a, kubelet) || strings.Contains(a, outside) {
			t.Errorf("mounter called for a refused target: %s", a)
		}
	}
	good := filepath.Join(vols, "pvc-k/mount")
	if err := pub(good); err != nil {
		t.Fatalf("publish on kubelet's target: %v", err)
	}
	if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: good}); err != nil {
		t.Fatalf("unpublish: %v", err)
	}
	if _, err := os.Lstat(good); !os.IsNotExist(err) {
		t.Errorf("target left after unpublish: %v", err)
	}
}

// TestNodeUnpublishNeverDeletesFiles: a target that is a regular file, or
// the driver's own socket, is left in place.
func TestNodeUnpublishNeverDeletesFiles(t *testing.T) {
	conn, _, sock := startFakeWith(t, nil)
	node := csi.NewNodeClient(conn)
	file := filepath.Join(t.TempDir(), "precious")
	os.WriteFile(file, []byte("data"), 0o600)
	for _, target := range []string{file, sock} {
		_, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: target})
		if err == nil {
			t.Errorf("unpublish of %q answered OK", target)
		}
		if _, err := os.Lstat(target); err != nil {
			t.Errorf("unpublish removed %q: %v", target, err)
		}
	}
	st, err := os.Stat(sock)
	if err != nil || st.Mode().Perm()&0o007 != 0 {
		t.Errorf("socket %q mode %v (%v): others must have no access", sock, st.Mode(), err)
	}
}

// TestNodePublishReadOnlyFromOptionsIsIdempotent: with "ro" among the
// class mount options and readonly=false, the same publish is OK every
// time.
func TestNodePublishReadOnlyFromOptionsIsIdempotent(t *testing.T) {
	conn, _ := startFake(t)
	ctl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	v := createFake(t, ctl, "pvc-roopt", nil)
	target := filepath.Join(t.TempDir(), "t")
	roCap := mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, "ro", "nfsvers=4.1")
	for i := 0; i < 3; i++ {
		if _, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: target,
			VolumeCapability: roCap, VolumeContext: v.VolumeContext}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
}

// TestBackgroundMountOptionRefused: "bg" in the class or volume options is
// InvalidArgument, at provisioning and at publish.
func TestBackgroundMountOptionRefused(t *testing.T) {
	conn, m := startFake(t)
	ctl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	bg := mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, "bg,hard")
	_, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-bg", VolumeCapabilities: []*csi.VolumeCapability{bg},
		Parameters: map[string]string{"server": "nfs.example", "share": "/export"}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("CreateVolume with bg = %v, want InvalidArgument", err)
	}
	v := createFake(t, ctl, "pvc-fg", nil)
	target := filepath.Join(t.TempDir(), "t")
	_, err = node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: target,
		VolumeCapability: bg, VolumeContext: v.VolumeContext})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("publish with bg = %v, want InvalidArgument", err)
	}
	for _, a := range m.Actions() {
		if strings.Contains(a, target) {
			t.Errorf("mounter called: %s", a)
		}
	}
}

// TestSingleWriterIsCheckedPerVolume: two concurrent
// SINGLE_NODE_SINGLE_WRITER publishes of one volume on different targets
// never both succeed.
func TestSingleWriterIsCheckedPerVolume(t *testing.T) {
	conn, m := startFake(t)
	m.MountDelay = 200 * time.Millisecond
	ctl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	v := createFake(t, ctl, "pvc-rwop", nil)
	sw := mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER)
	base := t.TempDir()
	errs := make(chan error, 2)
	for _, name := range []string{"a", "b"} {
		target := filepath.Join(base, name)
		go func() {
			_, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: target,
				VolumeCapability: sw, VolumeContext: v.VolumeContext})
			errs <- err
		}()
	}
	ok := 0
	for i := 0; i < 2; i++ {
		err := <-errs
		switch status.Code(err) {
		case codes.OK:
			ok++
		case codes.Aborted, codes.FailedPrecondition:
		default:
			t.Errorf("publish: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d of 2 concurrent single-writer publishes succeeded, want 1", ok)
	}
}

// TestLogsQuoteRequestStrings: a target path or volume ID holding a
// newline cannot forge a log line.
func TestLogsQuoteRequestStrings(t *testing.T) {
	var buf syncBuffer
	klog.LogToStderr(false)
	klog.SetOutput(&buf)
	defer func() { klog.LogToStderr(true); klog.SetOutput(os.Stderr) }()
	conn, _ := startFake(t)
	ctl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	v := createFake(t, ctl, "pvc-log", nil)
	forged := "\nE1130 00:00:00.000000 1 forged.go:1] FORGED"
	target := filepath.Join(t.TempDir(), "t"+forged)
	node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.VolumeId + forged, TargetPath: target,
		VolumeCapability: rwx, VolumeContext: v.VolumeContext})
	node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.VolumeId + forged, TargetPath: "/nonexistent" + forged})
	klog.Flush()
	out := buf.String()
	if !strings.Contains(out, "FORGED") {
		t.Fatalf("the calls were not logged:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "E1130 00:00:00.000000 1 forged.go") {
			t.Errorf("forged log line: %q", line)
		}
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestMountPolicy: nosuid and nodev by default, undone by the class's
// "suid"; a forced option cannot be undone by a later one ("nosuid,nodev"
// then "suid,dev" is refused).
func TestMountPolicy(t *testing.T) {
	conn, m, _ := startFakeWith(t, func(c *config.Config) { c.MountForced = "nodev" })
	ctl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	v := createFake(t, ctl, "pvc-policy", nil)
	publish := func(target string, flags ...string) error {
		_, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: target,
			VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, flags...), VolumeContext: v.VolumeContext})
		return err
	}
	base := t.TempDir()
	if err := publish(filepath.Join(base, "a"), "nfsvers=4.1"); err != nil {
		t.Fatal(err)
	}
	if e, _ := m.Mounted(filepath.Join(base, "a")); e == nil || strings.Join(e.Options, ",") != "nodev,nosuid,nfsvers=4.1" {
		t.Errorf("default options: %+v", e)
	}
	if err := publish(filepath.Join(base, "b"), "suid"); err != nil {
		t.Fatal(err)
	}
	if e, _ := m.Mounted(filepath.Join(base, "b")); e == nil || strings.Join(e.Options, ",") != "nodev,suid" {
		t.Errorf("suid from the class: %+v", e)
	}
	for _, flags := range [][]string{{"dev"}, {"nosuid,nodev", "suid,dev"}} {
		if err := publish(filepath.Join(base, "c"), flags...); status.Code(err) != codes.InvalidArgument {
			t.Errorf("publish with %q = %v, want InvalidArgument", flags, err)
		}
	}
}

// TestInlineVolumeRules: CSI inline volumes (attributes chosen by a pod
// author) come only from the node's allow-list, read-only unless the entry
// says rw, and may not pass X-mount.* options; no volume of any origin is
// mounted from inside .nfsdir.
func TestInlineVolumeRules(t *testing.T) {
	conn, m, _ := startFakeWith(t, func(c *config.Config) {
		c.InlineAllow, c.InlineAllowSet = "nfs.example:/export/ok=rw,nfs.example:/export/ro", true
	})
	node := csi.NewNodeClient(conn)
	for _, d := range []string{"/export/ok/a", "/export/ro/b", "/export/other", "/export/.nfsdir/trash"} {
		os.MkdirAll(m.ExportDir("nfs.example", d), 0o755)
	}
	base := t.TempDir()
	publish := func(name, subDir string, ephemeral bool, opts string) error {
		attrs := map[string]string{"server": "nfs.example", "share": "/export", "subDir": subDir, "mountOptions": opts}
		if ephemeral {
			attrs["csi.storage.k8s.io/ephemeral"] = "true"
		}
		_, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "csi-" + name, TargetPath: filepath.Join(base, name),
			VolumeCapability: rwx, VolumeContext: attrs})
		return err
	}
	if err := publish("rw", "ok/a", true, ""); err != nil {
		t.Fatalf("inline volume on an rw entry: %v", err)
	}
	if e, _ := m.Mounted(filepath.Join(base, "rw")); e == nil || hasOption(e.Options, "ro") {
		t.Errorf("rw entry mounted %+v", e)
	}
	if err := publish("ro", "ro/b", true, ""); err != nil {
		t.Fatalf("inline volume on a read-only entry: %v", err)
	}
	if e, _ := m.Mounted(filepath.Join(base, "ro")); e == nil || !hasOption(e.Options, "ro") {
		t.Errorf("read-only entry mounted %+v", e)
	}
	if err := publish("other", "other", true, ""); status.Code(err) != codes.PermissionDenied {
		t.Errorf("inline volume off the list = %v, want PermissionDenied", err)
	}
	if err := publish("owner", "ok/a", true, "X-mount.owner=1000"); status.Code(err) != codes.InvalidArgument {
		t.Errorf("inline volume with X-mount.owner = %v, want InvalidArgument", err)
	}
	if err := publish("static-other", "other", false, ""); err != nil {
		t.Errorf("a persistent volume is not subject to the inline list: %v", err)
	}
	for _, ephemeral := range []bool{true, false} {
		if err := publish(fmt.Sprint("meta-", ephemeral), ".nfsdir/trash", ephemeral, ""); status.Code(err) != codes.InvalidArgument {
			t.Errorf("volume inside .nfsdir (ephemeral=%v) = %v, want InvalidArgument", ephemeral, err)
		}
	}
}

// TestStatsNeedTheNamedVolume: NodeGetVolumeStats and NodeGetVolumeHealth
// answer NotFound for a path that carries another volume or lies outside
// the node's targets, without touching it.
func TestStatsNeedTheNamedVolume(t *testing.T) {
	conn, m := startFake(t)
	ctl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	os.MkdirAll(m.ExportDir("nfs.example", "/other"), 0o755)
	a := createFake(t, ctl, "pvc-a", nil)
	b := createFake(t, ctl, "pvc-b", map[string]string{"share": "/other"})
	target := filepath.Join(t.TempDir(), "a")
	if _, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: a.VolumeId, TargetPath: target,
		VolumeCapability: rwx, VolumeContext: a.VolumeContext}); err != nil {
		t.Fatal(err)
	}
	if _, err := node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: a.VolumeId, VolumePath: target}); err != nil {
		t.Errorf("stats of the published volume: %v", err)
	}
	if _, err := node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: b.VolumeId, VolumePath: target}); status.Code(err) != codes.NotFound {
		t.Errorf("stats of another volume's path = %v, want NotFound", err)
	}
	if _, err := node.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: b.VolumeId, VolumePublishPath: target}); status.Code(err) != codes.NotFound {
		t.Errorf("health of another volume's path = %v, want NotFound", err)
	}
	legacy := "nfs.example#other#x#uuid#delete"
	if _, err := node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: legacy, VolumePath: target}); status.Code(err) != codes.NotFound {
		t.Errorf("stats with a csi-driver-nfs ID of another directory = %v, want NotFound", err)
	}
	if _, err := node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: a.VolumeId, VolumePath: "/etc"}); status.Code(err) != codes.NotFound {
		t.Errorf("stats of /etc = %v, want NotFound", err)
	}
}

// TestGarbageOptionsInIDAreInvalidArgument: a crafted or corrupted volume
// ID whose mount option field nfsdir would never have written is
// InvalidArgument (the provisioner stops retrying), not Unavailable.
func TestGarbageOptionsInIDAreInvalidArgument(t *testing.T) {
	conn, _ := startFake(t)
	ctl := csi.NewControllerClient(conn)
	e, _ := export.New("nfs.example", "/export")
	id, err := volumeid.New(e, volumeid.KeyForDir("x"), volumeid.NewToken(), "-o,bg", "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id.String()})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("DeleteVolume of an ID with garbage options = %v, want InvalidArgument", err)
	}
}

// TestHealthAfterRestartReadsKubeletsTargets: without a publish path,
// NodeGetVolumeHealth of a restarted plugin (nothing in memory) finds the
// volume's targets from kubelet's vol_data.json and the mount table, and
// reports a dead one rather than healthy.
func TestHealthAfterRestartReadsKubeletsTargets(t *testing.T) {
	kubelet := t.TempDir()
	conn, m, _ := startFakeWith(t, func(c *config.Config) { c.PublishRoot, c.KubeletDir = "", kubelet })
	ctl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	v := createFake(t, ctl, "pvc-h", nil)
	other := createFake(t, ctl, "pvc-o", nil)
	publish := func(pod string, v *csi.Volume) string {
		dir := filepath.Join(kubelet, "pods", pod, "volumes/kubernetes.io~csi", v.VolumeContext["subDir"])
		os.MkdirAll(dir, 0o750)
		os.WriteFile(filepath.Join(dir, "vol_data.json"), []byte(`{"driverName":"nfsdir.csi.io","volumeHandle":`+strconv.Quote(v.VolumeId)+`}`), 0o644)
		target := filepath.Join(dir, "mount")
		if _, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: target,
			VolumeCapability: rwx, VolumeContext: v.VolumeContext}); err != nil {
			t.Fatal(err)
		}
		return target
	}
	publish("pod-1", v)
	publish("pod-2", other)
	// The volume's directory goes away on the server: its mount is dead.
	os.RemoveAll(filepath.Join(m.ExportDir("nfs.example", "/export"), v.VolumeContext["subDir"]))
	restarted := &Node{nodeID: "n", mounter: m, mountTimeout: time.Minute, targets: targetpath.Rule{KubeletDir: kubelet}}
	r, err := restarted.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: v.VolumeId})
	if err != nil {
		t.Fatal(err)
	}
	if st := r.GetVolumeHealth().GetHealthStatuses(); len(st) != 1 || st[0].GetStatus() != csi.VolumeHealthErrorType_INACCESSIBLE {
		t.Errorf("health of a dead volume after a restart: %v", st)
	}
	r, err = restarted.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: other.VolumeId})
	if err != nil || len(r.GetVolumeHealth().GetHealthStatuses()) != 0 {
		t.Errorf("health of a live volume after a restart: %v %v", r, err)
	}
}

// TestRecordReadsBackToBackAllAnswer: record reads called back to back
// by as many callers as reads may be in flight per share all read the
// record, never refused because an earlier read had answered but not yet
// given back its place (the stats would then fall back to the export's
// statfs).
func TestRecordReadsBackToBackAllAnswer(t *testing.T) {
	conn, m := startFake(t)
	v := createFake(t, csi.NewControllerClient(conn), "pvc-stats", nil)
	views, err := shares.New(shares.Config{StateDir: filepath.Join(t.TempDir(), "views"), MountTimeout: time.Minute}, m)
	if err != nil {
		t.Fatal(err)
	}
	defer views.Close(ctx)
	node := &Node{views: views}
	var wg sync.WaitGroup
	var refused atomic.Int64
	for range maxViewReads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				if rec, _, _, ok := node.record(ctx, v.VolumeId, true, time.Minute); !ok || rec == nil {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := refused.Load(); n > 0 {
		t.Errorf("%d of %d record reads refused or empty", n, 2000*maxViewReads)
	}
}
