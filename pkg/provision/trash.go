package provision

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/safepath"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// removal is the room of an Area that takes deleted volumes' directories
// out of the share's tree: into .nfsdir/trash for the purge, or aside as
// archived-<subDir>, each move checked against the volume's seal, and the
// parents nfsdir made pruned once empty.
type removal struct{ a *Area }

// removal returns the area's removals.
func (a *Area) removal() removal { return removal{a} }

// trashName names a deleted volume's directory in .nfsdir/trash.
func trashName(id volumeid.ID) string { return id.Key + "." + id.Token }

// moveInto renames the directory rel of the share into dst, an open
// metadata directory, as name. The source's parent is opened without
// following any symlink, and dst is the handle checked when the Area was
// opened: neither can be redirected by whatever is put at their names.
func (rm removal) moveInto(rel string, dst *os.Root, name string) error {
	return rm.a.atParent(rel, func(parent int) error {
		return rm.a.atDir(dst, func(dstDir int) error {
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

func (rm removal) archive(rec *Record) error {
	for attempt := 0; attempt < 1000; attempt++ {
		name := safepath.ArchiveName(rec.SubDir, attempt)
		if _, err := rm.a.root.Lstat(name); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("check %q: %w", name, err)
		}
		if err := rm.moveVerified(rec, rm.a.root, name); err != nil {
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

// toTrash moves the directory of rec into the trash for the purge: to
// a pending name first, which the purge ignores, and, once it proved to be
// rec's directory, removes it there if it is empty (the purge's whole work
// for it, at the cost of one call) or gives it its final name for the
// purge (purge true). noPending: the caller found no pending entry of an
// interrupted attempt (checkDelete), and it is not looked up again.
func (rm removal) toTrash(rec *Record, id volumeid.ID, noPending bool) (purge bool, err error) {
	final := trashName(id)
	pending := pendingPrefix + final
	if !noPending {
		_, err = rm.a.trash.Lstat(pending)
	}
	if noPending || errors.Is(err, fs.ErrNotExist) {
		err := rm.moveVerified(rec, rm.a.trash, pending)
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
	} else if err := rm.verifyMoved(rec, rm.a.trash, pending); err != nil {
		return false, err // left by an interrupted attempt, and not rec's: put back
	}
	StepHook("delete:rmdir", rec.SubDir)
	switch err := rm.removeEmptyDir(rm.a.trash, pending); {
	case err == nil:
		return false, nil
	case errors.Is(err, unix.ENOENT):
		// Another controller's call for this volume (a leader change)
		// removed it, or renamed it for the purge.
		return true, nil
	case !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST):
		klog.V(2).Infof("%s: %s/%s is left to the purge: %v", rec.describe(), trashDir, pending, err)
	}
	if err := rm.a.trash.Rename(pending, final); err != nil {
		return false, onShare(err, "rename %s/%s", trashDir, pending)
	}
	return true, nil
}

// removeEmptyDir removes the directory name below dir if it is empty
// (rmdir: ENOTEMPTY or EEXIST otherwise), with one call on the share.
func (rm removal) removeEmptyDir(dir *os.Root, name string) error {
	return rm.a.atDir(dir, func(fd int) error { return unix.Unlinkat(fd, name, unix.AT_REMOVEDIR) })
}

// pendingPrefix starts the name of a directory moved into the trash but
// not yet proven to be the deleted volume's; the purge skips such names.
const pendingPrefix = "."

// moveVerified renames the directory at rec's path to name below dst and
// then checks that what it moved is rec's directory: a rename acts on a
// name, and a delayed call (a deposed leader's, say) may find another
// volume's directory at the path by then. Anything else is moved back at
// once. fs.ErrNotExist: nothing at the path.
func (rm removal) moveVerified(rec *Record, dst *os.Root, name string) error {
	if err := rm.moveInto(rec.SubDir, dst, name); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return onShare(err, "move %q", rec.SubDir)
	}
	return rm.verifyMoved(rec, dst, name)
}

// verifyMoved checks that the directory at name below dst, just moved
// from rec's path, is rec's, and moves it back to the path otherwise.
func (rm removal) verifyMoved(rec *Record, dst *os.Root, name string) error {
	var why error
	var f *os.File
	err := rm.a.atDir(dst, func(fd int) (err error) {
		f, err = openPathAt(fd, name)
		return err
	})
	switch {
	case err != nil:
		return onShare(err, "check %q", name)
	case rec.FileID != 0:
		why = rm.a.seals().checkSealedFile(rec, f)
	default:
		if w := rm.a.creation().unfinishedAt(dst, name); w != "" {
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
	if err := rm.moveBack(dst, name, rec.SubDir); err != nil {
		return fault.Wrap(fault.Internal, err, "%v; nfsdir moved it to %q and could not move it back: move it back to %q by hand", why, name, rec.SubDir)
	}
	return why
}

// moveBack renames name below src back to rel on the share, unless
// something took rel meanwhile.
func (rm removal) moveBack(src *os.Root, name, rel string) error {
	if _, err := rm.a.seals().freshLstat(rel); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%q is taken again", rel)
	}
	return rm.a.atDir(src, func(srcDir int) error {
		return rm.a.atParent(rel, func(parent int) error {
			return unix.Renameat(srcDir, name, parent, path.Base(rel))
		})
	})
}

// pruneParents removes parent directories that nfsdir created for templated
// subDirs once they are empty, deepest first, never the share root.
func (rm removal) pruneParents(subDir string) {
	for _, p := range safepath.Parents(subDir) {
		if _, err := rm.a.parents.Lstat(parentMarker(p)); err != nil {
			return // not ours
		}
		// rmdir only (os.Root's Remove tries unlink first, and looks the
		// name up again for its rmdir).
		if err := rm.a.atParent(p, func(parent int) error {
			return unix.Unlinkat(parent, path.Base(p), unix.AT_REMOVEDIR)
		}); err != nil {
			return // not empty, gone, or not a directory
		}
		_ = rm.a.parents.Remove(parentMarker(p))
	}
}
