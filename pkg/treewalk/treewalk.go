// Package treewalk is nfsdir's one bounded tree walker (Walk), used by
// the usage count and the copy engine as visitors: depth first, never
// following a symlink, holding a fixed number of directories open and of
// entries in memory whatever a tree's depth or width, paced, and
// cancellable between entries. A walk lets go of the open directory
// nearest the root when it reaches its bound, and later opens it again
// through its child's "..", checking that it is the same directory and
// skipping the entries it had already looked at.
//
// The purge (provision.Purger) shares OpenDir's rule and the hostile
// shapes of treeshapes, not Walk: it removes what it walks, so a
// directory found again has lost the entries it looked at and changed
// (skipping by count and checking its ctime both fail); it bounds its
// descriptors by moving deep directories up to the top of the trash entry
// instead, and removes sibling directories in concurrent branches, which
// a server on the network rewards.
package treewalk

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// ErrMoved says a directory found again through ".." is not the one the
// walk let go (it was moved, or replaced, or changed when that counts).
var ErrMoved = errors.New("the directory found again is not the one let go")

// OpenDir opens the directory name of dirfd for reading, never through a
// symlink.
func OpenDir(dirfd int, name string) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// Was is what identifies a directory the walk let go: its device and
// inode, and, when Changed is set, the change time it had then (entries
// added or removed since change it, and the entries to skip would not be
// those read).
type Was struct {
	Dev, Ino uint64
	Changed  *unix.Timespec
}

// Reopen opens the parent of the open directory child again (its ".."),
// checks it is the directory was describes (ErrMoved when not), and skips
// the skip entries the walk had read of it, batch at a time; a directory
// that has fewer entries now ends the skipping early.
func Reopen(child int, was Was, skip, batch int) (*os.File, error) {
	f, err := OpenDir(child, "..")
	if err != nil {
		return nil, fmt.Errorf("reopen a directory: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Ino != was.Ino || uint64(st.Dev) != was.Dev ||
		(was.Changed != nil && st.Ctim != *was.Changed) {
		f.Close()
		return nil, ErrMoved
	}
	for skip > 0 {
		ents, err := f.ReadDir(min(skip, max(batch, 1)))
		skip -= len(ents)
		if len(ents) == 0 {
			if err != nil && !errors.Is(err, io.EOF) {
				f.Close()
				return nil, fmt.Errorf("read a directory: %w", err)
			}
			break // it shrank: nothing more to read in it
		}
	}
	return f, nil
}
