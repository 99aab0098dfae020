package provision

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/treecopy"
)

// filledClone makes pvc-src and a clone of it whose copy is complete,
// asked for once, not handed out; it returns the share's directory, its
// Area and the clone's record.
func filledClone(t *testing.T) (string, *Area, *Record) {
	t.Helper()
	dir, a, rec := cloneOf(t)
	if !rec.Pending {
		t.Fatalf("a volume made from a source is not Pending: %+v", rec)
	}
	if err := a.Pending().MarkAsked(idOf(rec), rec, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Fills().Fill(context.Background(), idOf(rec), treecopy.Default); err != nil {
		t.Fatal(err)
	}
	now, err := a.Lookup(idOf(rec))
	if err != nil || now == nil || !now.Filling || !now.Copied {
		t.Fatalf("after its fill the clone's record is %+v, %v; want Filling and Copied until handed out", now, err)
	}
	return dir, a, now
}

func marker(dir string, rec *Record) string {
	return filepath.Join(dir, ".nfsdir", "pending", pendingMarker(idOf(rec)))
}

// age makes the clone's marker look untouched for d.
func age(t *testing.T, dir string, rec *Record, d time.Duration) {
	t.Helper()
	then := time.Now().Add(-d)
	if err := os.Chtimes(marker(dir, rec), then, then); err != nil {
		t.Fatal(err)
	}
}

// A clone handed out is an ordinary volume: no longer Filling or Pending,
// its marker gone, and never discarded, however long nobody asks.
func TestHandedOutIsNeverAbandoned(t *testing.T) {
	dir, a, rec := filledClone(t)
	if _, err := os.Lstat(marker(dir, rec)); err != nil {
		t.Fatalf("no marker for a volume asked for: %v", err)
	}
	if err := a.Pending().HandOut(idOf(rec), rec); err != nil {
		t.Fatal(err)
	}
	if rec.Filling || rec.Pending || rec.Copied {
		t.Fatalf("handed out: %+v", rec)
	}
	if _, err := os.Lstat(marker(dir, rec)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the marker outlived the hand-out: %v", err)
	}
	// A marker left behind (its removal failed) changes nothing.
	if err := os.WriteFile(marker(dir, rec), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	age(t, dir, rec, 48*time.Hour)
	gone, err := a.Pending().SweepAbandoned(context.Background(), time.Hour)
	if err != nil || len(gone) != 0 {
		t.Fatalf("SweepAbandoned = %v, %v", gone, err)
	}
	if now, _ := a.Lookup(idOf(rec)); now == nil {
		t.Fatal("a volume handed out was discarded")
	}
	if _, err := os.Stat(filepath.Join(dir, "pvc-clone", "data")); err != nil {
		t.Fatalf("the volume's data: %v", err)
	}
	if _, err := os.Lstat(marker(dir, rec)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stale marker stays: %v", err)
	}
	// A replay of the hand-out is fine.
	if err := a.Pending().HandOut(idOf(rec), rec); err != nil {
		t.Fatal(err)
	}
}

// A clone nobody asked for within the limit (by the server's clock) is
// discarded, record and directory; one asked for recently is not; a late
// hand-out of a discarded one is refused.
func TestAbandonedIsDiscarded(t *testing.T) {
	ctx := context.Background()
	dir, a, rec := filledClone(t)
	age(t, dir, rec, 30*time.Minute)
	if gone, err := a.Pending().SweepAbandoned(ctx, time.Hour); err != nil || len(gone) != 0 {
		t.Fatalf("asked for 30 min ago, swept after an hour: %v, %v", gone, err)
	}
	age(t, dir, rec, 2*time.Hour)
	gone, err := a.Pending().SweepAbandoned(ctx, time.Hour)
	if err != nil || len(gone) != 1 || gone[0].Key != rec.Key() || gone[0].Token != rec.Token {
		t.Fatalf("SweepAbandoned = %v, %v; want the clone", gone, err)
	}
	if now, _ := a.Lookup(idOf(rec)); now != nil {
		t.Fatalf("the abandoned clone's record stays: %+v", now)
	}
	if _, err := os.Lstat(filepath.Join(dir, "pvc-clone")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the abandoned clone's directory stays: %v", err)
	}
	if _, err := os.Lstat(marker(dir, rec)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the marker stays: %v", err)
	}
	if err := a.Pending().HandOut(idOf(rec), rec); !errors.Is(err, ErrGone) {
		t.Fatalf("HandOut of a discarded volume = %v, want ErrGone", err)
	}
	// Its source is untouched.
	if b, err := os.ReadFile(filepath.Join(dir, "pvc-src", "data")); err != nil || string(b) != "source" {
		t.Fatalf("the source: %q, %v", b, err)
	}
}

// A volume being discarded is never handed out.
func TestHandOutOfAnAbandonedIsAborted(t *testing.T) {
	_, a, rec := filledClone(t)
	if _, err := updateRecordIf(a.records(), rec.Key(), rec.Token, func(r *Record) error { r.Abandoned = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := a.Pending().HandOut(idOf(rec), rec); !fault.Is(err, fault.Aborted) {
		t.Fatalf("HandOut = %v, want Aborted", err)
	}
	if _, err := a.Fills().Fill(context.Background(), idOf(rec), treecopy.Default); err != nil {
		t.Fatalf("Fill of a complete one = %v", err)
	}
}

// A record an older nfsdir rewrote (no Pending: it may have handed the
// volume out) is never discarded, whatever its marker says.
func TestOlderRecordsAreNeverAbandoned(t *testing.T) {
	dir, a, rec := filledClone(t)
	if _, err := updateRecordIf(a.records(), rec.Key(), rec.Token, func(r *Record) error { r.Pending = false; return nil }); err != nil {
		t.Fatal(err)
	}
	age(t, dir, rec, 48*time.Hour)
	if gone, err := a.Pending().SweepAbandoned(context.Background(), time.Hour); err != nil || len(gone) != 0 {
		t.Fatalf("SweepAbandoned = %v, %v", gone, err)
	}
	if now, _ := a.Lookup(idOf(rec)); now == nil {
		t.Fatal("an older nfsdir's volume was discarded")
	}
	if _, err := os.Lstat(marker(dir, rec)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("its marker stays: %v", err)
	}
}
