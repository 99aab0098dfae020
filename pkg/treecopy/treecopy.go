// Package treecopy copies a directory tree into an empty directory, as
// snapshots, restores and clones need: it never follows a symlink, never
// opens a FIFO, never leaves the file system it starts on, holds a bounded
// number of descriptors and directory entries whatever the tree's depth or
// width, and copies several files at once. Each regular file is copied by
// the cheapest means the file systems offer: a clone (FICLONE: the NFSv4.2
// CLONE operation, metadata only on a server with reflinks), then
// copy_file_range (the NFSv4.2 COPY operation: the data stays on the
// server), then read and write; holes stay holes. Directories, symlinks,
// FIFOs, hard links (as links), mode, owner, group, times and extended
// attributes are kept; sockets and device nodes are left out and counted.
package treecopy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/pkg/treewalk"
)

// Copier copies trees. Its zero value is not usable: start from Default.
type Copier struct {
	// MaxOpen bounds the directory pairs (source and copy) held open at
	// once, the roots included; deeper ones are let go and reopened
	// through their child's ".." when the copy comes back to them.
	MaxOpen int
	// Batch is how many entries are read from a directory at once.
	Batch int
	// Workers is how many regular files are copied at once.
	Workers int
	// Buffer is the size of a read and write when the file systems
	// offer neither clone nor copy_file_range.
	Buffer int
	// MaxLinkBytes bounds the memory, in bytes, of the hard-linked files
	// remembered until all their names are copied (their names and those
	// of the directories they are in, each directory once); past it,
	// further names of new hard-linked files become copies of their own
	// (counted in Result.Unlinked).
	MaxLinkBytes int64
	// Limit paces the copy, one entry at a time; nil: unpaced.
	Limit Limiter
	// Progress, when set, follows the copy as it goes (read it from
	// any goroutine).
	Progress *Progress
}

// Limiter paces a copy: Wait returns when the copy may look at n more
// entries, or with ctx's error. usage.Rate is one.
type Limiter = treewalk.Limiter

// Progress is how far a copy has come: entries looked at and bytes of
// file data copied so far.
type Progress struct {
	Entries, Bytes atomic.Int64
}

// Default holds at most 16 directory pairs open, 256 entries per
// directory read, copies 4 files at once with 1 MiB buffers, and
// remembers hard-linked files in at most 16 MiB (some 80,000 of them with
// short names, however deep).
var Default = Copier{MaxOpen: 16, Batch: 256, Workers: 4, Buffer: 1 << 20, MaxLinkBytes: 16 << 20}

// ErrChanged says a directory of the source was moved while the copy had
// let it go: the copy is abandoned, and a later one tries again.
var ErrChanged = errors.New("the source tree changed under the copy")

// Method is how a regular file's data was copied.
type Method int

// The methods, cheapest first.
const (
	Clone     Method = iota // FICLONE: the server shares the blocks
	CopyRange               // copy_file_range: the server copies
	ReadWrite               // the data crosses the network twice
	methods
)

func (m Method) String() string {
	return [...]string{"clone", "copy_file_range", "read_write"}[m]
}

// Result is what a copy made, and how.
type Result struct {
	Dirs, Files, Symlinks, FIFOs int64
	Links                        int64 // names made as hard links to a file already copied
	Unlinked                     int64 // names of hard-linked files copied on their own (MaxLinkBytes reached)
	LinkBytes                    int64 // most bytes the table of hard-linked files held
	Skipped                      int64 // sockets, device nodes, and other file systems' directories
	XattrsSkipped                int64 // extended attributes the copy's file system refused
	Bytes                        int64 // file data copied (holes not counted)
	ByMethod                     [methods]int64
	Reopened                     int64 // directories reopened through ".."
	MaxOpen                      int   // most directory pairs open at once
	Took                         time.Duration
}

// pair is the copy's side of a directory of the source on the walk's
// path: the copy's directory and what the copy keeps for it.
type pair struct {
	dst   *os.File // nil: let go, reopened through the child's ".."
	node  *node    // the copy's directory, by name from the roots
	files sync.WaitGroup
}

// dir is a directory of the source on the walk's path, with its pair.
type dir = treewalk.Dir[*pair]

type copyRun struct {
	c       Copier
	res     Result
	bytes   atomic.Int64
	methods [methods]atomic.Int64
	skipped atomic.Int64
	// unsupported[m]: m failed as unsupported once; not tried again.
	unsupported [methods]atomic.Bool
	links       *linkTable
	jobs        chan job
	errMu       sync.Mutex
	err         error
	rootAttrs   bool // the copy's root gets the source root's attributes
}

// job is a regular file to copy: both ends open, the source's status.
type job struct {
	src, dst int // raw descriptors: an *os.File would ask the poller about each
	st       unix.Stat_t
	dir      *node // where it is, for messages
	name     string
	done     *sync.WaitGroup
}

// Copy copies everything below the directory open as srcfd into the
// empty directory open as dstfd (both stay the caller's); with rootAttrs,
// the copy's root gets the source root's mode, owner, times and extended
// attributes too. An error leaves a partial copy for the caller to remove.
func (c Copier) Copy(ctx context.Context, srcfd, dstfd int, rootAttrs bool) (Result, error) {
	start := time.Now()
	r := &copyRun{c: c, links: newLinkTable(c.MaxLinkBytes), jobs: make(chan job)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var workers sync.WaitGroup
	for range max(c.Workers, 1) {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for j := range r.jobs {
				if err := r.copyFile(ctx, j); err != nil {
					r.fail(err)
					cancel()
				}
				unix.Close(j.src)
				unix.Close(j.dst)
				j.done.Done()
			}
		}()
	}
	err := r.walk(ctx, srcfd, dstfd, rootAttrs)
	close(r.jobs)
	workers.Wait()
	if err == nil {
		err = r.firstErr()
	}
	r.res.Bytes = r.bytes.Load()
	for m := range r.res.ByMethod {
		r.res.ByMethod[m] = r.methods[m].Load()
	}
	r.res.XattrsSkipped += r.skipped.Load()
	r.res.LinkBytes = r.links.peak
	r.res.Took = time.Since(start)
	return r.res, err
}

func (r *copyRun) addBytes(n int64) {
	r.bytes.Add(n)
	if r.c.Progress != nil {
		r.c.Progress.Bytes.Add(n)
	}
}

func (r *copyRun) fail(err error) {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

func (r *copyRun) firstErr() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.err
}

func (r *copyRun) walk(ctx context.Context, srcfd, dstfd int, rootAttrs bool) error {
	root, err := openRoot(srcfd, dstfd)
	if err != nil {
		return err
	}
	r.rootAttrs = rootAttrs
	st, err := treewalk.Walk(ctx, treewalk.Walker{MaxOpen: r.c.MaxOpen, Batch: r.c.Batch, Limit: r.c.Limit, Unchanged: true}, root, r)
	r.res.MaxOpen, r.res.Reopened = st.MaxOpen, st.Reopened
	switch {
	case errors.Is(err, treewalk.ErrMoved):
		return ErrChanged
	case err != nil && ctx.Err() != nil:
		if e := r.firstErr(); e != nil {
			return e
		}
	}
	return err
}

// openRoot opens the source and destination directories of a copy as
// the walk's root.
func openRoot(srcfd, dstfd int) (*dir, error) {
	src, err := treewalk.OpenDir(srcfd, ".")
	if err != nil {
		return nil, err
	}
	dst, err := treewalk.OpenDir(dstfd, ".")
	if err != nil {
		src.Close()
		return nil, err
	}
	p := &pair{dst: dst, node: &node{}}
	root, err := treewalk.NewDir(src, ".", p)
	if err != nil {
		src.Close()
		dst.Close()
		return nil, err
	}
	p.node.at = p
	return root, nil
}

// Leave is the walk done with the directory d: its files finish, then its
// copy gets its attributes (which making entries in it would change).
func (r *copyRun) Leave(d *dir, depth int) error {
	d.Data.files.Wait()
	if depth > 0 || r.rootAttrs {
		if err := r.setAttrs(int(d.File.Fd()), int(d.Data.dst.Fd()), &d.Stat); err != nil {
			return fmt.Errorf("directory %q: %w", d.Data.node.path(""), err)
		}
	}
	d.Data.node.at = nil
	return nil
}

// LetGo closes the copy's directory of d, which the walk lets go; its
// files in flight need no reference to it.
func (r *copyRun) LetGo(d *dir) {
	d.Data.dst.Close()
	d.Data.dst = nil
}

// Reopen opens the copy's directory of d again, as the copy of child's
// "..".
func (r *copyRun) Reopen(child, d *dir) error {
	dst, err := treewalk.OpenDir(int(child.Data.dst.Fd()), "..")
	if err != nil {
		return fmt.Errorf("reopen a directory of the copy: %w", err)
	}
	d.Data.dst = dst
	return nil
}

// Close waits for the files of d in flight and closes its copy.
func (r *copyRun) Close(d *dir) {
	d.Data.files.Wait()
	if d.Data.dst != nil {
		d.Data.dst.Close()
		d.Data.dst = nil
	}
}

// entry copies the entry name of the directory top: a directory is made
// and returned to descend into; anything else is copied (a regular file
// by a worker) and nil returned.
func (r *copyRun) Entry(d *dir, name string) (*dir, error) {
	if r.c.Progress != nil {
		r.c.Progress.Entries.Add(1)
	}
	top := d.Data
	sfd, dfd := int(d.File.Fd()), int(top.dst.Fd())
	var st unix.Stat_t
	if err := unix.Fstatat(sfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil // removed since the listing
		}
		return nil, fmt.Errorf("%q: %w", top.node.path(name), err)
	}
	if st.Dev != d.Stat.Dev {
		r.res.Skipped++ // another file system mounted inside
		return nil, nil
	}
	wrap := func(err error) error {
		if err == nil {
			return nil
		}
		return fmt.Errorf("%q: %w", top.node.path(name), err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return r.dir(d, name, &st)
	case unix.S_IFLNK:
		target, err := readlinkAt(sfd, name, st.Size)
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		if err == nil {
			err = unix.Symlinkat(target, dfd, name)
		}
		if err == nil {
			err = r.setLinkAttrs(dfd, name, &st)
		}
		r.res.Symlinks++
		return nil, wrap(err)
	case unix.S_IFIFO:
		err := unix.Mkfifoat(dfd, name, 0o600)
		if err == nil {
			fifoMade(dfd, name)
			err = r.setAttrsAt(sfd, dfd, name, &st)
		}
		r.res.FIFOs++
		return nil, wrap(err)
	case unix.S_IFREG:
		return nil, wrap(r.regular(d, name, &st))
	default:
		r.res.Skipped++ // sockets and device nodes are not data
		return nil, nil
	}
}

// dir makes the copy of the source directory name of d and opens both.
func (r *copyRun) dir(d *dir, name string, st *unix.Stat_t) (*dir, error) {
	top := d.Data
	src, err := treewalk.OpenDir(int(d.File.Fd()), name)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return nil, nil // replaced since the stat
	case err != nil:
		return nil, fmt.Errorf("open directory %q: %w", top.node.path(name), err)
	}
	p := &pair{node: &node{parent: top.node, name: name}}
	child, err := treewalk.NewDir(src, name, p)
	if err != nil || child.Stat.Ino != st.Ino || child.Stat.Dev != st.Dev {
		src.Close()
		return nil, nil // replaced since the stat
	}
	// Owner-only until its attributes are set, after its contents.
	if err := unix.Mkdirat(int(top.dst.Fd()), name, 0o700); err != nil {
		src.Close()
		return nil, fmt.Errorf("make directory %q: %w", top.node.path(name), err)
	}
	if p.dst, err = treewalk.OpenDir(int(top.dst.Fd()), name); err != nil {
		src.Close()
		return nil, fmt.Errorf("open the copy of %q: %w", top.node.path(name), err)
	}
	r.res.Dirs++
	p.node.at = p
	return child, nil
}

// regular copies the regular file name of top: as a hard link when it is
// another name of a file already copied, else by a worker.
func (r *copyRun) regular(d *dir, name string, st *unix.Stat_t) error {
	top := d.Data
	key := [2]uint64{st.Dev, st.Ino}
	if st.Nlink > 1 {
		if l := r.links.m[key]; l != nil {
			if err := r.linkTo(l, top, name); err != nil {
				return err
			}
			r.res.Links++
			r.links.used(key, l)
			return nil
		}
	}
	// O_NONBLOCK: should it have become a FIFO since the stat, opening it
	// does not wait for a writer (and the type check below refuses it).
	fd, err := unix.Openat(int(d.File.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) {
		return nil // removed or replaced since the stat
	}
	if err != nil {
		return err
	}
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil || now.Mode&unix.S_IFMT != unix.S_IFREG || now.Ino != st.Ino {
		unix.Close(fd)
		return err // replaced since the stat: left out
	}
	// Made with the source's permission bits, so that most files need no
	// chmod afterwards; the fd writes whatever they are.
	dfd, err := unix.Openat(int(top.dst.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, now.Mode&0o777)
	if err != nil {
		unix.Close(fd)
		return err
	}
	if now.Nlink > 1 && !r.links.add(key, top.node, name, uint64(now.Nlink)-1) {
		r.res.Unlinked++
	}
	r.res.Files++
	top.files.Add(1)
	r.jobs <- job{src: fd, dst: dfd, st: now, dir: top.node, name: name, done: &top.files}
	return nil
}

// readlinkAt reads the symlink name below dirfd, whose size lstat gave.
func readlinkAt(dirfd int, name string, size int64) (string, error) {
	buf := make([]byte, max(size+1, 256))
	for {
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) >= unix.PathMax {
			return "", unix.ENAMETOOLONG
		}
		buf = make([]byte, 2*len(buf))
	}
}
