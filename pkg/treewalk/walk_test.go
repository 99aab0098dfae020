package treewalk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nfsdir/nfsdir/pkg/treewalk/treeshapes"
)

// recorder is a visitor that notes every call, holds a handle of its own
// for each directory (so letting go and reopening must be paired), and
// can fail at a named entry.
type recorder struct {
	calls  []string
	held   map[*Dir[string]]bool // directories whose handle it holds
	closed map[*Dir[string]]int
	failAt string
}

func newRecorder() *recorder {
	return &recorder{held: map[*Dir[string]]bool{}, closed: map[*Dir[string]]int{}}
}

func (r *recorder) Entry(d *Dir[string], name string) (*Dir[string], error) {
	r.calls = append(r.calls, "entry "+filepath.Join(d.Data, name))
	if name == r.failAt {
		return nil, errors.New("failed on purpose")
	}
	f, err := OpenDir(int(d.File.Fd()), name)
	if err != nil {
		return nil, nil // not a directory
	}
	child, err := NewDir(f, name, filepath.Join(d.Data, name))
	if err != nil {
		f.Close()
		return nil, err
	}
	r.held[child] = true
	return child, nil
}

func (r *recorder) Leave(d *Dir[string], depth int) error {
	if !r.held[d] || d.File == nil {
		return fmt.Errorf("left %s while it was let go", d.Data)
	}
	r.calls = append(r.calls, fmt.Sprintf("leave %s %d", d.Data, depth))
	return nil
}

func (r *recorder) LetGo(d *Dir[string]) { r.held[d] = false }

func (r *recorder) Reopen(_, d *Dir[string]) error {
	if r.held[d] {
		return fmt.Errorf("reopened %s, which it holds", d.Data)
	}
	r.held[d] = true
	return nil
}

func (r *recorder) Close(d *Dir[string]) { r.closed[d]++ }

func rootDir(t *testing.T, dir string) *Dir[string] {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDir(f, ".", ".")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A walk over a chain deeper than its bound looks at every entry once,
// leaves each directory after its entries (depth first), pairs each
// let-go with a reopen, closes each directory once, and holds no more
// directories open than its bound.
func TestWalkVisitsEachEntryOnceWithinItsBound(t *testing.T) {
	dir := t.TempDir()
	p := dir
	for i := range 40 {
		p = filepath.Join(p, fmt.Sprint("d", i))
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		for j := range 3 {
			os.WriteFile(filepath.Join(p, fmt.Sprint("f", j)), nil, 0o644)
		}
	}
	r := newRecorder()
	root := rootDir(t, dir)
	r.held[root] = true
	st, err := Walk(context.Background(), Walker{MaxOpen: 3, Batch: 2, Unchanged: true}, root, r)
	if err != nil {
		t.Fatal(err)
	}
	if st.Entries != 40*4 || st.MaxOpen > 3 || st.Reopened < 35 {
		t.Fatalf("stats %+v: want 160 entries, at most 3 open, the chain reopened", st)
	}
	var entries, leaves []string
	for _, c := range r.calls {
		if rest, ok := strings.CutPrefix(c, "entry "); ok {
			entries = append(entries, rest)
		} else {
			leaves = append(leaves, c)
		}
	}
	sorted := slices.Clone(entries)
	slices.Sort(sorted)
	if len(slices.Compact(sorted)) != len(entries) {
		t.Fatal("an entry was looked at twice")
	}
	if deepest := "leave " + filepath.Join(chainNames(40)...) + " 40"; len(leaves) != 41 || leaves[0] != deepest || leaves[40] != "leave . 0" {
		t.Fatalf("leaves: first %q, last %q, %d in all", leaves[0], leaves[len(leaves)-1], len(leaves))
	}
	for d, n := range r.closed {
		if n != 1 {
			t.Errorf("%s closed %d times", d.Data, n)
		}
		if d.File != nil {
			t.Errorf("%s left open", d.Data)
		}
	}
	if len(r.closed) != 41 {
		t.Errorf("%d directories closed; want 41", len(r.closed))
	}
}

func chainNames(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprint("d", i))
	}
	return out
}

// A walk that ends early (the visitor's error, or its context) closes
// every directory on its path, once, and leaves no descriptor open.
func TestWalkEndingEarlyClosesEverything(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a", "b", "c", "d", "e")
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(p, "stop"), nil, 0o644)
	before := treeshapes.OpenFDs()
	r := newRecorder()
	r.failAt = "stop"
	root := rootDir(t, dir)
	if _, err := Walk(context.Background(), Walker{MaxOpen: 2, Batch: 1}, root, r); err == nil {
		t.Fatal("the visitor's error was lost")
	}
	if len(r.closed) != 6 {
		t.Fatalf("%d directories closed; want the 6 on the path", len(r.closed))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Walk(ctx, Walker{MaxOpen: 2}, rootDir(t, dir), newRecorder()); !errors.Is(err, context.Canceled) {
		t.Fatalf("a walk with its context ended: %v", err)
	}
	if after := treeshapes.OpenFDs(); after != before {
		t.Fatalf("descriptors: %d before, %d after", before, after)
	}
}
