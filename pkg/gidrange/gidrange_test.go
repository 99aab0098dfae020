package gidrange

import (
	"strconv"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	if r, err := Parse("", ""); err != nil || !r.None() {
		t.Errorf("none: %v %v", r, err)
	}
	if r, err := Parse("5000", "5999"); err != nil || r.Size() != 1000 || !r.Contains(5000) || !r.Contains(5999) || r.Contains(6000) {
		t.Errorf("5000-5999: %v %v", r, err)
	}
	for _, bad := range [][2]string{{"5000", ""}, {"", "1"}, {"0", "10"}, {"10", "5"}, {"x", "5"}, {"1", "3000000000"}, {"1", strconv.Itoa(MaxSize + 1)}, {"-1", "5"}} {
		if _, err := Parse(bad[0], bad[1]); err == nil {
			t.Errorf("%q-%q accepted", bad[0], bad[1])
		}
	}
	if _, err := Parse("1", strconv.Itoa(MaxSize)); err != nil {
		t.Errorf("a range of MaxSize: %v", err)
	}
}

func TestPick(t *testing.T) {
	r := Range{Start: 100, End: 103}
	taken := NewTaken(r)
	seen := map[int]bool{}
	for i := 0; i < 4; i++ {
		g, ok := taken.Pick("pvc-" + strconv.Itoa(i))
		if !ok || !r.Contains(g) || seen[g] {
			t.Fatalf("pick %d: %d %v (seen %v)", i, g, ok, seen)
		}
		seen[g] = true
		taken.Add(g)
	}
	if g, ok := taken.Pick("pvc-full"); ok {
		t.Errorf("a full range gave %d", g)
	}
	taken.Add(99) // outside: ignored
	if taken.Len() != 4 {
		t.Errorf("len %d", taken.Len())
	}
}

// FuzzPick: a pick is always a free GID of the range, and there is none
// only when every GID is taken.
func FuzzPick(f *testing.F) {
	f.Add(1000, 20, "pvc-a", "1000,1005,1019")
	f.Add(1, 1, "x", "1")
	f.Fuzz(func(t *testing.T, start, size int, seed, taken string) {
		if start < 1 || size < 1 || size > 4096 || start > 1<<30 {
			return
		}
		r := Range{Start: start, End: start + size - 1}
		set := NewTaken(r)
		for _, s := range strings.Split(taken, ",") {
			if g, err := strconv.Atoi(s); err == nil {
				set.Add(g)
			}
		}
		g, ok := set.Pick(seed)
		if ok && (!r.Contains(g) || set.Has(g)) {
			t.Fatalf("picked %d of %v, taken %v", g, r, set.Has(g))
		}
		if !ok && set.Len() != r.Size() {
			t.Fatalf("no pick with %d of %d taken", set.Len(), r.Size())
		}
	})
}
