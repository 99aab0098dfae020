package provision

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/safepath"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// checkNoShareAbove fails when a parent of subDir is the root of another
// nfsdir share (it holds a metadata directory): that share's volumes and
// this one's would not see each other's records.
func (a nesting) checkNoShareAbove(subDir string) error {
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
func (a nesting) checkNotNested(subDir string) error {
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
func (a nesting) firstError(concurrent bool, checks ...func() error) error {
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
func (a nesting) checkNoVolumeAround(subDir string) error {
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
func (a nesting) inParent(rel string, fn func(parent int) error) error {
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
func (a nesting) makeParents(subDir string) error {
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
const squashHint = "; the NFS server refused it, most likely because the export squashes root (root_squash or all_squash in /etc/exports) " +
	"or, with sec=krb5*, maps the controller's Kerberos principal to an unprivileged user: use an export with no_root_squash for nfsdir's share " +
	"(and map the principal to root), or make the share root writable by the squashed user"

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

// recheckNesting runs the nesting check again once the directory of rec
// was made, with the records directory revalidated: the first check ran
// before the record, so a volume around this one created concurrently
// may have passed its own check too. Records come before directories, so
// whichever of the two made its directory second sees the other's record
// here and undoes its own (the directory is new and empty).
func (a nesting) recheckNesting(rec *Record) error {
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
		a.creation().removeNewDir(rec.SubDir)
		rec.unseal()
	}
	return err
}

// nesting is the room of Area that keeps volumes from nesting: no volume
// inside another or around one, none above the share, and the parents a
// new volume's directory needs.
type nesting struct{ *Area }

func (a *Area) nesting() nesting { return nesting{a} }
