// Package provision creates and deletes volume directories on a mounted
// share. All filesystem work goes through an *os.Root opened on the share, so
// no path, symlink or ".." can reach outside it, and every directory it
// creates is backed by a Record in the share's metadata area: a directory
// without a matching record is never deleted, archived or renamed.
package provision

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/gidrange"
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
	// GIDRange, when set, gives the volume a GID of the range that no live
	// volume of the share holds (GIDs), as its directory's group, with the
	// setgid bit; GID must then be -1.
	GIDRange gidrange.Range
	// Claim (namespace/name) and Cluster go into the record: what a
	// later volume of the same claim shows to take the directory over.
	Claim, Cluster string
	// ExportName is the name of the export the volume is made on, kept in
	// the record for its ID; "": none.
	ExportName string
	// Reuse, when set, lets the volume take over the directory of an
	// earlier volume of the same claim and cluster (reuseDirectory):
	// it is called with that volume's record, and its error (the
	// earlier volume is still in use) refuses the takeover.
	Reuse func(ctx context.Context, earlier *Record) error `json:"-"`
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
	if rec, done, err := a.agents.make(ctx, req); done {
		return rec, err
	}
	// Three checks that only look (records above, shares above, the
	// other kind's record), made at once below a parent.
	if err := a.nesting().firstError(len(safepath.Parents(req.SubDir)) > 0,
		func() error { return a.nesting().checkNotNested(req.SubDir) },
		func() error { return a.nesting().checkNoShareAbove(req.SubDir) },
		func() error { return a.creation().checkKind(req) },
	); err != nil {
		return nil, err
	}
	if req.Shared && req.Source != nil {
		return nil, fault.New(fault.InvalidArgument, "volume %q: a volume that shares its directory (allowSharedSubDir) cannot be made from a snapshot or another volume", req.Name)
	}
	rec := newRecord(req)
	key := rec.Key()
	// A GID of the class's range: the record's, on a retry; otherwise one
	// claimed now, and given back unless a record of this call holds it.
	claimed, err := gidsOf(a).give(&req, rec)
	if err != nil {
		return nil, err
	}
	held := false
	defer func() {
		if !held {
			claimed.release()
		}
	}()
	if req.Source != nil {
		// Checked before the record: a volume whose source is missing
		// leaves nothing behind. A replay finds its record and is not
		// checked again (the source may be gone by then).
		if old, err := readRecord(a.records(), key); err != nil || old == nil || old.Name != req.Name {
			if err := a.Fills().check(req); err != nil {
				return nil, err
			}
		}
	}
	err = a.creation().writeRecord(key, req, rec)
	fresh := err == nil
	held = fresh
	if errors.Is(err, fs.ErrExist) {
		// A retry, a crash between the record and the directory, or another
		// volume that owns the directory.
		if rec, err = a.creation().existing(ctx, key, req); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	if req.Shared {
		err = a.creation().joinShared(rec)
	} else if err = a.creation().makeDir(key, rec, fresh); err == nil && fresh {
		err = a.nesting().recheckNesting(rec)
	}
	if err != nil && fresh && rec.FileID == 0 {
		// Nothing was made for this record: leave no trace of it.
		a.seals().dropRecord(key, rec)
		held = false
	}
	if err != nil {
		return nil, err
	}
	a.dirs.learn(rec)
	return rec, nil
}

// existing is the record at key when it is the one req makes again (a
// retry): Aborted when it is gone meanwhile, AlreadyExists when it is
// another volume's or this one's with other parameters.
func (a creation) existing(ctx context.Context, key string, req Request) (*Record, error) {
	old, err := readRecord(a.records(), key)
	if err != nil {
		return nil, err
	}
	if old == nil {
		return nil, fault.New(fault.Aborted, "volume %q is being deleted concurrently; retry", req.Name)
	}
	if old.Name != req.Name && req.Reuse != nil {
		return a.takeOver(ctx, key, old, req)
	}
	if old.Name != req.Name {
		return nil, fault.New(fault.AlreadyExists, "subDir %q already belongs to volume %q; two volumes sharing a directory would delete each other's data (a StorageClass can allow it with allowSharedSubDir and onDelete: retain)", req.SubDir, old.Name)
	}
	if old.GIDFromRange && !req.GIDRange.None() {
		req.GID, req.Mode = old.GID, old.Mode // the retry's GID is the record's
	}
	return old, compatible(old, req)
}

// writeRecord writes the record rec of req exclusively; a record at key
// of another volume whose creation was abandoned before its directory
// was made gives way to it.
func (a creation) writeRecord(key string, req Request, rec *Record) error {
	err := writeRecordExclusive(a.records(), key, rec)
	if errors.Is(err, fs.ErrExist) {
		if old, rerr := readRecord(a.records(), key); rerr == nil && old != nil && old.Name != req.Name && a.abandoned(old) {
			klog.Warningf("volume %q: reclaiming subDir %q from volume %q, whose creation was abandoned at %s before its directory was made", req.Name, req.SubDir, old.Name, old.Created.Format(time.RFC3339))
			a.seals().dropRecord(key, old)
			err = writeRecordExclusive(a.records(), key, rec)
		}
	}
	return err
}

// newRecord is the record of a new volume for req, not sealed yet.
func newRecord(req Request) *Record {
	return &Record{Version: RecordVersion, Name: req.Name, Token: volumeid.NewToken(), SubDir: req.SubDir,
		Shared: req.Shared, OnDelete: req.OnDelete, Mode: req.Mode, UID: req.UID, GID: req.GID,
		CapacityBytes: req.CapacityBytes, Created: time.Now().UTC().Truncate(time.Second), Options: req.Options,
		PublishOptions: req.PublishOptions, Source: req.Source, Filling: req.Source != nil, Pending: req.Source != nil, QuotaAgent: req.QuotaAgent, CopyAgent: req.CopyAgent,
		KeepSetID: req.KeepSetID, Claim: req.Claim, Cluster: req.Cluster, ExportName: req.ExportName}
}

// AbandonedAfter is how old a volume's record must be, with no directory
// made for it, before another volume may take its subDir: the creation was
// cut by a crash and never retried (its claim was deleted meanwhile).
// csi-provisioner retries a failed creation at least every 5 minutes.
var AbandonedAfter = time.Hour

// abandoned reports whether rec is an exclusive volume's record whose
// directory was never made and that is older than AbandonedAfter.
func (a creation) abandoned(rec *Record) bool {
	if rec.Shared || rec.SharedDir || rec.Adopted || rec.FileID != 0 || time.Since(rec.Created) < AbandonedAfter {
		return false
	}
	_, err := a.seals().freshLstat(rec.SubDir)
	return errors.Is(err, fs.ErrNotExist)
}

// checkKind fails when the directory of req is taken by a volume of the
// other kind: an exclusive volume's directory is never shared, and a shared
// directory never becomes one volume's.
func (a creation) checkKind(req Request) error {
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
func (a creation) joinShared(rec *Record) error {
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
		err = a.nesting().recheckNesting(dir)
	}
	if err != nil && fresh && dir.FileID == 0 {
		a.seals().dropRecord(key, dir)
	}
	return err
}

// removeNewDir undoes the directory this call just made at rel: only an
// empty directory is removed (rmdir), so that whatever another client may
// have put at the path meanwhile (a file, a link, a directory with data)
// stays.
func (a creation) removeNewDir(rel string) {
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
func (a creation) makeDir(key string, rec *Record, fresh bool) error {
	StepHook("create:dir", rec.SubDir)
	if rec.FileID != 0 {
		if err := a.nesting().makeParents(rec.SubDir); err != nil {
			return err
		}
		st, err := a.seals().freshLstat(rec.SubDir)
		if err == nil {
			if err := a.seals().checkSealed(rec, st); err != nil {
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
	return a.nesting().inParent(rec.SubDir, func(parent int) error { return a.makeDirIn(parent, key, rec, fresh) })
}

// makeDirIn is makeDir's making of the directory of rec, not sealed yet,
// in its parent directory open as parent.
func (a creation) makeDirIn(parent int, key string, rec *Record, fresh bool) error {
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
	err = a.seals().seal(parent, key, rec)
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
func (a creation) existsError(dir string) error {
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
func (a creation) unfinished(dir string) string { return a.unfinishedAt(a.root, dir) }

// unfinishedAt is unfinished for the directory rel below r.
func (a creation) unfinishedAt(r *os.Root, dir string) string {
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

// creation is the room of Area with the steps of a create: the checks of
// the request against what is on the share, the volume's directory made
// (or an unfinished one of an earlier attempt found), and a shared
// directory joined.
type creation struct{ *Area }

func (a *Area) creation() creation { return creation{a} }
