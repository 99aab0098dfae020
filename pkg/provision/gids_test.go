package provision

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/gidrange"
	"github.com/nfsdir/nfsdir/pkg/params"
)

func rangeReq(name string, r gidrange.Range) Request {
	q := req(name, name, params.Delete)
	q.Mode, q.GIDRange = 0o770, r
	return q
}

// TestGIDRange: volumes of a class with a GID range each get a GID of it
// that no other live volume holds, as their directory's group with the
// setgid bit; a retry gets the same; a full range is ResourceExhausted;
// a deleted volume's GID is free again; a claim a crash left behind with
// no record is taken back once it is older than AbandonedAfter.
func TestGIDRange(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	r := gidrange.Range{Start: 7000, End: 7002}
	gids := map[int]string{}
	var recs []*Record
	for i := 0; i < 3; i++ {
		name := "pvc-g" + strconv.Itoa(i)
		rec, err := a.Create(ctx, rangeReq(name, r))
		if err != nil {
			t.Fatal(err)
		}
		if !r.Contains(rec.GID) || gids[rec.GID] != "" || !rec.GIDFromRange {
			t.Fatalf("%s got GID %d (taken by %q)", name, rec.GID, gids[rec.GID])
		}
		gids[rec.GID] = name
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || int(st.Sys().(*syscall.Stat_t).Gid) != rec.GID || st.Mode()&os.ModeSetgid == 0 || st.Mode().Perm() != 0o770 {
			t.Errorf("%s's directory: %v, gid %d, mode %v", name, err, st.Sys().(*syscall.Stat_t).Gid, st.Mode())
		}
		again, err := a.Create(ctx, rangeReq(name, r))
		if err != nil || again.GID != rec.GID {
			t.Errorf("retry of %s: GID %d, %v", name, again.GID, err)
		}
		recs = append(recs, rec)
	}
	if _, err := a.Create(ctx, rangeReq("pvc-g3", r)); !fault.Is(err, fault.ResourceExhausted) {
		t.Fatalf("a fourth volume in a range of three: %v, want ResourceExhausted", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "pvc-g3")); err == nil {
		t.Error("a refused volume left its directory")
	}
	if _, err := a.Delete(ctx, idOf(recs[1])); err != nil {
		t.Fatal(err)
	}
	rec, err := a.Create(ctx, rangeReq("pvc-g3", r))
	if err != nil || rec.GID != recs[1].GID {
		t.Fatalf("after a delete: GID %v, %v; want %d", rec, err, recs[1].GID)
	}

	// A claim whose creation was cut short (no record holds it).
	if _, err := a.Delete(ctx, idOf(rec)); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, ".nfsdir/gids", strconv.Itoa(recs[1].GID))
	if err := os.WriteFile(stale, []byte(claimText("nokey", "notoken", "pvc-crashed")), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(ctx, rangeReq("pvc-g4", r)); !fault.Is(err, fault.ResourceExhausted) {
		t.Errorf("a fresh claim without a record was taken back: %v", err)
	}
	old := time.Now().Add(-2 * AbandonedAfter)
	os.Chtimes(stale, old, old)
	if rec, err := a.Create(ctx, rangeReq("pvc-g4", r)); err != nil || rec.GID != recs[1].GID {
		t.Errorf("an abandoned claim: %v, %v", rec, err)
	}
}

// TestGIDRangeConcurrentCreates: volumes created at once, through two
// Areas of the same share (two controllers), never get the same GID.
func TestGIDRangeConcurrentCreates(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenArea(root, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := gidrange.Range{Start: 100, End: 139}
	var mu sync.Mutex
	got := map[int]string{}
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			area := a
			if i%2 == 1 {
				area = b
			}
			name := "pvc-c" + strconv.Itoa(i)
			rec, err := area.Create(ctx, rangeReq(name, r))
			for err != nil && fault.Is(err, fault.Aborted) {
				rec, err = area.Create(ctx, rangeReq(name, r))
			}
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if other, ok := got[rec.GID]; ok {
				t.Errorf("%s and %s both got GID %d", name, other, rec.GID)
			}
			got[rec.GID] = name
		}(i)
	}
	wg.Wait()
	if len(got) != 40 {
		t.Errorf("%d GIDs for 40 volumes", len(got))
	}
}

// oldAgent makes volumes as an agent without GID ranges would: through
// its own Area, with the range dropped from the request.
type oldAgent struct {
	agentOn
	area *Area
}

func (g *oldAgent) MakeVolume(ctx context.Context, endpoint string, m RemoteMake) (*Record, error) {
	m.Request.GIDRange, m.Request.CopyAgent = gidrange.Range{}, ""
	return g.area.Create(ctx, m.Request)
}

func (g *oldAgent) RemoveVolume(ctx context.Context, endpoint string, r RemoteRemove) (RemoteRemoved, error) {
	return RemoteRemoved{}, nil
}

// TestGIDRangeThroughAnOldAgent: a volume an agent made without the GID
// its class's range asks for is FailedPrecondition, never handed out.
func TestGIDRangeThroughAnOldAgent(t *testing.T) {
	dir, a := newShare(t)
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	server, err := OpenArea(root, false)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	a.Agents().Use(&oldAgent{agentOn: agentOn{t: t, dir: dir}, area: server}, "/e")
	q := rangeReq("pvc-old-agent", gidrange.Range{Start: 10, End: 20})
	q.CopyAgent = "agent:1"
	if _, err := a.Create(context.Background(), q); !fault.Is(err, fault.FailedPrecondition) {
		t.Errorf("a volume made without its GID: %v, want FailedPrecondition", err)
	}
}
