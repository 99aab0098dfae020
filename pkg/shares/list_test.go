package shares

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/provision"
)

// TestListPagesAcrossSharesByPosition: volumes of two exports are listed
// each once, in pages of 2, and a page token stays valid when the volume
// it points after is deleted; a made-up token is Aborted.
func TestListPagesAcrossSharesByPosition(t *testing.T) {
	s, f, e, _ := setup(t, 0)
	e2, _ := export.New("nfs.example", "/other")
	os.MkdirAll(f.ExportDir(e2.Server, e2.Share), 0o755)
	opts := mountopts.Options{"nfsvers=4.1"}
	want := map[string]bool{}
	for i := range 5 {
		want[create(t, s, e, opts, fmt.Sprint("a-", i)).String()] = true
		want[create(t, s, e2, opts, fmt.Sprint("b-", i)).String()] = true
	}
	ctx := context.Background()
	got := map[string]int{}
	token := ""
	for pages := 0; ; pages++ {
		vols, next, err := s.List(ctx, token, 2, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(vols) > 2 || pages > 10 {
			t.Fatalf("page %d: %d volumes", pages, len(vols))
		}
		for _, v := range vols {
			got[v.ID.String()]++
		}
		if pages == 1 { // delete the volume the token points after
			last := vols[len(vols)-1].ID
			if err := s.OnVolume(ctx, last, func(a *provision.Area, _ *Share) error { _, err := a.Delete(ctx, last); return err }); err != nil {
				t.Fatal(err)
			}
		}
		if next == "" {
			break
		}
		token = next
	}
	for id := range want {
		if got[id] != 1 {
			t.Errorf("%s listed %d times", id, got[id])
		}
	}
	if len(got) != len(want) {
		t.Errorf("listed %d volumes, want %d", len(got), len(want))
	}
	if _, _, err := s.List(ctx, "made-up", 2, false); !fault.Is(err, fault.Aborted) {
		t.Errorf("List with a made-up token: %v", err)
	}
}

// TestListPagesOfEverySize: whatever the page size, a page that fills up
// exactly at the end of one share hands out a token that resumes at the
// start of the next, and every volume is listed once.
func TestListPagesOfEverySize(t *testing.T) {
	s, f, e, _ := setup(t, 0)
	e2, _ := export.New("nfs.example", "/other")
	os.MkdirAll(f.ExportDir(e2.Server, e2.Share), 0o755)
	opts := mountopts.Options{"nfsvers=4.1"}
	for i := range 4 {
		create(t, s, e, opts, fmt.Sprint("a-", i))
		create(t, s, e2, opts, fmt.Sprint("b-", i))
	}
	for size := 1; size <= 9; size++ {
		got := map[string]int{}
		token := ""
		for pages := 0; pages < 20; pages++ {
			vols, next, err := s.List(context.Background(), token, size, false)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range vols {
				got[v.ID.String()]++
			}
			if token = next; token == "" {
				break
			}
		}
		if len(got) != 8 {
			t.Errorf("pages of %d: listed %d volumes, want 8", size, len(got))
		}
		for id, n := range got {
			if n != 1 {
				t.Errorf("pages of %d: %s listed %d times", size, id, n)
			}
		}
	}
}

// TestListBackToBackNeverLeavesAShareOut: a listing that follows the one
// before at once lists every volume: the mark that keeps a second listing
// off a share whose server hangs is gone by the time a listing returns.
func TestListBackToBackNeverLeavesAShareOut(t *testing.T) {
	s, _, e, _ := setup(t, 0)
	opts := mountopts.Options{"nfsvers=4.1"}
	for i := range 3 {
		create(t, s, e, opts, fmt.Sprint("a-", i))
	}
	ctx := context.Background()
	for i := range 3000 {
		vols, _, err := s.List(ctx, "", 0, false)
		if err != nil || len(vols) != 3 {
			t.Fatalf("listing %d: %d volumes, %v", i, len(vols), err)
		}
	}
}

// TestListOneBadVolumeHidesNoOther: a record nobody can read (garbage, or
// a later format) is left out of a listing and the rest of the share is
// listed; a volume whose parent directory became a file is listed with its
// directory missing.
func TestListOneBadVolumeHidesNoOther(t *testing.T) {
	s, f, e, _ := setup(t, 0)
	opts := mountopts.Options{"nfsvers=4.1"}
	good := create(t, s, e, opts, "a-good")
	gone := create(t, s, e, opts, "b-parent/vol")
	root := f.ExportDir(e.Server, e.Share)
	if err := os.Symlink("{not json", filepath.Join(root, ".nfsdir/volumes/zzzzzzzzzzzzzzzzzzzz")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(root, "b-parent"), filepath.Join(root, "b-moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "b-parent"), []byte("a file"), 0o644); err != nil {
		t.Fatal(err)
	}
	vols, _, err := s.List(context.Background(), "", 0, true)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, v := range vols {
		got[v.ID.String()] = fmt.Sprint(v.Problems)
	}
	if len(got) != 2 || got[good.String()] != "[]" || !strings.Contains(got[gone.String()], "DirectoryMissing") {
		t.Errorf("listed %v", got)
	}
}

// TestListReadsRecordsAtOnceInKeyOrder: with more volumes than a listing
// reads at once (listInFlight), a listing in one page and one in pages of
// every size from 1 to listInFlight+3 give the same volumes in the same
// order, by record key, each once.
func TestListReadsRecordsAtOnceInKeyOrder(t *testing.T) {
	s, _, e, _ := setup(t, 0)
	opts := mountopts.Options{"nfsvers=4.1"}
	n := 2*listInFlight + 5
	for i := range n {
		create(t, s, e, opts, fmt.Sprint("v-", i))
	}
	all, next, err := s.List(context.Background(), "", 0, false)
	if err != nil || next != "" || len(all) != n {
		t.Fatalf("one page: %d volumes, next %q, %v; want %d", len(all), next, err, n)
	}
	for i := 1; i < len(all); i++ {
		if all[i-1].ID.Key >= all[i].ID.Key {
			t.Fatalf("one page: %s before %s, not in key order", all[i-1].ID.Key, all[i].ID.Key)
		}
	}
	for size := 1; size <= listInFlight+3; size++ {
		var got []string
		token := ""
		for pages := 0; pages <= n; pages++ {
			vols, next, err := s.List(context.Background(), token, size, false)
			if err != nil {
				t.Fatal(err)
			}
			if len(vols) > size {
				t.Fatalf("pages of %d: a page of %d", size, len(vols))
			}
			for _, v := range vols {
				got = append(got, v.ID.String())
			}
			if token = next; token == "" {
				break
			}
		}
		if len(got) != n {
			t.Fatalf("pages of %d: %d volumes, want %d", size, len(got), n)
		}
		for i, id := range got {
			if id != all[i].ID.String() {
				t.Fatalf("pages of %d: volume %d is %s, the one-page listing's %s", size, i, id, all[i].ID.String())
			}
		}
	}
}
