package serveragent_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/serveragent"
	"github.com/nfsdir/nfsdir/pkg/treecopy"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
	"github.com/nfsdir/nfsdir/tests/lab"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// labIDs pin the lab's controller certificate to the controller role.
var labIDs = serveragent.Identities{Controllers: []string{serveragent.DefaultControllerIdentity}}

// serveAgent serves an agent with cfg on a loopback port, with mutual
// TLS, until the test ends, and returns a controller's Pool for it and
// its endpoint.
func serveAgent(t *testing.T, cfg serveragent.Config) (*serveragent.Pool, string) {
	t.Helper()
	pki := lab.NewPKI(t)
	endpoint := serve(t, cfg, pki, pki.Server, labIDs)
	pool, err := serveragent.NewPool(serveragent.Files{Cert: pki.Client.Cert, Key: pki.Client.Key, CA: pki.CA}, serveragent.DefaultAgentIdentity)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, endpoint
}

// serve serves an agent with cfg on a loopback port with the server
// certificate server of pki, pinning ids, until the test ends, and
// returns its endpoint.
func serve(t *testing.T, cfg serveragent.Config, pki lab.PKI, server lab.CertFiles, ids serveragent.Identities) string {
	t.Helper()
	agent, err := serveragent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := serveragent.ServerTLS(serveragent.Files{Cert: server.Cert, Key: server.Key, CA: pki.CA}, ids)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go serveragent.Serve(ctx, l, agent, tlsCfg, ids)
	return l.Addr().String()
}

// controllerArea opens nfsdir's metadata area in dir (making it) as a
// controller does through its mount, with the agents of pool serving the
// share as "/e" (nil: no agents); it is closed when the test ends.
func controllerArea(t *testing.T, dir string, pool *serveragent.Pool) *provision.Area {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	a, err := provision.OpenArea(root, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if pool != nil {
		a.Agents().Use(pool, "/e")
	}
	return a
}

// An agent serving a directory for copies only (no project quotas there)
// makes a snapshot and its restore over gRPC with mutual TLS, as the
// controller asks through its Pool; the copies are in its audit trail;
// quota calls for that export are refused, naming the flag.
func TestCopiesOverGRPC(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	var audit lockedBuffer
	pool, endpoint := serveAgent(t, serveragent.Config{CopyExports: []serveragent.Export{{Share: "/e", Dir: dir}},
		FirstProject: 1, LastProject: 9, Audit: &audit})

	a := controllerArea(t, dir, pool)
	req := func(name string) provision.Request {
		return provision.Request{Name: name, SubDir: name, OnDelete: params.Delete, Mode: 0o755, UID: -1, GID: -1,
			CapacityBytes: 1 << 20, CopyAgent: endpoint}
	}
	src, err := a.Create(ctx, req("pvc-src"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pvc-src", "data"), []byte("source"), 0o640); err != nil {
		t.Fatal(err)
	}
	srcID := volumeid.ID{Key: src.Key(), Token: src.Token}
	snap, err := a.Snapshots().Create("snap", srcID)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := a.Snapshots().Fill(ctx, volumeid.SnapshotOf(srcID, snap.Key(), snap.Token), treecopy.Default); err != nil || res.Files != 1 || res.Bytes != 6 {
		t.Fatalf("the snapshot's fill through the agent = %+v, %v", res, err)
	}
	r := req("pvc-restore")
	r.Source = &provision.Source{Snapshot: true, Key: snap.Key(), Token: snap.Token}
	rec, err := a.Create(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Fills().Fill(ctx, volumeid.ID{Key: rec.Key(), Token: rec.Token}, treecopy.Default); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "pvc-restore", "data")); err != nil || string(b) != "source" {
		t.Fatalf("the restore holds %q, %v", b, err)
	}
	if n := strings.Count(audit.String(), `"op":"copy"`); n != 2 || strings.Contains(audit.String(), `"error"`) {
		t.Errorf("audit trail:\n%s", audit.String())
	}
	_, err = pool.Set(ctx, endpoint, serveragent.Volume{Share: "/e", SubDir: "pvc-src", Token: src.Token}, 1<<20, 0)
	if !fault.Is(err, fault.FailedPrecondition) || !strings.Contains(err.Error(), "--copy-export") {
		t.Errorf("Set on a copies-only export = %v", err)
	}
	// A copy into a volume that is not being filled is refused, whatever
	// the caller asks.
	_, err = pool.CopyTree(ctx, endpoint, provision.RemoteCopy{Share: "/e",
		Src: provision.CopyDir{SubDir: "pvc-restore", Token: rec.Token, FileID: rec.FileID},
		Dst: provision.CopyDir{SubDir: "pvc-src", Token: src.Token, FileID: src.FileID}})
	if !fault.Is(err, fault.FailedPrecondition) {
		t.Errorf("a copy into a volume in use = %v", err)
	}
	// Nothing being copied into a directory: not running, nothing done.
	if e, b, err := pool.CopyProgress(ctx, endpoint, provision.RemoteCopy{Share: "/e", Dst: provision.CopyDir{Snapshot: "x"}}); err != nil || e != 0 || b != 0 {
		t.Errorf("progress of no copy: %d, %d, %v", e, b, err)
	}
	// Another share: Unimplemented, so that the controller copies itself.
	_, err = pool.CopyTree(ctx, endpoint, provision.RemoteCopy{Share: "/other"})
	if !fault.Is(err, fault.Unimplemented) {
		t.Errorf("a copy on a share the agent does not serve = %v", err)
	}
}

// An export given for quotas must have them; the error says how to serve
// it for copies only. An export given twice is refused.
func TestExportsChecked(t *testing.T) {
	dir := t.TempDir()
	_, err := serveragent.New(serveragent.Config{Exports: []serveragent.Export{{Share: "/e", Dir: dir}}, FirstProject: 1, LastProject: 9})
	if err == nil || !strings.Contains(err.Error(), "--copy-export") {
		t.Errorf("an --export without project quotas: %v", err)
	}
	_, err = serveragent.New(serveragent.Config{CopyExports: []serveragent.Export{{Share: "/e", Dir: dir}, {Share: "/e/", Dir: dir}}, FirstProject: 1, LastProject: 9})
	if err == nil {
		t.Error("an export given twice was taken")
	}
	_, err = serveragent.New(serveragent.Config{CopyExports: []serveragent.Export{{Share: "/e", Dir: filepath.Join(dir, "missing")}}, FirstProject: 1, LastProject: 9})
	if err == nil {
		t.Error("a missing export directory was taken")
	}
}
