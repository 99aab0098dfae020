package provision

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/safepath"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// Volumes made from a snapshot or another volume are filled in the
// background while csi-provisioner calls CreateVolume again and again;
// it hands the volume to Kubernetes only once an answer is OK. If the
// claim is deleted meanwhile and csi-provisioner restarts (it keeps the
// claims it is provisioning in memory only), nobody ever asks for the
// volume again and it would stay on the share for good. So each such
// volume has a marker in .nfsdir/pending, touched (by the server's clock)
// whenever CreateVolume asks for it, and removed when CreateVolume hands
// it out; a volume whose marker nobody touched for long (SweepAbandoned)
// was given to nobody, and is discarded. A claim that still exists gets a
// new volume at csi-provisioner's next call: a new copy, nothing lost.

const pendingName = "pending"

// clockName is the file of .nfsdir/pending touched to read the server's
// clock.
const clockName = ".clock"

// Pending is the room of an Area that keeps the markers of volumes not
// handed out yet, and discards those nobody asked for.
type Pending struct{ a *Area }

// Pending returns the area's pending hand-outs.
func (a *Area) Pending() Pending { return Pending{a} }

// dir returns the open .nfsdir/pending; without create, a share that
// never had one gives fs.ErrNotExist.
func (pd Pending) dir(create bool) (*os.Root, error) {
	return pd.a.lazyMetaDir(pendingName, &pd.a.pending, create)
}

func pendingMarker(id volumeid.ID) string { return id.Key + "." + id.Token }

// MarkAsked records that a caller asked for the volume rec of id, not
// handed out yet: its marker is made, or touched when older than fresh.
// A record without Pending (an older nfsdir's) has no marker.
func (pd Pending) MarkAsked(id volumeid.ID, rec *Record, fresh time.Duration) error {
	if !rec.Pending || !rec.Filling {
		return nil
	}
	dir, err := pd.dir(true)
	if err != nil {
		return err
	}
	f, err := dir.OpenFile(pendingMarker(id), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return onShare(err, "mark volume %q asked for", rec.Name)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return onShare(err, "mark volume %q asked for", rec.Name)
	}
	if time.Since(st.ModTime()) > fresh {
		return touchNow(f)
	}
	return nil
}

// touchNow sets f's times to the server's now: utimensat with UTIME_NOW,
// which the NFS client sends as "set to server time".
func touchNow(f *os.File) error {
	if err := unix.Utimes("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), nil); err != nil {
		return onShare(err, "touch %s", f.Name())
	}
	return nil
}

// HandOut marks the complete volume of id handed out: from now on it is
// an ordinary volume, and never discarded as abandoned. A volume being
// discarded (nobody asked for it for too long) is Aborted: the caller's
// retry makes a new one. ErrGone: the record is gone (or being updated by
// another call; a retry finds out which).
func (pd Pending) HandOut(id volumeid.ID, rec *Record) error {
	if !rec.Pending {
		return nil
	}
	done, err := updateRecordIf(pd.a.records(), id.Key, id.Token, func(r *Record) error {
		if r.Abandoned {
			return fault.New(fault.Aborted, "volume %q was never handed out and nobody asked for it for too long: it is being discarded; retry to make it anew", r.Name)
		}
		if !r.Copied {
			return fault.New(fault.Aborted, "volume %q is not filled yet; retry", r.Name)
		}
		r.Filling, r.Copied, r.Pending = false, false, false
		return nil
	})
	if err != nil {
		return err
	}
	if done == nil {
		return ErrGone
	}
	*rec = *done
	if dir, err := pd.dir(false); err == nil {
		if err := dir.Remove(pendingMarker(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			// The record says it: the sweep drops the marker.
			klog.Warningf("volume %q: handed out; its marker in %s stays until the next sweep: %v", rec.Name, path.Join(safepath.MetaDir, pendingName), err)
		}
	}
	return nil
}

// SweepAbandoned discards the volumes made from a snapshot or volume,
// never handed out, that nobody asked for in the last after (by the
// server's clock), and drops markers left behind; it returns the IDs
// discarded. The caller kicks the purge.
func (pd Pending) SweepAbandoned(ctx context.Context, after time.Duration) ([]volumeid.ID, error) {
	dir, names, err := metaNames(pd.dir, path.Join(safepath.MetaDir, pendingName))
	if err != nil {
		return nil, err
	}
	if len(names) == 0 || len(names) == 1 && names[0] == clockName {
		return nil, nil
	}
	now, err := serverNow(dir)
	if err != nil {
		return nil, err
	}
	var out []volumeid.ID
	var errs []error
	for _, name := range names {
		key, token, ok := strings.Cut(name, ".")
		if !ok || !volumeid.ValidKey(key, token) {
			continue // the clock, or nothing nfsdir wrote
		}
		st, err := FreshLstat(dir, name) // another controller may have touched it
		if err != nil || now.Sub(st.ModTime()) < after {
			continue
		}
		id := volumeid.ID{Key: key, Token: token}
		gone, err := pd.abandon(ctx, id, now.Sub(st.ModTime()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if gone {
			out = append(out, id)
		}
		if err := dir.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, onShare(err, "remove %s", path.Join(safepath.MetaDir, pendingName, name)))
		}
	}
	return out, errors.Join(errs...)
}

// abandon discards the volume of id when its record is still Pending and
// Filling (never handed out); gone reports whether it did. A marker of a
// volume handed out, or of a record an older nfsdir rewrote, or of one
// gone, is only dropped.
func (pd Pending) abandon(ctx context.Context, id volumeid.ID, idle time.Duration) (gone bool, err error) {
	rec, err := pd.a.Lookup(id)
	if err != nil || rec == nil || !rec.Pending || !rec.Filling {
		return false, err
	}
	done, err := updateRecordIf(pd.a.records(), id.Key, id.Token, func(r *Record) error {
		if !r.Pending || !r.Filling {
			return errHandedOut
		}
		r.Abandoned = true
		return nil
	})
	if errors.Is(err, errHandedOut) || err == nil && done == nil {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	klog.Warningf("volume %q (%q, from %s): never handed out, and nobody asked for it for %s (its claim was deleted while it was being filled, and csi-provisioner restarted): discarding it", done.Name, done.SubDir, done.Source, idle.Round(time.Second))
	if err := pd.a.DiscardFill(ctx, id); err != nil {
		return false, fmt.Errorf("discard abandoned volume %q: %w", done.Name, err)
	}
	return true, nil
}

var errHandedOut = errors.New("handed out meanwhile")

// serverNow reads the server's clock: the mtime of the clock file in dir,
// touched now.
func serverNow(dir *os.Root) (time.Time, error) {
	f, err := dir.OpenFile(clockName, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return time.Time{}, onShare(err, "open the clock file of %s", path.Join(safepath.MetaDir, pendingName))
	}
	defer f.Close()
	if err := touchNow(f); err != nil {
		return time.Time{}, err
	}
	st, err := f.Stat()
	if err != nil {
		return time.Time{}, onShare(err, "read the clock file of %s", path.Join(safepath.MetaDir, pendingName))
	}
	return st.ModTime(), nil
}
