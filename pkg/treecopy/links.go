package treecopy

import (
	"fmt"
	"path"

	"golang.org/x/sys/unix"
)

// node is a directory of the copy as the walk and the hard-link table
// know it: its name in its parent and its parent's node. The walk holds
// the nodes of its stack; the table holds a node for as long as a file
// below it waits for its other names, so a chain of directories is kept
// once, however many files wait below it.
type node struct {
	parent *node
	name   string
	pins   int   // files of the table in it, and pinned directories in it
	at     *pair // its directory pair while it is on the walk's stack
}

// path is the node's path from the roots, with name appended, for
// messages.
func (n *node) path(name string) string {
	var parts []string
	if name != "" {
		parts = append(parts, name)
	}
	for ; n != nil && n.parent != nil; n = n.parent {
		parts = append(parts, n.name)
	}
	p := "."
	for i := len(parts) - 1; i >= 0; i-- {
		p = path.Join(p, parts[i])
	}
	return p
}

// linked is a hard-linked file of the source whose other names are yet to
// come: where its copy is, and how many names are left.
type linked struct {
	dir  *node
	name string
	left uint64
}

// What the table is charged for a file and for a directory it holds: the
// name's bytes and an estimate of the map entry, the struct and the
// allocator's rounding.
const (
	linkedCost = 160
	nodeCost   = 96
)

// linkTable remembers hard-linked files until all their names are copied,
// within a budget of bytes.
type linkTable struct {
	m           map[[2]uint64]*linked
	bytes, peak int64
	budget      int64
}

func newLinkTable(budget int64) *linkTable {
	return &linkTable{m: map[[2]uint64]*linked{}, budget: budget}
}

// add remembers the copy of the file key as name in dir, with left names
// to come, and tells whether the budget had room for it (and for the
// directories above it that the table does not hold yet).
func (t *linkTable) add(key [2]uint64, dir *node, name string, left uint64) bool {
	cost := int64(linkedCost + len(name))
	for n := dir; n != nil && n.pins == 0; n = n.parent {
		cost += int64(nodeCost + len(n.name))
	}
	if t.bytes+cost > t.budget {
		return false
	}
	t.bytes += cost
	t.peak = max(t.peak, t.bytes)
	for n := dir; n != nil; n = n.parent {
		n.pins++
		if n.pins > 1 {
			break
		}
	}
	t.m[key] = &linked{dir: dir, name: name, left: left}
	return true
}

// used notes that one more name of the file key was made as a link to l,
// and forgets l after its last one.
func (t *linkTable) used(key [2]uint64, l *linked) {
	if l.left--; l.left > 0 {
		return
	}
	delete(t.m, key)
	t.bytes -= int64(linkedCost + len(l.name))
	for n := l.dir; n != nil; n = n.parent {
		if n.pins--; n.pins > 0 {
			break
		}
		t.bytes -= int64(nodeCost + len(n.name))
	}
}

// linkTo makes name in top's copy a hard link to the copy l. Its
// directory is reached from the nearest directory above it that the walk
// holds open, one name at a time, never through a symlink or a mount, so
// that no path is longer than a name.
func (r *copyRun) linkTo(l *linked, top *pair, name string) error {
	var below []*node
	n := l.dir
	for ; n.at == nil || n.at.dst == nil; n = n.parent {
		below = append(below, n)
	}
	dir, owned := int(n.at.dst.Fd()), false
	for i := len(below) - 1; i >= 0; i-- {
		fd, err := unix.Openat2(dir, below[i].name, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
		})
		if owned {
			unix.Close(dir)
		}
		if err != nil {
			return fmt.Errorf("open %q for a hard link: %w", l.dir.path(""), err)
		}
		dir, owned = fd, true
	}
	if owned {
		defer unix.Close(dir)
	}
	return unix.Linkat(dir, l.name, int(top.dst.Fd()), name, 0)
}
