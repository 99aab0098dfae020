//go:build linux

// Package quota sets and reads Linux project quotas on a server's local
// file system: XFS mounted with prjquota, or ext4 with the project and
// quota features mounted with prjquota. A volume directory gets a project
// ID with the inherit flag, so that everything created below it counts
// against that project, and the project gets hard limits on blocks and
// inodes. The NFS server then refuses writes past the limit (XFS answers
// ENOSPC, ext4 EDQUOT) and answers statfs inside the directory with the
// project's limit and usage, so `df` in a pod shows the claim's size.
//
// It is the quota agent's side: it runs where the file system is, never
// on an NFS client. The calls are the kernel's (ioctl FS_IOC_FSSETXATTR,
// quotactl_fd); no quota tools are needed.
package quota

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Kernel ABI: struct fsxattr (linux/fs.h) and its ioctls, struct if_dqblk
// and the quotactl commands (linux/quota.h).
const (
	fsIocFsGetXattr  = 0x801c581f // _IOR('X', 31, struct fsxattr)
	fsIocFsSetXattr  = 0x401c5820 // _IOW('X', 32, struct fsxattr)
	xflagProjInherit = 0x00000200 // FS_XFLAG_PROJINHERIT

	prjQuota   = 2 // PRJQUOTA
	qGetQuota  = 0x800007
	qSetQuota  = 0x800008
	qifBLimits = 1 // QIF_BLIMITS
	qifILimits = 4 // QIF_ILIMITS
	blockSize  = 1024
)

type fsxattr struct {
	xflags     uint32
	extsize    uint32
	nextents   uint32
	projid     uint32
	cowextsize uint32
	pad        [8]byte
}

type dqblk struct {
	bhardlimit uint64 // in 1 KiB blocks
	bsoftlimit uint64
	curspace   uint64 // in bytes
	ihardlimit uint64
	isoftlimit uint64
	curinodes  uint64
	btime      uint64
	itime      uint64
	valid      uint32
	_          uint32
}

// Limits are a project's hard limits; 0 is no limit.
type Limits struct {
	Bytes  uint64
	Inodes uint64
}

// Usage is what a project uses, and its limits.
type Usage struct {
	Bytes, Inodes uint64
	Limits
}

// ErrNoProjectQuota means the file system does not account project quotas
// (not XFS with prjquota nor ext4 with project,quota and prjquota).
var ErrNoProjectQuota = errors.New("project quotas are not enabled on this file system (XFS: mount with prjquota; ext4: mkfs -O project,quota and mount with prjquota)")

// FS is a file system with project quotas, reached through a directory on
// it (its root or any other: quotactl_fd acts on the file system).
type FS struct{ f *os.File }

// Open opens the file system that holds dir.
func Open(dir string) (*FS, error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	fs := &FS{f}
	if _, err := fs.Get(0); err != nil {
		f.Close()
		return nil, err
	}
	return fs, nil
}

// Close releases the file system.
func (fs *FS) Close() error { return fs.f.Close() }

func (fs *FS) quotactl(cmd int, id uint32, q *dqblk) error {
	qcmd := cmd<<8 | prjQuota // QCMD(cmd, PRJQUOTA)
	_, _, e := unix.Syscall6(unix.SYS_QUOTACTL_FD, fs.f.Fd(), uintptr(qcmd), uintptr(id), uintptr(unsafe.Pointer(q)), 0, 0)
	switch e {
	case 0:
		return nil
	case unix.ESRCH, unix.ENOSYS, unix.ENOTSUP, unix.EINVAL:
		return fmt.Errorf("quotactl on %s: %w (%v)", fs.f.Name(), ErrNoProjectQuota, e)
	case unix.EPERM:
		return fmt.Errorf("quotactl on %s: %w (reading or setting another project's quota needs CAP_SYS_ADMIN)", fs.f.Name(), e)
	}
	return fmt.Errorf("quotactl on %s: %w", fs.f.Name(), e)
}

// SetLimits sets project id's hard limits (soft limits are set equal:
// there is no grace). Bytes are rounded up to whole KiB, the unit the
// kernel keeps.
func (fs *FS) SetLimits(id uint32, l Limits) error {
	blocks := (l.Bytes + blockSize - 1) / blockSize
	q := dqblk{bhardlimit: blocks, bsoftlimit: blocks, ihardlimit: l.Inodes, isoftlimit: l.Inodes, valid: qifBLimits | qifILimits}
	return fs.quotactl(qSetQuota, id, &q)
}

// Get returns what project id uses, and its limits: zero for a project
// the file system has no record of (nothing ever used it).
func (fs *FS) Get(id uint32) (Usage, error) {
	var q dqblk
	if err := fs.quotactl(qGetQuota, id, &q); errors.Is(err, unix.ENOENT) {
		return Usage{}, nil
	} else if err != nil {
		return Usage{}, err
	}
	return Usage{Bytes: q.curspace, Inodes: q.curinodes, Limits: Limits{Bytes: q.bhardlimit * blockSize, Inodes: q.ihardlimit}}, nil
}

// Project returns the project ID of the open file f and whether it
// passes it on to what is created below it.
func Project(f *os.File) (id uint32, inherit bool, err error) {
	var x fsxattr
	if err := ioctlXattr(f, fsIocFsGetXattr, &x); err != nil {
		return 0, false, err
	}
	return x.projid, x.xflags&xflagProjInherit != 0, nil
}

// SetProject gives the open directory dir project id, with the inherit
// flag: files and directories created below it get the same project. What
// is below it already keeps its own project (set it on an empty
// directory).
func SetProject(dir *os.File, id uint32) error {
	var x fsxattr
	if err := ioctlXattr(dir, fsIocFsGetXattr, &x); err != nil {
		return err
	}
	x.projid = id
	x.xflags |= xflagProjInherit
	return ioctlXattr(dir, fsIocFsSetXattr, &x)
}

// ClearProject gives dir project 0 without the inherit flag.
func ClearProject(dir *os.File) error {
	var x fsxattr
	if err := ioctlXattr(dir, fsIocFsGetXattr, &x); err != nil {
		return err
	}
	x.projid = 0
	x.xflags &^= xflagProjInherit
	return ioctlXattr(dir, fsIocFsSetXattr, &x)
}

func ioctlXattr(f *os.File, req uintptr, x *fsxattr) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), req, uintptr(unsafe.Pointer(x)))
	if e == unix.EPERM && req == fsIocFsSetXattr {
		return fmt.Errorf("%s: fsxattr ioctl: %w (changing a project needs CAP_FOWNER, or owning the directory)", f.Name(), e)
	}
	if e != 0 {
		return fmt.Errorf("%s: fsxattr ioctl: %w", f.Name(), e)
	}
	return nil
}
