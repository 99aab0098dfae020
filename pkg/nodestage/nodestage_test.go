package nodestage

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/nfsmount/nfsmounttest"
	"github.com/nfsdir/nfsdir/pkg/targetpath"
)

type lab struct {
	fake   *nfsmounttest.Fake
	stager *Stager
	dir    string // stage directory
	state  string // the driver's state directory, which holds dir
	root   string // where staging paths and targets are
	exp    export.Export
}

func setup(t *testing.T) *lab {
	t.Helper()
	tmp := t.TempDir()
	l := &lab{fake: nfsmounttest.New(filepath.Join(tmp, "server")), dir: filepath.Join(tmp, "state", "node", "stage"), state: filepath.Join(tmp, "state"),
		root: filepath.Join(tmp, "kubelet"), exp: export.Export{Server: "srv", Share: "/share"}}
	for _, v := range []string{"v1", "v2", "v3", "other"} {
		if err := os.MkdirAll(filepath.Join(l.fake.ExportDir("srv", "/share"), v), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l.stager = l.restart(t)
	return l
}

// restart returns a new Stager on the same directory, as a restarted node
// plugin has.
func (l *lab) restart(t *testing.T) *Stager {
	s, err := New(l.dir, l.fake, 0, targetpath.Rule{Root: filepath.Dir(l.root)}, l.state)
	if err != nil {
		t.Fatal(err)
	}
	s.mountTimeout = 5e9
	return s
}

func (l *lab) staging(t *testing.T, name string) string {
	p := filepath.Join(l.root, name, "globalmount")
	if err := os.MkdirAll(p, 0o750); err != nil {
		t.Fatal(err)
	}
	return p
}

func (l *lab) shares(t *testing.T) int {
	t.Helper()
	m, err := l.stager.Shares()
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}

func (l *lab) mounts() int {
	n := 0
	for _, a := range l.fake.Actions() {
		if strings.HasPrefix(a, "mount ") {
			n++
		}
	}
	return n
}

func TestOneShareMountForManyVolumes(t *testing.T) {
	l := setup(t)
	ctx := context.Background()
	opts := mountopts.Options{"nfsvers=4.1", "hard"}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	paths := make([]string, 3)
	for i, v := range []string{"v1", "v2", "v3"} {
		paths[i] = l.staging(t, v)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = l.stager.Stage(ctx, l.exp, v, opts, paths[i])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Stage %d: %v", i, err)
		}
	}
	if n := l.mounts(); n != 1 || l.shares(t) != 1 {
		t.Fatalf("three volumes of one share made %d NFS mounts, %d share mounts; want 1", n, l.shares(t))
	}
	e, _ := l.fake.Mounted(paths[1])
	if e == nil || e.Source != "srv:/share/v2" {
		t.Fatalf("staging of v2 shows %+v", e)
	}
	// Other options: another share mount.
	if err := l.stager.Stage(ctx, l.exp, "other", mountopts.Options{"nfsvers=3"}, l.staging(t, "other")); err != nil {
		t.Fatal(err)
	}
	if l.shares(t) != 2 {
		t.Fatalf("%d share mounts for two option sets", l.shares(t))
	}

	// Users are counted from the mount table: a restarted plugin keeps
	// a share mount while one staged volume is left, and reuses it.
	l.stager = l.restart(t)
	for _, p := range paths[:2] {
		if err := l.fake.Unmount(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	l.stager.Sweep(ctx, nil)
	if l.shares(t) != 2 {
		t.Fatalf("a sweep with v3 and other still staged left %d share mounts", l.shares(t))
	}
	if err := l.stager.Stage(ctx, l.exp, "v1", opts, paths[0]); err != nil || l.mounts() != 2 {
		t.Fatalf("staging again after a restart: %v, %d NFS mounts in all", err, l.mounts())
	}
	// A mount of the driver's own (below its state directory) on the same
	// superblock is no user, though the rule would take its path.
	own := filepath.Join(l.state, "mounts", "controller")
	os.MkdirAll(own, 0o700)
	if err := l.fake.Bind(ctx, filepath.Join(l.dir, Key(l.exp, opts)), own, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{paths[0], paths[2], filepath.Join(l.root, "other", "globalmount")} {
		if err := l.fake.Unmount(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	l.stager.Sweep(ctx, nil)
	if n := l.shares(t); n != 0 {
		t.Fatalf("%d share mounts left when nothing is staged", n)
	}
	if ents, _ := os.ReadDir(l.dir); len(ents) != 0 {
		t.Fatalf("stage directory keeps %d entries", len(ents))
	}
	l.fake.Unmount(ctx, own)
}

func TestABindThatArrivesElsewhereIsRefused(t *testing.T) {
	l := setup(t)
	ctx := context.Background()
	dir := l.fake.ExportDir("srv", "/share")
	if err := os.Symlink("other", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"link", "out"} {
		p := l.staging(t, sub)
		err := l.stager.Stage(ctx, l.exp, sub, nil, p)
		if !fault.Is(err, fault.FailedPrecondition) {
			t.Fatalf("staging through symlink %s: %v, want FailedPrecondition", sub, err)
		}
		if e, _ := l.fake.Mounted(p); e != nil {
			t.Fatalf("a refused bind stays: %+v", e)
		}
	}
	if err := l.stager.Stage(ctx, l.exp, "../share", nil, l.staging(t, "up")); !fault.Is(err, fault.InvalidArgument) {
		t.Fatalf("a directory above the share: %v", err)
	}
	l.stager.Sweep(ctx, nil)
	if n := l.shares(t); n != 0 {
		t.Fatalf("%d share mounts left after refusals", n)
	}
}

func TestAShareBeingStagedIsNotSwept(t *testing.T) {
	l := setup(t)
	ctx := context.Background()
	p := l.staging(t, "v1")
	if err := l.stager.Stage(ctx, l.exp, "v1", nil, p); err != nil {
		t.Fatal(err)
	}
	key := Key(l.exp, nil)
	if err := l.fake.Unmount(ctx, p); err != nil {
		t.Fatal(err)
	}
	l.stager.locks.TryAcquire(key) // a Stage in progress
	l.stager.Sweep(ctx, nil)
	if l.shares(t) != 1 {
		t.Fatal("a share held by a Stage in progress was swept")
	}
	l.stager.locks.Release(key)
	l.stager.Sweep(ctx, nil)
	if l.shares(t) != 0 {
		t.Fatal("an unused share mount stays")
	}
}

func TestIsKey(t *testing.T) {
	if !isKey(Key(export.Export{Server: "a", Share: "/b"}, nil)) || isKey("lost+found") || isKey("0123456789ABCDEF") {
		t.Fatal("isKey")
	}
}
