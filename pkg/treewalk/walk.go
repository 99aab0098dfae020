package treewalk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// Limiter paces a walk: Wait returns when the walk may look at n more
// entries, or with ctx's error.
type Limiter interface {
	Wait(ctx context.Context, n int) error
}

// Walker walks trees depth first, in bounded memory and descriptors: it
// holds at most MaxOpen directories open and reads Batch entries of a
// directory at a time, whatever the tree's depth or width. What it does
// with each entry is its Visitor's.
type Walker struct {
	// MaxOpen bounds the directories held open at once (the root
	// included, at least 2); deeper directories are let go and reopened
	// through their child's ".." when the walk comes back to them.
	MaxOpen int
	// Batch is how many entries are read from a directory at once.
	Batch int
	// Limit paces the walk, one Wait per entry; nil: unpaced.
	Limit Limiter
	// Unchanged requires a directory found again to be unchanged since
	// it was let go (its ctime): a walk that must look at each entry
	// exactly once, since the entries it skips on reopening are counted,
	// not named. Without it, only its device and inode must match.
	Unchanged bool
}

// Dir is a directory on the walk's path from the root, with the
// visitor's data for it.
type Dir[T any] struct {
	File *os.File    // the directory, open for reading; nil while let go
	Stat unix.Stat_t // its status when opened
	Name string      // its name in its parent ("." for the root)
	Data T

	changed  unix.Timespec // its ctime when let go
	consumed int           // entries of it looked at so far
	pending  []fs.DirEntry // entries read and not yet looked at (only while open)
}

// NewDir returns a Dir for the directory f, open for reading (never
// through a symlink: see OpenDir), named name in its parent; it reads
// f's status.
func NewDir[T any](f *os.File, name string, data T) (*Dir[T], error) {
	d := &Dir[T]{File: f, Name: name, Data: data}
	if err := unix.Fstat(int(f.Fd()), &d.Stat); err != nil {
		return nil, fmt.Errorf("stat directory %q: %w", name, err)
	}
	return d, nil
}

// Visitor is what a walk does with what it finds.
type Visitor[T any] interface {
	// Entry looks at the entry name of the open directory d and returns
	// the subdirectory to descend into (made with NewDir, on the same
	// file system, never through a symlink), or nil.
	Entry(d *Dir[T], name string) (*Dir[T], error)
	// Leave is called when every entry of d was looked at, while d is
	// still open; depth is 0 for the root.
	Leave(d *Dir[T], depth int) error
	// LetGo closes what the visitor holds open for d: the walk lets d go
	// to stay within MaxOpen.
	LetGo(d *Dir[T])
	// Reopen opens again what the visitor holds for d, which the walk has
	// just opened again through its child's "..".
	Reopen(child, d *Dir[T]) error
	// Close releases what the visitor holds for d for good: the walk is
	// done with d, or ends early.
	Close(d *Dir[T])
}

// Stats is what a walk looked at, and what its bound cost.
type Stats struct {
	Entries  int64 // entries looked at
	Reopened int64 // directories reopened through ".."
	MaxOpen  int   // most directories open at once
}

// Walk walks the tree below root with v, depth first, and closes root's
// File when done. A directory let go and found changed is ErrMoved; ctx
// ends the walk between entries.
func Walk[T any](ctx context.Context, w Walker, root *Dir[T], v Visitor[T]) (st Stats, err error) {
	wk := &walk[T]{w: w, v: v, batch: max(w.Batch, 1), stack: []*Dir[T]{root}, open: 1}
	defer wk.closeAll()
	st.MaxOpen = 1
	for len(wk.stack) > 0 {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		top := wk.stack[len(wk.stack)-1]
		if len(top.pending) == 0 {
			done, err := wk.read(top)
			if err != nil {
				return st, err
			}
			if done {
				if err := wk.leave(&st); err != nil {
					return st, err
				}
				continue
			}
		}
		name := top.pending[0].Name()
		top.pending = top.pending[1:]
		top.consumed++
		if w.Limit != nil {
			if err := w.Limit.Wait(ctx, 1); err != nil {
				return st, err
			}
		}
		st.Entries++
		child, err := v.Entry(top, name)
		if err != nil {
			return st, err
		}
		if child != nil {
			wk.push(child)
			st.MaxOpen = max(st.MaxOpen, wk.open)
		}
	}
	return st, nil
}

// walk is one Walk in progress: the directories on its path from the
// root, and how many of them are open.
type walk[T any] struct {
	w     Walker
	v     Visitor[T]
	batch int
	stack []*Dir[T]
	open  int
}

// path is the path of the directory on top of the stack, from the root,
// for messages.
func (wk *walk[T]) path() string {
	p := "."
	for _, d := range wk.stack[1:] {
		p = path.Join(p, d.Name)
	}
	return p
}

// read reads the next batch of d's entries; done says there are none left.
func (wk *walk[T]) read(d *Dir[T]) (done bool, err error) {
	ents, err := d.File.ReadDir(wk.batch)
	if len(ents) == 0 {
		if err != nil && !errors.Is(err, io.EOF) {
			return false, fmt.Errorf("read directory %q: %w", wk.path(), err)
		}
		return true, nil
	}
	d.pending = ents
	return false, nil
}

// push descends into child, letting go of the open directory nearest the
// root (the root itself excepted) when MaxOpen are open.
func (wk *walk[T]) push(child *Dir[T]) {
	if wk.open >= max(wk.w.MaxOpen, 2) {
		for _, d := range wk.stack[1:] {
			if d.File != nil {
				var st unix.Stat_t
				if unix.Fstat(int(d.File.Fd()), &st) == nil {
					d.changed = st.Ctim
				}
				wk.v.LetGo(d)
				d.File.Close()
				d.File, d.pending = nil, nil
				wk.open--
				break
			}
		}
	}
	wk.stack = append(wk.stack, child)
	wk.open++
}

// leave is the walk done with the directory on top of the stack: the
// visitor's Leave, then its parent opened again through ".." if the walk
// let it go (and the visitor's part of it), then it is closed.
func (wk *walk[T]) leave(st *Stats) error {
	top := wk.stack[len(wk.stack)-1]
	if err := wk.v.Leave(top, len(wk.stack)-1); err != nil {
		return err
	}
	wk.stack = wk.stack[:len(wk.stack)-1]
	defer wk.release(top)
	if len(wk.stack) == 0 {
		return nil
	}
	parent := wk.stack[len(wk.stack)-1]
	if parent.File != nil {
		return nil
	}
	was := Was{Dev: uint64(parent.Stat.Dev), Ino: parent.Stat.Ino}
	if wk.w.Unchanged {
		was.Changed = &parent.changed
	}
	f, err := Reopen(int(top.File.Fd()), was, parent.consumed, wk.batch)
	if err != nil {
		return err
	}
	parent.File = f
	wk.open++
	st.Reopened++
	return wk.v.Reopen(top, parent)
}

// release closes d, done with or abandoned.
func (wk *walk[T]) release(d *Dir[T]) {
	wk.v.Close(d)
	if d.File != nil {
		d.File.Close()
		d.File = nil
		wk.open--
	}
}

// closeAll releases every directory still on the stack.
func (wk *walk[T]) closeAll() {
	for i := len(wk.stack) - 1; i >= 0; i-- {
		wk.release(wk.stack[i])
	}
	wk.stack = nil
}
