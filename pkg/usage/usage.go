// Package usage counts what a volume's tree uses, in the background: a
// walk that never follows a symlink, never leaves the file system it
// starts on, holds a bounded number of descriptors and directory entries
// whatever the tree's depth or width, and paces itself with a Limiter so
// it never competes with the workloads on the share.
package usage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/pkg/treewalk"

	"github.com/nfsdir/nfsdir/pkg/capacity"
)

// Limiter paces a walk: Wait returns when the walk may look at n more
// entries, or with ctx's error.
type Limiter interface {
	Wait(ctx context.Context, n int) error
}

// Walker counts trees. Its zero value is not usable: set MaxOpen.
type Walker struct {
	// MaxOpen bounds the directories held open at once (the tree's root
	// included); deeper directories are let go and reopened through
	// their child's ".." when the walk comes back to them.
	MaxOpen int
	// Batch is how many entries are read from a directory at once.
	Batch int
	// Limit paces the walk; nil: unpaced.
	Limit Limiter
}

// DefaultWalker holds at most 32 directories open and reads 256 entries
// at a time: at most 8192 entries in memory.
var DefaultWalker = Walker{MaxOpen: 32, Batch: 256}

// ErrChanged says a directory was moved while the walk had let it go:
// the count is abandoned, and a later walk tries again.
var ErrChanged = errors.New("the tree changed under the count")

// frame is a directory on the walk's path from the root.
type frame struct {
	f        *os.File // nil: let go, reopened through the child's ".."
	dev, ino uint64
	consumed int           // entries of it counted so far
	pending  []fs.DirEntry // entries read and not yet counted (only while open)
}

// Result is what a walk found, and what it cost.
type Result struct {
	Bytes, Inodes int64
	Entries       int64         // entries looked at
	Reopened      int64         // directories reopened through ".."
	MaxOpen       int           // most directories open at once
	Took          time.Duration // wall time, pacing included
}

// Count walks the directory open as dirfd (which stays the caller's) and
// returns what it and everything below it on the same file system use.
func (w Walker) Count(ctx context.Context, dirfd int) (Result, error) {
	start := time.Now()
	var res Result
	var tally capacity.Tally
	// A description of its own: a dup would share the caller's offset.
	rootFd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return res, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(rootFd, &st); err != nil {
		unix.Close(rootFd)
		return res, err
	}
	tally.Add(true, st.Blocks*512, uint64(st.Nlink))
	stack := []*frame{{f: os.NewFile(uintptr(rootFd), "."), dev: uint64(st.Dev), ino: st.Ino}}
	open := 1
	res.MaxOpen = 1
	defer func() {
		for _, fr := range stack {
			if fr.f != nil {
				fr.f.Close()
			}
		}
	}()
	batch := max(w.Batch, 1)
	for len(stack) > 0 {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		top := stack[len(stack)-1]
		if len(top.pending) == 0 {
			ents, err := top.f.ReadDir(batch)
			if len(ents) == 0 {
				if err != nil && !errors.Is(err, io.EOF) {
					return res, fmt.Errorf("read a directory: %w", err)
				}
				// Done with top: go back to its parent, reopening it
				// through ".." when it was let go.
				stack = stack[:len(stack)-1]
				opened, err := w.back(top, stack, batch, &res)
				if err != nil {
					return res, err
				}
				open += opened
				continue
			}
			top.pending = ents
		}
		e := top.pending[0]
		top.pending = top.pending[1:]
		top.consumed++
		if w.Limit != nil {
			if err := w.Limit.Wait(ctx, 1); err != nil {
				return res, err
			}
		}
		res.Entries++
		child, err := tallyEntry(top, e.Name(), &tally)
		if err != nil {
			return res, err
		}
		if child == nil {
			continue
		}
		if open >= max(w.MaxOpen, 2) {
			letGo(stack)
			open--
		}
		stack = append(stack, child)
		open++
		res.MaxOpen = max(res.MaxOpen, open)
	}
	res.Bytes, res.Inodes = tally.Count()
	res.Took = time.Since(start)
	return res, nil
}

// back closes top, done with, after opening its parent (the last of
// stack) again through ".." when the walk let it go (counted in res). It
// returns the change in the count of open directories.
func (w Walker) back(top *frame, stack []*frame, batch int, res *Result) (int, error) {
	opened := 0
	if len(stack) > 0 {
		if parent := stack[len(stack)-1]; parent.f == nil {
			if err := w.reopen(top.f, parent, batch); err != nil {
				top.f.Close()
				return 0, err
			}
			res.Reopened++
			opened++
		}
	}
	top.f.Close()
	return opened - 1, nil
}

// tallyEntry tallies the entry name of the directory top and returns the
// directory to descend into when it is one of the volume's (nil for
// anything else, or for an entry removed or replaced since the listing).
func tallyEntry(top *frame, name string, tally *capacity.Tally) (*frame, error) {
	fd := int(top.f.Fd())
	var est unix.Stat_t
	if err := unix.Fstatat(fd, name, &est, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil // removed since the listing
		}
		return nil, fmt.Errorf("stat an entry: %w", err)
	}
	isDir := est.Mode&unix.S_IFMT == unix.S_IFDIR
	if !isDir || uint64(est.Dev) != top.dev {
		// Another file system mounted inside (a server-side mount
		// crossed by the client) is not the volume's.
		if uint64(est.Dev) == top.dev {
			tally.Add(false, est.Blocks*512, uint64(est.Nlink))
		}
		return nil, nil
	}
	tally.Add(true, est.Blocks*512, uint64(est.Nlink))
	cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return nil, nil // replaced since the stat: counted as it was
	case errors.Is(err, unix.EACCES):
		return nil, nil // a directory the controller's user may not read
	case err != nil:
		return nil, fmt.Errorf("open a directory: %w", err)
	}
	var cst unix.Stat_t
	if err := unix.Fstat(cfd, &cst); err != nil || cst.Ino != est.Ino || cst.Dev != est.Dev {
		unix.Close(cfd)
		return nil, nil // replaced since the stat
	}
	return &frame{f: os.NewFile(uintptr(cfd), name), dev: uint64(cst.Dev), ino: cst.Ino}, nil
}

// letGo closes the open directory nearest the root (the root itself
// excepted), with the entries it had read and not counted.
func letGo(stack []*frame) {
	for _, fr := range stack[1:] {
		if fr.f != nil {
			fr.f.Close()
			fr.f, fr.pending = nil, nil
			return
		}
	}
}

// reopen opens parent again as child's "..", checks it is the directory
// the walk let go, and skips the entries already counted.
func (w Walker) reopen(child *os.File, parent *frame, batch int) error {
	f, err := treewalk.Reopen(int(child.Fd()), treewalk.Was{Dev: parent.dev, Ino: parent.ino}, parent.consumed, batch)
	if errors.Is(err, treewalk.ErrMoved) {
		return ErrChanged
	}
	if err != nil {
		return err
	}
	parent.f = f
	return nil
}

// Rate is a Limiter that lets PerSecond entries through each second on
// average, in bursts of at most Burst; it is shared by every walk of a
// controller, so together they never go faster. Its zero PerSecond is
// unlimited.
type Rate struct {
	PerSecond float64
	Burst     int

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// Wait implements Limiter.
func (r *Rate) Wait(ctx context.Context, n int) error {
	if r.PerSecond <= 0 {
		return ctx.Err()
	}
	r.mu.Lock()
	now := time.Now()
	burst := float64(max(r.Burst, 1))
	if r.last.IsZero() {
		r.tokens = burst
	} else {
		r.tokens = min(burst, r.tokens+now.Sub(r.last).Seconds()*r.PerSecond)
	}
	r.last = now
	r.tokens -= float64(n)
	wait := time.Duration(0)
	if r.tokens < 0 {
		wait = time.Duration(-r.tokens / r.PerSecond * float64(time.Second))
	}
	r.mu.Unlock()
	if wait == 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
