package provision

import (
	"errors"
	"io/fs"
	"time"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/safepath"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// Adoptions is the room of an Area that hands existing directories over
// to nfsdir (nfsdir adopt, nfsdir migrate) and takes them back.
type Adoptions struct{ a *Area }

// Adoptions returns the area's adoptions.
func (a *Area) Adoptions() Adoptions { return Adoptions{a} }

// Adopt hands an existing directory, created by something else (a
// csi-driver-nfs volume, a static PV, an administrator), over to nfsdir: it
// writes a record for it, so that the volume ID built from the record can be
// deleted, archived or retained like any nfsdir volume. The directory must
// exist, be a real directory, lie outside other volumes and have no record.
// Nothing is written into the directory.
func (ad Adoptions) Adopt(req Request) (*Record, error) {
	same, err := ad.check(req)
	if err != nil || same != nil {
		return same, err
	}
	st, err := ad.a.root.Lstat(req.SubDir)
	if err != nil {
		return nil, err
	}
	id, err := fileID(ad.a.root, req.SubDir)
	if err != nil {
		return nil, err
	}
	rec := &Record{Version: RecordVersion, Name: req.Name, Token: volumeid.NewToken(), SubDir: req.SubDir,
		OnDelete: req.OnDelete, Mode: uint32(st.Mode().Perm()), UID: -1, GID: -1,
		CapacityBytes: req.CapacityBytes, Created: time.Now().UTC().Truncate(time.Second), Adopted: true, FileID: id, Handle: ad.a.seals().handleDigest(ad.a.root, req.SubDir),
		Options: req.Options, LegacyID: req.LegacyID, Claim: req.Claim, Cluster: req.Cluster}
	if err := writeRecordExclusive(ad.a.records(), rec.Key(), rec); err != nil {
		if errors.Is(err, fs.ErrExist) {
			old, _ := readRecord(ad.a.records(), rec.Key())
			if old != nil {
				return nil, fault.New(fault.AlreadyExists, "directory %q already belongs to nfsdir volume %q", req.SubDir, old.Name)
			}
		}
		return nil, err
	}
	return rec, nil
}

// Can reports whether Adopt(req) would succeed, changing nothing: nil
// when it would (or did already: the same adoption), else Adopt's error.
func (ad Adoptions) Can(req Request) error {
	_, err := ad.check(req)
	return err
}

// check runs Adopt's checks. It returns the record of the same
// adoption made before (the same name, legacy ID and directory), if any.
func (ad Adoptions) check(req Request) (*Record, error) {
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
	old, err := readRecord(ad.a.records(), volumeid.KeyForDir(req.SubDir))
	if err != nil {
		return nil, err
	}
	if old != nil {
		if old.Adopted && old.Name == req.Name && old.LegacyID == req.LegacyID {
			if id, err := fileID(ad.a.root, req.SubDir); err == nil && id == old.FileID {
				return old, nil
			}
		}
		return nil, fault.New(fault.AlreadyExists, "directory %q already belongs to nfsdir volume %q", req.SubDir, old.Name)
	}
	if err := ad.a.nesting().checkNotNested(req.SubDir); err != nil {
		return nil, err
	}
	if err := ad.a.nesting().checkNoVolumeAround(req.SubDir); err != nil {
		return nil, err
	}
	for _, p := range append(safepath.Parents(req.SubDir), req.SubDir) {
		st, err := ad.a.root.Lstat(p)
		if err != nil {
			return nil, fault.Wrap(fault.NotFound, err, "directory %q", req.SubDir)
		}
		if !st.IsDir() {
			return nil, fault.New(fault.FailedPrecondition, "%q is not a directory (%s)", p, st.Mode().Type())
		}
	}
	return nil, nil
}

// Undo removes the record Adopt made for the directory subDir as volume
// name, and nothing else: the directory and what it holds stay as they
// are. No record is not an error; a record that is not that adoption is
// FailedPrecondition.
func (ad Adoptions) Undo(name, subDir string) error {
	if err := safepath.CheckVolumePath(subDir); err != nil {
		return fault.New(fault.InvalidArgument, "subDir %v", err)
	}
	key := volumeid.KeyForDir(subDir)
	rec, err := readRecord(ad.a.records(), key)
	if err != nil || rec == nil {
		return err
	}
	if !rec.Adopted || rec.Name != name || rec.SubDir != subDir {
		return fault.New(fault.FailedPrecondition, "directory %q belongs to nfsdir volume %q, which is not its adoption as %q; left alone", subDir, rec.Name, name)
	}
	if err := ad.a.volumes.Remove(key); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// As returns the record of the directory subDir when it was adopted
// for the csi-driver-nfs volume ID legacyID (Adopt with Request.LegacyID),
// and nil when there is none: no other record, and no other ID, qualifies.
func (ad Adoptions) As(legacyID, subDir string) (*Record, error) {
	if safepath.CheckVolumePath(subDir) != nil {
		return nil, nil
	}
	rec, err := readRecord(ad.a.records(), volumeid.KeyForDir(subDir))
	if err != nil || rec == nil || !rec.Adopted || rec.LegacyID == "" || rec.LegacyID != legacyID || rec.SubDir != subDir {
		return nil, err
	}
	return rec, nil
}
