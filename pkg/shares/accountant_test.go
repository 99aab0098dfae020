package shares

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/nfsmount/nfsmounttest"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/provision"
)

// setupAccounting returns a Set on a fake share that counts every 200 ms
// with workers at once.
func setupAccounting(t *testing.T, workers int) (*Set, *nfsmounttest.Fake, export.Export) {
	t.Helper()
	f := nfsmounttest.New(t.TempDir())
	e, _ := export.New("nfs.example", "/export")
	os.MkdirAll(f.ExportDir(e.Server, e.Share), 0o755)
	s, err := New(Config{StateDir: filepath.Join(t.TempDir(), "state"), MountTimeout: time.Minute,
		Accounting: Accounting{Every: 200 * time.Millisecond, Workers: workers}}, f)
	if err != nil {
		t.Fatal(err)
	}
	return s, f, e
}

// TestAccountantCountsAndReportsOverCapacity: a Set with accounting counts
// a volume in the background, stores the figure a View reads, and counts
// the volume as over its capacity per share; counts stop with StopPurges.
func TestAccountantCountsAndReportsOverCapacity(t *testing.T) {
	s, f, e := setupAccounting(t, 2)
	ctx := context.Background()
	var rec *provision.Record
	err := s.On(ctx, e, mountopts.Options{"nfsvers=4.1"}, true, func(a *provision.Area, _ *Share) (err error) {
		rec, err = a.Create(ctx, provision.Request{Name: "pvc-a", SubDir: "pvc-a", OnDelete: params.Delete, Mode: 0o770, UID: -1, GID: -1, CapacityBytes: 4096})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(f.ExportDir(e.Server, e.Share), "pvc-a", "blob"), []byte(strings.Repeat("x", 100000)), 0o644)
	for end := time.Now().Add(10 * time.Second); s.Accounting().OverVolumes[e.String()] != 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no count saw the volume over its capacity: %+v", s.Accounting())
		}
	}
	st := s.Accounting()
	if st.OverBytes[e.String()] < 100000-4096 || st.Counts == 0 || st.Failures != 0 {
		t.Fatalf("accounting figures: %+v", st)
	}
	root, _ := os.OpenRoot(f.ExportDir(e.Server, e.Share))
	defer root.Close()
	v, err := provision.OpenView(root)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if fig, ok, err := v.Figure(rec); !ok || err != nil || fig.Bytes < 100000 {
		t.Fatalf("stored figure: %+v %v %v", fig, ok, err)
	}
	s.StopPurges()
	n := s.Accounting().Counts
	time.Sleep(500 * time.Millisecond)
	if s.Accounting().Counts != n {
		t.Fatal("counts went on after StopPurges")
	}
	s.Close(ctx)
}

// TestPassesSettleInterruptedRemovals: a record a removal left aside (a
// creation that dropped its own record and was cut) is settled by the
// accountant's next pass once old enough.
func TestPassesSettleInterruptedRemovals(t *testing.T) {
	defer func(d time.Duration) { settleAfter = d }(settleAfter)
	settleAfter = 0
	s, f, e := setupAccounting(t, 1)
	defer s.Close(context.Background())
	defer s.StopPurges()
	ctx := context.Background()
	var rec *provision.Record
	err := s.On(ctx, e, mountopts.Options{"nfsvers=4.1"}, true, func(a *provision.Area, _ *Share) (err error) {
		rec, err = a.Create(ctx, provision.Request{Name: "pvc-cut", SubDir: "pvc-cut", OnDelete: params.Delete, Mode: 0o770, UID: -1, GID: -1})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	vols := filepath.Join(f.ExportDir(e.Server, e.Share), ".nfsdir/volumes")
	aside := filepath.Join(vols, rec.Key()+".del."+rec.Token)
	if err := os.Rename(filepath.Join(vols, rec.Key()), aside); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Lstat(aside); os.IsNotExist(err) {
			break
		}
		if time.Now().After(end) {
			t.Fatal("no pass settled the record left aside")
		}
	}
}
