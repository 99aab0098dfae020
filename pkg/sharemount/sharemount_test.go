package sharemount

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/pkg/nfsmount/nfsmounttest"
)

// probing wraps the fake mounter with a controllable Probe: it returns the
// queued errors one by one, then probes for real.
type probing struct {
	*nfsmounttest.Fake
	mu   sync.Mutex
	errs []error
}

func (p *probing) failNext(errs ...error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errs = append(p.errs, errs...)
}

func (p *probing) Probe(ctx context.Context, path string) (nfsmount.Usage, error) {
	p.mu.Lock()
	if len(p.errs) > 0 {
		err := p.errs[0]
		p.errs = p.errs[1:]
		p.mu.Unlock()
		return nfsmount.Usage{}, err
	}
	p.mu.Unlock()
	return p.Fake.Probe(ctx, path)
}

func setup(t *testing.T) (*Manager, *probing, export.Export) {
	t.Helper()
	base := t.TempDir()
	f := &probing{Fake: nfsmounttest.New(base)}
	e, _ := export.New("nfs.example", "/export")
	os.MkdirAll(f.ExportDir(e.Server, e.Share), 0o755)
	m, err := New(filepath.Join(t.TempDir(), "state"), f, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return m, f, e
}

func mounts(f *probing) int {
	n := 0
	for _, a := range f.Actions() {
		if strings.HasPrefix(a, "mount ") {
			n++
		}
	}
	return n
}

func TestGetMountsOnceForConcurrentCallers(t *testing.T) {
	m, f, e := setup(t)
	opts, _ := mountopts.Parse("nfsvers=4.1,ro")
	var wg sync.WaitGroup
	shares := make([]*Share, 16)
	for i := range shares {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s, err := m.Get(context.Background(), e, opts)
			if err != nil {
				t.Error(err)
			}
			shares[i] = s
		}(i)
	}
	wg.Wait()
	if n := mounts(f); n != 1 {
		t.Fatalf("%d mounts for 16 callers: %v", n, f.Actions())
	}
	for _, s := range shares[1:] {
		if s != shares[0] {
			t.Fatal("callers got different shares")
		}
	}
	if strings.Contains(","+shares[0].Options.String()+",", ",ro,") {
		t.Error("the controller's share mount must not be read-only")
	}
	if err := shares[0].Root().WriteFile("probe", []byte("x"), 0o600); err != nil {
		t.Errorf("share root not writable through os.Root: %v", err)
	}
	if m.Count() != 1 {
		t.Errorf("Count = %d", m.Count())
	}
	other, _ := mountopts.Parse("nfsvers=3")
	if _, err := m.Get(context.Background(), e, other); err != nil || mounts(f) != 2 {
		t.Errorf("other options share a mount: %v %v", err, f.Actions())
	}
}

func TestStaleMountIsMountedAgain(t *testing.T) {
	m, f, e := setup(t)
	s1, err := m.Get(context.Background(), e, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := m.Get(context.Background(), e, nil); s != s1 || mounts(f) != 1 {
		t.Fatal("a fresh share was not reused")
	}
	f.failNext(&os.PathError{Op: "statfs", Path: s1.Path, Err: syscall.ESTALE})
	m.Invalidate(s1) // as the controller does after an ESTALE
	s2, err := m.Get(context.Background(), e, nil)
	if err != nil || s2 == s1 || mounts(f) != 2 {
		t.Fatalf("stale share not mounted again: %v %v", err, f.Actions())
	}
	if !strings.Contains(strings.Join(f.Actions(), "\n"), "unmount "+s1.Path) {
		t.Errorf("stale mount not unmounted first: %v", f.Actions())
	}
}

func TestUnreachableServerIsUnavailable(t *testing.T) {
	m, f, e := setup(t)
	s, err := m.Get(context.Background(), e, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.failNext(errors.New("permission problem"))
	m.Invalidate(s)
	if _, err := m.Get(context.Background(), e, nil); !fault.Is(err, fault.Unavailable) {
		t.Errorf("unhealthy share: %v", err)
	}
	f.MountErr[e.String()] = errors.New("mount.nfs: Connection refused")
	m.Close(context.Background())
	if _, err := m.Get(context.Background(), e, nil); !fault.Is(err, fault.Unavailable) || !strings.Contains(err.Error(), "check server") {
		t.Errorf("failed mount: %v", err)
	}
}

// TestMissingSecurityIsTheOperatorsToFix: a share mount refused for a
// missing daemon or a fallback in security stays FailedPrecondition, which
// csi-provisioner does not retry as if the server were away.
func TestMissingSecurityIsTheOperatorsToFix(t *testing.T) {
	m, f, e := setup(t)
	f.MountErr[e.String()] = fault.New(fault.FailedPrecondition, "no tlshd listens for the kernel's TLS handshakes")
	if _, err := m.Get(context.Background(), e, mountopts.Options{"xprtsec=tls"}); !fault.Is(err, fault.FailedPrecondition) || !strings.Contains(err.Error(), "no tlshd") {
		t.Errorf("share mount without tlshd: %v", err)
	}
}

func TestStateDirectoryRemembersExportsAndOptions(t *testing.T) {
	m, _, e := setup(t)
	opts, _ := mountopts.Parse("nfsvers=4.2,sec=sys")
	if _, err := m.Get(context.Background(), e, opts); err != nil {
		t.Fatal(err)
	}
	exps, known := m.Known()
	if len(exps) != 1 || exps[0] != e || known[0].String() != "nfsvers=4.2,sec=sys" {
		t.Errorf("Known = %v %v", exps, known)
	}
	if err := m.RememberOptions("0123456789abcdef", opts); err != nil {
		t.Fatal(err)
	}
	got, err := m.LookupOptions("0123456789abcdef")
	if err != nil || got.String() != opts.String() {
		t.Errorf("LookupOptions = %v %v", got, err)
	}
	if _, err := m.LookupOptions("fedcba9876543210"); !fault.Is(err, fault.FailedPrecondition) {
		t.Errorf("unknown options: %v", err)
	}
	if _, err := m.LookupOptions("../../etc/passwd"); err == nil {
		t.Error("LookupOptions followed a path")
	}
	if err := m.Usable(); err != nil {
		t.Error(err)
	}
}

func TestCloseUnmountsEverything(t *testing.T) {
	m, f, e := setup(t)
	s, _ := m.Get(context.Background(), e, nil)
	m.Close(context.Background())
	if en, _ := f.Mounted(s.Path); en != nil || m.Count() != 0 {
		t.Errorf("still mounted after Close: %v", f.Actions())
	}
}

// TestConcurrentRememberOptionsAllSucceed: creates and listings remember
// the same options at once; none may rename another's file away, and
// nothing temporary is left.
func TestConcurrentRememberOptionsAllSucceed(t *testing.T) {
	m, _, _ := setup(t)
	opts, _ := mountopts.Parse("nfsvers=4.2,sec=sys")
	errs := make(chan error, 32)
	for i := range 32 {
		go func() {
			o := opts
			if i%2 == 1 {
				o, _ = mountopts.Parse("nfsvers=4.1")
			}
			errs <- m.RememberOptions("0123456789abcdef", o)
		}()
	}
	for range 32 {
		if err := <-errs; err != nil {
			t.Errorf("RememberOptions: %v", err)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(m.dir, "options"))
	if len(ents) != 1 {
		t.Errorf("options directory holds %d entries, want 1", len(ents))
	}
}

// On NFSv3 only the claims mount keeps locks: the others go without lockd
// (the controller's pod has no rpc.statd, and mount.nfs would refuse).
func TestOnlyClaimsMountsLockOnNFSv3(t *testing.T) {
	m, f, e := setup(t)
	os.MkdirAll(f.ExportDir(e.Server, e.Share+"/"+ClaimsDir), 0o755)
	opts, _ := mountopts.Parse("nfsvers=3,hard")
	ctx := context.Background()
	for _, get := range []func(context.Context, export.Export, mountopts.Options) (*Share, error){m.Get, m.GetReadOnly, m.GetForPurge, m.GetClaims} {
		if _, err := get(ctx, e, opts); err != nil {
			t.Fatal(err)
		}
	}
	acts := f.Actions()
	if len(acts) != 4 {
		t.Fatalf("mounts: %q", acts)
	}
	for i, a := range acts {
		opts := "," + a[strings.LastIndex(a, " ")+1:] + ","
		if claims := i == 3; strings.Contains(opts, ",nolock,") == claims || !strings.Contains(opts, ",nfsvers=3,") {
			t.Errorf("mount %d: %q (only the claims mount, the last, may lock)", i, a)
		}
	}
}

func TestMountPointsNameTheirShareAndUse(t *testing.T) {
	m, f, e := setup(t)
	os.MkdirAll(f.ExportDir(e.Server, e.Share+"/"+ClaimsDir), 0o755)
	ctx := context.Background()
	want := map[string]string{}
	for use, get := range map[string]func(context.Context, export.Export, mountopts.Options) (*Share, error){
		"main": m.Get, "view": m.GetReadOnly, "purge": m.GetForPurge, "claims": m.GetClaims} {
		s, err := get(ctx, e, mountopts.Options{})
		if err != nil {
			t.Fatal(err)
		}
		want[s.Path] = use
	}
	got := m.MountPoints()
	if len(got) != 4 {
		t.Fatalf("mount points %v, want 4", got)
	}
	for p, use := range want {
		if got[p] != (MountPoint{Share: e, Use: use}) {
			t.Errorf("%s: %+v, want share %s, use %s", p, got[p], e, use)
		}
	}
}
