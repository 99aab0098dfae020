package nfsproto

import (
	"fmt"
	"syscall"
)

// Status is an nfsstat4.
type Status uint32

// The statuses nfsdir acts on.
const (
	OK             Status = 0
	ErrPerm        Status = 1
	ErrNoEnt       Status = 2
	ErrIO          Status = 5
	ErrAccess      Status = 13
	ErrExist       Status = 17
	ErrXDev        Status = 18
	ErrNotDir      Status = 20
	ErrIsDir       Status = 21
	ErrInval       Status = 22
	ErrNoSpc       Status = 28
	ErrROFS        Status = 30
	ErrNameTooLong Status = 63
	ErrNotEmpty    Status = 66
	ErrDQuot       Status = 69
	ErrStale       Status = 70
	ErrBadHandle   Status = 10001
	ErrDelay       Status = 10008
	ErrExpired     Status = 10011
	ErrGrace       Status = 10013
	ErrWrongSec    Status = 10016
	ErrMoved       Status = 10019
	ErrNoFH        Status = 10020
	ErrStaleClient Status = 10022
	ErrNotSame     Status = 10027
	ErrSymlink     Status = 10029
	ErrBadXDR      Status = 10036
	ErrBadName     Status = 10041
	ErrBadSession  Status = 10052
	ErrBadSlot     Status = 10053
	ErrSeqMisorder Status = 10063
	ErrDeadSession Status = 10078
)

var statusNames = map[Status]string{
	OK: "NFS4_OK", ErrPerm: "NFS4ERR_PERM", ErrNoEnt: "NFS4ERR_NOENT", ErrIO: "NFS4ERR_IO",
	ErrAccess: "NFS4ERR_ACCESS", ErrExist: "NFS4ERR_EXIST", ErrXDev: "NFS4ERR_XDEV",
	ErrNotDir: "NFS4ERR_NOTDIR", ErrIsDir: "NFS4ERR_ISDIR", ErrInval: "NFS4ERR_INVAL",
	ErrNoSpc: "NFS4ERR_NOSPC", ErrROFS: "NFS4ERR_ROFS", ErrNameTooLong: "NFS4ERR_NAMETOOLONG",
	ErrNotEmpty: "NFS4ERR_NOTEMPTY", ErrDQuot: "NFS4ERR_DQUOT", ErrStale: "NFS4ERR_STALE",
	ErrBadHandle: "NFS4ERR_BADHANDLE", ErrDelay: "NFS4ERR_DELAY", ErrExpired: "NFS4ERR_EXPIRED",
	ErrGrace: "NFS4ERR_GRACE", ErrWrongSec: "NFS4ERR_WRONGSEC", ErrMoved: "NFS4ERR_MOVED",
	ErrNoFH: "NFS4ERR_NOFILEHANDLE", ErrStaleClient: "NFS4ERR_STALE_CLIENTID",
	ErrNotSame: "NFS4ERR_NOT_SAME", ErrSymlink: "NFS4ERR_SYMLINK", ErrBadXDR: "NFS4ERR_BADXDR", ErrBadName: "NFS4ERR_BADNAME",
	ErrBadSession: "NFS4ERR_BADSESSION", ErrBadSlot: "NFS4ERR_BADSLOT",
	ErrSeqMisorder: "NFS4ERR_SEQ_MISORDERED", ErrDeadSession: "NFS4ERR_DEADSESSION",
}

func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("nfsstat4 %d", uint32(s))
}

// SessionLost tells whether s means the client's session or client ID is
// gone on the server (a restart, an expired lease): a new session must be
// made, and the operations were not run.
func (s Status) SessionLost() bool {
	switch s {
	case ErrBadSession, ErrDeadSession, ErrStaleClient, ErrExpired, ErrBadSlot, ErrSeqMisorder:
		return true
	}
	return false
}

// OpError is the operation of a COMPOUND that failed: the server ran the
// operations before it, and none after it.
type OpError struct {
	Index  int    // its place in the COMPOUND
	Op     string // its name
	Status Status
}

func (e *OpError) Error() string {
	return fmt.Sprintf("NFS %s (operation %d of the compound): %s", e.Op, e.Index, e.Status)
}

// errnos are the errno values Linux's NFS client gives for a status
// (fs/nfs/nfs4proc.c, nfs4_map_errors), so that a failed operation reads
// as the same failed system call would.
var errnos = map[Status]syscall.Errno{
	ErrPerm: syscall.EPERM, ErrNoEnt: syscall.ENOENT, ErrIO: syscall.EIO, ErrAccess: syscall.EACCES,
	ErrExist: syscall.EEXIST, ErrXDev: syscall.EXDEV, ErrNotDir: syscall.ENOTDIR, ErrIsDir: syscall.EISDIR,
	ErrInval: syscall.EINVAL, ErrNoSpc: syscall.ENOSPC, ErrROFS: syscall.EROFS,
	ErrNameTooLong: syscall.ENAMETOOLONG, ErrNotEmpty: syscall.ENOTEMPTY, ErrDQuot: syscall.EDQUOT,
	ErrStale: syscall.ESTALE, ErrBadHandle: syscall.ESTALE, ErrDelay: syscall.EAGAIN,
	ErrGrace: syscall.EAGAIN, ErrSymlink: syscall.ELOOP, ErrBadName: syscall.EINVAL,
	ErrWrongSec: syscall.EPERM, ErrMoved: syscall.EREMOTE,
}

// Errno is the errno of s; EIO for a status with none of its own.
func (s Status) Errno() syscall.Errno {
	if e, ok := errnos[s]; ok {
		return e
	}
	return syscall.EIO
}

// Unwrap is the operation's status as an errno: errors.Is(err,
// fs.ErrExist) holds for an NFS4ERR_EXIST.
func (e *OpError) Unwrap() error { return e.Status.Errno() }
