package provision

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/safepath"
)

// Purger removes the trash of shares in the background with bounded
// concurrency. Deleted volumes are renamed into the trash synchronously, so
// DeleteVolume returns fast whatever their size; the purge resumes after a
// restart because the trash lives on the share.
//
// Removal works relative to open directory descriptors, one path component
// at a time, and never follows a symlink: a pod that still has the deleted
// volume mounted and swaps a directory for a symlink while it is purged gets
// its symlink removed, not the target.
//
// An entry that cannot be removed (an immutable file, a sticky directory
// the squashed user may not clean) is skipped, the rest of the volume is
// removed, and the purge of that volume is retried with an exponential
// back-off (MinBackoff doubling up to MaxBackoff) that holds no worker, so
// stuck volumes never keep others from being purged.
type Purger struct {
	// MinBackoff and MaxBackoff bound the wait between attempts at a
	// volume whose purge failed.
	MinBackoff, MaxBackoff time.Duration

	sem     chan struct{}
	wg      sync.WaitGroup
	removed atomic.Int64 // entries removed so far

	mu      sync.Mutex
	running map[string]bool // trash entries being purged, by share + name
	stuck   map[string]bool // trash entries whose last attempt failed
}

// NewPurger returns a Purger running at most workers volume purges at once.
func NewPurger(workers int) *Purger {
	return &Purger{MinBackoff: time.Second, MaxBackoff: 5 * time.Minute,
		sem: make(chan struct{}, workers), running: map[string]bool{}, stuck: map[string]bool{}}
}

// Kick starts purging every trash entry of the share at sharePath that is not
// already being purged. It returns at once, without touching the share (a
// dead server must not hold the caller); ctx stops the purges.
func (p *Purger) Kick(ctx context.Context, sharePath string, a *Area) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.kick(ctx, sharePath, a)
	}()
}

func (p *Purger) kick(ctx context.Context, sharePath string, a *Area) {
	trash, err := a.trash.Open(".")
	if err != nil {
		klog.Warningf("open trash of %s: %v", sharePath, err)
		return
	}
	names, err := trash.Readdirnames(-1)
	trash.Close()
	if err != nil {
		klog.Warningf("list trash of %s: %v", sharePath, err)
	}
	for _, name := range names {
		if strings.HasPrefix(name, pendingPrefix) {
			continue // not yet proven to be a deleted volume's
		}
		id := sharePath + "\x00" + name
		p.mu.Lock()
		if p.running[id] {
			p.mu.Unlock()
			continue
		}
		p.running[id] = true
		p.mu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer func() { p.mu.Lock(); delete(p.running, id); delete(p.stuck, id); p.mu.Unlock() }()
			p.purge(ctx, sharePath, a, id, name)
		}()
	}
}

// purge removes the trash entry name, retrying with back-off until it is
// gone, ctx ends or the Area is closed.
func (p *Purger) purge(ctx context.Context, sharePath string, a *Area, id, name string) {
	backoff := p.MinBackoff
	for attempt := 1; ; attempt++ {
		select {
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		start := time.Now()
		w, err := p.purgeOnce(ctx, a, name)
		<-p.sem
		if err == nil {
			klog.V(2).Infof("purged %s/%s on %s in %s (%s)", trashDir, name, sharePath, time.Since(start).Round(time.Millisecond), w)
			return
		}
		if ctx.Err() != nil || errors.Is(err, os.ErrClosed) {
			return // stopping, or the share was released: the next Kick resumes
		}
		p.mu.Lock()
		p.stuck[id] = true
		p.mu.Unlock()
		klog.Warningf("purge %q on %s (attempt %d): %v; retrying in %s", trashDir+"/"+name, sharePath, attempt, err, backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, p.MaxBackoff)
	}
}

// purgeOnce makes one attempt at removing the trash entry name.
func (p *Purger) purgeOnce(ctx context.Context, a *Area, name string) (*walk, error) {
	w := newWalk(p)
	trash, err := a.trash.Open(".")
	if err != nil {
		return w, err
	}
	defer trash.Close()
	return w, w.removeAt(ctx, int(trash.Fd()), "", name, false, level{top: -1})
}

// walk is one attempt at removing a trash entry. Linux removes the
// entries of one directory one at a time (unlink and rmdir hold the
// directory's lock across the NFS call), so a walk gains nothing from
// concurrent removals in one directory; it removes subdirectories in
// concurrent branches instead, as many as its widthTuner finds to pay,
// each removing its own directories one entry at a time.
type walk struct {
	p *Purger

	mu       sync.Mutex
	tune     *widthTuner
	branches int          // branches running beside the walk's own
	since    time.Time    // start of the current sample
	count    atomic.Int64 // removals so far
}

// maxBranches bounds the concurrent branches of one walk, and so its
// descriptors: each branch holds at most maxPurgeDepth+1. A walk starts
// with startBranches: a server on the network gains from several calls in
// flight at once, and one that does not is found out in a few samples.
const (
	maxBranches   = 8
	startBranches = 4
)

func newWalk(p *Purger) *walk {
	return &walk{p: p, tune: newWidthTuner(startBranches, maxBranches), since: time.Now()}
}

// removedOne counts a removal, and times every tuneSample of them for the
// tuner.
func (w *walk) removedOne() {
	w.p.removed.Add(1)
	if w.count.Add(1)%tuneSample != 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	w.tune.observe(tuneSample, now.Sub(w.since))
	w.since = now
}

// branch reports whether another branch may start now, and counts it.
func (w *walk) branch() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.branches+1 >= w.tune.next() {
		return false
	}
	w.branches++
	return true
}

func (w *walk) unbranch() {
	w.mu.Lock()
	w.branches--
	w.mu.Unlock()
}

// String says how the walk spread its removals, for the log.
func (w *walk) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tune.String()
}

// join is the path of name inside the trash entry, below the directory
// whose path is parent ("" for the entry itself).
func join(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "/" + name
}

// maxPurgeDepth is how many directory levels below a trash entry a purge
// descends with a descriptor open at each; a directory deeper than that is
// first moved up to the entry's top, so a purge holds at most
// maxPurgeDepth+2 descriptors and as many directory listings whatever the
// depth of the tree (a tenant's 25,000-deep chain included).
const maxPurgeDepth = 16

// level is where a directory being removed lies in its trash entry: its
// depth below the entry, and the entry's top directory open as top (-1
// for the entry itself).
type level struct {
	depth int
	top   int
}

// Stuck returns how many trash entries could not be removed at the last
// attempt and wait for another.
func (p *Purger) Stuck() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.stuck)
}

// Wait waits for the purges started so far.
func (p *Purger) Wait() { p.wg.Wait() }

// Removed returns how many files and directories the purges removed.
func (p *Purger) Removed() int64 { return p.removed.Load() }

// Pending returns how many purges are running or queued.
func (p *Purger) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.running)
}

// errHoldsShare is why a directory holding another share's metadata
// directory is left in the trash.
var errHoldsShare = errors.New("it holds another nfsdir share's metadata directory (" + safepath.MetaDir + "): that share's root lies inside this deleted volume, and nfsdir never removes it or anything in it; move that share out of the trash to let the purge finish")

// maxSkipped bounds the entries of one directory that an attempt skips as
// stuck; beyond it the attempt ends (and is retried later).
const maxSkipped = 4096

// stuckError says an entry cannot be removed for a reason that an
// immediate retry will not fix (EPERM, EACCES, EROFS, EBUSY).
type stuckError struct {
	path string // inside the trash entry
	err  error
}

func (e *stuckError) Error() string { return fmt.Sprintf("%q cannot be removed: %v", e.path, e.err) }
func (e *stuckError) Unwrap() error { return e.err }

// isStuck reports whether an unlink or rmdir error will persist until
// someone changes the entry (its flags, its owner, its directory's mode).
func isStuck(err error) bool {
	for _, e := range []error{unix.EPERM, unix.EACCES, unix.EROFS, unix.EBUSY, unix.ETXTBSY} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// removeAt removes name, a single path component inside the directory open
// as dirfd, with everything below it; parent is that directory's path
// inside the trash entry, for messages. It never follows symlinks. It
// checks ctx before each batch of a directory's entries. Entries that cannot be removed are
// skipped; the first of them is reported as a *stuckError at the end.
// listedDir says its directory's listing gave it as a directory, so the
// first attempt skips the unlink.
func (w *walk) removeAt(ctx context.Context, dirfd int, parent, name string, listedDir bool, at level) error {
	for attempt := 0; ; attempt++ {
		if attempt > 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if attempt > 100 {
			return fmt.Errorf("%q keeps changing while it is removed", join(parent, name))
		}
		var uerr error = unix.EISDIR
		if !listedDir || attempt > 0 {
			uerr = unix.Unlinkat(dirfd, name, 0)
		}
		if uerr == nil {
			w.removedOne()
			return nil
		}
		if errors.Is(uerr, unix.ENOENT) {
			return nil
		}
		rel := join(parent, name)
		if !errors.Is(uerr, unix.EISDIR) && !errors.Is(uerr, unix.EPERM) {
			if isStuck(uerr) {
				return &stuckError{path: rel, err: uerr}
			}
			return fmt.Errorf("unlink %q: %w", rel, uerr)
		}
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch {
		case errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
			if errors.Is(uerr, unix.EPERM) {
				// Not a directory, and unlink is not permitted.
				return &stuckError{path: rel, err: uerr}
			}
			continue // swapped for a symlink or file: unlink that instead
		case err != nil:
			return fmt.Errorf("open %q: %w", rel, err)
		}
		// Another share's root (it holds a metadata directory) lies inside
		// this deleted volume: never removed, nor anything in it.
		var st unix.Stat_t
		if err := unix.Fstatat(fd, safepath.MetaDir, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			unix.Close(fd)
			return &stuckError{path: rel, err: errHoldsShare}
		}
		below := level{depth: at.depth + 1, top: at.top}
		if at.top < 0 {
			below.top = fd
		}
		if err := w.emptyDir(ctx, fd, rel, below); err != nil {
			return err
		}
		err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
		switch {
		case err == nil:
			w.removedOne()
			return nil
		case errors.Is(err, unix.ENOENT):
			return nil
		case isStuck(err):
			return &stuckError{path: rel, err: err}
		case !errors.Is(err, unix.ENOTEMPTY):
			return fmt.Errorf("rmdir %q: %w", rel, err)
		}
		// Something wrote into it meanwhile: empty it again.
	}
}

// emptyDir removes everything it can in the directory open as fd and
// closes fd. It reads the directory in batches to its end, removing as it
// goes: files one at a time, subdirectories in branches of their own while
// the walk allows one more, else in turn; it starts over while a pass
// removed anything and left something. Entries that cannot be removed are skipped; the first
// is returned as a *stuckError.
func (w *walk) emptyDir(ctx context.Context, fd int, rel string, at level) error {
	dir := os.NewFile(uintptr(fd), rel)
	defer dir.Close()
	skip := map[string]bool{}
	var firstStuck error
	note := func(name string, err error) error {
		var se *stuckError
		if !errors.As(err, &se) {
			return err
		}
		skip[name] = true
		if firstStuck == nil {
			firstStuck = err
		}
		if len(skip) > maxSkipped {
			return fmt.Errorf("more than %d entries of %q cannot be removed: %w", maxSkipped, rel, firstStuck)
		}
		return nil
	}
	for {
		if _, err := dir.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("rewind %q: %w", rel, err)
		}
		progress := false // this pass removed something (a local count: other purges run too)
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			ents, err := dir.ReadDir(1024)
			if len(ents) == 0 {
				if err != nil && !errors.Is(err, io.EOF) {
					return fmt.Errorf("read %q: %w", rel, err)
				}
				break
			}
			var subdirs []string
			for _, e := range ents {
				switch name := e.Name(); {
				case skip[name]:
				case e.IsDir():
					subdirs = append(subdirs, name)
				default:
					err := w.removeAt(ctx, fd, rel, name, false, at)
					progress = progress || err == nil
					if err := note(name, err); err != nil {
						return err
					}
				}
			}
			moved, errs := w.removeDirs(ctx, fd, rel, subdirs, at)
			progress = progress || moved
			for _, d := range subdirs {
				err, done := errs[d]
				if !done {
					continue
				}
				progress = progress || err == nil
				if err := note(d, err); err != nil {
					return err
				}
			}
		}
		// A pass without progress: done, or stuck. Below the entry's
		// top a pass that skipped nothing removed all it saw: rmdir
		// tells whether anything came meanwhile, without another
		// listing. The top keeps listing while it gains entries lifted
		// up from deep below.
		if !progress || (len(skip) == 0 && at.depth > 1) {
			return firstStuck
		}
	}
}

// removeDirs removes the subdirectories names of the directory open as fd
// (at depth at), each in a branch of its own while the walk allows one
// more, else in turn; below maxPurgeDepth it moves them up instead. It
// returns whether it moved any, and the result of every removal it made
// (a nil error for one that succeeded); after an error other than a
// *stuckError it starts no more.
func (w *walk) removeDirs(ctx context.Context, fd int, rel string, names []string, at level) (bool, map[string]error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		moved bool
		errs  = map[string]error{}
		stop  bool
	)
	done := func(name string, err error) {
		mu.Lock()
		defer mu.Unlock()
		errs[name] = err
		var se *stuckError
		if err != nil && !errors.As(err, &se) {
			stop = true
		}
	}
	stopped := func() bool { mu.Lock(); defer mu.Unlock(); return stop }
	for _, d := range names {
		if stopped() {
			break
		}
		if at.depth >= maxPurgeDepth {
			ok, err := liftUp(fd, d, at.top)
			if err != nil {
				done(d, fmt.Errorf("move %q up: %w", join(rel, d), err))
				break
			}
			if ok {
				moved = true
				continue
			}
		}
		if w.branch() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer w.unbranch()
				done(d, w.removeAt(ctx, fd, rel, d, true, at))
			}()
			continue
		}
		done(d, w.removeAt(ctx, fd, rel, d, true, at))
	}
	wg.Wait() // fd stays open until every branch below it is done
	return moved, errs
}

// liftUp moves the directory name, in the directory open as fd, up to the
// top of its trash entry (open as top) under a fresh name, where a later
// pass of the purge finds it at depth one. It reports false when it could
// not move it across file systems (a server-side mount inside the volume):
// the caller then descends as usual.
func liftUp(fd int, name string, top int) (bool, error) {
	for i := 0; i < 100; i++ {
		err := unix.Renameat(fd, name, top, fmt.Sprintf(".lifted-%d-%d", time.Now().UnixNano(), i))
		switch {
		case err == nil, errors.Is(err, unix.ENOENT):
			return true, nil
		case errors.Is(err, unix.EXDEV):
			return false, nil
		case errors.Is(err, unix.EEXIST), errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EISDIR):
			continue // the name is taken (a tenant's): another one
		default:
			return false, err
		}
	}
	return false, errors.New("no free name at the top of the trash entry")
}
