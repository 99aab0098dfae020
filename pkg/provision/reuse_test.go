package provision

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/gidrange"
	"github.com/nfsdir/nfsdir/pkg/params"
)

// claimReq is a volume of claim team/data made in cluster c1, in the
// directory the class's template gives that claim.
func claimReq(name string) Request {
	q := req(name, "team/data", params.Delete)
	q.Claim, q.Cluster = "team/data", "c1"
	return q
}

// reusing is q with reuseDirectory on, the earlier volume found gone;
// asked collects the earlier volumes Reuse was asked about.
func reusing(q Request, asked *[]string) Request {
	q.Reuse = func(_ context.Context, earlier *Record) error {
		*asked = append(*asked, earlier.Name)
		return nil
	}
	return q
}

// TestReuseTakesOverTheClaimsDirectory: a new volume of the same claim and
// cluster gets the earlier volume's directory with its data, under the
// same token; a retry gets the same; without reuseDirectory it is refused
// as before.
func TestReuseTakesOverTheClaimsDirectory(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	old, err := a.Create(ctx, claimReq("pvc-old"))
	if err != nil {
		t.Fatal(err)
	}
	if old.Claim != "team/data" || old.Cluster != "c1" {
		t.Fatalf("record names claim %q cluster %q", old.Claim, old.Cluster)
	}
	if err := os.WriteFile(filepath.Join(dir, "team/data/kept"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(ctx, claimReq("pvc-new")); !fault.Is(err, fault.AlreadyExists) {
		t.Fatalf("without reuseDirectory: %v, want AlreadyExists", err)
	}
	var asked []string
	q := reusing(claimReq("pvc-new"), &asked)
	q.CapacityBytes = 2 * old.CapacityBytes
	rec, err := a.Create(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Name != "pvc-new" || rec.Previous != "pvc-old" || rec.Token != old.Token || rec.FileID != old.FileID || rec.CapacityBytes != q.CapacityBytes {
		t.Fatalf("taken over: %+v", rec)
	}
	if strings.Join(asked, ",") != "pvc-old" {
		t.Fatalf("Reuse asked about %v, want pvc-old", asked)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "team/data/kept")); err != nil || string(b) != "data" {
		t.Fatalf("the data: %q, %v", b, err)
	}
	again, err := a.Create(ctx, q)
	if err != nil || again.Name != "pvc-new" || again.Token != rec.Token {
		t.Fatalf("retry: %+v, %v", again, err)
	}
	if len(asked) != 1 {
		t.Errorf("a retry asked Reuse again: %v", asked)
	}
	found, err := a.Lookup(idOf(rec))
	if err != nil || found == nil || found.Name != "pvc-new" {
		t.Fatalf("Lookup: %+v, %v", found, err)
	}
}

// TestReuseRefusals: the directory is not taken over, and its record not
// changed, when the record shows another claim or cluster, no claim, a
// volume still in use, other settings, or a directory that is not the
// sealed one; each is FailedPrecondition saying what was found.
func TestReuseRefusals(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	old, err := a.Create(ctx, claimReq("pvc-old"))
	if err != nil {
		t.Fatal(err)
	}
	noClaim := req("pvc-legacy", "team/legacy", params.Delete)
	if _, err := a.Create(ctx, noClaim); err != nil {
		t.Fatal(err)
	}
	var asked []string
	cases := map[string]func(*Request){
		"made for claim team/data":                       func(q *Request) { q.Claim = "other/data" },
		`made in cluster "c1", and this is cluster "c2"`: func(q *Request) { q.Cluster = "c2" },
		"does not know its cluster's identity":           func(q *Request) { q.Cluster = "" },
		"mode 2770 uid -1 gid -1":                        func(q *Request) { q.Mode = 0o750 },
		"still used by a PersistentVolume": func(q *Request) {
			q.Reuse = func(context.Context, *Record) error {
				return fault.New(fault.FailedPrecondition, "still used by a PersistentVolume")
			}
		},
		"does not name the claim it was made for": func(q *Request) { q.SubDir = "team/legacy" },
	}
	for want, change := range cases {
		q := reusing(claimReq("pvc-new"), &asked)
		change(&q)
		_, err := a.Create(ctx, q)
		if !fault.Is(err, fault.FailedPrecondition) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", want, err)
		}
	}
	if rec, err := a.Lookup(idOf(old)); err != nil || rec == nil || rec.Name != "pvc-old" || rec.Previous != "" {
		t.Errorf("the refused takeovers changed the record: %+v, %v", rec, err)
	}
	// A directory put in the sealed one's place is not the volume's.
	if err := os.Rename(filepath.Join(dir, "team/data"), filepath.Join(dir, "team/moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "team/data"), 0o2770); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(ctx, reusing(claimReq("pvc-new"), &asked)); err == nil || !strings.Contains(err.Error(), "not the one nfsdir created") {
		t.Errorf("replaced directory: %v", err)
	}
	os.Remove(filepath.Join(dir, "team/data"))
	if _, err := a.Create(ctx, reusing(claimReq("pvc-new"), &asked)); !fault.Is(err, fault.FailedPrecondition) || !strings.Contains(err.Error(), "is gone") {
		t.Errorf("directory gone: %v", err)
	}
	if len(asked) != 0 {
		t.Errorf("Reuse asked about %v for refused takeovers", asked)
	}
}

// TestReuseConcurrentTakeovers: the same takeover from two controllers
// at once ends with one record under the new name; a call that loses the
// race is Aborted or sees the takeover done.
func TestReuseConcurrentTakeovers(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	if _, err := a.Create(ctx, claimReq("pvc-old")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	b, err := OpenArea(root, true)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var mu sync.Mutex
	var asked []string
	q := claimReq("pvc-new")
	q.Reuse = func(context.Context, *Record) error {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, "x")
		return nil
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			area := a
			if i%2 == 1 {
				area = b
			}
			_, errs[i] = area.Create(ctx, q)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !fault.Is(err, fault.Aborted) {
			t.Errorf("concurrent takeover: %v", err)
		}
	}
	rec, err := a.Create(ctx, q)
	if err != nil || rec.Name != "pvc-new" || rec.Previous != "pvc-old" {
		t.Fatalf("after the race: %+v, %v", rec, err)
	}
}

// TestReuseKeepsTheRangeGID: a volume of a GID-range class taken over
// keeps its GID and its claim of it; the GID the new volume claimed on
// its way is given back.
func TestReuseKeepsTheRangeGID(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	r := gidrange.Range{Start: 9000, End: 9003}
	q := claimReq("pvc-old")
	q.Mode, q.GIDRange = 0o770, r
	old, err := a.Create(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	q2 := reusing(q, &asked)
	q2.Name = "pvc-new"
	rec, err := a.Create(ctx, q2)
	if err != nil || rec.GID != old.GID || !rec.GIDFromRange {
		t.Fatalf("taken over: %+v, %v (GID was %d)", rec, err, old.GID)
	}
	claims, err := os.ReadDir(filepath.Join(dir, ".nfsdir", gidsName))
	if err != nil || len(claims) != 1 || claims[0].Name() != strconv.Itoa(old.GID) {
		t.Fatalf("GID claims after the takeover: %v, %v", claims, err)
	}
	if _, err := a.Delete(ctx, idOf(rec)); err != nil {
		t.Fatal(err)
	}
	if claims, _ := os.ReadDir(filepath.Join(dir, ".nfsdir", gidsName)); len(claims) != 0 {
		t.Errorf("the GID stays claimed after the volume's deletion: %v", claims)
	}
	if _, err := os.Stat(filepath.Join(dir, "team/data")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("deleted volume's directory: %v", err)
	}
}

// TestReuseTakesOverAnAdoptedDirectory: a directory `nfsdir adopt` or
// `nfsdir migrate` handed over with its claim and cluster is taken over
// by a new volume of that claim, whatever owner and mode the directory
// has; one adopted without them is refused.
func TestReuseTakesOverAnAdoptedDirectory(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	for _, sub := range []string{"team/data", "team/bare"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Adoptions().Adopt(Request{Name: "pvc-migrated", SubDir: "team/data", OnDelete: params.Retain, Claim: "team/data", Cluster: "c1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Adoptions().Adopt(Request{Name: "adopted-bare", SubDir: "team/bare", OnDelete: params.Retain}); err != nil {
		t.Fatal(err)
	}
	var asked []string
	rec, err := a.Create(ctx, reusing(claimReq("pvc-new"), &asked))
	if err != nil || rec.Name != "pvc-new" || rec.Previous != "pvc-migrated" || !rec.Adopted || rec.Mode != 0o755 {
		t.Fatalf("adopted directory taken over: %+v, %v", rec, err)
	}
	bare := reusing(claimReq("pvc-bare"), &asked)
	bare.SubDir = "team/bare"
	if _, err := a.Create(ctx, bare); !fault.Is(err, fault.FailedPrecondition) || !strings.Contains(err.Error(), "nfsdir adopt --claim team/data") {
		t.Errorf("adopted without a claim: %v", err)
	}
}
