package exportfile

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/pkg/export"
)

// TestWatchFollowsTheFile: the names follow the file (an export added,
// one moved, one removed) while the driver runs; an invalid file, or one
// that names an export --export names, leaves the names as they were.
func TestWatchFollowsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "exports")
	write := func(text string) {
		// As the kubelet updates a ConfigMap: a new file renamed in.
		if err := os.WriteFile(path+".new", []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}
	write("# exports\nmain=10.0.0.1:/srv\n")
	names := export.NewNames(nil)
	fixed := map[string]export.Export{"flag": {Server: "f", Share: "/f"}}
	w, err := New(path, fixed, names)
	if err != nil {
		t.Fatal(err)
	}
	if names.List() != "flag, main" {
		t.Fatalf("names %s", names.List())
	}
	Every = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Watch(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	await := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: names %v", what, names.Map())
			}
		}
	}
	write("main=10.0.0.2:/srv\nfast-2=10.0.0.3:/b\n")
	await("moved and added", func() bool {
		e, _ := names.Lookup("main")
		_, added := names.Lookup("fast-2")
		return e.Server == "10.0.0.2" && added
	})
	for _, bad := range []string{"main=10.0.0.9:/srv\nbroken\n", "flag=x:/y\n", ""} {
		write(bad)
		time.Sleep(50 * time.Millisecond)
		if bad == "" {
			await("removed", func() bool { return names.List() == "flag" })
			continue
		}
		if e, _ := names.Lookup("main"); e.Server != "10.0.0.2" || names.List() != "fast-2, flag, main" {
			t.Errorf("after %q: %v", bad, names.Map())
		}
	}
	if _, err := New(filepath.Join(t.TempDir(), "missing"), nil, export.NewNames(nil)); err == nil {
		t.Error("a missing file was accepted")
	}
}

func TestChanges(t *testing.T) {
	a := export.Export{Server: "a", Share: "/x"}
	b := export.Export{Server: "b", Share: "/x"}
	got := strings.Join(Changes(map[string]export.Export{"m": a, "gone": a}, map[string]export.Export{"m": b, "new": a}), "\n")
	for _, want := range []string{"export m: moved from a:/x to b:/x", "export new: added, at a:/x", "export gone: removed (was at a:/x)"} {
		if !strings.Contains(got, want) {
			t.Errorf("changes %q lack %q", got, want)
		}
	}
	if c := Changes(map[string]export.Export{"m": a}, map[string]export.Export{"m": a}); len(c) != 0 {
		t.Errorf("no change: %v", c)
	}
}
