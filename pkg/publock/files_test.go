package publock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func files(t *testing.T) (a, b Files, dir string) {
	dir = t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return Files{Root: root, Node: "node-a", Lapse: time.Minute}, Files{Root: root, Node: "node-b", Lapse: time.Minute}, dir
}

func age(t *testing.T, p string, by time.Duration) {
	old := time.Now().Add(-by)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
}

func TestOneNodeHoldsAClaim(t *testing.T) {
	ctx := context.Background()
	a, b, dir := files(t)
	n := Name("team/data")
	if took, err := a.Take(ctx, n, "vol-1"); err != nil || took != "" {
		t.Fatalf("a takes: %q %v", took, err)
	}
	if _, err := a.Take(ctx, n, "vol-1"); err != nil {
		t.Fatalf("a takes again: %v", err)
	}
	var held *HeldError
	if _, err := b.Take(ctx, n, "vol-1"); !errors.As(err, &held) || held.Claim.Node != "node-a" || held.Claim.Volume != "vol-1" {
		t.Fatalf("b takes a's live claim: %v", err)
	}
	if err := b.Drop(ctx, n); err != nil {
		t.Fatal(err)
	}
	if err := b.Renew(ctx, n, "vol-1"); !errors.As(err, &held) {
		t.Fatalf("b renews a's claim: %v", err)
	}
	if _, err := b.Take(ctx, n, "vol-1"); !errors.As(err, &held) {
		t.Fatalf("b's drop freed a's claim: %v", err)
	}
	if err := a.Drop(ctx, n); err != nil {
		t.Fatal(err)
	}
	if took, err := b.Take(ctx, n, "vol-1"); err != nil || took != "" {
		t.Fatalf("b takes the dropped claim: %q %v", took, err)
	}
	if err := b.Drop(ctx, "v-nothing"); err != nil {
		t.Fatalf("drop of no claim: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "v-nothing")); !os.IsNotExist(err) {
		t.Fatalf("drop made a claim file: %v", err)
	}
}

func TestALapsedClaimIsTakenOver(t *testing.T) {
	ctx := context.Background()
	a, b, dir := files(t)
	n := Name("x")
	if _, err := a.Take(ctx, n, "vol-x"); err != nil {
		t.Fatal(err)
	}
	age(t, filepath.Join(dir, n), 59*time.Second)
	if _, err := b.Take(ctx, n, "vol-x"); err == nil {
		t.Fatal("b took a claim renewed 59 s ago")
	}
	if err := a.Renew(ctx, n, "vol-x"); err != nil {
		t.Fatal(err)
	}
	age(t, filepath.Join(dir, n), 61*time.Second)
	if took, err := b.Take(ctx, n, "vol-x"); err != nil || took != "node-a" {
		t.Fatalf("b takes the lapsed claim: %q %v", took, err)
	}
	var held *HeldError
	if err := a.Renew(ctx, n, "vol-x"); !errors.As(err, &held) || held.Claim.Node != "node-b" {
		t.Fatalf("a renews the claim b took over: %v", err)
	}
}

func TestALockedClaimWaitsForItsLock(t *testing.T) {
	a, b, dir := files(t)
	n := Name("y")
	f, err := os.OpenFile(filepath.Join(dir, n), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := a.Take(ctx, n, "v"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("take of a locked claim: %v", err)
	}
	go func() { time.Sleep(100 * time.Millisecond); f.Close() }()
	if _, err := b.Take(context.Background(), n, "v"); err != nil {
		t.Fatalf("take once the lock is gone: %v", err)
	}
}

func TestAnUnreadableClaimIsTaken(t *testing.T) {
	a, _, dir := files(t)
	n := Name("z")
	if err := os.WriteFile(filepath.Join(dir, n), []byte(`{"node":"node-b","vol`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Take(context.Background(), n, "v"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, n))
	if c, err := Parse(b); err != nil || c.Node != "node-a" {
		t.Fatalf("claim %q %v", b, err)
	}
}
