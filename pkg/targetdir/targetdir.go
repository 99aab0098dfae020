// Package targetdir creates and removes publish target directories on the
// node's own disk, reaching them without following any symlink: the parent
// is opened with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) from the
// configured base, and the target itself is made, inspected and removed
// relative to that descriptor. It never unlinks anything but an empty
// directory.
package targetdir

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/targetpath"
)

// openParent returns an O_PATH descriptor of t's parent directory, reached
// from t.Base without symlinks and without leaving it.
func openParent(t targetpath.Target) (int, error) {
	base, err := unix.Open(t.Base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fault.Wrap(fault.FailedPrecondition, err, "open target root %q", t.Base)
	}
	if t.Parent == "" {
		return base, nil
	}
	defer unix.Close(base)
	for {
		fd, err := unix.Openat2(base, t.Parent, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		switch {
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			continue
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV), errors.Is(err, unix.ENOTDIR):
			return -1, fault.Wrap(fault.InvalidArgument, err, "parent of target %q is reached through a symlink or is not a directory", t.Path())
		case err != nil:
			return -1, &parentError{fault.Wrap(fault.NotFound, err, "parent of target %q", t.Path())}
		}
		return fd, nil
	}
}

// parentError says the target's parent does not exist (or cannot be
// opened for another reason than a symlink).
type parentError struct{ error }

func (e *parentError) Unwrap() error { return e.error }

// CheckParent reports whether t's parent, if it exists, is reached without
// symlinks. Call it before anything acts on the target path by name (an
// unmount): the kernel would follow a symlink that names another mount.
func CheckParent(t targetpath.Target) error {
	pfd, err := openParentIfAny(t)
	if err != nil || pfd < 0 {
		return err
	}
	return unix.Close(pfd)
}

// openParentIfAny is openParent, except that a missing parent gives -1
// and no error.
func openParentIfAny(t targetpath.Target) (int, error) {
	pfd, err := openParent(t)
	var pe *parentError
	if errors.As(err, &pe) && errors.Is(err, unix.ENOENT) {
		return -1, nil
	}
	return pfd, err
}

// Make creates the target directory (mode 0750) if it is missing and
// checks that it is a real directory, not a symlink or a file. The parent
// must exist: kubelet creates it before calling NodePublishVolume.
func Make(t targetpath.Target) error {
	pfd, err := openParent(t)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := unix.Mkdirat(pfd, t.Leaf, 0o750); err != nil && !errors.Is(err, unix.EEXIST) {
		return fault.Wrap(fault.Internal, err, "create target %q", t.Path())
	}
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, t.Leaf, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fault.Wrap(fault.Internal, err, "inspect target %q", t.Path())
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fault.New(fault.InvalidArgument, "target %q is %s, not a directory; refusing to mount on it", t.Path(), kind(st.Mode))
	}
	return nil
}

// Remove removes the target if it is an empty directory; a target that is
// already gone, or whose parent is, is not an error. Anything else at the
// target (a file, a symlink, a socket) is left in place and reported.
func Remove(t targetpath.Target) error {
	pfd, err := openParentIfAny(t)
	if err != nil || pfd < 0 {
		return err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, t.Leaf, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fault.Wrap(fault.Internal, err, "inspect target %q", t.Path())
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fault.New(fault.FailedPrecondition, "target %q is %s, not a directory; left in place", t.Path(), kind(st.Mode))
	}
	if err := unix.Unlinkat(pfd, t.Leaf, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fault.Wrap(fault.FailedPrecondition, err, "remove target directory %q", t.Path())
	}
	return nil
}

func kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "a symlink"
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFDIR:
		return "a directory"
	}
	return fmt.Sprintf("a file of type %#o", mode&unix.S_IFMT)
}

// Published returns the targets, in the kubelet layout of r, whose
// kubelet vol_data.json names volumeID: where kubelet has the volume
// published, known even to a plugin that restarted since. Each volume
// directory is reached as a target's parent is (no symlink, never leaving
// the kubelet directory), and only its vol_data.json is read: a regular
// file, at most targetpath.MaxVolData bytes. Whether anything is mounted
// at a target is the caller's to check. A Root rule has no such layout.
func Published(r targetpath.Rule, volumeID string) []string {
	var out []string
	for target, id := range PublishedAll(r, "") {
		if id == volumeID {
			out = append(out, target)
		}
	}
	sort.Strings(out)
	return out
}

// PublishedAll returns the volume ID of every target, in the kubelet
// layout of r, whose kubelet vol_data.json names the driver (any driver
// when driver is ""), read as Published reads them.
func PublishedAll(r targetpath.Rule, driver string) map[string]string {
	pattern := r.VolumeDirGlob()
	if pattern == "" {
		return nil
	}
	dirs, err := filepath.Glob(pattern)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, dir := range dirs {
		t, err := r.Check(filepath.Join(dir, "mount"))
		if err != nil {
			continue
		}
		if h, d, err := volData(t); err == nil && (driver == "" || d == driver) {
			out[t.Path()] = h
		}
	}
	return out
}

// volData reads the volume ID and the driver's name from the
// vol_data.json beside t.
func volData(t targetpath.Target) (string, string, error) {
	pfd, err := openParent(t)
	if err != nil {
		return "", "", err
	}
	fd, err := unix.Openat(pfd, targetpath.VolDataFile, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	unix.Close(pfd)
	if err != nil {
		return "", "", err
	}
	f := os.NewFile(uintptr(fd), targetpath.VolDataFile)
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return "", "", fmt.Errorf("%s is not a regular file", targetpath.VolDataFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, targetpath.MaxVolData))
	if err != nil {
		return "", "", err
	}
	return targetpath.VolData(b)
}
