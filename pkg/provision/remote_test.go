package provision

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/treecopy"
)

// agentOn copies as the copy agent does, on the share's directory: through
// a View, which proves both directories before anything is copied.
type agentOn struct {
	t      *testing.T
	dir    string
	calls  []RemoteCopy
	err    error         // returned instead of copying when set
	polled chan struct{} // when set, a copy waits for a progress call first
}

func (g *agentOn) CopyProgress(ctx context.Context, endpoint string, c RemoteCopy) (int64, int64, error) {
	if g.polled != nil {
		select {
		case <-g.polled:
		default:
			close(g.polled)
		}
	}
	return 7, 4096, nil
}

func (g *agentOn) CopyTree(ctx context.Context, endpoint string, c RemoteCopy) (treecopy.Result, error) {
	g.calls = append(g.calls, c)
	if g.polled != nil {
		<-g.polled
	}
	if endpoint != "agent:1" || c.Share != "/e" {
		g.t.Errorf("copy asked of %s for share %s", endpoint, c.Share)
	}
	if g.err != nil {
		return treecopy.Result{}, g.err
	}
	root, err := os.OpenRoot(g.dir)
	if err != nil {
		return treecopy.Result{}, err
	}
	defer root.Close()
	v, err := OpenView(root)
	if err != nil {
		return treecopy.Result{}, err
	}
	defer v.Close()
	src, dst, err := v.OpenCopy(c)
	if err != nil {
		return treecopy.Result{}, err
	}
	defer src.Close()
	defer dst.Close()
	return treecopy.Default.Copy(ctx, int(src.Fd()), int(dst.Fd()), c.RootAttrs)
}

// remoteShare makes a share whose Area copies through an agent, and
// pvc-src on it, naming that agent and holding one file.
func remoteShare(t *testing.T) (string, *Area, *agentOn, *Record) {
	t.Helper()
	dir, a := newShare(t)
	g := &agentOn{t: t, dir: dir}
	a.Agents().Use(g, "/e")
	r := req("pvc-src", "pvc-src", params.Delete)
	r.CopyAgent = "agent:1"
	src, err := a.Create(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pvc-src", "data"), []byte("source"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, a, g, src
}

// A snapshot of a volume that names a copy agent, and its restore into
// another such volume, are copied by the agent: the snapshot from the
// volume's directory into a copy being made, the restore from the
// snapshot's complete copy into the filling volume's directory.
func TestSnapshotAndRestoreThroughTheAgent(t *testing.T) {
	ctx := context.Background()
	dir, a, g, src := remoteShare(t)
	snap, err := a.Snapshots().Create("snap", idOf(src))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Snapshots().Fill(ctx, snapshotIDOf(idOf(src), snap), treecopy.Default); err != nil {
		t.Fatal(err)
	}
	if len(g.calls) != 1 || g.calls[0].Src.SubDir != "pvc-src" || g.calls[0].Src.Token != src.Token || !g.calls[0].RootAttrs ||
		g.calls[0].Dst.Snapshot == "" || g.calls[0].Src.FileID != src.FileID {
		t.Fatalf("the agent was asked %+v", g.calls)
	}
	r := req("pvc-restore", "pvc-restore", params.Delete)
	r.CopyAgent = "agent:1"
	r.Source = &Source{Snapshot: true, Key: snap.Key(), Token: snap.Token}
	rec, err := a.Create(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Fills().Fill(ctx, idOf(rec), treecopy.Default); err != nil {
		t.Fatal(err)
	}
	if len(g.calls) != 2 || g.calls[1].Src.Snapshot != snap.dataName() || g.calls[1].Dst.SubDir != "pvc-restore" || g.calls[1].RootAttrs {
		t.Fatalf("the agent was asked %+v", g.calls)
	}
	b, err := os.ReadFile(filepath.Join(dir, "pvc-restore", "data"))
	if err != nil || string(b) != "source" {
		t.Fatalf("the restore holds %q, %v", b, err)
	}
	if now, _ := a.Lookup(idOf(rec)); now == nil || !now.Copied {
		t.Fatalf("the restored volume is %+v after its fill", now)
	}
}

// An agent that does not copy (older than copies, or not serving the
// share: Unimplemented, before it writes anything) leaves the copy to the
// controller; any other failure fails the attempt.
func TestAnAgentThatDoesNotCopyLeavesItToTheController(t *testing.T) {
	ctx := context.Background()
	dir, a, g, src := remoteShare(t)
	r := req("pvc-clone", "pvc-clone", params.Delete)
	r.CopyAgent = "agent:1"
	r.Source = &Source{Key: src.Key(), Token: src.Token}
	rec, err := a.Create(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []fault.Kind{fault.Unavailable, fault.PermissionDenied} {
		g.err = fault.New(k, "agent down, or without a capability")
		if _, err := a.Fills().Fill(ctx, idOf(rec), treecopy.Default); !fault.Is(err, k) {
			t.Fatalf("Fill with the agent failing = %v, want %v", err, k)
		}
	}
	g.err = fault.New(fault.Unimplemented, "unknown method Copy")
	if _, err := a.Fills().Fill(ctx, idOf(rec), treecopy.Default); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "pvc-clone", "data")); err != nil || string(b) != "source" {
		t.Fatalf("the clone holds %q, %v", b, err)
	}
	if len(g.calls) != 3 {
		t.Fatalf("the agent was asked %d times, want 3", len(g.calls))
	}
}

// The agent copies only from and into nfsdir's directories, still the
// ones the controller opened, and only into an empty directory of a volume
// being filled or of a snapshot being made.
func TestOpenCopyDirRefuses(t *testing.T) {
	dir, a, _, src := remoteShare(t)
	snap, err := a.Snapshots().Create("snap", idOf(src))
	if err != nil {
		t.Fatal(err)
	}
	attempt := snap.attemptPrefix() + "aaaaaaaa"
	snaps := filepath.Join(dir, ".nfsdir", "snapshots")
	if err := os.Mkdir(filepath.Join(snaps, attempt), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(snaps, snap.attemptPrefix()+"bbbbbbbb")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(snaps, ".aaaaaaaa.bbbbbbbb.cccccccc"), 0o700); err != nil {
		t.Fatal(err)
	}
	clone := cloneRecord(t, a, src)
	v := viewOf(t, dir)
	ino := func(rel string) uint64 { return inode(t, filepath.Join(dir, rel)) }
	for _, c := range []struct {
		what string
		d    CopyDir
		dst  bool
		want fault.Kind
	}{
		{"into a volume not being filled", CopyDir{SubDir: "pvc-src", Token: src.Token, FileID: src.FileID}, true, fault.FailedPrecondition},
		{"from a volume with another token", CopyDir{SubDir: "pvc-src", Token: "zzzzzzzz", FileID: src.FileID}, false, fault.NotFound},
		{"from a directory of no volume", CopyDir{SubDir: "other", Token: src.Token, FileID: src.FileID}, false, fault.NotFound},
		{"from a volume's directory with another inode", CopyDir{SubDir: "pvc-src", Token: src.Token, FileID: src.FileID + 1}, false, fault.FailedPrecondition},
		{"into a snapshot's complete copy", CopyDir{Snapshot: snap.dataName(), FileID: 1}, true, fault.InvalidArgument},
		{"from a copy being made", CopyDir{Snapshot: attempt, FileID: ino(".nfsdir/snapshots/" + attempt)}, false, fault.InvalidArgument},
		{"into a name reaching out", CopyDir{Snapshot: "../../etc", FileID: 1}, true, fault.InvalidArgument},
		{"into a copy of no recorded snapshot", CopyDir{Snapshot: ".aaaaaaaa.bbbbbbbb.cccccccc", FileID: ino(".nfsdir/snapshots/.aaaaaaaa.bbbbbbbb.cccccccc")}, true, fault.NotFound},
		{"into a symlink", CopyDir{Snapshot: snap.attemptPrefix() + "bbbbbbbb", FileID: 1}, true, fault.FailedPrecondition},
		{"into a copy with another inode", CopyDir{Snapshot: attempt, FileID: 1}, true, fault.FailedPrecondition},
		{"both kinds", CopyDir{SubDir: "pvc-src", Token: src.Token, Snapshot: attempt, FileID: src.FileID}, false, fault.InvalidArgument},
	} {
		f, _, err := v.openCopyDir(c.d, c.dst)
		if f != nil {
			f.Close()
		}
		if !fault.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.what, err, c.want)
		}
	}
	// The right directories open, until the copy's is not empty.
	for _, d := range []CopyDir{{Snapshot: attempt, FileID: ino(".nfsdir/snapshots/" + attempt)}, {SubDir: "pvc-clone", Token: clone.Token, FileID: clone.FileID}} {
		f, _, err := v.openCopyDir(d, true)
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		f.Close()
	}
	if err := os.WriteFile(filepath.Join(dir, "pvc-clone", "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := v.openCopyDir(CopyDir{SubDir: "pvc-clone", Token: clone.Token, FileID: clone.FileID}, true); !fault.Is(err, fault.FailedPrecondition) {
		t.Errorf("into a volume's directory that is not empty: %v", err)
	}
}

// The records must say the copy: a snapshot being made is copied from
// its own source volume, a filling volume from its own source.
func TestOpenCopyFollowsTheRecords(t *testing.T) {
	ctx := context.Background()
	dir, a, _, src := remoteShare(t)
	other, err := a.Create(ctx, req("pvc-other", "pvc-other", params.Delete))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := a.Snapshots().Create("snap", idOf(src))
	if err != nil {
		t.Fatal(err)
	}
	attempt := snap.attemptPrefix() + "aaaaaaaa"
	if err := os.Mkdir(filepath.Join(dir, ".nfsdir", "snapshots", attempt), 0o700); err != nil {
		t.Fatal(err)
	}
	clone := cloneRecord(t, a, src)
	v := viewOf(t, dir)
	vol := func(rec *Record) CopyDir { return CopyDir{SubDir: rec.SubDir, Token: rec.Token, FileID: rec.FileID} }
	into := CopyDir{Snapshot: attempt, FileID: inode(t, filepath.Join(dir, ".nfsdir", "snapshots", attempt))}
	for _, c := range []struct {
		what string
		c    RemoteCopy
		ok   bool
	}{
		{"the snapshot from its volume", RemoteCopy{Src: vol(src), Dst: into}, true},
		{"the clone from its source", RemoteCopy{Src: vol(src), Dst: vol(clone)}, true},
		{"the snapshot from another volume", RemoteCopy{Src: vol(other), Dst: into}, false},
		{"the clone from another volume", RemoteCopy{Src: vol(other), Dst: vol(clone)}, false},
	} {
		s, d, err := v.OpenCopy(c.c)
		if c.ok && err != nil || !c.ok && !fault.Is(err, fault.FailedPrecondition) {
			t.Errorf("%s: %v", c.what, err)
		}
		if err == nil {
			s.Close()
			d.Close()
		}
	}
}

// A volume whose class names a quota agent but no copy agent is copied by
// the controller: a quota agent may lack what copying takes.
func TestAQuotaAgentIsNotAskedToCopy(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	g := &agentOn{t: t, dir: dir}
	a.Agents().Use(g, "/e")
	r := req("pvc-src", "pvc-src", params.Delete)
	r.QuotaAgent = "agent:1"
	src, err := a.Create(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := a.Snapshots().Create("snap", idOf(src))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Snapshots().Fill(ctx, snapshotIDOf(idOf(src), snap), treecopy.Default); err != nil {
		t.Fatal(err)
	}
	if len(g.calls) != 0 {
		t.Errorf("the quota agent was asked to copy: %+v", g.calls)
	}
}

// While an agent copies, its progress is asked for and shown as the
// copy's (in the callers' "... copied so far").
func TestProgressOfACopyByTheAgent(t *testing.T) {
	defer func(d time.Duration) { progressEvery = d }(progressEvery)
	progressEvery = 10 * time.Millisecond
	ctx := context.Background()
	_, a, g, src := remoteShare(t)
	g.polled = make(chan struct{})
	snap, err := a.Snapshots().Create("snap", idOf(src))
	if err != nil {
		t.Fatal(err)
	}
	c := treecopy.Default
	c.Progress = &treecopy.Progress{}
	if _, err := a.Snapshots().Fill(ctx, snapshotIDOf(idOf(src), snap), c); err != nil {
		t.Fatal(err)
	}
	if c.Progress.Entries.Load() != 7 || c.Progress.Bytes.Load() != 4096 {
		t.Errorf("progress %d entries, %d bytes; want the agent's 7 and 4096", c.Progress.Entries.Load(), c.Progress.Bytes.Load())
	}
}

// cloneRecord records pvc-clone, to be filled from src.
func cloneRecord(t *testing.T, a *Area, src *Record) *Record {
	t.Helper()
	r := req("pvc-clone", "pvc-clone", params.Delete)
	r.Source = &Source{Key: src.Key(), Token: src.Token}
	clone, err := a.Create(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return clone
}

// viewOf opens the View of the share at dir, as the agent does.
func viewOf(t *testing.T, dir string) *View {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	v, err := OpenView(root)
	if err != nil {
		root.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close(); root.Close() })
	return v
}
