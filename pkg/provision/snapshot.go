package provision

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/safepath"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// Snapshots live in their own metadata directory, made by the first
// snapshot of a share:
//
//	.nfsdir/snapshots/<key>                  the Snapshot record (a symlink's target, as volume records)
//	.nfsdir/snapshots/<key>.<token>          the snapshot's copy of the volume's tree, once complete
//	.nfsdir/snapshots/.<key>.<token>.<try>   a copy being made (one per attempt)
//
// <key> is volumeid.KeyForSnapshot of the snapshot's CSI name. A copy is
// made under an attempt's own name and renamed to <key>.<token> only when
// it is complete, so a snapshot is ready exactly when that name exists:
// nothing marks readiness but the finished copy itself, and an attempt cut
// at any point (a crash, a second controller taking over) never leaves a
// partial copy under the final name. The metadata area is nfsdir's alone
// (mode 0700, checked when it is opened), so no tenant reaches a
// snapshot's data.
const snapshotsName = "snapshots"

var snapshotsDir = path.Join(safepath.MetaDir, snapshotsName)

// SnapshotKind tags snapshot records, so that one is never read as a
// volume's.
const SnapshotKind = "snapshot"

// Snapshot is nfsdir's record of a snapshot: written once, before its copy
// is made, and removed only after the copy is gone.
type Snapshot struct {
	Version int    `json:"version"`
	Kind    string `json:"kind"`
	Name    string `json:"name"`  // CSI snapshot name
	Token   string `json:"token"` // random per creation, also in the snapshot ID
	// SourceKey and SourceToken name the source volume's record.
	SourceKey   string `json:"sourceKey"`
	SourceToken string `json:"sourceToken"`
	SourceName  string `json:"sourceName"` // the source volume's name, for messages
	// SizeBytes is the source volume's capacity when the snapshot was
	// taken: the smallest volume it restores into.
	SizeBytes int64     `json:"sizeBytes"`
	Created   time.Time `json:"created"`
	// Options are the source volume's share mount options (its record's
	// Options), so that a listing rebuilds the snapshot's ID as it was
	// handed out.
	Options string `json:"options,omitempty"`
	// ExportName is the source volume's (its record's ExportName), so
	// that a listing rebuilds the snapshot's ID with the export's name.
	ExportName string `json:"exportName,omitempty"`
}

// Key returns the key the snapshot's record is stored under.
func (s *Snapshot) Key() string { return volumeid.KeyForSnapshot(s.Name) }

// dataName names the snapshot's complete copy.
func (s *Snapshot) dataName() string { return s.Key() + "." + s.Token }

// attemptPrefix starts the names of the copies being made for s.
func (s *Snapshot) attemptPrefix() string { return "." + s.dataName() + "." }

// SourceIs reports whether s was taken of the volume of id.
func (s *Snapshot) SourceIs(id volumeid.ID) bool {
	return s.SourceKey == id.Key && s.SourceToken == id.Token
}

// Snapshots is the room of an Area that keeps its share's snapshots: their
// records and complete copies in .nfsdir/snapshots, and the copies being
// made (Fill). Volumes restored from a snapshot are filled by Fills.
type Snapshots struct{ a *Area }

// Snapshots returns the area's snapshots.
func (a *Area) Snapshots() Snapshots { return Snapshots{a} }

// dir returns the open snapshots directory; without create, a
// share that never had a snapshot gives fs.ErrNotExist.
func (sn Snapshots) dir(create bool) (*os.Root, error) {
	return sn.a.lazyMetaDir(snapshotsName, &sn.a.snapshots, create)
}

// readSnapshot returns the snapshot record stored under key, or nil.
func readSnapshot(dir *os.Root, key string) (*Snapshot, error) {
	b, err := dir.Readlink(key)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	full := path.Join(snapshotsDir, key)
	if err != nil {
		return nil, onShare(err, "read snapshot record %s", full)
	}
	var s Snapshot
	if err := json.Unmarshal([]byte(b), &s); err != nil {
		return nil, badRecord("snapshot record %s is corrupt: %v", full, err)
	}
	if s.Version != RecordVersion || s.Kind != SnapshotKind {
		return nil, badRecord("snapshot record %s has format version %d kind %q; this nfsdir reads version %d kind %q", full, s.Version, s.Kind, RecordVersion, SnapshotKind)
	}
	if s.Key() != key {
		return nil, badRecord("snapshot record %s does not match its key", full)
	}
	return &s, nil
}

// Create records a snapshot named name of the volume of src, or
// returns the record a former call made (a retry). Its copy is made by
// Fill. The source must exist and be sealed; NotFound when it does
// not exist, AlreadyExists when a snapshot of that name was taken of
// another volume.
func (sn Snapshots) Create(name string, src volumeid.ID) (*Snapshot, error) {
	dir, err := sn.dir(true)
	if err != nil {
		return nil, err
	}
	key := volumeid.KeyForSnapshot(name)
	if old, err := readSnapshot(dir, key); err != nil || old != nil {
		return sn.same(old, name, src, err)
	}
	vol, err := sn.a.Lookup(src)
	if err != nil {
		return nil, err
	}
	if vol == nil {
		return nil, fault.New(fault.NotFound, "source volume %q does not exist", src.String())
	}
	if vol.Shared {
		return nil, fault.New(fault.FailedPrecondition, "volume %q shares its directory with other volumes (allowSharedSubDir): it cannot be snapshotted", vol.Name)
	}
	if vol.Filling {
		return nil, fault.New(fault.FailedPrecondition, "source volume %q is still being filled from its own source; snapshot it once it is ready", vol.Name)
	}
	if vol.FileID == 0 {
		return nil, fault.New(fault.FailedPrecondition, "source volume %q has no sealed directory yet", vol.Name)
	}
	snap := &Snapshot{Version: RecordVersion, Kind: SnapshotKind, Name: name, Token: volumeid.NewToken(),
		SourceKey: src.Key, SourceToken: src.Token, SourceName: vol.Name, SizeBytes: vol.CapacityBytes, Options: vol.Options, ExportName: vol.ExportName,
		Created: time.Now().UTC().Truncate(time.Second)}
	err = writeLinkExclusive(dir, key, snap, path.Join(snapshotsDir, key))
	if errors.Is(err, fs.ErrExist) { // a concurrent call
		old, err := readSnapshot(dir, key)
		return sn.same(old, name, src, err)
	}
	if err != nil {
		return nil, err
	}
	return snap, nil
}

// same answers a Create that found the record old.
func (sn Snapshots) same(old *Snapshot, name string, src volumeid.ID, err error) (*Snapshot, error) {
	switch {
	case err != nil:
		return nil, err
	case old == nil:
		return nil, fault.New(fault.Aborted, "snapshot %q is being deleted concurrently; retry", name)
	case !old.SourceIs(src):
		return nil, fault.New(fault.AlreadyExists, "snapshot %q already exists, taken of volume %q, not of %q", name, old.SourceName, src.String())
	}
	return old, nil
}

// Lookup returns the record of a snapshot ID, or nil when the
// snapshot does not exist (never taken, deleted, or a later one of the same
// name).
func (sn Snapshots) Lookup(id volumeid.ID) (*Snapshot, error) {
	dir, err := sn.dir(false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s, err := readSnapshot(dir, id.Key)
	if err != nil || s == nil || s.Token != id.Token {
		return nil, err
	}
	return s, nil
}

// Ready reports whether the copy of s is complete.
func (sn Snapshots) Ready(s *Snapshot) (bool, error) {
	dir, err := sn.dir(false)
	if err != nil {
		return false, err
	}
	st, err := dir.Lstat(s.dataName())
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, onShare(err, "check %s", path.Join(snapshotsDir, s.dataName()))
	}
	return st.IsDir(), nil
}

// Keys returns the keys of every snapshot record of the share,
// sorted; none when the share never had a snapshot.
func (sn Snapshots) Keys() ([]string, error) {
	_, names, err := metaNames(sn.dir, snapshotsDir)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, n := range names {
		if !strings.Contains(n, ".") { // not a copy, complete or being made
			keys = append(keys, n)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// Record returns the snapshot record stored under key, or nil.
func (sn Snapshots) Record(key string) (*Snapshot, error) {
	dir, err := sn.dir(false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return readSnapshot(dir, key)
}

// Delete removes the snapshot of id: its copies (complete or being
// made) are moved into the trash for the purge, then its record is
// removed. A snapshot that does not exist is not an error. The caller
// kicks the purge.
func (sn Snapshots) Delete(id volumeid.ID) error {
	s, err := sn.Lookup(id)
	if err != nil || s == nil {
		if err == nil {
			err = sn.settleAside(id)
		}
		return err
	}
	dir, err := sn.dir(false)
	if err != nil {
		return err
	}
	// Copies being made first, then the complete one: an attempt that
	// finishes meanwhile renames its copy to the final name, which is
	// then still moved.
	if err := sn.trashAttempts(dir, s, ""); err != nil {
		return err
	}
	if err := sn.trashData(dir, s.dataName()); err != nil {
		return err
	}
	if err := removeRecordIf(recordDir{Root: dir}, id.Key, id.Token); err != nil {
		return err
	}
	// An attempt that renamed its copy after the move above and read the
	// record before its removal leaves the copy: moved here. (One that
	// read it after moves its copy away itself: Fill.)
	return sn.trashData(dir, s.dataName())
}

// settleAside finishes a removal of the record of id that was cut
// after taking it aside.
func (sn Snapshots) settleAside(id volumeid.ID) error {
	dir, err := sn.dir(false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return settleAside(recordDir{Root: dir}, id.Key, id.Key+asideSuffix+id.Token, id.Token)
}

// trashAttempts moves every copy being made for s, except keep, into the
// trash.
func (sn Snapshots) trashAttempts(dir *os.Root, s *Snapshot, keep string) error {
	names, err := listNames(dir)
	if err != nil {
		return onShare(err, "list %s", snapshotsDir)
	}
	for _, n := range names {
		if strings.HasPrefix(n, s.attemptPrefix()) && n != keep {
			if err := sn.trashData(dir, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// trashData moves the copy name of the snapshots directory into
// the trash under a name of its own; a copy already gone is fine.
func (sn Snapshots) trashData(dir *os.Root, name string) error {
	err := renameBetween(dir, name, sn.a.trash, "snapshot-"+strings.TrimPrefix(name, ".")+"."+volumeid.NewToken())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return onShare(err, "move %s into the trash", path.Join(snapshotsDir, name))
	}
	return nil
}

// renameBetween renames name below from to newName below to, both open
// metadata directories: neither is reached by path again.
func renameBetween(from *os.Root, name string, to *os.Root, newName string) error {
	f, err := from.Open(".")
	if err != nil {
		return err
	}
	defer f.Close()
	t, err := to.Open(".")
	if err != nil {
		return err
	}
	defer t.Close()
	err = unix.Renameat(int(f.Fd()), name, int(t.Fd()), newName)
	if errors.Is(err, unix.ENOENT) {
		return fs.ErrNotExist
	}
	if err != nil {
		return fmt.Errorf("rename %q: %w", name, err)
	}
	return nil
}
