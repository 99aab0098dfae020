package shares

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/pkg/capacity"
	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/nfsmount/nfsmounttest"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/usage"
)

// setupAccounting returns a Set on a fake share that counts every 200 ms
// with workers at once.
func setupAccounting(t *testing.T, workers int) (*Set, *nfsmounttest.Fake, export.Export) {
	t.Helper()
	f := nfsmounttest.New(t.TempDir())
	e, _ := export.New("nfs.example", "/export")
	os.MkdirAll(f.ExportDir(e.Server, e.Share), 0o755)
	s, err := New(Config{StateDir: filepath.Join(t.TempDir(), "state"), MountTimeout: time.Minute,
		Accounting: usage.Accounting{Every: 200 * time.Millisecond, Workers: workers}}, f)
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

// fakeServer answers usage questions as a quota agent would, or fails.
type fakeServer struct {
	mu    sync.Mutex
	asked []string
	fail  bool
}

func (f *fakeServer) Usage(_ context.Context, endpoint, share, subDir, token string) (usage.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, endpoint+" "+share+" "+subDir+" "+token)
	if f.fail {
		return usage.Result{}, errors.New("agent down")
	}
	return usage.Result{Bytes: 7 << 20, Inodes: 3}, nil
}

func (f *fakeServer) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.asked)
}

// TestUsageOfQuotaVolumesComesFromTheirAgent: a volume whose size a quota
// agent enforces is counted by asking the agent (with the volume's share,
// directory and token), never walked; a volume without an agent is
// walked; while the agent fails, the walk counts it.
func TestUsageOfQuotaVolumesComesFromTheirAgent(t *testing.T) {
	srv := &fakeServer{}
	f := nfsmounttest.New(t.TempDir())
	e, _ := export.New("nfs.example", "/export")
	os.MkdirAll(f.ExportDir(e.Server, e.Share), 0o755)
	s, err := New(Config{StateDir: filepath.Join(t.TempDir(), "state"), MountTimeout: time.Minute,
		Accounting: usage.Accounting{Every: 200 * time.Millisecond, Workers: 2, Server: srv}}, f)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer s.Close(ctx)
	var quotaed, plain *provision.Record
	err = s.On(ctx, e, mountopts.Options{"nfsvers=4.1"}, true, func(a *provision.Area, _ *Share) (err error) {
		if quotaed, err = a.Create(ctx, provision.Request{Name: "pvc-q", SubDir: "pvc-q", OnDelete: params.Delete, Mode: 0o770, UID: -1, GID: -1,
			CapacityBytes: 1 << 30, QuotaAgent: "agent.example:29700"}); err != nil {
			return err
		}
		plain, err = a.Create(ctx, provision.Request{Name: "pvc-p", SubDir: "pvc-p", OnDelete: params.Delete, Mode: 0o770, UID: -1, GID: -1, CapacityBytes: 1 << 30})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := f.ExportDir(e.Server, e.Share)
	os.WriteFile(filepath.Join(dir, "pvc-q", "blob"), make([]byte, 5000), 0o644)
	os.WriteFile(filepath.Join(dir, "pvc-p", "blob"), []byte(strings.Repeat("x", 5000)), 0o644)
	root, _ := os.OpenRoot(dir)
	defer root.Close()
	figure := func(rec *provision.Record, want func(int64) bool) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			var fig capacity.Figure
			var ok bool
			v, err := provision.OpenView(root)
			if err == nil {
				fig, ok, err = v.Figure(rec)
				v.Close()
			}
			if ok && err == nil && want(fig.Bytes) {
				return
			}
			if time.Now().After(end) {
				t.Fatalf("figure of %s: %+v %v %v (agent asked %q, %+v)", rec.Name, fig, ok, err, srv.calls(), s.Accounting())
			}
		}
	}
	figure(quotaed, func(b int64) bool { return b == 7<<20 })
	figure(plain, func(b int64) bool { return b >= 5000 && b < 1<<20 })
	want := "agent.example:29700 /export pvc-q " + quotaed.Token
	for _, c := range srv.calls() {
		if c != want {
			t.Fatalf("agent asked %q; want only %q", c, want)
		}
	}
	if s.Accounting().FromServer == 0 {
		t.Fatalf("no count from the server: %+v", s.Accounting())
	}
	srv.mu.Lock()
	srv.fail = true
	srv.mu.Unlock()
	figure(quotaed, func(b int64) bool { return b >= 5000 && b < 1<<20 })
}
