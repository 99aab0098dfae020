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
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/pkg/treewalk"

	"github.com/nfsdir/nfsdir/pkg/capacity"
)

// Limiter paces a walk: Wait returns when the walk may look at n more
// entries, or with ctx's error.
type Limiter = treewalk.Limiter

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
	// A description of its own: a dup would share the caller's offset.
	rootFd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return res, err
	}
	f := os.NewFile(uintptr(rootFd), ".")
	root, err := treewalk.NewDir(f, ".", struct{}{})
	if err != nil {
		f.Close()
		return res, err
	}
	t := &tally{}
	t.add(true, &root.Stat)
	wk := treewalk.Walker{MaxOpen: w.MaxOpen, Batch: w.Batch, Limit: w.Limit}
	st, err := treewalk.Walk(ctx, wk, root, t)
	res.Entries, res.Reopened, res.MaxOpen = st.Entries, st.Reopened, st.MaxOpen
	if errors.Is(err, treewalk.ErrMoved) {
		err = ErrChanged
	}
	if err != nil {
		return res, err
	}
	res.Bytes, res.Inodes = t.Count()
	res.Took = time.Since(start)
	return res, nil
}

// tally is the count's visitor: it adds up what every entry uses.
type tally struct{ capacity.Tally }

func (t *tally) add(dir bool, st *unix.Stat_t) { t.Add(dir, st.Blocks*512, uint64(st.Nlink)) }

// Entry tallies the entry name of d and returns the directory to descend
// into when it is one of the volume's (nil for anything else, or for an
// entry removed or replaced since the listing).
func (t *tally) Entry(d *treewalk.Dir[struct{}], name string) (*treewalk.Dir[struct{}], error) {
	fd := int(d.File.Fd())
	var est unix.Stat_t
	if err := unix.Fstatat(fd, name, &est, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil // removed since the listing
		}
		return nil, fmt.Errorf("stat an entry: %w", err)
	}
	if est.Dev != d.Stat.Dev {
		// Another file system mounted inside (a server-side mount
		// crossed by the client) is not the volume's.
		return nil, nil
	}
	isDir := est.Mode&unix.S_IFMT == unix.S_IFDIR
	t.add(isDir, &est)
	if !isDir {
		return nil, nil
	}
	f, err := treewalk.OpenDir(fd, name)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return nil, nil // replaced since the stat: counted as it was
	case errors.Is(err, unix.EACCES):
		return nil, nil // a directory the controller's user may not read
	case err != nil:
		return nil, fmt.Errorf("open a directory: %w", err)
	}
	child, err := treewalk.NewDir(f, name, struct{}{})
	if err != nil || child.Stat.Ino != est.Ino || child.Stat.Dev != est.Dev {
		f.Close()
		return nil, nil // replaced since the stat
	}
	return child, nil
}

// The count holds nothing of its own for a directory.
func (*tally) Leave(*treewalk.Dir[struct{}], int) error  { return nil }
func (*tally) LetGo(*treewalk.Dir[struct{}])             {}
func (*tally) Reopen(_, _ *treewalk.Dir[struct{}]) error { return nil }
func (*tally) Close(*treewalk.Dir[struct{}])             {}

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
