// Package provision creates and deletes volume directories on a mounted
// share. All filesystem work goes through an *os.Root opened on the share, so
// no path, symlink or ".." can reach outside it, and every directory it
// creates is backed by a Record in the share's metadata area: a directory
// without a matching record is never deleted, archived or renamed.
package provision

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/safepath"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// Request describes a volume to create. Defaults are already applied.
type Request struct {
	Name          string
	SubDir        string
	OnDelete      params.OnDelete
	Mode          uint32
	UID, GID      int
	CapacityBytes int64
	// Shared allows other volumes to use the same directory; only with
	// OnDelete retain.
	Shared bool
	// Options are the share mount options the volume ID carries, kept in
	// the record so that a listing rebuilds the same ID.
	Options string
	// PublishOptions replace the StorageClass's mount options at publish
	// (a VolumeAttributesClass's at creation); nil: none.
	PublishOptions *string
	// Source, when set, is what the new volume is filled from (Fill);
	// it must exist on this share, be complete, and fit CapacityBytes.
	Source *Source
	// LegacyID (Adopt only) is the csi-driver-nfs volume ID that keeps
	// naming the adopted directory; its subDir must be SubDir.
	LegacyID string
	// QuotaAgent is the quota agent that enforces the volume's size.
	QuotaAgent string
	// CopyAgent is the agent that copies the volume's trees on the server.
	CopyAgent string
	// KeepSetID keeps setuid and setgid bits in a restore from an archive.
	KeepSetID bool
}

// Create makes the volume directory for req on the share, or returns the
// existing record when the same request was already served (a retry).
//
// The record is keyed by the volume's directory and published, exclusively,
// before the directory is made: a directory without a record is never
// nfsdir's, and two volumes can never claim one directory unless both opt in
// to sharing it. A volume directory never lies inside another volume's
// directory or a shared directory, and never holds one, since it must not
// exist yet. The directory is made read-only and empty (mode 0500), its
// identity (fileid) is sealed into the record, and only then does it get
// the volume's owner and mode: a retry after a crash takes over a directory
// at the path only when it is sealed, or is still exactly what nfsdir
// leaves between mkdir and seal (empty, mode 0500, nfsdir's owner), and
// Delete never takes a directory put at the same path later for the
// volume. A first creation costs the record, the mkdir, the seal (a
// symlink and a rename) and a chmod, one or two lookups per parent level
// of a nested subDir, and a chown when an owner is asked for.
//
// A shared volume (req.Shared) joins the directory nfsdir created for
// shared volumes at that subDir, with the same owner and mode, and creates
// it when missing, under a record of its own (Record.SharedDir); it never
// joins another directory.
//
// Errors: InvalidArgument for a path inside another volume or shared
// directory; AlreadyExists when the directory belongs to another volume,
// when the same volume exists with other parameters, or when the directory
// exists without being nfsdir's; FailedPrecondition when a path component
// is a symlink or not a directory, or when a directory at the path cannot
// be proven to be the one nfsdir made.
func (a *Area) Create(ctx context.Context, req Request) (*Record, error) {
	if err := safepath.CheckVolumePath(req.SubDir); err != nil {
		return nil, fault.New(fault.InvalidArgument, "subDir %v", err)
	}
	// The agent runs this same Create on the server, checks included.
	if rec, done, err := a.makeRemote(ctx, req); done {
		return rec, err
	}
	// Three checks that only look (records above, shares above, the
	// other kind's record), made at once below a parent.
	if err := a.firstError(len(safepath.Parents(req.SubDir)) > 0,
		func() error { return a.checkNotNested(req.SubDir) },
		func() error { return a.checkNoShareAbove(req.SubDir) },
		func() error { return a.checkKind(req) },
	); err != nil {
		return nil, err
	}
	if req.Shared && req.Source != nil {
		return nil, fault.New(fault.InvalidArgument, "volume %q: a volume that shares its directory (allowSharedSubDir) cannot be made from a snapshot or another volume", req.Name)
	}
	rec := newRecord(req)
	key := rec.Key()
	if req.Source != nil {
		// Checked before the record: a volume whose source is missing
		// leaves nothing behind. A replay finds its record and is not
		// checked again (the source may be gone by then).
		if old, err := readRecord(a.records(), key); err != nil || old == nil || old.Name != req.Name {
			if err := a.checkSource(req); err != nil {
				return nil, err
			}
		}
	}
	err := writeRecordExclusive(a.records(), key, rec)
	if errors.Is(err, fs.ErrExist) {
		if old, rerr := readRecord(a.records(), key); rerr == nil && old != nil && old.Name != req.Name && a.abandoned(old) {
			klog.Warningf("volume %q: reclaiming subDir %q from volume %q, whose creation was abandoned at %s before its directory was made", req.Name, req.SubDir, old.Name, old.Created.Format(time.RFC3339))
			a.dropRecord(key, old)
			err = writeRecordExclusive(a.records(), key, rec)
		}
	}
	fresh := err == nil
	if errors.Is(err, fs.ErrExist) {
		// A retry, a crash between the record and the directory, or another
		// volume that owns the directory.
		old, err := readRecord(a.records(), key)
		if err != nil {
			return nil, err
		}
		if old == nil {
			return nil, fault.New(fault.Aborted, "volume %q is being deleted concurrently; retry", req.Name)
		}
		if old.Name != req.Name {
			return nil, fault.New(fault.AlreadyExists, "subDir %q already belongs to volume %q; two volumes sharing a directory would delete each other's data (a StorageClass can allow it with allowSharedSubDir and onDelete: retain)", req.SubDir, old.Name)
		}
		if err := compatible(old, req); err != nil {
			return nil, err
		}
		rec = old
	} else if err != nil {
		return nil, err
	}
	if req.Shared {
		err = a.joinShared(rec)
	} else if err = a.makeDir(key, rec, fresh); err == nil && fresh {
		err = a.recheckNesting(rec)
	}
	if err != nil && fresh && rec.FileID == 0 {
		// Nothing was made for this record: leave no trace of it.
		a.dropRecord(key, rec)
	}
	if err != nil {
		return nil, err
	}
	a.learnDir(rec)
	return rec, nil
}

// newRecord is the record of a new volume for req, not sealed yet.
func newRecord(req Request) *Record {
	return &Record{Version: RecordVersion, Name: req.Name, Token: volumeid.NewToken(), SubDir: req.SubDir,
		Shared: req.Shared, OnDelete: req.OnDelete, Mode: req.Mode, UID: req.UID, GID: req.GID,
		CapacityBytes: req.CapacityBytes, Created: time.Now().UTC().Truncate(time.Second), Options: req.Options,
		PublishOptions: req.PublishOptions, Source: req.Source, Filling: req.Source != nil, Pending: req.Source != nil, QuotaAgent: req.QuotaAgent, CopyAgent: req.CopyAgent,
		KeepSetID: req.KeepSetID}
}

// AbandonedAfter is how old a volume's record must be, with no directory
// made for it, before another volume may take its subDir: the creation was
// cut by a crash and never retried (its claim was deleted meanwhile).
// csi-provisioner retries a failed creation at least every 5 minutes.
var AbandonedAfter = time.Hour

// abandoned reports whether rec is an exclusive volume's record whose
// directory was never made and that is older than AbandonedAfter.
func (a *Area) abandoned(rec *Record) bool {
	if rec.Shared || rec.SharedDir || rec.Adopted || rec.FileID != 0 || time.Since(rec.Created) < AbandonedAfter {
		return false
	}
	_, err := a.freshLstat(rec.SubDir)
	return errors.Is(err, fs.ErrNotExist)
}

// checkKind fails when the directory of req is taken by a volume of the
// other kind: an exclusive volume's directory is never shared, and a shared
// directory never becomes one volume's.
func (a *Area) checkKind(req Request) error {
	if req.Shared {
		other, err := readRecord(a.records(), volumeid.KeyForDir(req.SubDir))
		if err != nil || other == nil {
			return err
		}
		return fault.New(fault.AlreadyExists, "subDir %q belongs to volume %q, which does not share it", req.SubDir, other.Name)
	}
	dir, err := readRecord(a.records(), volumeid.KeyForSharedDir(req.SubDir))
	if err != nil || dir == nil {
		return err
	}
	return fault.New(fault.AlreadyExists, "subDir %q is a directory nfsdir made for shared volumes (allowSharedSubDir); a volume of its own cannot take it", req.SubDir)
}

// joinShared makes sure the shared directory of the shared volume rec
// exists, made by nfsdir for sharing, with rec's owner and mode, creating
// it when missing. It stays when every sharer is gone.
func (a *Area) joinShared(rec *Record) error {
	dir := &Record{Version: RecordVersion, SharedDir: true, Token: volumeid.NewToken(), SubDir: rec.SubDir,
		OnDelete: params.Retain, Mode: rec.Mode, UID: rec.UID, GID: rec.GID, Created: rec.Created}
	key := dir.Key()
	err := writeRecordExclusive(a.records(), key, dir)
	fresh := err == nil
	if errors.Is(err, fs.ErrExist) {
		old, err := readRecord(a.records(), key)
		if err != nil {
			return err
		}
		if old == nil {
			return fault.New(fault.Aborted, "the record of shared directory %q was removed concurrently; retry", rec.SubDir)
		}
		if old.Mode != rec.Mode || old.UID != rec.UID || old.GID != rec.GID {
			return fault.New(fault.AlreadyExists, "shared directory %q was made with mode %04o uid %d gid %d; volume %q asks for mode %04o uid %d gid %d, and nfsdir does not change it under its other volumes", rec.SubDir, old.Mode, old.UID, old.GID, rec.Name, rec.Mode, rec.UID, rec.GID)
		}
		dir = old
	} else if err != nil {
		return err
	}
	if err = a.makeDir(key, dir, fresh); err == nil && fresh {
		err = a.recheckNesting(dir)
	}
	if err != nil && fresh && dir.FileID == 0 {
		a.dropRecord(key, dir)
	}
	return err
}

// recheckNesting runs the nesting check again once the directory of rec
// was made, with the records directory revalidated: the first check ran
// before the record, so a volume around this one created concurrently
// may have passed its own check too. Records come before directories, so
// whichever of the two made its directory second sees the other's record
// here and undoes its own (the directory is new and empty).
func (a *Area) recheckNesting(rec *Record) error {
	if len(safepath.Parents(rec.SubDir)) == 0 {
		return nil // at the share root: nothing can lie around it
	}
	if !a.onServer && !a.freshLookups {
		if d, err := a.volumes.Open("."); err == nil {
			d.Close()
		}
	}
	err := a.checkNotNested(rec.SubDir)
	if err != nil {
		a.removeNewDir(rec.SubDir)
		rec.unseal()
	}
	return err
}

// removeNewDir undoes the directory this call just made at rel: only an
// empty directory is removed (rmdir), so that whatever another client may
// have put at the path meanwhile (a file, a link, a directory with data)
// stays.
func (a *Area) removeNewDir(rel string) {
	err := a.atParent(rel, func(parent int) error {
		return unix.Unlinkat(parent, path.Base(rel), unix.AT_REMOVEDIR)
	})
	if err != nil && !errors.Is(err, unix.ENOENT) {
		klog.Warningf("leaving %q: %v", rel, err)
	}
}

// StepHook is called between the steps of Create and Delete that act on
// the share, with the step's name and the volume's subDir. Tests set it to
// hold a call at any step, as a deposed leader or a slow server would; it
// is never set in the product.
var StepHook = func(step, subDir string) {}

// newDirPerm is the mode a directory is made with, before its seal: read
// only, so nothing is put into it until it has its record's owner and mode.
const newDirPerm = 0o500

// makeDir makes the directory of rec (a volume's, or a shared directory's)
// with its parents, seals its identity into the record stored under key and
// gives it rec's owner and mode; or, when rec is sealed, checks that the
// directory at the path is the sealed one and (re)applies owner and mode.
// fresh: the record was written by this call, so any directory already at
// the path is someone else's.
func (a *Area) makeDir(key string, rec *Record, fresh bool) error {
	StepHook("create:dir", rec.SubDir)
	if rec.FileID != 0 {
		if err := a.makeParents(rec.SubDir); err != nil {
			return err
		}
		st, err := a.freshLstat(rec.SubDir)
		if err == nil {
			if err := a.checkSealed(rec, st); err != nil {
				return err
			}
			return setOwnerAndMode(a.root, rec)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return onShare(err, "check %q", rec.SubDir)
		}
		// Removed by someone after nfsdir made it: make it again.
	}
	// The directory is made, opened and sealed in its parent opened once.
	return a.inParent(rec.SubDir, func(parent int) error { return a.makeDirIn(parent, key, rec, fresh) })
}

// makeDirIn is makeDir's making of the directory of rec, not sealed yet,
// in its parent directory open as parent.
func (a *Area) makeDirIn(parent int, key string, rec *Record, fresh bool) error {
	err := unix.Mkdirat(parent, path.Base(rec.SubDir), newDirPerm)
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrExist) && !fresh && rec.FileID == 0:
		// A crash between mkdir and seal, a concurrent creator of the same
		// shared directory, or someone else's directory.
		if why := a.unfinished(rec.SubDir); why != "" {
			if now, rerr := readRecord(a.records(), key); rerr == nil && now != nil && now.Token == rec.Token && now.FileID != 0 {
				*rec = *now // sealed meanwhile by a concurrent creator
				return a.makeDir(key, rec, false)
			}
			return fault.New(fault.FailedPrecondition, "directory %q exists, and nfsdir cannot prove it is the one it began to make for %s before an interruption: %s. Move it away (or delete it) and retry, or hand it over with `nfsdir adopt` after removing the record %s", rec.SubDir, rec.describe(), why, recordPath(key))
		}
	case errors.Is(err, fs.ErrExist):
		return a.existsError(rec.SubDir)
	default:
		return onShare(&fs.PathError{Op: "mkdirat", Path: rec.SubDir, Err: err}, "create %q", rec.SubDir)
	}
	err = a.seal(parent, key, rec)
	if err != nil && !fresh {
		return err // the record stays; a retry finds the directory sealed or unfinished
	}
	if err != nil {
		// Never leave a half-made volume: the directory is new and empty,
		// and the caller drops the record.
		a.removeNewDir(rec.SubDir)
		rec.unseal()
	}
	return err
}

// existsError explains why an existing directory cannot become a volume's.
func (a *Area) existsError(dir string) error {
	if st, err := a.root.Lstat(dir); err == nil && !st.IsDir() {
		return fault.New(fault.FailedPrecondition, "%q exists on the share and is not a directory (%s); nfsdir will not follow or replace it", dir, st.Mode().Type())
	}
	why := "nfsdir did not create it"
	if _, err := a.parents.Lstat(parentMarker(dir)); err == nil {
		why = "it holds the directories of other nfsdir volumes"
	}
	return fault.New(fault.AlreadyExists, "directory %q already exists on the share and %s; choose another subDir or move it away", dir, why)
}

// unfinished tells whether dir is exactly what makeDir leaves between mkdir
// and seal: a real directory, empty, mode newDirPerm, owned by the user
// nfsdir writes as. It returns "" if so, else what differs.
func (a *Area) unfinished(dir string) string { return a.unfinishedAt(a.root, dir) }

// unfinishedAt is unfinished for the directory rel below r.
func (a *Area) unfinishedAt(r *os.Root, dir string) string {
	st, err := r.Lstat(dir)
	if err != nil {
		return err.Error()
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.IsDir():
		return fmt.Sprintf("it is a %s", typeName(st.Mode()))
	case !ok || sys.Uid != a.owner:
		return fmt.Sprintf("it is owned by uid %d, not nfsdir's %d", sys.Uid, a.owner)
	case st.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != newDirPerm:
		return fmt.Sprintf("its mode is %04o, not the %04o nfsdir makes directories with", st.Mode().Perm(), newDirPerm)
	}
	d, err := r.Open(dir)
	if err != nil {
		return err.Error()
	}
	defer d.Close()
	if names, _ := d.Readdirnames(1); len(names) > 0 {
		return "it is not empty"
	}
	return ""
}

// checkSealed fails when st, found at rec's path, is not the directory
// sealed into rec.
func (a *Area) checkSealed(rec *Record, st fs.FileInfo) error {
	return a.checkSealedAs(rec, st, func() string { return a.handleDigest(a.root, rec.SubDir) })
}

// checkSealedFile fails when f, open (O_PATH will do) at rec's path or
// where it was just moved, is not the directory sealed into rec. Its
// attributes and handle come from the descriptor: no call on the share
// beyond the one that opened it.
func (a *Area) checkSealedFile(rec *Record, f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return onShare(err, "check %q", rec.SubDir)
	}
	return a.checkSealedAs(rec, st, func() string { return fdHandleDigest(f) })
}

// checkSealedAs fails when st is not the directory sealed into rec;
// handle gives the digest of its file handle ("" when there is none).
func (a *Area) checkSealedAs(rec *Record, st fs.FileInfo, handle func() string) error {
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
func (a *Area) sealedHandle(rec *Record) string {
	if a.onServer {
		return rec.ServerHandle
	}
	return rec.Handle
}

// handleDigest returns a digest of the file handle of p below root (for
// NFS, the server's file handle: file system id, inode and generation), or
// "" when the file system gives none.
func (a *Area) handleDigest(root *os.Root, p string) string {
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
func (a *Area) dropRecord(key string, rec *Record) {
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
func (a *Area) seal(parent int, key string, rec *Record) error {
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
func (a *Area) openDir(rel string) (*os.File, error) {
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
func (a *Area) freshOpenPath(rel string) (*os.File, error) {
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
func (a *Area) freshLstat(p string) (fs.FileInfo, error) {
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

// checkNoShareAbove fails when a parent of subDir is the root of another
// nfsdir share (it holds a metadata directory): that share's volumes and
// this one's would not see each other's records.
func (a *Area) checkNoShareAbove(subDir string) error {
	parents := safepath.Parents(subDir)
	checks := make([]func() error, len(parents))
	for i, p := range parents {
		checks[i] = func() error {
			_, err := a.root.Lstat(path.Join(p, safepath.MetaDir))
			if err == nil {
				return fault.New(fault.InvalidArgument, "subDir %q lies inside %q, the root of another nfsdir share (it holds %s); shares must not overlap: give this volume a subDir outside it", subDir, p, safepath.MetaDir)
			}
			if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
				return onShare(err, "check %q", p)
			}
			return nil
		}
	}
	return a.firstError(true, checks...)
}

// checkNotNested fails when a parent of subDir is a volume's directory or a
// shared directory.
func (a *Area) checkNotNested(subDir string) error {
	var checks []func() error
	for _, p := range safepath.Parents(subDir) {
		for _, key := range []string{volumeid.KeyForDir(p), volumeid.KeyForSharedDir(p)} {
			checks = append(checks, func() error {
				rec, err := readRecord(a.records(), key)
				if err != nil {
					return err
				}
				if rec != nil {
					return fault.New(fault.InvalidArgument, "subDir %q lies inside %s (directory %q); volumes cannot nest", subDir, rec.describe(), p)
				}
				return nil
			})
		}
	}
	return a.firstError(true, checks...)
}

// firstError runs checks, at once when concurrent is set and the Area is
// on a mount (each is then a round trip to the server; on the server's
// own file system they run in turn), and returns the first error in the
// order of checks, so that what a call answers does not depend on which
// look-up came back first.
func (a *Area) firstError(concurrent bool, checks ...func() error) error {
	if len(checks) == 0 {
		return nil
	}
	errs := make([]error, len(checks))
	fns := make([]func(), len(checks))
	for i, c := range checks {
		fns[i] = func() { errs[i] = c() }
	}
	if concurrent && len(checks) > 1 {
		a.atOnce()(fns...)
	} else {
		inTurn(fns...)
	}
	return firstNonNil(errs)
}

// firstNonNil returns the first error of errs that is not nil, or nil.
func firstNonNil(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkNoVolumeAround reads every record of the share and fails when a
// recorded volume, exclusive or shared, lies inside subDir, is subDir, or
// holds it: adopting such a directory would let a DeleteVolume of the
// adopted volume remove a live one. It costs one read per record, which
// only `nfsdir adopt`, an administrator's command, pays.
func (a *Area) checkNoVolumeAround(subDir string) error {
	dir, err := a.volumes.Open(".")
	if err != nil {
		return fmt.Errorf("list volume records: %w", err)
	}
	defer dir.Close()
	for {
		keys, err := dir.Readdirnames(1024)
		for _, k := range keys {
			if strings.Contains(k, ".") {
				continue // a record being sealed, updated or removed, under a temporary name
			}
			rec, rerr := readRecord(a.records(), k)
			if rerr != nil {
				return rerr
			}
			switch {
			case rec == nil:
			case rec.SubDir == subDir && !rec.Shared:
				// Its own record: writing the new one reports AlreadyExists.
			case safepath.IsWithin(rec.SubDir, subDir):
				return fault.New(fault.FailedPrecondition, "%q contains nfsdir's %s (directory %q); adopting it would put that data under another volume's onDelete", subDir, rec.describe(), rec.SubDir)
			case safepath.IsWithin(subDir, rec.SubDir):
				return fault.New(fault.FailedPrecondition, "%q lies inside nfsdir's %s (directory %q)", subDir, rec.describe(), rec.SubDir)
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && len(keys) == 0) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list volume records: %w", err)
		}
	}
}

func compatible(rec *Record, req Request) error {
	var diffs []string
	if rec.OnDelete != req.OnDelete && !rec.Modified {
		diffs = append(diffs, fmt.Sprintf("onDelete %s (requested %s)", rec.OnDelete, req.OnDelete))
	}
	if rec.Mode != req.Mode || rec.UID != req.UID || rec.GID != req.GID {
		diffs = append(diffs, fmt.Sprintf("mode %04o uid %d gid %d (requested %04o uid %d gid %d)", rec.Mode, rec.UID, rec.GID, req.Mode, req.UID, req.GID))
	}
	if rec.KeepSetID != req.KeepSetID {
		diffs = append(diffs, fmt.Sprintf("keepSetIDOnRestore %t (requested %t)", rec.KeepSetID, req.KeepSetID))
	}
	if !sameSource(rec.Source, req.Source) {
		diffs = append(diffs, fmt.Sprintf("content from %s (requested %s)", rec.Source, req.Source))
	}
	if rec.CapacityBytes < req.CapacityBytes {
		// Larger is the same volume expanded since it was created.
		diffs = append(diffs, fmt.Sprintf("capacity %d bytes (requested %d)", rec.CapacityBytes, req.CapacityBytes))
	}
	if len(diffs) > 0 {
		return fault.New(fault.AlreadyExists, "volume %q already exists with %s", req.Name, strings.Join(diffs, ", "))
	}
	return nil
}

// inParent runs fn with the parent directory of the share's path rel
// open (the share root held open for a path at the top), made first with
// makeParents when missing. An existing parent is opened at once: a real
// directory below the share root with no symlink on the way
// (RESOLVE_NO_SYMLINKS), with one look-up per component; anything else
// goes through makeParents, which says what is wrong with it.
func (a *Area) inParent(rel string, fn func(parent int) error) error {
	d := path.Dir(rel)
	if d == "." {
		return a.atDir(a.root, fn)
	}
	return a.atDir(a.root, func(root int) error {
		open := func() (int, error) {
			return unix.Openat2(root, d, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
				Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
		}
		fd, err := open()
		if err != nil {
			if err := a.makeParents(rel); err != nil {
				return err
			}
			if fd, err = open(); err != nil {
				return onShare(&fs.PathError{Op: "openat2", Path: d, Err: err}, "open parent %q", d)
			}
		}
		defer unix.Close(fd)
		return fn(fd)
	})
}

// makeParents creates the missing parents of subDir, marking those it
// creates; existing parents must be real directories, not symlinks.
func (a *Area) makeParents(subDir string) error {
	parents := safepath.Parents(subDir)
	for i := len(parents) - 1; i >= 0; i-- {
		p := parents[i]
		created, err := mkdirOnce(a.root, p, 0o755)
		if err != nil {
			return onShare(err, "create parent %q", p)
		}
		if created {
			if err := a.parents.WriteFile(parentMarker(p), []byte(p+"\n"), 0o600); err != nil {
				return fmt.Errorf("mark parent %q: %w", p, err)
			}
		}
	}
	return nil
}

// setOwnerAndMode applies the record's owner and mode.
func setOwnerAndMode(root *os.Root, rec *Record) error {
	if rec.UID >= 0 || rec.GID >= 0 {
		if err := root.Lchown(rec.SubDir, rec.UID, rec.GID); err != nil {
			return onShare(err, "set owner %d:%d of %q", rec.UID, rec.GID, rec.SubDir)
		}
	}
	// Chmod after chown: chown clears the setgid bit.
	if err := root.Chmod(rec.SubDir, modeBits(rec.Mode)); err != nil {
		return onShare(err, "set mode %04o of %q", rec.Mode, rec.SubDir)
	}
	return nil
}

// squashHint explains the usual cause of EPERM/EACCES on an NFS share.
const squashHint = "; the NFS server refused it, most likely because the export squashes root (root_squash or all_squash in /etc/exports): use an export with no_root_squash for nfsdir's share, or make the share root writable by the squashed user"

// onShare wraps an error of a filesystem operation on the share, keeping
// its kind and explaining permission errors.
func onShare(err error, format string, args ...any) error {
	if errors.Is(err, fs.ErrPermission) {
		return fault.Wrap(fault.PermissionDenied, err, "%s", fmt.Sprintf(format, args...)+squashHint)
	}
	return fault.Wrap(fault.KindOf(err), err, format, args...)
}

// modeBits converts Unix permission bits (with setuid/setgid/sticky) to an
// fs.FileMode.
func modeBits(m uint32) fs.FileMode {
	fm := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		fm |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		fm |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		fm |= fs.ModeSticky
	}
	return fm
}

// mkdirOnce creates dir and reports whether it did; an existing directory is
// fine, an existing symlink or file is FailedPrecondition.
func mkdirOnce(root *os.Root, dir string, perm fs.FileMode) (bool, error) {
	err := root.Mkdir(dir, perm)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return false, fmt.Errorf("create %q: %w", dir, err)
	}
	st, err := root.Lstat(dir)
	if err != nil {
		return false, fmt.Errorf("check %q: %w", dir, err)
	}
	if !st.IsDir() {
		return false, fault.New(fault.FailedPrecondition, "%q exists on the share and is not a directory (%s); nfsdir will not follow or replace it", dir, st.Mode().Type())
	}
	return false, nil
}

// parentMarker names the marker of parent directory p in .nfsdir/parents.
func parentMarker(p string) string {
	sum := sha256.Sum256([]byte(p))
	return hex.EncodeToString(sum[:16])
}

// Lookup returns the record of a volume ID, or nil when the volume does not
// exist (never created, or deleted). A record with another token belongs to
// a later volume of the same name and counts as not found.
func (a *Area) Lookup(id volumeid.ID) (*Record, error) {
	rec, err := readRecord(a.records(), id.Key)
	a.learnDir(rec)
	if err != nil || rec == nil || rec.Token != id.Token || rec.SharedDir {
		return nil, err
	}
	return rec, nil
}

// Delete applies the record's onDelete policy to the volume of id and then
// removes the record. A volume that does not exist is not an error. With
// "delete", the directory is renamed into the trash at once and, unless it
// was empty and removed there at once, purged later by a Purger: purge
// reports whether the trash holds something for the Purger now.
func (a *Area) Delete(ctx context.Context, id volumeid.ID) (purge bool, err error) {
	return a.DeleteWith(ctx, id, nil)
}

// DeleteWith is Delete, calling before (when set) with the volume's record
// (nil: none) before anything changes; its error ends the call. A volume
// an agent made for this Area is known without reading the share (Made).
// Otherwise the record is read, and, when the volume's directory is known
// from its key (knownDir), the look-ups DeleteVolume begins with go to the
// server at the same time as that read (lookUpToDelete).
func (a *Area) DeleteWith(ctx context.Context, id volumeid.ID, before func(*Record) error) (purge bool, err error) {
	rec := a.Made(id)
	var pre *deleteChecks
	if rec == nil {
		if rec, pre, err = a.lookUpToDelete(id); err != nil {
			return false, err
		}
	}
	if before != nil {
		if err := before(rec); err != nil {
			return false, err
		}
	}
	return a.deleteFound(ctx, id, rec, pre)
}

// DeleteFound is Delete of the volume of id that Lookup found as rec (nil:
// not found) a moment ago: a volume that names a copy agent is deleted
// by the agent, on the server (RemoteMaker); any other, or one the agent
// does not delete, through the share mount. The agent reads the record
// again before it changes anything; through the mount, rec is taken as
// read unless an update held the record aside meanwhile, or rec came
// from an agent (Made) or a call to one came between.
func (a *Area) DeleteFound(ctx context.Context, id volumeid.ID, rec *Record) (purge bool, err error) {
	return a.deleteFound(ctx, id, rec, nil)
}

// deleteFound is DeleteFound; pre, when set, holds the look-ups made
// with the record's read (lookUpToDelete).
func (a *Area) deleteFound(ctx context.Context, id volumeid.ID, rec *Record, pre *deleteChecks) (purge bool, err error) {
	done, purge, err := a.removeRemote(ctx, id, rec)
	if !done {
		// rec was read from the share a moment ago in this call, unless
		// an agent had it (Made) or was asked meanwhile: read it again.
		if rec != nil && (rec.CopyAgent != "" || rec.QuotaAgent != "") {
			rec, pre = nil, nil
		}
		purge, err = a.deleteAs(id, "", rec, pre)
	}
	if err == nil {
		a.forgetMade(id)
	}
	return purge, err
}

// lookUpToDelete reads the record of id (nil: none) for a DeleteVolume.
// When the volume's directory is known from its key (knownDir), the
// call's first look-ups (checkDelete's) go to the server at the same
// time, and come back as pre; whatever the record then says is checked
// against what they found, and they are made again, after the read, if
// the record is not the one they were made for.
func (a *Area) lookUpToDelete(id volumeid.ID) (rec *Record, pre *deleteChecks, err error) {
	subDir, ok := a.knownDir(id.Key)
	if !ok || a.onServer {
		rec, err = a.Lookup(id)
		return rec, nil, err
	}
	var c deleteChecks
	a.atOnce()(
		func() { rec, err = a.Lookup(id) },
		func() { c = a.checkDelete(id, subDir, true) },
	)
	if err != nil || rec == nil {
		return rec, nil, err
	}
	return rec, &c, nil
}

// DiscardFill removes a volume whose fill from a snapshot or volume never
// completed, whatever its onDelete policy: nobody was ever given it, and a
// half-filled directory left in place would pass for data. A complete
// volume is FailedPrecondition: it is never discarded.
func (a *Area) DiscardFill(ctx context.Context, id volumeid.ID) error {
	_, err := a.deleteAs(id, params.Delete, nil, nil)
	return err
}

// deleteAs is Delete; with policy set, only an unfinished fill is deleted,
// with that policy. known is the record of id this call read from the
// share a moment ago, or nil: it is then read here. early, when set,
// holds the look-ups made at the same time as that read.
func (a *Area) deleteAs(id volumeid.ID, policy params.OnDelete, known *Record, early *deleteChecks) (purge bool, err error) {
	var pre deleteChecks
	if known != nil && policy == "" {
		if early != nil && early.subDir == known.SubDir && !known.Shared {
			pre = *early
		} else {
			pre = a.checkDelete(id, known.SubDir, known.OnDelete != params.Retain)
		}
		if pre.done {
			pre.pathErr = a.judgePath(known, pre.path)
		}
	}
	// An update of the record (an expansion) may hold it aside: put it
	// back, so that the record is found, and removed, here.
	var aside bool
	if !pre.done {
		if aside, err = settleUpdateFound(a.records(), id.Key, id.Key+updateSuffix+id.Token); err != nil {
			return false, err
		}
	}
	rec := known
	if rec == nil || aside {
		if rec, err = a.Lookup(id); err != nil {
			return false, err
		}
	}
	if rec == nil {
		// Gone; an attempt interrupted while removing the record may have
		// left it aside, or the volume in the trash.
		return true, settleAside(a.records(), id.Key, id.Key+asideSuffix+id.Token, id.Token)
	}
	if policy != "" {
		if !rec.Filling {
			return false, fault.New(fault.FailedPrecondition, "volume %q is complete; only an unfinished fill is discarded", rec.Name)
		}
		rec.OnDelete = policy
	}
	// What is at the path, opened once (O_PATH): its attributes, handle
	// and names are read through the descriptor.
	if !pre.done {
		pre.path = a.probePath(rec.SubDir, rec.OnDelete != params.Retain)
		pre.pathErr = a.judgePath(rec, pre.path)
	}
	if pre.pathErr != nil {
		return false, pre.pathErr
	}
	exists := pre.path.exists
	if exists {
		switch rec.OnDelete {
		case params.Retain:
			klog.Infof("volume %q: retaining %q", rec.Name, rec.SubDir)
		case params.Archive:
			if err := a.archive(rec); err != nil {
				return false, err
			}
		}
	}
	if rec.OnDelete != params.Retain && rec.OnDelete != params.Archive {
		// Also when nothing is at the path: an interrupted attempt may
		// have left the directory pending in the trash.
		StepHook("delete:move", rec.SubDir)
		if purge, err = a.trashVolume(rec, id, pre.noPending); err != nil {
			return false, err
		}
	}
	StepHook("delete:record", rec.SubDir)
	// The record's removal, the usage figure's and the parents' pruning
	// act on different names and none waits for another: the directory
	// has left its path already (or stays, retained or archived, and
	// then nothing is pruned), and a figure is counted data, which the
	// accountant counts again for a record a failed removal leaves.
	var recErr error
	tail := []func(){func() { recErr = removeRecordChecked(a.records(), id.Key, id.Token, pre.noAside) }}
	if !rec.Shared && !pre.noFigure {
		tail = append(tail, func() { a.dropFigure(id.Key, id.Token) })
	}
	if rec.OnDelete != params.Retain && !pre.noMarker {
		tail = append(tail, func() { a.pruneParents(rec.SubDir) })
	}
	a.atOnce()(tail...)
	return purge, recErr
}

// atOnce returns together, or inTurn on the server's own file system
// (OnServer), where there are no round trips to overlap.
func (a *Area) atOnce() func(...func()) {
	if a.onServer {
		return inTurn
	}
	return together
}

// deleteChecks are the look-ups a DeleteVolume makes before it changes
// anything, made at once (checkDelete) when the volume's directory is
// known: each is one round trip to the server, and none depends on
// another's answer. done: they were made and no update holds the record
// aside (an update's record may say otherwise than the one known, so the
// call then makes them again, one after the other, from the record put
// back).
type deleteChecks struct {
	done      bool
	subDir    string    // the directory they were made for
	path      pathProbe // what is at subDir
	pathErr   error     // why it may not be moved (judgePath, once the record is known)
	noPending bool      // the trash holds no pending entry of an interrupted attempt
	noAside   bool      // no record of an interrupted removal is aside
	noFigure  bool      // no usage figure is stored under the record's key
	noMarker  bool      // the directory's parent is not one nfsdir made (or there is none)
}

// checkDelete makes deleteAs's first look-ups for the volume of id, whose
// directory is subDir, at the same time: the update that may hold the
// record aside, what is at its path (probePath), a pending entry in the
// trash and a record left aside by an interrupted removal. Whatever one
// finds other than nothing is looked up again where it is acted on, as
// before. The usage figure and the parent's marker are looked up with
// them: what was absent then is not looked up again at the end (a figure
// stored meanwhile is the accountant's to drop; a parent holds the
// volume's directory until it moves, so no one makes it, nor marks it,
// meanwhile). None of them needs the record: they may be made while it
// is read (lookUpToDelete). forRemoval: the directory may be moved away
// (unknown, or not retained).
func (a *Area) checkDelete(id volumeid.ID, subDir string, forRemoval bool) deleteChecks {
	c := deleteChecks{subDir: subDir, noMarker: true}
	var noUpdate bool
	absent := func(err error) bool { return errors.Is(err, fs.ErrNotExist) }
	checks := []func(){
		func() { c.path = a.probePath(subDir, forRemoval) },
		func() { _, err := a.records().Readlink(id.Key + updateSuffix + id.Token); noUpdate = absent(err) },
		func() { _, err := a.trash.Lstat(pendingPrefix + trashName(id)); c.noPending = absent(err) },
		func() { _, err := a.records().Readlink(id.Key + asideSuffix + id.Token); c.noAside = absent(err) },
		func() { c.noFigure = a.figureAbsent(id.Key) },
	}
	if parents := safepath.Parents(subDir); len(parents) > 0 {
		checks = append(checks, func() { _, err := a.parents.Lstat(parentMarker(parents[0])); c.noMarker = absent(err) })
	}
	a.atOnce()(checks...)
	if !noUpdate {
		return deleteChecks{}
	}
	c.done = true
	return c
}

// inTurn runs fns one after the other.
func inTurn(fns ...func()) {
	for _, fn := range fns {
		fn()
	}
}

// together runs fns at once and returns when all have returned.
func together(fns ...func()) {
	var wg sync.WaitGroup
	for _, fn := range fns[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn()
		}()
	}
	fns[0]()
	wg.Wait()
}

// pathProbe is what probePath found at a volume's path.
type pathProbe struct {
	exists    bool        // something is there
	err       error       // it could not be looked at
	st        fs.FileInfo // its attributes
	handle    string      // the digest of its file handle ("" when none)
	shareRoot bool        // it holds another share's metadata directory
}

// probePath opens what is at the share's path subDir once (O_PATH), never
// following a symlink, reads its attributes and file handle through that
// descriptor, looks for another share's metadata directory in it, and
// closes it: everything judgePath needs, without the record. shareRoot is
// looked for only with forRemoval (a retained directory stays whatever it
// holds).
func (a *Area) probePath(subDir string, forRemoval bool) (p pathProbe) {
	f, err := a.freshOpenPath(subDir)
	if errors.Is(err, fs.ErrNotExist) {
		return p
	}
	p.exists = true
	if err != nil {
		p.err = fmt.Errorf("check %q: %w", subDir, err)
		return p
	}
	defer f.Close()
	if p.st, err = f.Stat(); err != nil {
		p.err = onShare(err, "check %q", subDir)
		return p
	}
	p.handle = fdHandleDigest(f)
	if forRemoval && p.st.IsDir() {
		var st unix.Stat_t
		p.shareRoot = unix.Fstatat(int(f.Fd()), safepath.MetaDir, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	}
	return p
}

// judgePath fails when what probePath found at rec's path must not be
// moved away for rec's onDelete policy (retain moves nothing): it is
// another share's root, or not the directory sealed into rec (or, for an
// older record without a seal, not provably nfsdir's).
func (a *Area) judgePath(rec *Record, p pathProbe) error {
	if !p.exists {
		return nil
	}
	if p.err != nil || rec.OnDelete == params.Retain {
		return p.err
	}
	if p.shareRoot {
		return fault.New(fault.FailedPrecondition, "volume %q: its directory %q is the root of another nfsdir share (it holds %s): a StorageClass uses it as its share, and nfsdir will not %s it; point that StorageClass elsewhere or move its data out first", rec.Name, rec.SubDir, safepath.MetaDir, rec.OnDelete)
	}
	if rec.FileID != 0 {
		return a.checkSealedAs(rec, p.st, func() string { return p.handle })
	}
	if why := a.unfinished(rec.SubDir); why != "" {
		// Made by an older nfsdir that sealed after chmod, or not
		// nfsdir's at all: nothing proves which.
		return fault.New(fault.FailedPrecondition, "directory %q was never sealed into the record of volume %q, and nfsdir cannot prove it is the one it made: %s. nfsdir leaves it alone: delete it by hand and retry", rec.SubDir, rec.Name, why)
	}
	return nil
}

// Expand records bytes as the capacity of the volume of id and returns its
// record. A capacity below the recorded one is OutOfRange (volumes never
// shrink); the same one changes nothing. A volume that does not exist is
// NotFound. The record is updated only if it is still the one of id
// (updateRecordIf), so a delayed call never touches a later volume.
func (a *Area) Expand(id volumeid.ID, bytes int64) (*Record, error) {
	smaller := func(r *Record) error {
		if bytes < r.CapacityBytes {
			return fault.New(fault.OutOfRange, "volume %q has %d bytes; nfsdir volumes do not shrink (asked for %d)", r.Name, r.CapacityBytes, bytes)
		}
		return nil
	}
	rec, err := a.Lookup(id)
	if err != nil {
		return nil, err
	}
	if rec != nil {
		if err := smaller(rec); err != nil || rec.CapacityBytes == bytes {
			return rec, err
		}
	}
	rec, err = updateRecordIf(a.records(), id.Key, id.Token, func(r *Record) error {
		if r.SharedDir {
			return fault.New(fault.NotFound, "volume %q does not exist", id.String())
		}
		if err := smaller(r); err != nil {
			return err
		}
		r.CapacityBytes = bytes
		return nil
	})
	if err == nil && rec == nil {
		err = fault.New(fault.NotFound, "volume %q does not exist", id.String())
	}
	return rec, err
}

// Change is what a VolumeAttributesClass changes in a volume.
type Change struct {
	OnDelete params.OnDelete // "": unchanged
	// PublishOptions replace the mount options at the next publish; nil
	// leaves them.
	PublishOptions *string
}

// Modify applies c to the record of the volume of id and returns the
// record, marked Modified. A volume that does not exist is NotFound; a
// volume sharing its directory keeps onDelete retain (InvalidArgument).
// As Expand, it updates the record only if it is still the one of id.
func (a *Area) Modify(id volumeid.ID, c Change) (*Record, error) {
	rec, err := updateRecordIf(a.records(), id.Key, id.Token, func(r *Record) error {
		if r.SharedDir {
			return fault.New(fault.NotFound, "volume %q does not exist", id.String())
		}
		if c.OnDelete != "" {
			if r.Shared && c.OnDelete != params.Retain {
				return fault.New(fault.InvalidArgument, "volume %q shares its directory with other volumes: its onDelete stays retain (asked for %s)", r.Name, c.OnDelete)
			}
			r.OnDelete = c.OnDelete
		}
		if c.PublishOptions != nil {
			r.PublishOptions = c.PublishOptions
		}
		r.Modified = true
		return nil
	})
	if err == nil && rec == nil {
		err = fault.New(fault.NotFound, "volume %q does not exist", id.String())
	}
	return rec, err
}

// trashName names a deleted volume's directory in .nfsdir/trash.
func trashName(id volumeid.ID) string { return id.Key + "." + id.Token }

// moveInto renames the directory rel of the share into dst, an open
// metadata directory, as name. The source's parent is opened without
// following any symlink, and dst is the handle checked when the Area was
// opened: neither can be redirected by whatever is put at their names.
func (a *Area) moveInto(rel string, dst *os.Root, name string) error {
	return a.atParent(rel, func(parent int) error {
		return a.atDir(dst, func(dstDir int) error {
			if err := unix.Renameat(parent, path.Base(rel), dstDir, name); err != nil {
				return fmt.Errorf("rename %q: %w", rel, err)
			}
			return nil
		})
	})
}

// atParent runs fn with a descriptor of the parent directory of rel on
// the share, opened without following any symlink on the way.
func (a *Area) atParent(rel string, fn func(fd int) error) error {
	d := path.Dir(rel)
	return a.atDir(a.root, func(root int) error {
		if d == "." {
			return fn(root)
		}
		fd, err := unix.Openat2(root, d, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
		if err != nil {
			return fmt.Errorf("open %q: %w", d, err)
		}
		defer unix.Close(fd)
		return fn(fd)
	})
}

func (a *Area) archive(rec *Record) error {
	for attempt := 0; attempt < 1000; attempt++ {
		name := safepath.ArchiveName(rec.SubDir, attempt)
		if _, err := a.root.Lstat(name); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("check %q: %w", name, err)
		}
		if err := a.moveVerified(rec, a.root, name); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // gone meanwhile; nothing left to archive
			}
			return err
		}
		klog.Infof("volume %q: archived %q as %q", rec.Name, rec.SubDir, name)
		return nil
	}
	return fault.New(fault.ResourceExhausted, "no free archive name for %q", rec.SubDir)
}

// trashVolume moves the directory of rec into the trash for the purge: to
// a pending name first, which the purge ignores, and, once it proved to be
// rec's directory, removes it there if it is empty (the purge's whole work
// for it, at the cost of one call) or gives it its final name for the
// purge (purge true). noPending: the caller found no pending entry of an
// interrupted attempt (checkDelete), and it is not looked up again.
func (a *Area) trashVolume(rec *Record, id volumeid.ID, noPending bool) (purge bool, err error) {
	final := trashName(id)
	pending := pendingPrefix + final
	if !noPending {
		_, err = a.trash.Lstat(pending)
	}
	if noPending || errors.Is(err, fs.ErrNotExist) {
		err := a.moveVerified(rec, a.trash, pending)
		if errors.Is(err, fs.ErrNotExist) {
			// Gone meanwhile: an earlier attempt, or another
			// controller's, may have left it in the trash for the purge.
			return true, nil
		}
		if err != nil {
			return false, err
		}
	} else if err != nil {
		return false, onShare(err, "check %s/%s", trashDir, pending)
	} else if err := a.verifyMoved(rec, a.trash, pending); err != nil {
		return false, err // left by an interrupted attempt, and not rec's: put back
	}
	StepHook("delete:rmdir", rec.SubDir)
	switch err := a.removeEmptyDir(a.trash, pending); {
	case err == nil:
		return false, nil
	case errors.Is(err, unix.ENOENT):
		// Another controller's call for this volume (a leader change)
		// removed it, or renamed it for the purge.
		return true, nil
	case !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST):
		klog.V(2).Infof("%s: %s/%s is left to the purge: %v", rec.describe(), trashDir, pending, err)
	}
	if err := a.trash.Rename(pending, final); err != nil {
		return false, onShare(err, "rename %s/%s", trashDir, pending)
	}
	return true, nil
}

// removeEmptyDir removes the directory name below dir if it is empty
// (rmdir: ENOTEMPTY or EEXIST otherwise), with one call on the share.
func (a *Area) removeEmptyDir(dir *os.Root, name string) error {
	return a.atDir(dir, func(fd int) error { return unix.Unlinkat(fd, name, unix.AT_REMOVEDIR) })
}

// pendingPrefix starts the name of a directory moved into the trash but
// not yet proven to be the deleted volume's; the purge skips such names.
const pendingPrefix = "."

// moveVerified renames the directory at rec's path to name below dst and
// then checks that what it moved is rec's directory: a rename acts on a
// name, and a delayed call (a deposed leader's, say) may find another
// volume's directory at the path by then. Anything else is moved back at
// once. fs.ErrNotExist: nothing at the path.
func (a *Area) moveVerified(rec *Record, dst *os.Root, name string) error {
	if err := a.moveInto(rec.SubDir, dst, name); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return onShare(err, "move %q", rec.SubDir)
	}
	return a.verifyMoved(rec, dst, name)
}

// verifyMoved checks that the directory at name below dst, just moved
// from rec's path, is rec's, and moves it back to the path otherwise.
func (a *Area) verifyMoved(rec *Record, dst *os.Root, name string) error {
	var why error
	var f *os.File
	err := a.atDir(dst, func(fd int) (err error) {
		f, err = openPathAt(fd, name)
		return err
	})
	switch {
	case err != nil:
		return onShare(err, "check %q", name)
	case rec.FileID != 0:
		why = a.checkSealedFile(rec, f)
	default:
		if w := a.unfinishedAt(dst, name); w != "" {
			why = fault.New(fault.FailedPrecondition, "the directory at %q is not the one nfsdir made for %s: %s", rec.SubDir, rec.describe(), w)
		}
	}
	if f != nil {
		f.Close()
	}
	if why == nil {
		return nil
	}
	klog.Warningf("%s: moved a directory that is not its own from %q; moving it back: %v", rec.describe(), rec.SubDir, why)
	if err := a.moveBack(dst, name, rec.SubDir); err != nil {
		return fault.Wrap(fault.Internal, err, "%v; nfsdir moved it to %q and could not move it back: move it back to %q by hand", why, name, rec.SubDir)
	}
	return why
}

// moveBack renames name below src back to rel on the share, unless
// something took rel meanwhile.
func (a *Area) moveBack(src *os.Root, name, rel string) error {
	if _, err := a.freshLstat(rel); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%q is taken again", rel)
	}
	return a.atDir(src, func(srcDir int) error {
		return a.atParent(rel, func(parent int) error {
			return unix.Renameat(srcDir, name, parent, path.Base(rel))
		})
	})
}

// pruneParents removes parent directories that nfsdir created for templated
// subDirs once they are empty, deepest first, never the share root.
func (a *Area) pruneParents(subDir string) {
	for _, p := range safepath.Parents(subDir) {
		if _, err := a.parents.Lstat(parentMarker(p)); err != nil {
			return // not ours
		}
		// rmdir only (os.Root's Remove tries unlink first, and looks the
		// name up again for its rmdir).
		if err := a.atParent(p, func(parent int) error {
			return unix.Unlinkat(parent, path.Base(p), unix.AT_REMOVEDIR)
		}); err != nil {
			return // not empty, gone, or not a directory
		}
		_ = a.parents.Remove(parentMarker(p))
	}
}

// Adopt hands an existing directory, created by something else (a
// csi-driver-nfs volume, a static PV, an administrator), over to nfsdir: it
// writes a record for it, so that the volume ID built from the record can be
// deleted, archived or retained like any nfsdir volume. The directory must
// exist, be a real directory, lie outside other volumes and have no record.
// Nothing is written into the directory.
func (a *Area) Adopt(req Request) (*Record, error) {
	same, err := a.checkAdopt(req)
	if err != nil || same != nil {
		return same, err
	}
	st, err := a.root.Lstat(req.SubDir)
	if err != nil {
		return nil, err
	}
	id, err := fileID(a.root, req.SubDir)
	if err != nil {
		return nil, err
	}
	rec := &Record{Version: RecordVersion, Name: req.Name, Token: volumeid.NewToken(), SubDir: req.SubDir,
		OnDelete: req.OnDelete, Mode: uint32(st.Mode().Perm()), UID: -1, GID: -1,
		CapacityBytes: req.CapacityBytes, Created: time.Now().UTC().Truncate(time.Second), Adopted: true, FileID: id, Handle: a.handleDigest(a.root, req.SubDir),
		Options: req.Options, LegacyID: req.LegacyID}
	if err := writeRecordExclusive(a.records(), rec.Key(), rec); err != nil {
		if errors.Is(err, fs.ErrExist) {
			old, _ := readRecord(a.records(), rec.Key())
			if old != nil {
				return nil, fault.New(fault.AlreadyExists, "directory %q already belongs to nfsdir volume %q", req.SubDir, old.Name)
			}
		}
		return nil, err
	}
	return rec, nil
}

// CanAdopt reports whether Adopt(req) would succeed, changing nothing: nil
// when it would (or did already: the same adoption), else Adopt's error.
func (a *Area) CanAdopt(req Request) error {
	_, err := a.checkAdopt(req)
	return err
}

// checkAdopt runs Adopt's checks. It returns the record of the same
// adoption made before (the same name, legacy ID and directory), if any.
func (a *Area) checkAdopt(req Request) (*Record, error) {
	if err := safepath.CheckVolumePath(req.SubDir); err != nil {
		return nil, fault.New(fault.InvalidArgument, "subDir %v", err)
	}
	if req.Shared {
		return nil, fault.New(fault.InvalidArgument, "a shared directory cannot be adopted")
	}
	if req.LegacyID != "" {
		l, err := volumeid.ParseLegacy(req.LegacyID)
		if err != nil {
			return nil, fault.Wrap(fault.InvalidArgument, err, "legacy volume ID")
		}
		if l.SubDir != req.SubDir {
			return nil, fault.New(fault.InvalidArgument, "csi-driver-nfs volume ID %q names directory %q, not %q", req.LegacyID, l.SubDir, req.SubDir)
		}
	}
	old, err := readRecord(a.records(), volumeid.KeyForDir(req.SubDir))
	if err != nil {
		return nil, err
	}
	if old != nil {
		if old.Adopted && old.Name == req.Name && old.LegacyID == req.LegacyID {
			if id, err := fileID(a.root, req.SubDir); err == nil && id == old.FileID {
				return old, nil
			}
		}
		return nil, fault.New(fault.AlreadyExists, "directory %q already belongs to nfsdir volume %q", req.SubDir, old.Name)
	}
	if err := a.checkNotNested(req.SubDir); err != nil {
		return nil, err
	}
	if err := a.checkNoVolumeAround(req.SubDir); err != nil {
		return nil, err
	}
	for _, p := range append(safepath.Parents(req.SubDir), req.SubDir) {
		st, err := a.root.Lstat(p)
		if err != nil {
			return nil, fault.Wrap(fault.NotFound, err, "directory %q", req.SubDir)
		}
		if !st.IsDir() {
			return nil, fault.New(fault.FailedPrecondition, "%q is not a directory (%s)", p, st.Mode().Type())
		}
	}
	return nil, nil
}

// Unadopt removes the record Adopt made for the directory subDir as volume
// name, and nothing else: the directory and what it holds stay as they
// are. No record is not an error; a record that is not that adoption is
// FailedPrecondition.
func (a *Area) Unadopt(name, subDir string) error {
	if err := safepath.CheckVolumePath(subDir); err != nil {
		return fault.New(fault.InvalidArgument, "subDir %v", err)
	}
	key := volumeid.KeyForDir(subDir)
	rec, err := readRecord(a.records(), key)
	if err != nil || rec == nil {
		return err
	}
	if !rec.Adopted || rec.Name != name || rec.SubDir != subDir {
		return fault.New(fault.FailedPrecondition, "directory %q belongs to nfsdir volume %q, which is not its adoption as %q; left alone", subDir, rec.Name, name)
	}
	if err := a.volumes.Remove(key); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// AdoptedAs returns the record of the directory subDir when it was adopted
// for the csi-driver-nfs volume ID legacyID (Adopt with Request.LegacyID),
// and nil when there is none: no other record, and no other ID, qualifies.
func (a *Area) AdoptedAs(legacyID, subDir string) (*Record, error) {
	if safepath.CheckVolumePath(subDir) != nil {
		return nil, nil
	}
	rec, err := readRecord(a.records(), volumeid.KeyForDir(subDir))
	if err != nil || rec == nil || !rec.Adopted || rec.LegacyID == "" || rec.LegacyID != legacyID || rec.SubDir != subDir {
		return nil, err
	}
	return rec, nil
}
