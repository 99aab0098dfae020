// Package provision creates and deletes volume directories on a mounted
// share. All filesystem work goes through an *os.Root opened on the share, so
// no path, symlink or ".." can reach outside it, and every directory it
// creates is backed by a Record in the share's metadata area: a directory
// without a matching record is never deleted, archived or renamed.
package provision

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
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
}

// Create makes the volume directory for req on the share, or returns the
// existing record when the same request was already served (a retry).
//
// The record is keyed by the volume's directory and published, exclusively,
// before the directory is made: a directory without a record is never
// nfsdir's, and two volumes can never claim one directory unless both opt in
// to sharing it. A new volume directory must not lie inside another volume's
// directory; it cannot contain one, since it must not exist yet. Once the
// directory exists, its fileid is sealed into the record, so that Delete
// never takes a directory put at the same path later for the volume. A first
// creation costs the record and the mkdir (two round trips to the server)
// plus the seal (a rename, and a symlink, usually with the directory's
// attributes still cached), one lookup per parent level of a nested subDir,
// and a chown and chmod when an owner or special mode bits are asked for.
//
// Errors: InvalidArgument for a path inside another volume; AlreadyExists
// when the directory belongs to another volume, when the same volume exists
// with other parameters, or when the directory exists without being
// nfsdir's; FailedPrecondition when a path component is a symlink or not a
// directory.
func (a *Area) Create(ctx context.Context, req Request) (*Record, error) {
	if err := safepath.CheckVolumePath(req.SubDir); err != nil {
		return nil, fault.New(fault.InvalidArgument, "subDir %v", err)
	}
	if err := a.checkNotNested(req.SubDir); err != nil {
		return nil, err
	}
	rec := &Record{Version: RecordVersion, Name: req.Name, Token: volumeid.NewToken(), SubDir: req.SubDir,
		Shared: req.Shared, OnDelete: req.OnDelete, Mode: req.Mode, UID: req.UID, GID: req.GID,
		CapacityBytes: req.CapacityBytes, Created: time.Now().UTC().Truncate(time.Second)}
	key := rec.Key()
	if req.Shared {
		// Shared volumes coexist only with other shared volumes.
		if other, err := readRecord(a.volumes, volumeid.KeyForDir(req.SubDir)); err != nil || other != nil {
			if err != nil {
				return nil, err
			}
			return nil, fault.New(fault.AlreadyExists, "subDir %q belongs to volume %q, which does not share it", req.SubDir, other.Name)
		}
	}
	err := writeRecordExclusive(a.volumes, key, rec)
	if errors.Is(err, fs.ErrExist) {
		// A retry, a crash between the record and the directory, or another
		// volume that owns the directory.
		old, err := readRecord(a.volumes, key)
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
		if err := a.makeVolumeDir(old, false); err != nil {
			return nil, err
		}
		return old, a.seal(key, old)
	}
	if err != nil {
		return nil, err
	}
	if err := a.makeVolumeDir(rec, !req.Shared); err != nil {
		_ = removeRecord(a.volumes, key)
		return nil, err
	}
	return rec, a.seal(key, rec)
}

// seal records the identity (fileid) of the volume directory in its record,
// so that a directory put at the same path later is never taken for it.
// Shared and already sealed volumes are left as they are.
func (a *Area) seal(key string, rec *Record) error {
	if rec.Shared || rec.FileID != 0 {
		return nil
	}
	id, err := fileID(a.root, rec.SubDir)
	if err != nil {
		return err
	}
	sealed := *rec
	sealed.FileID = id
	if err := rewriteRecord(a.volumes, key, &sealed); err != nil {
		return err
	}
	*rec = sealed
	return nil
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

// checkNotNested fails when a parent of subDir is an (exclusive) volume.
func (a *Area) checkNotNested(subDir string) error {
	for _, p := range safepath.Parents(subDir) {
		rec, err := readRecord(a.volumes, volumeid.KeyForDir(p))
		if err != nil {
			return err
		}
		if rec != nil {
			return fault.New(fault.InvalidArgument, "subDir %q lies inside volume %q (directory %q); volumes cannot nest", subDir, rec.Name, p)
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
			rec, rerr := readRecord(a.volumes, k)
			if rerr != nil {
				return rerr
			}
			switch {
			case rec == nil:
			case rec.SubDir == subDir && !rec.Shared:
				// Its own record: writing the new one reports AlreadyExists.
			case safepath.IsWithin(rec.SubDir, subDir):
				return fault.New(fault.FailedPrecondition, "%q contains nfsdir volume %q (directory %q); adopting it would put that volume's data under another volume's onDelete", subDir, rec.Name, rec.SubDir)
			case safepath.IsWithin(subDir, rec.SubDir):
				return fault.New(fault.FailedPrecondition, "%q lies inside nfsdir volume %q (directory %q)", subDir, rec.Name, rec.SubDir)
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
	if rec.OnDelete != req.OnDelete {
		diffs = append(diffs, fmt.Sprintf("onDelete %s (requested %s)", rec.OnDelete, req.OnDelete))
	}
	if rec.Mode != req.Mode || rec.UID != req.UID || rec.GID != req.GID {
		diffs = append(diffs, fmt.Sprintf("mode %04o uid %d gid %d (requested %04o uid %d gid %d)", rec.Mode, rec.UID, rec.GID, req.Mode, req.UID, req.GID))
	}
	if rec.CapacityBytes != req.CapacityBytes {
		diffs = append(diffs, fmt.Sprintf("capacity %d bytes (requested %d)", rec.CapacityBytes, req.CapacityBytes))
	}
	if len(diffs) > 0 {
		return fault.New(fault.AlreadyExists, "volume %q already exists with %s", req.Name, strings.Join(diffs, ", "))
	}
	return nil
}

// makeVolumeDir creates the parents (marking those it creates) and the
// volume directory with the record's mode and owner. Existing parents must be
// real directories, not symlinks. When fresh, the record was just written and
// an existing volume directory is someone else's: AlreadyExists.
func (a *Area) makeVolumeDir(rec *Record, fresh bool) error {
	root := a.root
	parents := safepath.Parents(rec.SubDir)
	for i := len(parents) - 1; i >= 0; i-- {
		p := parents[i]
		created, err := mkdirOnce(root, p, 0o755)
		if err != nil {
			return onShare(err, "create parent %q", p)
		}
		if created {
			if err := a.parents.WriteFile(parentMarker(p), []byte(p+"\n"), 0o600); err != nil {
				return fmt.Errorf("mark parent %q: %w", p, err)
			}
		}
	}
	// Mkdir applies the process umask and drops special bits; when neither
	// changes the mode, no chmod is needed.
	perm := modeBits(rec.Mode)
	err := root.Mkdir(rec.SubDir, perm.Perm())
	switch {
	case errors.Is(err, fs.ErrExist) && fresh:
		why := "nfsdir did not create it"
		if _, perr := a.parents.Lstat(parentMarker(rec.SubDir)); perr == nil {
			why = "it holds the directories of other nfsdir volumes"
		}
		return fault.New(fault.AlreadyExists, "directory %q already exists on the share and %s; choose another subDir or move it away", rec.SubDir, why)
	case errors.Is(err, fs.ErrExist):
		// A retry: the directory is ours; finish what a crash may have cut.
		if _, err := mkdirOnce(root, rec.SubDir, perm.Perm()); err != nil { // checks it is a real directory
			return err
		}
		return setOwnerAndMode(root, rec)
	case err != nil:
		return onShare(err, "create %q", rec.SubDir)
	}
	if err := setOwnerAndMode(root, rec); err != nil {
		// Never leave a half-made volume: the directory is new and empty.
		_ = root.Remove(rec.SubDir)
		return err
	}
	return nil
}

// setOwnerAndMode applies the record's owner and, when mkdir could not
// have set it exactly, its mode.
func setOwnerAndMode(root *os.Root, rec *Record) error {
	owned := rec.UID >= 0 || rec.GID >= 0
	if owned {
		if err := root.Lchown(rec.SubDir, rec.UID, rec.GID); err != nil {
			return onShare(err, "set owner %d:%d of %q", rec.UID, rec.GID, rec.SubDir)
		}
	}
	// Chmod after chown: chown clears the setgid bit.
	if owned || rec.Mode&^0o777 != 0 || rec.Mode&processUmask() != 0 {
		if err := root.Chmod(rec.SubDir, modeBits(rec.Mode)); err != nil {
			return onShare(err, "set mode %04o of %q", rec.Mode, rec.SubDir)
		}
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

// processUmask returns the process umask, read once at the first volume
// creation (main sets it to 0 before serving); mkdir(2) clears its bits.
var processUmask = sync.OnceValue(func() uint32 {
	old := syscall.Umask(0o022)
	syscall.Umask(old)
	return uint32(old)
})

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
	rec, err := readRecord(a.volumes, id.Key)
	if err != nil || rec == nil || rec.Token != id.Token {
		return nil, err
	}
	return rec, nil
}

// Delete applies the record's onDelete policy to the volume of id and then
// removes the record. A volume that does not exist is not an error. With
// "delete", the directory is renamed into the trash at once and purged later
// by a Purger.
func (a *Area) Delete(ctx context.Context, id volumeid.ID) error {
	root := a.root
	rec, err := a.Lookup(id)
	if err != nil || rec == nil {
		return err
	}
	st, err := FreshLstat(root, rec.SubDir)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("check %q: %w", rec.SubDir, err)
	}
	if exists && !st.IsDir() {
		return fault.New(fault.FailedPrecondition, "%q is no longer a directory (%s); nfsdir leaves it alone", rec.SubDir, st.Mode().Type())
	}
	if exists && rec.FileID != 0 && rec.OnDelete != params.Retain {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Ino != rec.FileID {
			return fault.New(fault.FailedPrecondition, "directory %q is not the one nfsdir created for volume %q (it was replaced: fileid %d, recorded %d); nfsdir leaves it alone: delete it by hand, or hand it over with `nfsdir adopt` after removing the record %s", rec.SubDir, rec.Name, sys.Ino, rec.FileID, recordPath(id.Key))
		}
	}
	if exists {
		switch rec.OnDelete {
		case params.Retain:
			klog.Infof("volume %q: retaining %q", rec.Name, rec.SubDir)
		case params.Archive:
			if err := archive(root, rec); err != nil {
				return err
			}
		default:
			// ENOENT: gone meanwhile (our own earlier attempt, seen through a
			// stale cache, or someone else); nothing left to move.
			if err := a.moveInto(rec.SubDir, a.trash, trashName(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return onShare(err, "move %q to %s", rec.SubDir, trashDir)
			}
		}
	}
	if err := removeRecord(a.volumes, id.Key); err != nil {
		return err
	}
	if rec.OnDelete != params.Retain {
		a.pruneParents(rec.SubDir)
	}
	return nil
}

// trashName names a deleted volume's directory in .nfsdir/trash.
func trashName(id volumeid.ID) string { return id.Key + "." + id.Token }

// moveInto renames the directory rel of the share into dst, an open
// metadata directory, as name. The source's parent is opened without
// following any symlink, and dst is the handle checked when the Area was
// opened: neither can be redirected by whatever is put at their names.
func (a *Area) moveInto(rel string, dst *os.Root, name string) error {
	rootDir, err := a.root.Open(".")
	if err != nil {
		return err
	}
	defer rootDir.Close()
	parent := int(rootDir.Fd())
	if d := path.Dir(rel); d != "." {
		fd, err := unix.Openat2(parent, d, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
		if err != nil {
			return fmt.Errorf("open %q: %w", d, err)
		}
		defer unix.Close(fd)
		parent = fd
	}
	dstDir, err := dst.Open(".")
	if err != nil {
		return err
	}
	defer dstDir.Close()
	if err := unix.Renameat(parent, path.Base(rel), int(dstDir.Fd()), name); err != nil {
		return fmt.Errorf("rename %q: %w", rel, err)
	}
	return nil
}

func archive(root *os.Root, rec *Record) error {
	for attempt := 0; attempt < 1000; attempt++ {
		name := safepath.ArchiveName(rec.SubDir, attempt)
		if _, err := root.Lstat(name); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("check %q: %w", name, err)
		}
		if err := root.Rename(rec.SubDir, name); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // gone meanwhile; nothing left to archive
			}
			return fmt.Errorf("archive %q as %q: %w", rec.SubDir, name, err)
		}
		klog.Infof("volume %q: archived %q as %q", rec.Name, rec.SubDir, name)
		return nil
	}
	return fault.New(fault.ResourceExhausted, "no free archive name for %q", rec.SubDir)
}

// pruneParents removes parent directories that nfsdir created for templated
// subDirs once they are empty, deepest first, never the share root.
func (a *Area) pruneParents(subDir string) {
	for _, p := range safepath.Parents(subDir) {
		if _, err := a.parents.Lstat(parentMarker(p)); err != nil {
			return // not ours
		}
		if err := a.root.Remove(p); err != nil {
			return // not empty, or gone
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
	if err := safepath.CheckVolumePath(req.SubDir); err != nil {
		return nil, fault.New(fault.InvalidArgument, "subDir %v", err)
	}
	if req.Shared {
		return nil, fault.New(fault.InvalidArgument, "a shared directory cannot be adopted")
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
		CapacityBytes: req.CapacityBytes, Created: time.Now().UTC().Truncate(time.Second), Adopted: true, FileID: id}
	if err := writeRecordExclusive(a.volumes, rec.Key(), rec); err != nil {
		if errors.Is(err, fs.ErrExist) {
			old, _ := readRecord(a.volumes, rec.Key())
			if old != nil {
				return nil, fault.New(fault.AlreadyExists, "directory %q already belongs to nfsdir volume %q", req.SubDir, old.Name)
			}
		}
		return nil, err
	}
	return rec, nil
}
