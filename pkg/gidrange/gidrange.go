// Package gidrange is the pure logic of a StorageClass's GID range
// (gidRangeStart, gidRangeEnd): each new volume gets a GID of the range
// that no live volume of the share holds. It parses and checks ranges and
// picks a free GID from the taken ones, starting at a point that depends
// on the volume, so that two controllers creating at once rarely reach
// for the same one (the claim on the share settles it when they do).
package gidrange

import (
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
)

// MaxSize bounds a range's size: the taken set of a share is read into a
// bitmap of this many bits (128 KiB).
const MaxSize = 1 << 20

// Range is the GIDs Start..End, both included; the zero Range is none.
type Range struct{ Start, End int }

// None reports whether r is the zero Range.
func (r Range) None() bool { return r == Range{} }

// Size is how many GIDs r holds.
func (r Range) Size() int {
	if r.None() {
		return 0
	}
	return r.End - r.Start + 1
}

// Contains reports whether gid is in r.
func (r Range) Contains(gid int) bool { return !r.None() && gid >= r.Start && gid <= r.End }

func (r Range) String() string { return fmt.Sprintf("%d-%d", r.Start, r.End) }

// Parse reads a range from its two parameters; both empty is none. GIDs
// are 1..2^31-1 (0 is root's group), Start <= End, and the range holds at
// most MaxSize GIDs.
func Parse(start, end string) (Range, error) {
	if start == "" && end == "" {
		return Range{}, nil
	}
	if start == "" || end == "" {
		return Range{}, fmt.Errorf("gidRangeStart and gidRangeEnd go together: got %q and %q", start, end)
	}
	s, err1 := strconv.ParseInt(start, 10, 64)
	e, err2 := strconv.ParseInt(end, 10, 64)
	if err1 != nil || err2 != nil || s < 1 || e < 1 || s > math.MaxInt32 || e > math.MaxInt32 {
		return Range{}, fmt.Errorf("gidRangeStart %q and gidRangeEnd %q must be numbers from 1 to %d", start, end, math.MaxInt32)
	}
	if s > e {
		return Range{}, fmt.Errorf("gidRangeStart %d is above gidRangeEnd %d", s, e)
	}
	if e-s+1 > MaxSize {
		return Range{}, fmt.Errorf("gid range %d-%d holds %d GIDs; at most %d", s, e, e-s+1, MaxSize)
	}
	return Range{Start: int(s), End: int(e)}, nil
}

// Taken is the set of a range's GIDs held, as a bitmap.
type Taken struct {
	r    Range
	bits []uint64
	n    int
}

// NewTaken is an empty set of r's GIDs.
func NewTaken(r Range) *Taken { return &Taken{r: r, bits: make([]uint64, (r.Size()+63)/64)} }

// Add marks gid taken; GIDs outside the range are ignored.
func (t *Taken) Add(gid int) {
	if !t.r.Contains(gid) {
		return
	}
	i := gid - t.r.Start
	if t.bits[i/64]&(1<<(i%64)) == 0 {
		t.bits[i/64] |= 1 << (i % 64)
		t.n++
	}
}

// Has reports whether gid is taken.
func (t *Taken) Has(gid int) bool {
	if !t.r.Contains(gid) {
		return false
	}
	i := gid - t.r.Start
	return t.bits[i/64]&(1<<(i%64)) != 0
}

// Len is how many GIDs are taken.
func (t *Taken) Len() int { return t.n }

// Pick returns a free GID of the range, the first at or after a point
// that depends on seed (the volume's name), wrapping around; false when
// every GID is taken.
func (t *Taken) Pick(seed string) (int, bool) {
	size := t.r.Size()
	if size == 0 || t.n >= size {
		return 0, false
	}
	h := fnv.New64a()
	h.Write([]byte(seed))
	off := int(h.Sum64() % uint64(size))
	for k := 0; k < size; k++ {
		gid := t.r.Start + (off+k)%size
		if !t.Has(gid) {
			return gid, true
		}
	}
	return 0, false
}
