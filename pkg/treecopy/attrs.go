package treecopy

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// errReplaced says an entry the copy made was replaced by another while
// the copy was giving it its attributes: someone is writing the copy.
var errReplaced = errors.New("replaced by another file while the copy was making it")

// fifoMade runs once a FIFO is made and before it gets its mode; tests
// put a writer of the copy there.
var fifoMade = func(dirfd int, name string) {}

// chmodFIFO gives the FIFO name below dirfd, which the copy has just
// made, its mode through a descriptor of that FIFO (opened O_PATH, never
// following a symlink; chmod has no such flag before Linux 6.6), so that a
// name swapped meanwhile for a symlink or another file changes the mode of
// nothing else.
func chmodFIFO(dirfd int, name string, mode uint32) error {
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return fmt.Errorf("FIFO %q: %w", name, errReplaced)
	}
	return unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), mode, 0)
}

// times returns the access and modification times of st.
func times(st *unix.Stat_t) []unix.Timespec {
	return []unix.Timespec{st.Atim, st.Mtim}
}

// setAttrs gives the copy dst the owner, mode, extended attributes and
// times of the source src (a regular file or a directory), in that order:
// chown clears the setuid and setgid bits and file capabilities, and
// everything but setting the times changes the ctime only.
//
// Owner and mode are set only where they differ from the copy's (as its
// creation left them, known without asking the server again): each is a
// call to the server.
func (r *copyRun) setAttrs(sfd, dfd int, st *unix.Stat_t) error {
	var now unix.Stat_t
	if err := unix.Fstat(dfd, &now); err != nil {
		return err
	}
	if now.Uid != st.Uid || now.Gid != st.Gid {
		if err := unix.Fchown(dfd, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
		now.Mode = 0 // chown may have cleared setuid and setgid
	}
	if now.Mode&0o7777 != st.Mode&0o7777 {
		if err := unix.Fchmod(dfd, st.Mode&0o7777); err != nil {
			return err
		}
	}
	if err := r.copyXattrs(sfd, dfd); err != nil {
		return err
	}
	return unix.UtimesNanoAt(dfd, "", times(st), unix.AT_EMPTY_PATH)
}

// setAttrsAt gives the copy name below dfd (a FIFO, never opened) the
// owner, mode and times of st. Extended attributes in the user namespace
// exist only on regular files and directories.
func (r *copyRun) setAttrsAt(_, dfd int, name string, st *unix.Stat_t) error {
	if err := unix.Fchownat(dfd, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if err := chmodFIFO(dfd, name, st.Mode&0o7777); err != nil {
		return err
	}
	return unix.UtimesNanoAt(dfd, name, times(st), unix.AT_SYMLINK_NOFOLLOW)
}

// setLinkAttrs gives the symlink name below dfd the owner and times of st
// (a symlink has no mode of its own).
func (r *copyRun) setLinkAttrs(dfd int, name string, st *unix.Stat_t) error {
	if err := unix.Fchownat(dfd, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	return unix.UtimesNanoAt(dfd, name, times(st), unix.AT_SYMLINK_NOFOLLOW)
}

// xattrRefused tells whether err says the copy's file system does not
// take an attribute (its namespace, its size, or this user): the copy goes
// on without it, counted.
func xattrRefused(err error) bool {
	return errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EPERM) ||
		errors.Is(err, unix.EACCES) || errors.Is(err, unix.E2BIG) || errors.Is(err, unix.ERANGE) || errors.Is(err, unix.EINVAL)
}

// copyXattrs copies the extended attributes of sfd to dfd.
func (r *copyRun) copyXattrs(sfd, dfd int) error {
	names, err := listXattrs(sfd)
	if err != nil {
		if xattrRefused(err) {
			return nil // none on the source's file system
		}
		return err
	}
	for _, name := range names {
		val, err := getXattr(sfd, name)
		if errors.Is(err, unix.ENODATA) {
			continue // removed meanwhile
		}
		if err == nil {
			err = unix.Fsetxattr(dfd, name, val, 0)
		}
		if err != nil {
			if !xattrRefused(err) {
				return err
			}
			r.skipped.Add(1)
		}
	}
	return nil
}

// listXattrs returns the names of fd's extended attributes.
func listXattrs(fd int) ([]string, error) {
	for {
		n, err := unix.Flistxattr(fd, nil)
		if err != nil || n == 0 {
			return nil, err
		}
		buf := make([]byte, n)
		n, err = unix.Flistxattr(fd, buf)
		if errors.Is(err, unix.ERANGE) {
			continue // grew meanwhile
		}
		if err != nil {
			return nil, err
		}
		var names []string
		start := 0
		for i, b := range buf[:n] {
			if b == 0 {
				if i > start {
					names = append(names, string(buf[start:i]))
				}
				start = i + 1
			}
		}
		return names, nil
	}
}

// getXattr returns the value of fd's extended attribute name.
func getXattr(fd int, name string) ([]byte, error) {
	for {
		n, err := unix.Fgetxattr(fd, name, nil)
		if err != nil {
			return nil, err
		}
		buf := make([]byte, n)
		n, err = unix.Fgetxattr(fd, name, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}
