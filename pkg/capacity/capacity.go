// Package capacity is the arithmetic of a volume's capacity: the tally of
// what its tree uses (hard links shared between their names), the figure
// the accountant records for it on the share, and what a volume reports
// from its capacity, its figure and the free space of its export. It does
// no I/O.
package capacity

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Tally adds up what the entries of a tree use. A file with several hard
// links is charged to each of its names in equal parts, so a file whose
// links all lie in the tree counts once, exactly, and nothing has to
// remember which inodes were seen: memory stays bounded whatever the tree.
// A file linked from outside the tree (another volume on the same share)
// is charged in part to each tree that holds a link.
type Tally struct {
	bytes, inodes, entries int64
	// shared holds, per link count, the bytes and names of the entries
	// with that many links, divided once at the end for exactness; at
	// most maxLinkCounts link counts, beyond which entries are divided
	// at once (an error below one byte and one inode per name).
	shared map[uint64]*linked
	// part accumulates the fractions of the entries divided at once.
	partBytes, partInodes float64
}

type linked struct{ bytes, names uint64 }

const maxLinkCounts = 256

// Add counts one entry of the tree: its allocated bytes and its link
// count (directories count their own space and one inode, whatever their
// link count).
func (t *Tally) Add(dir bool, allocated int64, nlink uint64) {
	t.entries++
	if allocated < 0 {
		allocated = 0
	}
	if dir || nlink <= 1 {
		t.bytes += allocated
		t.inodes++
		return
	}
	if t.shared == nil {
		t.shared = map[uint64]*linked{}
	}
	l := t.shared[nlink]
	if l == nil {
		if len(t.shared) >= maxLinkCounts {
			t.partBytes += float64(allocated) / float64(nlink)
			t.partInodes += 1 / float64(nlink)
			return
		}
		l = &linked{}
		t.shared[nlink] = l
	}
	l.bytes += uint64(allocated)
	l.names++
}

// Entries returns how many entries were added.
func (t *Tally) Entries() int64 { return t.entries }

// Count returns the bytes and inodes the tree uses so far.
func (t *Tally) Count() (bytes, inodes int64) {
	bytes, inodes = t.bytes, t.inodes
	for n, l := range t.shared {
		bytes += int64((l.bytes + n/2) / n)
		inodes += int64((l.names + n/2) / n)
	}
	return bytes + int64(t.partBytes+0.5), inodes + int64(t.partInodes+0.5)
}

// Figure is what the accountant last found a volume to use. It is kept
// on the share beside the volume's record, and carries the record's token:
// a figure for an earlier volume of the same directory is never used.
type Figure struct {
	Token   string        `json:"token"`
	Bytes   int64         `json:"bytes"`
	Inodes  int64         `json:"inodes"`
	Counted time.Time     `json:"counted"` // when the count ended
	Took    time.Duration `json:"took"`
}

// maxFigure bounds an encoded figure: it is stored as a symlink's target.
const maxFigure = 1024

// Encode returns the figure's stored form.
func (f Figure) Encode() (string, error) {
	b, err := json.Marshal(f)
	if err != nil {
		return "", err
	}
	if len(b) > maxFigure {
		return "", fmt.Errorf("usage figure is %d bytes long, more than %d", len(b), maxFigure)
	}
	return string(b), nil
}

// Decode parses a stored figure and checks that it can be one nfsdir
// wrote.
func Decode(s string) (Figure, error) {
	var f Figure
	if len(s) > maxFigure {
		return f, errors.New("usage figure too long")
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Figure{}, fmt.Errorf("usage figure: %w", err)
	}
	if dec.More() {
		return Figure{}, errors.New("usage figure: trailing data")
	}
	if f.Token == "" || f.Bytes < 0 || f.Inodes < 0 || f.Took < 0 {
		return Figure{}, fmt.Errorf("usage figure %q is not one nfsdir writes", s)
	}
	return f, nil
}

// Space is what the export's file system has, from statfs.
type Space struct {
	TotalBytes, AvailableBytes int64
	TotalInodes, FreeInodes    int64
}

// Stats is what a volume reports to kubelet: its capacity as total, what it
// uses, and what it can still take (bounded by what the export has left).
// Over is set, with a message, when it uses more than its capacity.
type Stats struct {
	TotalBytes, UsedBytes, AvailableBytes    int64
	TotalInodes, UsedInodes, AvailableInodes int64
	Over                                     string
}

// Report returns the Stats of a volume of capacity bytes (0: none
// requested, so the export's size stands for it) that uses what f says,
// on an export with space s.
func Report(capacity int64, f Figure, s Space) Stats {
	total := capacity
	if total <= 0 {
		total = s.TotalBytes
	}
	st := Stats{TotalBytes: total, UsedBytes: f.Bytes, UsedInodes: f.Inodes}
	st.AvailableBytes = max(0, min(total-f.Bytes, s.AvailableBytes))
	st.AvailableInodes = max(0, s.FreeInodes)
	st.TotalInodes = f.Inodes + st.AvailableInodes
	if capacity > 0 && f.Bytes > capacity {
		st.Over = fmt.Sprintf("uses %s of %s (%s over its capacity), counted %s", Bytes(f.Bytes), Bytes(capacity), Bytes(f.Bytes-capacity), f.Counted.UTC().Format(time.RFC3339))
	}
	return st
}

// Bytes formats n with a binary unit, for messages.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for (v >= unit || v <= -unit) && i < 5 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTPE"[i])
}
