package csiserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/shares"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// claimsDir is one share's claims directory on the local disk.
type claimsDir struct{ root *os.Root }

func (d claimsDir) Claims(_ context.Context, _ volumeid.ID, fn func(*os.Root) error) error {
	if d.root == nil {
		return shares.ErrNoClaims
	}
	return fn(d.root)
}

// mountTable is what the fake nodes have mounted.
type mountTable struct {
	mu sync.Mutex
	m  map[string]bool
}

func (t *mountTable) set(target string, on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]bool{}
	}
	t.m[target] = on
}

func (t *mountTable) mounted(target string) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[target], nil
}

func testVolumeID(t *testing.T) string {
	t.Helper()
	e, err := export.New("192.0.2.1", "/share")
	if err != nil {
		t.Fatal(err)
	}
	return volumeid.ID{Export: e, Key: "abcdefghijklmnopqrst", Token: "abcdefgh"}.String()
}

func newClaims(t *testing.T, dir claimsOn, node, file string, mt *mountTable) *nodeClaims {
	c := &nodeClaims{views: dir, node: node, lapse: time.Minute, file: file, mounted: mt.mounted}
	c.restore()
	return c
}

func wantCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if got := status.Code(toStatus(err)); got != code {
		t.Fatalf("%s: %v (%s), want %s", what, err, got, code)
	}
}

func TestClaimsKeepAVolumeOnOneNode(t *testing.T) {
	ctx := context.Background()
	root, err := os.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	dir := claimsDir{root}
	state := t.TempDir()
	mt := &mountTable{}
	a := newClaims(t, dir, "node-a", filepath.Join(state, "a.json"), mt)
	b := newClaims(t, dir, "node-b", filepath.Join(state, "b.json"), &mountTable{})
	vol := testVolumeID(t)

	wantCode(t, "a takes", a.take(ctx, vol, "team/data", "/t/a1"), codes.OK)
	wantCode(t, "a takes for a second target", a.take(ctx, vol, "team/data", "/t/a2"), codes.OK)
	wantCode(t, "b takes", b.take(ctx, vol, "team/data", "/t/b"), codes.FailedPrecondition)
	wantCode(t, "b takes the same directory spelled otherwise", b.take(ctx, vol, "/team//data/", "/t/b"), codes.FailedPrecondition)
	mt.set("/t/a1", true)
	mt.set("/t/a2", true)

	// Restarted: the claims file gives the claims back, renewed while
	// their targets stay mounted.
	a = newClaims(t, dir, "node-a", filepath.Join(state, "a.json"), mt)
	if a.count() != 1 {
		t.Fatalf("a holds %d claims after the restart", a.count())
	}
	a.renew(ctx)
	wantCode(t, "b takes after a's restart", b.take(ctx, vol, "team/data", "/t/b"), codes.FailedPrecondition)

	a.release(ctx, vol, "/t/a1")
	wantCode(t, "b takes while a keeps a target", b.take(ctx, vol, "team/data", "/t/b"), codes.FailedPrecondition)
	// The other target went away without an unpublish (kubelet cleaned
	// up): the next renewal drops the claim.
	mt.set("/t/a2", false)
	a.renew(ctx)
	if a.count() != 0 {
		t.Fatalf("a still holds %d claims", a.count())
	}
	wantCode(t, "b takes once a's mounts are gone", b.take(ctx, vol, "team/data", "/t/b"), codes.OK)
	wantCode(t, "a takes b's claim", a.take(ctx, vol, "team/data", "/t/a1"), codes.FailedPrecondition)
	if a.count() != 0 {
		t.Fatal("a refused claim is held")
	}
}

func TestClaimsWithoutAClaimsDirectoryAreNotEnforced(t *testing.T) {
	c := newClaims(t, claimsDir{}, "node-a", filepath.Join(t.TempDir(), "a.json"), &mountTable{})
	vol := testVolumeID(t)
	wantCode(t, "take without a claims directory", c.take(context.Background(), vol, "x", "/t"), codes.OK)
	wantCode(t, "take of a volume without an nfsdir ID", c.take(context.Background(), "static-volume", "x", "/t"), codes.OK)
}

func TestConcurrentPublishesOfOneVolumeOnOneNode(t *testing.T) {
	root, err := os.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	c := newClaims(t, claimsDir{root}, "node-a", filepath.Join(t.TempDir(), "a.json"), &mountTable{})
	vol := testVolumeID(t)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			target := filepath.Join("/t", string(rune('a'+i)))
			for {
				err := c.take(context.Background(), vol, "x", target)
				if status.Code(toStatus(err)) == codes.Aborted {
					continue // one claim operation at a time; kubelet retries
				}
				if err != nil {
					t.Error(err)
				}
				return
			}
		}()
	}
	wg.Wait()
	c.mu.Lock()
	n := len(c.held[vol].Targets)
	c.mu.Unlock()
	if n != 8 {
		t.Fatalf("%d targets held, want 8", n)
	}
}

// hungDir is a share whose server stopped answering: every claim
// operation blocks until release is closed, whatever its context says.
type hungDir struct{ release chan struct{} }

func (d hungDir) Claims(context.Context, volumeid.ID, func(*os.Root) error) error {
	<-d.release
	return nil
}

func TestClaimOnAHungServerIsBounded(t *testing.T) {
	old := claimTimeout
	claimTimeout = 200 * time.Millisecond
	defer func() { claimTimeout = old }()
	d := hungDir{release: make(chan struct{})}
	c := newClaims(t, d, "node-a", filepath.Join(t.TempDir(), "a.json"), &mountTable{})
	vol := testVolumeID(t)
	began := time.Now()
	wantCode(t, "take on a hung server", c.take(context.Background(), vol, "x", "/t"), codes.Unavailable)
	if d := time.Since(began); d > 2*time.Second {
		t.Fatalf("take on a hung server took %s", d)
	}
	wantCode(t, "take while the first is stuck", c.take(context.Background(), vol, "x", "/t"), codes.Aborted)
	close(d.release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := c.take(context.Background(), vol, "x", "/t")
		if err == nil {
			break
		}
		if status.Code(toStatus(err)) != codes.Aborted || time.Now().After(deadline) {
			t.Fatalf("take once the server answers: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRenewalLeavesAPublishInProgressAlone: a renewal that runs between
// the claim and the mount (the target not in the mount table yet) keeps
// the claim; once the target was mounted and is gone, it drops it.
func TestRenewalLeavesAPublishInProgressAlone(t *testing.T) {
	ctx := context.Background()
	root, err := os.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	mt := &mountTable{}
	a := newClaims(t, claimsDir{root}, "node-a", filepath.Join(t.TempDir(), "a.json"), mt)
	b := newClaims(t, claimsDir{root}, "node-b", filepath.Join(t.TempDir(), "b.json"), &mountTable{})
	vol := testVolumeID(t)
	wantCode(t, "a takes", a.take(ctx, vol, "x", "/t/a"), codes.OK)
	a.renew(ctx) // the mount is still being made
	wantCode(t, "b takes during a's publish", b.take(ctx, vol, "x", "/t/b"), codes.FailedPrecondition)
	mt.set("/t/a", true)
	a.published(vol, "/t/a")
	a.renew(ctx)
	wantCode(t, "b takes while a has it mounted", b.take(ctx, vol, "x", "/t/b"), codes.FailedPrecondition)
	mt.set("/t/a", false)
	a.renew(ctx)
	wantCode(t, "b takes once a's mount is gone", b.take(ctx, vol, "x", "/t/b"), codes.OK)
}

// gatedDir is a claims directory whose next operation, once armed, waits
// at the gate: it tells when it got there, then waits to be let on.
type gatedDir struct {
	claimsDir
	mu      sync.Mutex
	arrived chan struct{} // closed when the armed operation reaches the gate
	open    chan struct{} // closed to let it on
}

func (d *gatedDir) arm() (arrived, open chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.arrived, d.open = make(chan struct{}), make(chan struct{})
	return d.arrived, d.open
}

func (d *gatedDir) Claims(ctx context.Context, id volumeid.ID, fn func(*os.Root) error) error {
	d.mu.Lock()
	arrived, open := d.arrived, d.open
	d.arrived, d.open = nil, nil
	d.mu.Unlock()
	if arrived != nil {
		close(arrived)
		<-open
	}
	return d.claimsDir.Claims(ctx, id, fn)
}

// TestUnpublishDuringARenewalFreesTheClaim: the lab's two-node test once
// found a claim still on the server after the last unpublish. A renewal
// that had decided to renew (its target still mounted) was on its way to
// the server when the unpublish dropped the claim: the drop gave up on the
// busy volume, or went first and the renewal took the free claim again.
// Either way the other node was refused the volume until the claim lapsed.
func TestUnpublishDuringARenewalFreesTheClaim(t *testing.T) {
	for _, dropFirst := range []bool{false, true} {
		ctx := context.Background()
		root, err := os.OpenRoot(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		dir := &gatedDir{claimsDir: claimsDir{root}}
		mt := &mountTable{}
		a := newClaims(t, dir, "node-a", filepath.Join(t.TempDir(), "a.json"), mt)
		b := newClaims(t, claimsDir{root}, "node-b", filepath.Join(t.TempDir(), "b.json"), &mountTable{})
		vol := testVolumeID(t)
		wantCode(t, "a takes", a.take(ctx, vol, "x", "/t/a"), codes.OK)
		mt.set("/t/a", true)
		a.published(vol, "/t/a")

		arrived, open := dir.arm()
		renewed := make(chan struct{})
		go func() { defer close(renewed); a.renewOne(ctx, vol) }()
		<-arrived // the renewal is on its way to the server
		mt.set("/t/a", false)
		released := make(chan struct{})
		if dropFirst {
			// The renewal's operation reaches the server only after the
			// drop: its in-flight mark taken off, as when its own wait
			// ran out.
			a.inflight.Release(vol)
			a.release(ctx, vol, "/t/a")
			close(released)
			a.inflight.TryAcquire(vol)
		} else {
			go func() { defer close(released); a.release(ctx, vol, "/t/a") }()
			// The unpublish either gives up on the busy volume at
			// once, or waits for the renewal: let it do either first.
			select {
			case <-released:
			case <-time.After(300 * time.Millisecond):
			}
		}
		close(open)
		<-renewed
		<-released
		wantCode(t, fmt.Sprintf("b takes after a's last unpublish (drop first: %v)", dropFirst), b.take(ctx, vol, "x", "/t/b"), codes.OK)
	}
}
