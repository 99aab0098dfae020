package provision

import (
	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

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
	// MountServer, when set, replaces the address nodes mount the volume
	// from ("": its export's own). Modify then checks, through the Area,
	// that the volume's directory there is the one sealed into its record:
	// call it on an Area of the export at the new address.
	MountServer *string
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
		if c.MountServer != nil {
			if *c.MountServer != "" {
				if err := a.seals().seen(r); err != nil {
					return err
				}
			}
			r.MountServer = *c.MountServer
		}
		r.Modified = true
		return nil
	})
	if err == nil && rec == nil {
		err = fault.New(fault.NotFound, "volume %q does not exist", id.String())
	}
	return rec, err
}

// seen fails unless the volume directory of r, seen through this Area, is
// the one sealed into r (its inode number and file handle): proof that the
// Area's address serves the volume's own data.
func (a seals) seen(r *Record) error {
	if r.FileID == 0 {
		return fault.New(fault.FailedPrecondition, "volume %q has no sealed directory (made or adopted by an older nfsdir): its address cannot be checked; move it with a named export instead", r.Name)
	}
	st, err := a.freshLstat(r.SubDir)
	if err != nil {
		return onShare(err, "check %q through the new address", r.SubDir)
	}
	return a.checkSealed(r, st)
}
