package treecopy

// Unpack is the engine's other way in: a tar archive (gzip-compressed or
// not) unpacked into an empty directory, as restoring a csi-driver-nfs
// snapshot (a tar.gz of the volume on the share) needs, without ever
// trusting the archive: every name is resolved one component at a time
// below the directory, without following a symlink, so no entry ("../x",
// "/etc/x", "link/x" after "link -> /") lands outside it; hard links only
// join names inside it; device nodes are left out. Regular files,
// directories, symlinks, hard links and FIFOs get their mode (files
// without setuid and setgid unless asked), owner and times (directories'
// mode and times once their contents are in place), and blocks of zeros
// stay holes; of two entries of one name, the later wins. It holds one
// open descriptor per directory level of the entry being unpacked,
// remembers the modes and times of at most MaxDirs directories (16 MiB of
// their names), and keeps to bounds in bytes, entries and depth that a
// crafted archive cannot talk it out of.

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/pkg/safepath"
)

// MaxDirs and maxDirNames bound the directories whose times are set once
// the archive is unpacked, by count and by the bytes of their names; past
// either, a directory's times are set when it is made.
const (
	MaxDirs     = 100000
	maxDirNames = 16 << 20
)

// ErrUnsafe marks an entry whose name would leave the directory or pass
// through a symlink: it is left out, and counted.
var ErrUnsafe = errors.New("unsafe entry")

// ErrBounds says an archive holds more than its Unpacker allows: more
// bytes of file data, more entries or deeper names.
var ErrBounds = errors.New("the archive passes the restore's bounds")

// Unpacker unpacks archives within bounds.
type Unpacker struct {
	// MaxBytes bounds the file data, by the sizes the archive declares
	// (holes included), checked before a file's data is read.
	MaxBytes int64
	// MaxEntries bounds the archive's entries, of every kind.
	MaxEntries int64
	// MaxDepth bounds the components of an entry's name.
	MaxDepth int
	// KeepSetID keeps the setuid and setgid bits of files; without it
	// they are cleared.
	KeepSetID bool
	// Owner, when set, owns every restored entry in place of the owners
	// the archive names (the volume's ownership policy); nil: the
	// archive's owners.
	Owner *Owner
	// Limit paces the restore, one entry at a time; nil: unpaced.
	Limit Limiter
	// Progress, when set, follows the restore as it goes.
	Progress *Progress
}

// Owner is the owner a restore gives its entries: a UID or GID of -1
// keeps the archive's.
type Owner struct{ UID, GID int }

// DefaultUnpacker allows a terabyte of data, ten million entries and
// names 512 directories deep; a restore into a volume sets MaxBytes to
// the volume's capacity.
var DefaultUnpacker = Unpacker{MaxBytes: 1 << 40, MaxEntries: 10_000_000, MaxDepth: 512}

// Unpack reads the archive r (gzip-compressed when it starts with the gzip
// magic) and unpacks it into the directory open as dirfd (it stays the
// caller's), which should be empty, and returns what it made as a Copy
// does (every file counted as ReadWrite; Skipped: device nodes, unsafe
// names, and a name that comes again for a directory). It stops at ctx's
// end, inside a file too. An error leaves a partial tree for the caller to
// remove.
func (c Unpacker) Unpack(ctx context.Context, r io.Reader, dirfd int) (Result, error) {
	start := time.Now()
	res, err := c.unpack(ctx, r, dirfd)
	res.ByMethod[ReadWrite] = res.Files
	res.Took = time.Since(start)
	return res, err
}

func (c Unpacker) unpack(ctx context.Context, r io.Reader, dirfd int) (Result, error) {
	var res Result
	br := bufio.NewReaderSize(r, 1<<20)
	var in io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return res, fmt.Errorf("gzip: %w", err)
		}
		defer zr.Close()
		in = zr
	}
	u := &unpackRun{c: c, ctx: ctx, root: dirfd, buf: make([]byte, 1<<20)}
	tr := tar.NewReader(in)
	for entries := int64(1); ; entries++ {
		if err := ctx.Err(); err != nil {
			return u.res, err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return u.res, fmt.Errorf("read archive: %w", err)
		}
		if entries > c.MaxEntries {
			return u.res, fmt.Errorf("more than %d entries: %w", c.MaxEntries, ErrBounds)
		}
		if c.Limit != nil {
			if err := c.Limit.Wait(ctx, 1); err != nil {
				return u.res, err
			}
		}
		if c.Progress != nil {
			c.Progress.Entries.Add(1)
		}
		if err := u.entry(h, tr); err != nil {
			if errors.Is(err, ErrUnsafe) {
				u.res.Skipped++
				continue
			}
			return u.res, fmt.Errorf("%q: %w", h.Name, err)
		}
	}
	for i := len(u.dirs) - 1; i >= 0; i-- { // deepest last made, first set
		d := u.dirs[i]
		if err := u.at(d.name, func(parent int, base string) error {
			return dirModeAndTimes(parent, base, d.mode, d.times)
		}); err != nil && !errors.Is(err, ErrUnsafe) {
			return u.res, fmt.Errorf("%q: set mode and times: %w", d.name, err)
		}
	}
	return u.res, nil
}

type unpackRun struct {
	c         Unpacker
	ctx       context.Context
	root      int
	res       Result
	declared  int64 // bytes of file data the archive declared so far
	buf       []byte
	dirs      []dirAttrs
	dirsBytes int // of the names in dirs
}

// dirAttrs is a directory's mode and times, set once its contents are in.
type dirAttrs struct {
	name  string
	mode  uint32
	times []unix.Timespec
}

// dirModeAndTimes gives the directory base below parent its mode and
// times, through a descriptor of it (never through a symlink).
func dirModeAndTimes(parent int, base string, mode uint32, times []unix.Timespec) error {
	fd, err := unix.Openat(parent, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return ErrUnsafe
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, mode); err != nil {
		return err
	}
	return unix.UtimesNanoAt(fd, "", times, unix.AT_EMPTY_PATH)
}

// replacing runs mk, which makes the name base below parent; should the
// name be taken (an archive may hold a name twice, the later entry
// winning), it removes what is there, unless that is a directory, and
// runs mk again.
func replacing(parent int, base string, mk func() error) error {
	err := mk()
	if !errors.Is(err, unix.EEXIST) {
		return err
	}
	if err := unix.Unlinkat(parent, base, 0); err != nil {
		if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM) {
			return ErrUnsafe // a directory: left as it is
		}
		return err
	}
	return mk()
}

// clean returns the archive name as a path below the root, or ErrUnsafe
// (safepath.ArchiveEntry).
func clean(name string) (string, error) {
	p, ok := safepath.ArchiveEntry(name)
	if !ok {
		return "", ErrUnsafe
	}
	return p, nil
}

// at resolves the parent of name below the root without following any
// symlink (a symlink or non-directory on the way is ErrUnsafe) and calls fn
// with it open and name's last component.
func (u *unpackRun) at(name string, fn func(parent int, base string) error) error {
	dir, base := path.Split(name)
	fd, err := unix.Openat(u.root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	for _, c := range strings.Split(strings.TrimSuffix(dir, "/"), "/") {
		if c == "" || c == "." {
			continue
		}
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			// A parent the archive does not list: made, as tar does.
			if err = unix.Mkdirat(fd, c, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		unix.Close(fd)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return ErrUnsafe
		}
		if err != nil {
			return err
		}
		fd = next
	}
	defer unix.Close(fd)
	return fn(fd, base)
}

func headerTimes(h *tar.Header) []unix.Timespec {
	at := h.AccessTime
	if at.IsZero() {
		at = h.ModTime
	}
	return []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(h.ModTime.UnixNano())}
}

// entry unpacks one archive entry.
func (u *unpackRun) entry(h *tar.Header, body io.Reader) error {
	name, err := clean(h.Name)
	if err != nil {
		return err
	}
	mode := uint32(h.Mode) & 0o7777
	if name == "." {
		return nil // the root is the caller's: its own owner and mode stay
	}
	if depth := strings.Count(name, "/") + 1; depth > u.c.MaxDepth {
		return fmt.Errorf("a name %d deep, more than %d: %w", depth, u.c.MaxDepth, ErrBounds)
	}
	if h.Typeflag != tar.TypeDir && !u.c.KeepSetID {
		mode &^= unix.S_ISUID | unix.S_ISGID
	}
	switch h.Typeflag {
	case tar.TypeDir:
		return u.dir(h, name, mode)
	case tar.TypeReg, tar.TypeGNUSparse:
		return u.file(h, body, name, mode)
	case tar.TypeSymlink:
		return u.symlink(h, name)
	case tar.TypeLink:
		return u.link(h, name)
	case tar.TypeFifo:
		return u.fifo(h, name, mode)
	default: // devices, sockets, and what this reader does not know
		return ErrUnsafe
	}
}

// dir makes the directory name of the entry h (or finds it made) with the
// entry's owner; its mode and times wait for the end of the archive (u.dirs)
// when they fit, as entries made in it would change them.
func (u *unpackRun) dir(h *tar.Header, name string, mode uint32) error {
	return u.at(name, func(parent int, base string) error {
		if err := unix.Mkdirat(parent, base, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
		fd, err := unix.Openat(parent, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				return ErrUnsafe
			}
			return err
		}
		defer unix.Close(fd)
		u.res.Dirs++
		uid, gid := u.owner(h)
		if err := unix.Fchown(fd, uid, gid); err != nil {
			return err
		}
		if len(u.dirs) < MaxDirs && u.dirsBytes+len(name) <= maxDirNames {
			u.dirs = append(u.dirs, dirAttrs{name: name, mode: mode, times: headerTimes(h)})
			u.dirsBytes += len(name)
			return nil
		}
		if err := unix.Fchmod(fd, mode); err != nil {
			return err
		}
		return unix.UtimesNanoAt(fd, "", headerTimes(h), unix.AT_EMPTY_PATH)
	})
}

// file makes the regular file name of the entry h with its data (body),
// owner, mode and times, within the restore's bytes.
func (u *unpackRun) file(h *tar.Header, body io.Reader, name string, mode uint32) error {
	if h.Size < 0 || h.Size > u.c.MaxBytes-u.declared {
		return fmt.Errorf("its %d bytes pass the restore's %d bytes of file data: %w", h.Size, u.c.MaxBytes, ErrBounds)
	}
	u.declared += h.Size
	return u.at(name, func(parent int, base string) error {
		var fd int
		err := replacing(parent, base, func() (err error) {
			fd, err = unix.Openat(parent, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
			return err
		})
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := u.data(fd, body, h.Size); err != nil {
			return err
		}
		u.res.Files++
		uid, gid := u.owner(h)
		if err := unix.Fchown(fd, uid, gid); err != nil {
			return err
		}
		if err := unix.Fchmod(fd, mode); err != nil { // after chown, which clears setuid
			return err
		}
		return unix.UtimesNanoAt(fd, "", headerTimes(h), unix.AT_EMPTY_PATH)
	})
}

// symlink makes the symlink name of the entry h, as it is (never followed).
func (u *unpackRun) symlink(h *tar.Header, name string) error {
	return u.at(name, func(parent int, base string) error {
		if err := replacing(parent, base, func() error { return unix.Symlinkat(h.Linkname, parent, base) }); err != nil {
			return err
		}
		u.res.Symlinks++
		uid, gid := u.owner(h)
		if err := unix.Fchownat(parent, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		return unix.UtimesNanoAt(parent, base, headerTimes(h), unix.AT_SYMLINK_NOFOLLOW)
	})
}

// link makes name a hard link to an entry made before it in the archive.
func (u *unpackRun) link(h *tar.Header, name string) error {
	target, err := clean(h.Linkname)
	if err != nil || target == "." || target == name {
		return ErrUnsafe
	}
	return u.at(target, func(tparent int, tbase string) error {
		return u.at(name, func(parent int, base string) error {
			// linkat without AT_SYMLINK_FOLLOW links a symlink itself,
			// never what it points at.
			err := replacing(parent, base, func() error { return unix.Linkat(tparent, tbase, parent, base, 0) })
			if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOENT) {
				return ErrUnsafe // a directory, or a name not (yet) in the archive
			}
			if err != nil {
				return err
			}
			u.res.Links++
			return nil
		})
	})
}

// fifo makes the FIFO name of the entry h.
func (u *unpackRun) fifo(h *tar.Header, name string, mode uint32) error {
	return u.at(name, func(parent int, base string) error {
		if err := replacing(parent, base, func() error { return unix.Mkfifoat(parent, base, 0o600) }); err != nil {
			return err
		}
		u.res.FIFOs++
		fifoMade(parent, base)
		uid, gid := u.owner(h)
		if err := unix.Fchownat(parent, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if err := chmodFIFO(parent, base, mode); err != nil {
			return err
		}
		return unix.UtimesNanoAt(parent, base, headerTimes(h), unix.AT_SYMLINK_NOFOLLOW)
	})
}

// owner is the owner the entry h gets: the archive's, or the Owner's.
func (u *unpackRun) owner(h *tar.Header) (uid, gid int) {
	uid, gid = h.Uid, h.Gid
	if o := u.c.Owner; o != nil {
		if o.UID >= 0 {
			uid = o.UID
		}
		if o.GID >= 0 {
			gid = o.GID
		}
	}
	return uid, gid
}

// data writes size bytes of body into fd, leaving blocks of zeros as
// holes.
func (u *unpackRun) data(fd int, body io.Reader, size int64) error {
	var off int64
	for off < size {
		if err := u.ctx.Err(); err != nil {
			return err
		}
		n, err := io.ReadFull(body, u.buf[:min(int64(len(u.buf)), size-off)])
		if n > 0 {
			w, werr := writeAt(fd, u.buf[:n], off, true)
			u.res.Bytes += int64(w)
			if u.c.Progress != nil {
				u.c.Progress.Bytes.Add(int64(w))
			}
			if werr != nil {
				return werr
			}
			off += int64(n)
		}
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return fmt.Errorf("archive ends inside the file: %w", io.ErrUnexpectedEOF)
			}
			return err
		}
	}
	return unix.Ftruncate(fd, size)
}
