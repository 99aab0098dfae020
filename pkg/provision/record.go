package provision

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/safepath"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// Layout of the metadata area at the share root (format version 1):
//
//	.nfsdir/volumes/<key>        one Record per provisioned volume
//	.nfsdir/parents/<hash>       marks a parent directory nfsdir created
//	.nfsdir/trash/<key>.<token>  deleted volume directories awaiting purge
//
// A record is a symbolic link whose target is the record's JSON text. One
// symlink(2) publishes it whole and fails if it exists, which makes the
// write atomic and exclusive across controllers, on NFS too, in a single
// round trip; readlink(2) reads it back. The link is never followed: its
// target is not a path. <key> is volumeid.KeyForDir(subDir), or for a
// volume that shares its directory, volumeid.KeyForShared(subDir, name),
// or for the shared directory itself volumeid.KeyForSharedDir(subDir).
const (
	volumesDir = safepath.MetaDir + "/volumes"
	trashDir   = safepath.MetaDir + "/trash"
)

// RecordVersion is the version of the record format written by this code.
const RecordVersion = 1

// Record is nfsdir's proof that it created a volume directory. It is written
// before the directory is created and removed only after the directory is
// gone (or archived or retained), so a crash in between is retried safely.
type Record struct {
	Version int    `json:"version"`
	Name    string `json:"name"`  // CSI volume name
	Token   string `json:"token"` // creation token, also in the volume ID
	SubDir  string `json:"subDir"`
	Shared  bool   `json:"shared,omitempty"`
	// SharedDir marks the record of a directory nfsdir created for shared
	// volumes (Shared) to join, not of a volume: its Name is empty, it is
	// never a volume ID's record, and it stays when the sharers are gone.
	SharedDir bool `json:"sharedDir,omitempty"`
	Adopted   bool `json:"adopted,omitempty"` // handed over by `nfsdir adopt`
	// LegacyID is the csi-driver-nfs volume ID of the PersistentVolume
	// that kept using the adopted directory (nfsdir serving under
	// csi-driver-nfs's name): DeleteVolume with exactly that ID follows
	// this record. Empty: the volume is known by its nfsdir ID only.
	LegacyID string `json:"legacyID,omitempty"`
	// QuotaAgent is the host:port of the quota agent that enforces the
	// volume's capacity on the server: expansion raises the limit there,
	// and deletion clears it first. Empty: no quota.
	QuotaAgent string `json:"quotaAgent,omitempty"`
	// CopyAgent is the host:port of the agent that copies the volume's
	// tree on the server (its snapshots, clones, and its own fill from a
	// snapshot or volume). Empty: the controller copies, through its share
	// mount. (A quota agent copies only when named here too: one run with
	// only the capabilities quotas need could not.)
	CopyAgent string `json:"copyAgent,omitempty"`
	// KeepSetID keeps the setuid and setgid bits of the files a restore
	// from an archive writes (the StorageClass's keepSetIDOnRestore).
	KeepSetID bool `json:"keepSetID,omitempty"`
	// Pending marks a volume made from a snapshot or volume that was not
	// handed out yet: Filling stays set until CreateVolume hands it out
	// (HandOut), also once its copy is complete (Copied). Only such a
	// record is ever discarded as abandoned (SweepAbandoned); a record an
	// older nfsdir rewrote loses the mark, and is never.
	Pending bool `json:"pending,omitempty"`
	// Copied says the fill of a Pending volume is complete.
	Copied bool `json:"copied,omitempty"`
	// Abandoned says nobody asked for a Pending volume for too long: it
	// is being discarded, and is never handed out.
	Abandoned bool `json:"abandoned,omitempty"`
	// FileID is the volume directory's inode number (NFS fileid), recorded
	// once the directory exists: a directory at SubDir with another FileID
	// is not the one nfsdir created, and is never deleted or archived. 0:
	// not recorded (a crash before sealing).
	FileID uint64 `json:"fileID,omitempty"`
	// Handle is a digest of the directory's file handle, recorded with
	// FileID: the NFS file handle holds the server's file system id and
	// the inode's generation, so a directory on another file system
	// mounted at the path, or a new inode that reuses the number, does not
	// match. Empty: the client could not give a handle (or an older
	// nfsdir sealed the record), and FileID alone identifies it.
	Handle string `json:"handle,omitempty"`
	// ServerHandle is Handle as the server's own file system gives it,
	// recorded instead of Handle when an agent on the server made the
	// directory (MakeVolume): a handle there is not the NFS one, so each
	// side compares only the handle it can compute, and FileID always.
	ServerHandle string          `json:"serverHandle,omitempty"`
	OnDelete     params.OnDelete `json:"onDelete"`
	Mode         uint32          `json:"mode"`
	UID          int             `json:"uid"` // -1: not changed
	GID          int             `json:"gid"` // -1: not changed
	// GIDFromRange: GID was claimed from the class's range for this
	// volume (GIDs), and is given back when it is deleted.
	GIDFromRange  bool      `json:"gidFromRange,omitempty"`
	CapacityBytes int64     `json:"capacityBytes"`
	Created       time.Time `json:"created"`
	// Options are the share mount options of the volume's ID ("" in
	// records of an older nfsdir: a listing then uses the options the
	// share is mounted with).
	Options string `json:"options,omitempty"`
	// PublishOptions, when set, replace the StorageClass's mount options
	// at the volume's next NodePublishVolume (a VolumeAttributesClass's
	// mountOptions; "" clears them).
	PublishOptions *string `json:"publishOptions,omitempty"`
	// MountServer, when set, is the address nodes mount the volume from
	// in place of its export's server (a VolumeAttributesClass's
	// mountServer), written only once the volume's sealed directory was
	// seen through it.
	MountServer string `json:"mountServer,omitempty"`
	// Source is what the volume was made from (a snapshot or another
	// volume); nil for an empty volume.
	Source *Source `json:"source,omitempty"`
	// Filling says the volume's directory is still being filled from
	// Source: the volume is not usable (CreateVolume answers Aborted
	// until it is done) and is left out of listings.
	Filling bool `json:"filling,omitempty"`
	// Modified says a VolumeAttributesClass changed the volume's
	// mutable settings (OnDelete, PublishOptions) since the StorageClass
	// made it: a replayed CreateVolume no longer compares them.
	Modified bool `json:"modified,omitempty"`
	// Claim is the namespace/name of the PersistentVolumeClaim the volume
	// was made for, and Cluster the identity of the cluster (its
	// controller's --cluster-id): what a later volume of the same claim
	// proves before it takes over the directory (reuseDirectory). Empty:
	// not known when the volume was made.
	Claim   string `json:"claim,omitempty"`
	Cluster string `json:"cluster,omitempty"`
	// ExportName is the name of the export the volume was made on (a
	// StorageClass's export): its ID carries the name, not the address,
	// and a listing rebuilds it so. Empty: an ID of server and share.
	ExportName string `json:"exportName,omitempty"`
	// Previous is the name of the volume that had the directory before
	// Name took it over (reuseDirectory).
	Previous string `json:"previous,omitempty"`
}

// Source names what a volume is filled from: a snapshot's record (Snapshot)
// or another volume's, by key and token, on the volume's own share; or a
// csi-driver-nfs snapshot's archive (Archive, a path relative to the share).
type Source struct {
	Snapshot bool   `json:"snapshot,omitempty"`
	Key      string `json:"key,omitempty"`
	Token    string `json:"token,omitempty"`
	Archive  string `json:"archive,omitempty"`
}

func (s *Source) String() string {
	if s == nil {
		return "no content source"
	}
	if s.Archive != "" {
		return fmt.Sprintf("csi-driver-nfs snapshot %s", s.Archive)
	}
	kind := "volume"
	if s.Snapshot {
		kind = "snapshot"
	}
	return fmt.Sprintf("%s %s.%s", kind, s.Key, s.Token)
}

func sameSource(a, b *Source) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// describe names what the record stands for, in messages.
func (r *Record) describe() string {
	if r.SharedDir {
		return fmt.Sprintf("the shared directory %q", r.SubDir)
	}
	return fmt.Sprintf("volume %q", r.Name)
}

func recordPath(key string) string { return path.Join(volumesDir, key) }

// unseal forgets the directory sealed into r.
func (r *Record) unseal() { r.FileID, r.Handle, r.ServerHandle = 0, "", "" }

// Key returns the key the record is stored under.
func (r *Record) Key() string {
	switch {
	case r.SharedDir:
		return volumeid.KeyForSharedDir(r.SubDir)
	case r.Shared:
		return volumeid.KeyForShared(r.SubDir, r.Name)
	}
	return volumeid.KeyForDir(r.SubDir)
}

// ErrBadRecord marks a record that was read but cannot be used: not
// JSON, another format version, an unsafe directory, or stored under
// another key. It is the record's fault, not the server's.
var ErrBadRecord = errors.New("unusable record")

type badRecordError struct{ msg string }

func (e *badRecordError) Error() string        { return e.msg }
func (e *badRecordError) Is(target error) bool { return target == ErrBadRecord }

func badRecord(format string, args ...any) error {
	return &badRecordError{fmt.Sprintf(format, args...)}
}

// recordDir is the records directory: its Root, and the same directory
// held open as a file (nil: none), so that a record is read with one
// readlinkat into a buffer any record fits in. os.Root's Readlink starts
// at 128 bytes and doubles: three calls for a record of 300, and through
// the controller's share mount (lookupcache=none) three LOOKUPs.
type recordDir struct {
	*os.Root
	file *os.File
}

// Readlink is os.Root's Readlink of the record name, in one call.
func (d recordDir) Readlink(name string) (string, error) {
	if d.file == nil || strings.Contains(name, "/") {
		return d.Root.Readlink(name)
	}
	buf := make([]byte, 4096)
	var n int
	err := withHeld(d.file, func(fd int) (err error) {
		n, err = unix.Readlinkat(fd, name, buf)
		return err
	})
	switch {
	case err != nil:
		return "", &fs.PathError{Op: "readlinkat", Path: name, Err: err}
	case n == len(buf):
		return d.Root.Readlink(name) // cut: longer than Linux keeps (PATH_MAX)
	}
	return string(buf[:n]), nil
}

// Rename renames the record link oldname to newname in one renameat(2).
// os.Root's Rename first looks newname up (to refuse replacing a
// directory), one more LOOKUP through the controller's share mount; here
// both names are links nfsdir writes, and renameat(2) refuses to put a
// link over a directory by itself (EISDIR).
func (d recordDir) Rename(oldname, newname string) error {
	if d.file == nil || strings.Contains(oldname, "/") || strings.Contains(newname, "/") {
		return d.Root.Rename(oldname, newname)
	}
	err := withHeld(d.file, func(fd int) error { return unix.Renameat(fd, oldname, fd, newname) })
	if err != nil {
		return &os.LinkError{Op: "renameat", Old: oldname, New: newname, Err: err}
	}
	return nil
}

// readRecord returns the record stored under key, or nil when there is none.
func readRecord(volumes recordDir, key string) (*Record, error) {
	return readAside(volumes, key, key)
}

// readAside returns the record of key stored under the name name (key
// itself, or where an update or removal holds it aside), or nil.
func readAside(volumes recordDir, key, name string) (*Record, error) {
	b, err := volumes.Readlink(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read volume record %s: %w", recordPath(name), err)
	}
	return parseRecord(key, name, b)
}

// parseRecord reads the text b of the record of key, stored under name.
func parseRecord(key, name, b string) (*Record, error) {
	var r Record
	if err := json.Unmarshal([]byte(b), &r); err != nil {
		return nil, badRecord("volume record %s is corrupt: %v", recordPath(name), err)
	}
	if r.Version != RecordVersion {
		return nil, badRecord("volume record %s has format version %d; this nfsdir reads version %d", recordPath(key), r.Version, RecordVersion)
	}
	if err := safepath.CheckVolumePath(r.SubDir); err != nil {
		return nil, badRecord("volume record %s names an unsafe directory: %v", recordPath(key), err)
	}
	if r.Key() != key {
		return nil, badRecord("volume record %s does not match its key", recordPath(key))
	}
	return &r, nil
}

// writeRecordExclusive publishes r under key unless a record exists there.
// It returns fs.ErrExist when one does.
func writeRecordExclusive(volumes recordDir, key string, r *Record) error {
	return writeLinkExclusive(volumes.Root, key, r, recordPath(key))
}

// writeLinkExclusive publishes v, as JSON, as the target of a new symlink
// name below dir (full: its path on the share, for messages); fs.ErrExist
// when something is there.
func writeLinkExclusive(dir *os.Root, name string, v any, full string) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := dir.Symlink(string(b), name); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fs.ErrExist
		}
		var le *os.LinkError // its message would repeat the record's text
		if errors.As(err, &le) {
			err = le.Err
		}
		return onShare(err, "write record %s", full)
	}
	return nil
}

// sealSuffix names the temporary link a record is rewritten through.
const sealSuffix = ".seal"

// rewriteRecord replaces the record under key with r atomically: the new
// link is written under a temporary name and renamed over the old one.
func rewriteRecord(volumes recordDir, key string, r *Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := key + sealSuffix
	err = volumes.Symlink(string(b), tmp)
	if errors.Is(err, fs.ErrExist) { // left by an interrupted rewrite
		if err := volumes.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return onShare(err, "remove stale %s", path.Join(volumesDir, tmp))
		}
		err = volumes.Symlink(string(b), tmp)
	}
	if err != nil {
		var le *os.LinkError
		if errors.As(err, &le) {
			err = le.Err
		}
		return onShare(err, "write volume record %s", path.Join(volumesDir, tmp))
	}
	if err := volumes.Rename(tmp, key); err != nil {
		return onShare(err, "replace volume record %s", recordPath(key))
	}
	return nil
}

// asideSuffix names the link a record is moved to while its removal
// checks that it is the record the caller read.
const asideSuffix = ".del."

// removeRecordIf removes the record under key only if it carries token:
// the record is first renamed aside (one atomic step that takes whatever
// is there), then read; a record that turns out to be another one (a later
// volume at the same directory, created after the caller read its own) is
// linked back under key, which fails rather than replace one written
// meanwhile. A caller delayed for any time (a deposed leader) can so only
// ever remove the record it read.
func removeRecordIf(volumes recordDir, key, token string) error {
	return removeRecordChecked(volumes, key, token, false)
}

// removeRecordChecked is removeRecordIf; noAside: the caller looked up
// the name an interrupted earlier removal would have left the record
// under, and found nothing there.
func removeRecordChecked(volumes recordDir, key, token string, noAside bool) error {
	aside := key + asideSuffix + token
	if !noAside {
		if err := settleAside(volumes, key, aside, token); err != nil { // an interrupted earlier attempt
			return err
		}
	}
	if err := volumes.Rename(key, aside); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // nothing there
		}
		return onShare(err, "remove volume record %s", recordPath(key))
	}
	return settleAside(volumes, key, aside, token)
}

// settleAside removes the record taken aside as aside if it carries token,
// and otherwise puts it back under key.
func settleAside(volumes recordDir, key, aside, token string) error {
	b, err := volumes.Readlink(aside)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return onShare(err, "read volume record %s", path.Join(volumesDir, aside))
	}
	var r Record
	if json.Unmarshal([]byte(b), &r) == nil && r.Token != token {
		if err := volumes.Link(aside, key); err != nil {
			return fault.Wrap(fault.Internal, err, "the record of volume %q (token %s) was taken aside by the removal of token %s and cannot be put back as %s: rename %s back to %s by hand", r.Name, r.Token, token, recordPath(key), path.Join(volumesDir, aside), recordPath(key))
		}
		klog.Warningf("volume record %s: left the record of volume %q (token %s) in place; the caller's record (token %s) was already gone", recordPath(key), r.Name, r.Token, token)
	}
	if err := volumes.Remove(aside); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return onShare(err, "remove volume record %s", path.Join(volumesDir, aside))
	}
	return nil
}

// updateSuffix names the link a record is moved to while an update checks
// that it is the record the caller read.
const updateSuffix = ".upd."

// updateRecordIf replaces the record under key with what change makes of
// it, only if that record carries token, and returns the new record; nil
// (and no error) when key holds no record of token (gone, or a later
// volume's). As removeRecordIf, it first takes the record aside in one
// atomic rename, whatever is there, and reads it; the changed record is
// then written under key exclusively, so a caller delayed for any time (a
// deposed leader) never replaces another volume's record. While the record
// is aside its key is vacant: a volume created meanwhile at the same
// directory finds the directory taken and drops its own record, and
// DeleteVolume puts the aside record back first (settleUpdate).
func updateRecordIf(volumes recordDir, key, token string, change func(*Record) error) (*Record, error) {
	aside := key + updateSuffix + token
	if err := settleUpdate(volumes, key, aside); err != nil { // an interrupted earlier update
		return nil, err
	}
	if err := volumes.Rename(key, aside); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, onShare(err, "update volume record %s", recordPath(key))
	}
	b, err := volumes.Readlink(aside)
	if err != nil {
		return nil, errors.Join(onShare(err, "read volume record %s", path.Join(volumesDir, aside)), settleUpdate(volumes, key, aside))
	}
	var r Record
	if json.Unmarshal([]byte(b), &r) != nil || r.Token != token {
		return nil, settleUpdate(volumes, key, aside) // another volume's: put back
	}
	if err := change(&r); err != nil {
		return nil, errors.Join(err, settleUpdate(volumes, key, aside))
	}
	if err := writeRecordExclusive(volumes, key, &r); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fault.New(fault.Aborted, "a record was written as %s while the record of volume %q was being updated (a volume being created at the same directory, which fails); retry", recordPath(key), r.Name)
		}
		return nil, err // the record stays aside; the next attempt settles it
	}
	if err := volumes.Remove(aside); err != nil && !errors.Is(err, fs.ErrNotExist) {
		klog.Warningf("volume record %s: updated, but the old record %s stays until the next update: %v", recordPath(key), path.Join(volumesDir, aside), err)
	}
	return &r, nil
}

// settleUpdate puts a record an update left aside as aside back under key,
// or drops it when key holds the same volume's record already (the
// update's result).
func settleUpdate(volumes recordDir, key, aside string) error {
	_, err := settleUpdateFound(volumes, key, aside)
	return err
}

// settleUpdateFound is settleUpdate, and reports whether a record was
// held aside as aside.
func settleUpdateFound(volumes recordDir, key, aside string) (found bool, err error) {
	b, err := volumes.Readlink(aside)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return true, onShare(err, "read volume record %s", path.Join(volumesDir, aside))
	}
	var old Record
	_ = json.Unmarshal([]byte(b), &old)
	err = volumes.Link(aside, key)
	if errors.Is(err, fs.ErrExist) {
		cur, rerr := readRecord(volumes, key)
		if rerr != nil {
			return true, rerr
		}
		if cur == nil || cur.Token != old.Token {
			return true, fault.New(fault.Aborted, "the record of volume %q is held aside as %s while another record is at %s (a volume being created at the same directory, which fails); retry", old.Name, path.Join(volumesDir, aside), recordPath(key))
		}
		err = nil // the update's result is in place
	}
	if err != nil {
		return true, onShare(err, "put volume record %s back as %s", path.Join(volumesDir, aside), recordPath(key))
	}
	if err := volumes.Remove(aside); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return true, onShare(err, "remove volume record %s", path.Join(volumesDir, aside))
	}
	return true, nil
}
