package provision

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/treecopy"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// ErrGone says the snapshot or volume a fill was started for was deleted
// meanwhile: there is nothing left to fill.
var ErrGone = errors.New("deleted while it was being filled")

// Fill makes the copy of the snapshot of id, unless it is complete
// already, with c: into a directory of this attempt's own, renamed to the
// snapshot's final name only once complete. Copies left by earlier attempts
// (a crash, or a controller that lost its leadership) are moved into the
// trash first; such an attempt, if still running, can then never finish
// (its rename fails). The source volume must still exist and be the
// sealed directory: a snapshot whose source was deleted before its copy
// was complete is FailedPrecondition, for good. ErrGone: the snapshot
// was deleted. The caller kicks the purge after an error.
func (sn Snapshots) Fill(ctx context.Context, id volumeid.ID, c treecopy.Copier) (treecopy.Result, error) {
	var res treecopy.Result
	s, err := sn.Lookup(id)
	if err != nil {
		return res, err
	}
	if s == nil {
		return res, ErrGone
	}
	if ready, err := sn.Ready(s); err != nil || ready {
		return res, err
	}
	vol, err := readRecord(sn.a.records(), s.SourceKey)
	if err != nil {
		return res, err
	}
	if vol == nil || vol.Token != s.SourceToken || vol.FileID == 0 {
		return res, fault.New(fault.FailedPrecondition, "snapshot %q: its source volume %q was deleted before the snapshot was complete; delete the snapshot", s.Name, s.SourceName)
	}
	dir, err := sn.dir(false)
	if err != nil {
		return res, err
	}
	attempt := s.attemptPrefix() + volumeid.NewToken()
	if err := sn.trashAttempts(dir, s, attempt); err != nil {
		return res, err
	}
	if err := dir.Mkdir(attempt, 0o700); err != nil {
		return res, onShare(err, "create %s", path.Join(snapshotsDir, attempt))
	}
	src, err := sn.a.openVolumeDir(vol)
	if err != nil {
		return res, errors.Join(onShare(err, "open the directory of volume %q", vol.Name), sn.trashData(dir, attempt))
	}
	defer unix.Close(src)
	dst, err := openAt(dir, attempt)
	if err != nil {
		return res, errors.Join(onShare(err, "open %s", path.Join(snapshotsDir, attempt)), sn.trashData(dir, attempt))
	}
	defer unix.Close(dst)
	res, err = sn.a.agents.copyTree(ctx, c, vol.CopyAgent, src, dst, CopyDir{SubDir: vol.SubDir, Token: vol.Token}, CopyDir{Snapshot: attempt}, true)
	if err != nil {
		return res, errors.Join(onShare(err, "snapshot %q of volume %q", s.Name, vol.Name), sn.trashData(dir, attempt))
	}
	err = renameBetween(dir, attempt, dir, s.dataName())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return res, fault.New(fault.Aborted, "snapshot %q: another attempt took this one's copy away (a second controller); its own copy is what counts", s.Name)
	case errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY):
		return res, sn.trashData(dir, attempt) // another attempt finished first
	case err != nil:
		return res, errors.Join(onShare(err, "complete snapshot %q", s.Name), sn.trashData(dir, attempt))
	}
	// Deleted meanwhile: DeleteSnapshot may have moved the copies before
	// this rename, so the copy is moved away here.
	if now, err := sn.Lookup(id); err == nil && now == nil {
		return res, errors.Join(ErrGone, sn.trashData(dir, s.dataName()))
	}
	return res, nil
}

// Fills is the room of an Area that fills volumes made from a snapshot,
// a volume or a csi-driver-nfs archive.
type Fills struct{ a *Area }

// Fills returns the area's fills.
func (a *Area) Fills() Fills { return Fills{a} }

// check checks that the source of req can fill it: it exists on
// this share, is complete, and fits the requested capacity.
func (fl Fills) check(req Request) error {
	src := req.Source
	if src.Archive != "" {
		fd, err := fl.openArchive(src.Archive)
		if err != nil {
			return err
		}
		unix.Close(fd)
		return nil
	}
	if src.Snapshot {
		s, err := fl.a.Snapshots().Lookup(volumeid.ID{Key: src.Key, Token: src.Token})
		if err != nil {
			return err
		}
		if s == nil {
			return fault.New(fault.NotFound, "snapshot %s.%s does not exist on this share", src.Key, src.Token)
		}
		ready, err := fl.a.Snapshots().Ready(s)
		if err != nil {
			return err
		}
		if !ready {
			return fault.New(fault.Unavailable, "snapshot %q is not ready to use yet; retry once it is", s.Name)
		}
		return fitsIn(req, s.SizeBytes, "snapshot "+s.Name)
	}
	vol, err := fl.a.Lookup(volumeid.ID{Key: src.Key, Token: src.Token})
	if err != nil {
		return err
	}
	if vol == nil {
		return fault.New(fault.NotFound, "source volume %s.%s does not exist on this share", src.Key, src.Token)
	}
	if vol.Shared {
		return fault.New(fault.FailedPrecondition, "source volume %q shares its directory with other volumes (allowSharedSubDir): it cannot be cloned", vol.Name)
	}
	if vol.Filling || vol.FileID == 0 {
		return fault.New(fault.Unavailable, "source volume %q is not complete yet; retry once it is", vol.Name)
	}
	return fitsIn(req, vol.CapacityBytes, "volume "+vol.Name)
}

// fitsIn fails with OutOfRange when req asks for less than size bytes.
func fitsIn(req Request, size int64, what string) error {
	if req.CapacityBytes > 0 && req.CapacityBytes < size {
		return fault.New(fault.OutOfRange, "volume %q asks for %d bytes, less than the %d bytes of its source %s", req.Name, req.CapacityBytes, size, what)
	}
	return nil
}

// Fill copies the source of the volume of id into its directory with c
// and marks the volume usable, unless it is already. The directory is the
// sealed one Create made; one an earlier attempt left partly filled is
// moved into the trash and made anew (sealed again) first, so a copy is
// always made into an empty directory, and the volume is marked usable
// only if its record still seals the directory this attempt filled: an
// attempt overtaken by another (a second controller) never marks the
// other's partial copy complete. ErrGone: the volume was deleted. The
// caller kicks the purge after an error.
func (fl Fills) Fill(ctx context.Context, id volumeid.ID, c treecopy.Copier) (treecopy.Result, error) {
	var res treecopy.Result
	rec, err := fl.a.Lookup(id)
	if err != nil || rec == nil {
		if err == nil {
			err = ErrGone
		}
		return res, err
	}
	if !rec.Filling || rec.Copied {
		return res, nil
	}
	if rec.Abandoned {
		return res, ErrGone
	}
	copyInto, release, err := fl.copier(ctx, rec, c)
	if err != nil {
		return res, err
	}
	defer release()
	dst, err := fl.emptyDir(id, rec)
	if err != nil {
		return res, err
	}
	defer unix.Close(dst)
	var st unix.Stat_t
	if err := unix.Fstat(dst, &st); err != nil {
		return res, onShare(err, "check %q", rec.SubDir)
	}
	if res, err = copyInto(dst); err != nil {
		return res, onShare(err, "fill volume %q from %s", rec.Name, rec.Source)
	}
	if rec.Source.Archive != "" && res.Skipped > 0 {
		klog.Warningf("volume %q: %d entries of %s were left out (device nodes, or names reaching outside the volume or through a symlink)", rec.Name, res.Skipped, rec.Source)
	}
	// Marked usable only if the record still seals the directory this
	// attempt filled.
	done, err := updateRecordIf(fl.a.records(), id.Key, id.Token, func(r *Record) error {
		if r.FileID != st.Ino {
			return fault.New(fault.Aborted, "volume %q: another attempt made its directory anew while this one filled it; that attempt's copy is what counts", r.Name)
		}
		if r.Pending {
			r.Copied = true // still Filling until handed out (HandOut)
		} else {
			r.Filling = false // a record of an older nfsdir's
		}
		return nil
	})
	if err == nil && done == nil {
		err = ErrGone
	}
	return res, err
}

// copier returns what fills rec's directory (given as a descriptor):
// the copy of its source volume or snapshot, or the unpacking of its
// csi-driver-nfs archive, and what releases the source when done.
func (fl Fills) copier(ctx context.Context, rec *Record, c treecopy.Copier) (func(dst int) (treecopy.Result, error), func(), error) {
	if rec.Source.Archive != "" {
		return fl.unpacker(ctx, rec, c)
	}
	src, from, err := fl.openSource(rec)
	if err != nil {
		return nil, nil, err
	}
	return func(dst int) (treecopy.Result, error) {
		return fl.a.agents.copyTree(ctx, c, rec.CopyAgent, src, dst, from, CopyDir{SubDir: rec.SubDir, Token: rec.Token}, false)
	}, func() { unix.Close(src) }, nil
}

// unpacker is copier for a csi-driver-nfs snapshot: its tar.gz unpacked
// (treecopy.Unpack: nothing in the archive reaches outside the volume),
// within the volume's capacity.
func (fl Fills) unpacker(ctx context.Context, rec *Record, c treecopy.Copier) (func(dst int) (treecopy.Result, error), func(), error) {
	afd, err := fl.openArchive(rec.Source.Archive)
	if err != nil {
		return nil, nil, err
	}
	archive := os.NewFile(uintptr(afd), rec.Source.Archive)
	u := treecopy.DefaultUnpacker
	if rec.CapacityBytes > 0 {
		u.MaxBytes = min(u.MaxBytes, rec.CapacityBytes)
	}
	u.Limit, u.Progress = c.Limit, c.Progress
	u.KeepSetID = rec.KeepSetID
	// A StorageClass that gives its volumes an owner (uid, gid) gives it
	// to what is restored into them too; without one, the archive's
	// owners stay.
	if rec.UID >= 0 || rec.GID >= 0 {
		u.Owner = &treecopy.Owner{UID: rec.UID, GID: rec.GID}
	}
	return func(dst int) (treecopy.Result, error) {
		res, err := u.Unpack(ctx, archive, dst)
		if errors.Is(err, treecopy.ErrBounds) {
			err = fault.Wrap(fault.OutOfRange, err, "volume %q cannot be restored from %s within %d bytes of file data, %d entries and names %d deep; ask for a larger volume if it is the bytes",
				rec.Name, rec.Source, u.MaxBytes, u.MaxEntries, u.MaxDepth)
		}
		return res, err
	}, func() { archive.Close() }, nil
}

// openArchive opens the regular file rel of the share (a csi-driver-nfs
// snapshot archive) without following any symlink: NotFound when it is not
// there, FailedPrecondition when it is not a regular file. An archive
// named .tar.gz may be there as a plain .tar instead (csi-driver-nfs
// --enable-snapshot-compression=false makes those, under the same snapshot
// ID); which one it is, Unpack tells from its content.
func (fl Fills) openArchive(rel string) (int, error) {
	root, err := fl.a.root.Open(".")
	if err != nil {
		return -1, err
	}
	defer root.Close()
	names := []string{rel}
	if plain, ok := strings.CutSuffix(rel, ".tar.gz"); ok {
		names = append(names, plain+".tar")
	}
	fd := -1
	for _, name := range names {
		fd, err = unix.Openat2(int(root.Fd()), name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
		if !errors.Is(err, unix.ENOENT) {
			rel = name
			break
		}
	}
	if errors.Is(err, unix.ENOENT) {
		return -1, fault.New(fault.NotFound, "csi-driver-nfs snapshot archive %s does not exist on the share", strings.Join(quoteAll(names), " or "))
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		return -1, fault.New(fault.FailedPrecondition, "csi-driver-nfs snapshot archive %q is reached through a symlink; nfsdir does not follow it", rel)
	}
	if err != nil {
		return -1, onShare(err, "open %q", rel)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		if err != nil {
			return -1, onShare(err, "check %q", rel)
		}
		return -1, fault.New(fault.FailedPrecondition, "csi-driver-nfs snapshot archive %q is not a regular file", rel)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, 0); err != nil { // blocking reads from here on
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// openSource opens the directory the volume rec is filled from, and names
// it for a copy agent.
func (fl Fills) openSource(rec *Record) (int, CopyDir, error) {
	src := rec.Source
	if src.Snapshot {
		s, err := fl.a.Snapshots().Lookup(volumeid.ID{Key: src.Key, Token: src.Token})
		if err != nil {
			return -1, CopyDir{}, err
		}
		if s == nil {
			return -1, CopyDir{}, fault.New(fault.FailedPrecondition, "volume %q: the snapshot it is restored from was deleted before the restore was complete; delete the volume", rec.Name)
		}
		dir, err := fl.a.Snapshots().dir(false)
		if err != nil {
			return -1, CopyDir{}, err
		}
		fd, err := openAt(dir, s.dataName())
		if err != nil {
			return -1, CopyDir{}, onShare(err, "open the copy of snapshot %q", s.Name)
		}
		return fd, CopyDir{Snapshot: s.dataName()}, nil
	}
	vol, err := fl.a.Lookup(volumeid.ID{Key: src.Key, Token: src.Token})
	if err != nil {
		return -1, CopyDir{}, err
	}
	if vol == nil || vol.FileID == 0 {
		return -1, CopyDir{}, fault.New(fault.FailedPrecondition, "volume %q: the volume it is cloned from was deleted before the clone was complete; delete the volume", rec.Name)
	}
	fd, err := fl.a.openVolumeDir(vol)
	if err != nil {
		return -1, CopyDir{}, onShare(err, "open the directory of volume %q", vol.Name)
	}
	return fd, CopyDir{SubDir: vol.SubDir, Token: vol.Token}, nil
}

// emptyDir opens the sealed directory of the filling volume rec,
// making it anew first when an earlier attempt left anything in it.
func (fl Fills) emptyDir(id volumeid.ID, rec *Record) (int, error) {
	fd, err := fl.a.openVolumeDir(rec)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return -1, onShare(err, "open the directory of volume %q", rec.Name)
	}
	if err == nil {
		empty, err := isEmpty(fd)
		if err != nil || empty {
			if err != nil {
				unix.Close(fd)
			}
			return fd, err
		}
		unix.Close(fd)
		klog.Infof("volume %q: an earlier fill was cut; making its directory %q anew", rec.Name, rec.SubDir)
		if err := fl.a.removal().moveVerified(rec, fl.a.trash, "filling-"+trashName(id)+"."+volumeid.NewToken()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return -1, err
		}
	}
	// Gone, or moved away: unseal the record, then make and seal the
	// directory as Create does.
	sealed := rec.FileID
	next, err := updateRecordIf(fl.a.records(), id.Key, id.Token, func(r *Record) error {
		if r.FileID != sealed {
			return fault.New(fault.Aborted, "volume %q: another attempt is making its directory anew; retry", r.Name)
		}
		r.unseal()
		return nil
	})
	if err != nil {
		return -1, err
	}
	if next == nil {
		return -1, ErrGone
	}
	if err := fl.a.creation().makeDir(id.Key, next, false); err != nil {
		return -1, err
	}
	*rec = *next
	return fl.a.openVolumeDir(rec)
}

// isEmpty reports whether the directory open as fd has no entries (read
// on a description of its own: fd's offset stays).
func isEmpty(fd int) (bool, error) {
	d, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	f := os.NewFile(uintptr(d), ".")
	defer f.Close()
	names, err := f.Readdirnames(1)
	if len(names) > 0 {
		return false, nil
	}
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return false, err
}

// openAt opens the directory name below dir without following a symlink.
func openAt(dir *os.Root, name string) (int, error) {
	d, err := dir.Open(".")
	if err != nil {
		return -1, err
	}
	defer d.Close()
	return unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// quoteAll quotes each of names.
func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strconv.Quote(n)
	}
	return out
}
