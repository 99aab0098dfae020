package provision

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/fault"
)

// checkSealed fails when st, found at rec's path, is not the directory
// sealed into rec.
func (a seals) checkSealed(rec *Record, st fs.FileInfo) error {
	return a.checkSealedAs(rec, st, func() string { return a.handleDigest(a.root, rec.SubDir) })
}

// checkSealedFile fails when f, open (O_PATH will do) at rec's path or
// where it was just moved, is not the directory sealed into rec. Its
// attributes and handle come from the descriptor: no call on the share
// beyond the one that opened it.
func (a seals) checkSealedFile(rec *Record, f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return onShare(err, "check %q", rec.SubDir)
	}
	return a.checkSealedAs(rec, st, func() string { return fdHandleDigest(f) })
}

// checkSealedAs fails when st is not the directory sealed into rec;
// handle gives the digest of its file handle ("" when there is none).
func (a seals) checkSealedAs(rec *Record, st fs.FileInfo, handle func() string) error {
	if a.onServer && rec.ServerHandle == "" && rec.Handle != "" {
		// Said before anything changes: the controller acts instead.
		return fault.New(fault.Unimplemented, "directory %q was sealed through NFS, with a file handle only an NFS client can compare; the controller acts on it through its mount", rec.SubDir)
	}
	if !st.IsDir() {
		return fault.New(fault.FailedPrecondition, "%q is no longer a directory (%s); nfsdir leaves it alone", rec.SubDir, st.Mode().Type())
	}
	replaced := func(what string) error {
		return fault.New(fault.FailedPrecondition, "directory %q is not the one nfsdir created for %s (it was replaced: %s); nfsdir leaves it alone: delete it by hand, or hand it over with `nfsdir adopt` after removing the record %s", rec.SubDir, rec.describe(), what, recordPath(rec.Key()))
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Ino != rec.FileID {
		return replaced(fmt.Sprintf("fileid %d, recorded %d", sys.Ino, rec.FileID))
	}
	if want := a.sealedHandle(rec); want != "" {
		if h := handle(); h != "" && h != want {
			return replaced(fmt.Sprintf("same fileid %d, but its file handle (server file system and generation) differs from the recorded one", rec.FileID))
		}
	}
	return nil
}

// sealedHandle is the handle digest sealed into rec that this Area can
// compare: the NFS one through a share mount, the server's own on the
// server (OnServer); "" when rec has none of that kind.
func (a seals) sealedHandle(rec *Record) string {
	if a.onServer {
		return rec.ServerHandle
	}
	return rec.Handle
}

// handleDigest returns a digest of the file handle of p below root (for
// NFS, the server's file handle: file system id, inode and generation), or
// "" when the file system gives none.
func (a seals) handleDigest(root *os.Root, p string) string {
	var h unix.FileHandle
	at := func(fd int) (err error) {
		h, _, err = unix.NameToHandleAt(fd, path.Base(p), 0) // never follows a final symlink without AT_SYMLINK_FOLLOW
		return err
	}
	var err error
	if d := path.Dir(p); d == "." {
		err = a.atDir(root, at)
	} else {
		var dir *os.File
		if dir, err = root.Open(d); err == nil {
			err = at(int(dir.Fd()))
			dir.Close()
		}
	}
	if err != nil {
		return ""
	}
	return digestOf(h)
}

// fdHandleDigest is handleDigest of the file open as f.
func fdHandleDigest(f *os.File) string {
	h, _, err := unix.NameToHandleAt(int(f.Fd()), "", unix.AT_EMPTY_PATH)
	if err != nil {
		return ""
	}
	return digestOf(h)
}

func digestOf(h unix.FileHandle) string {
	sum := sha256.Sum256(append(binary.BigEndian.AppendUint32(nil, uint32(h.Type())), h.Bytes()...))
	return hex.EncodeToString(sum[:16])
}

// dropRecord removes the record under key if it is still rec (same token):
// a record written later by someone else is left alone.
func (a seals) dropRecord(key string, rec *Record) {
	if err := removeRecordIf(a.records(), key, rec.Token); err != nil {
		klog.Warningf("%s: %v", rec.describe(), err)
	}
}

// seal records the identity (fileid and file handle) of the directory
// just made for rec in its record, so that a directory put at the same
// path later is never taken for it, then gives it rec's owner and mode.
// All of it goes through one descriptor of the directory: what gets the
// owner and mode is what was sealed, whatever happens to the name
// meanwhile, and the server is asked for the name once. The descriptor
// is O_PATH where its mode can be set through /proc (setModeOpen): opening
// it then asks no permission of the server (through NFS, no ACCESS call).
func (a seals) seal(parent int, key string, rec *Record) error {
	flags := unix.O_RDONLY
	if procFDs() {
		flags = unix.O_PATH
	}
	fd, err := unix.Openat(parent, path.Base(rec.SubDir), flags|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return onShare(&fs.PathError{Op: "openat", Path: rec.SubDir, Err: err}, "open %q", rec.SubDir)
	}
	d := os.NewFile(uintptr(fd), rec.SubDir)
	defer d.Close()
	st, err := d.Stat()
	if err != nil {
		return onShare(err, "check %q", rec.SubDir)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok || !st.IsDir() {
		return fault.New(fault.FailedPrecondition, "%q is not a directory (%s)", rec.SubDir, st.Mode().Type())
	}
	sealed := *rec
	sealed.unseal()
	sealed.FileID = sys.Ino
	if a.onServer {
		sealed.ServerHandle = fdHandleDigest(d)
	} else {
		sealed.Handle = fdHandleDigest(d)
	}
	if err := rewriteRecord(a.records(), key, &sealed); err != nil {
		return err
	}
	*rec = sealed
	if rec.UID >= 0 || rec.GID >= 0 {
		if err := unix.Fchownat(int(d.Fd()), "", rec.UID, rec.GID, unix.AT_EMPTY_PATH); err != nil {
			return onShare(&fs.PathError{Op: "chown", Path: rec.SubDir, Err: err}, "set owner %d:%d of %q", rec.UID, rec.GID, rec.SubDir)
		}
	}
	// Chmod after chown: chown clears the setgid bit.
	if err := setModeOpen(d, modeBits(rec.Mode)); err != nil {
		return onShare(err, "set mode %04o of %q", rec.Mode, rec.SubDir)
	}
	return nil
}

// openDir opens the directory rel of the share without following any
// symlink, on the way or at its end.
func (a seals) openDir(rel string) (*os.File, error) {
	var fd int
	err := a.atParent(rel, func(parent int) (err error) {
		fd, err = unix.Openat(parent, path.Base(rel), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, fs.ErrNotExist
		}
		return nil, fmt.Errorf("open %q: %w", rel, err)
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// procFDs reports whether /proc/self/fd is there to reach a descriptor's
// file by (setModeOpen).
var procFDs = sync.OnceValue(func() bool {
	_, err := os.Stat("/proc/self/fd")
	return err == nil
})

// setModeOpen sets the mode of the file open as f, which may be an O_PATH
// descriptor (fchmod refuses those): through /proc/self/fd, whose link
// leads to the open file itself and never to whatever now holds its name.
// (fchmodat2 with AT_EMPTY_PATH would do without /proc, from Linux 6.6.)
func setModeOpen(f *os.File, mode os.FileMode) error {
	if err := f.Chmod(mode); !errors.Is(err, unix.EBADF) {
		return err
	}
	return os.Chmod("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), mode)
}

// openPathAt opens name in the directory open as dir for its attributes,
// file handle and names only (O_PATH: no permission check, so through
// NFS no ACCESS call, and no open state), never following a final
// symlink: a symlink is opened as itself.
func openPathAt(dir int, name string) (*os.File, error) {
	fd, err := unix.Openat(dir, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "openat", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// freshOpenPath opens rel on the share as openPathAt does, without
// following any symlink on the way, after revalidating its parent
// directory with the server as freshLstat does.
func (a seals) freshOpenPath(rel string) (*os.File, error) {
	if !a.onServer && !a.freshLookups {
		if d, err := a.root.Open(path.Dir(rel)); err == nil {
			d.Close()
		}
	}
	var f *os.File
	err := a.atParent(rel, func(parent int) (err error) {
		f, err = openPathAt(parent, path.Base(rel))
		return err
	})
	return f, err
}

// FreshLstat is Lstat of p below root after revalidating p's parent
// directory with the server: opening a directory revalidates its attributes
// (close-to-open), and a changed directory drops the client's cached names
// in it. Without it, a directory moved or replaced through another client
// could still be seen as it was, and a rename by name would then act on
// whatever the server now holds at that name.
func FreshLstat(root *os.Root, p string) (fs.FileInfo, error) {
	if d, err := root.Open(path.Dir(p)); err == nil {
		d.Close()
	}
	return root.Lstat(p)
}

// freshLstat is FreshLstat of p on the share; on the server's own file
// system (OnServer), which no client cache stands between, or on a mount
// that never caches names (FreshLookups), a plain Lstat.
func (a seals) freshLstat(p string) (fs.FileInfo, error) {
	if a.onServer || a.freshLookups {
		return a.root.Lstat(p)
	}
	return FreshLstat(a.root, p)
}

// fileID returns the inode number (NFS fileid) of dir, which must be a real
// directory.
func fileID(root *os.Root, dir string) (uint64, error) {
	st, err := root.Lstat(dir)
	if err != nil {
		return 0, onShare(err, "check %q", dir)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok || !st.IsDir() {
		return 0, fault.New(fault.FailedPrecondition, "%q is not a directory (%s)", dir, st.Mode().Type())
	}
	return sys.Ino, nil
}

// seals is the room of Area that seals volume directories (a record
// holding the directory's inode and handle) and checks their seals,
// reading the share afresh where the area asks for fresh lookups.
type seals struct{ *Area }

func (a *Area) seals() seals { return seals{a} }
