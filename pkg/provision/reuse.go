package provision

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/fault"
)

// takeOver gives the directory of the earlier volume old, whose record is
// at key, to the new volume of req (reuseDirectory: a cluster rebuilt and
// its claims made again). It does so only when old is a complete volume
// of its own directory (sealed, not being made or filled), made for the
// same claim in the same cluster, with the same owner and mode unless it
// was adopted, its directory still the one sealed into the record, and
// req.Reuse finds old no longer in use. The record keeps its token, so
// the volume's GID claim, quota and copies stay its own; its name becomes
// req's, and Previous says whose it was. Its capacity grows to req's when
// req asks for more. Anything else is FailedPrecondition, with what was
// found. A retry finds the record under req's name, as for any volume.
func (a creation) takeOver(ctx context.Context, key string, old *Record, req Request) (*Record, error) {
	if err := a.canTakeOver(old, &req); err != nil {
		return nil, err
	}
	st, err := a.seals().freshLstat(old.SubDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, a.refuse(req, "the directory of volume %q, whose record is there, is gone; remove the record %s by hand to make a new directory", old.Name, recordPath(key))
	}
	if err != nil {
		return nil, onShare(err, "check %q", old.SubDir)
	}
	if err := a.seals().checkSealed(old, st); err != nil {
		return nil, err
	}
	if err := req.Reuse(ctx, old); err != nil {
		return nil, err
	}
	rec, err := updateRecordIf(a.records(), key, old.Token, func(r *Record) error {
		switch r.Name {
		case req.Name: // taken over by a concurrent retry
			return nil
		case old.Name:
		default:
			return fault.New(fault.Aborted, "the record of directory %q changed while volume %q was taking it over; retry", req.SubDir, req.Name)
		}
		r.Previous, r.Name = r.Name, req.Name
		r.CapacityBytes = max(r.CapacityBytes, req.CapacityBytes)
		return nil
	})
	if err == nil && rec == nil {
		err = fault.New(fault.Aborted, "the record of directory %q is being changed by another call; retry", req.SubDir)
	}
	if err != nil {
		return nil, err
	}
	klog.Infof("volume %q: took over directory %q of volume %q (claim %s, cluster %s, made %s): reuseDirectory",
		rec.Name, rec.SubDir, rec.Previous, rec.Claim, rec.Cluster, rec.Created.Format(time.RFC3339))
	return rec, nil
}

// canTakeOver checks what takeOver can tell from the records alone: old
// is a complete volume made for req's claim in req's cluster, with req's
// settings. A GID of the class's range is old's, as on a retry.
func (a creation) canTakeOver(old *Record, req *Request) error {
	switch {
	case old.Shared || old.SharedDir:
		return a.refuse(*req, "it is a shared directory (allowSharedSubDir)")
	case old.Filling || old.Pending || old.Abandoned || old.FileID == 0:
		return a.refuse(*req, "volume %q, whose directory it is, was never completed (its creation or its fill from %s was cut short); delete that claim's volume or the record %s by hand", old.Name, old.Source, recordPath(old.Key()))
	case old.Claim == "":
		return a.refuse(*req, "its record (volume %q, made %s) does not name the claim it was made for (made by an nfsdir that did not record claims, or adopted without --claim): hand it over with `nfsdir adopt --claim %s` after removing the record %s", old.Name, old.Created.Format(time.DateOnly), req.Claim, recordPath(old.Key()))
	case old.Claim != req.Claim:
		return a.refuse(*req, "it was made for claim %s (volume %q), not for claim %s", old.Claim, old.Name, req.Claim)
	case req.Cluster == "":
		return a.refuse(*req, "this controller does not know its cluster's identity, which the record must match: set the chart value driver.clusterID (flag --cluster-id), or let the controller read the kube-system namespace")
	case old.Cluster == "":
		return a.refuse(*req, "its record (volume %q) does not name the cluster that made it: hand it over with `nfsdir adopt --claim %s --cluster-id %s` after removing the record %s", old.Name, req.Claim, req.Cluster, recordPath(old.Key()))
	case old.Cluster != req.Cluster:
		return a.refuse(*req, "volume %q was made in cluster %q, and this is cluster %q: if this cluster replaces that one, install the chart with driver.clusterID=%s", old.Name, old.Cluster, req.Cluster, old.Cluster)
	}
	if old.GIDFromRange && !req.GIDRange.None() {
		req.GID, req.Mode = old.GID, old.Mode
	}
	if old.Adopted {
		return nil // owner and mode are the adopted directory's own
	}
	var diffs []string
	if old.Mode != req.Mode || old.UID != req.UID || old.GID != req.GID {
		diffs = append(diffs, fmt.Sprintf("mode %04o uid %d gid %d (the class asks for %04o uid %d gid %d)", old.Mode, old.UID, old.GID, req.Mode, req.UID, req.GID))
	}
	if old.KeepSetID != req.KeepSetID {
		diffs = append(diffs, fmt.Sprintf("keepSetIDOnRestore %t (the class says %t)", old.KeepSetID, req.KeepSetID))
	}
	if len(diffs) > 0 {
		return a.refuse(*req, "volume %q was made with %s; use a StorageClass with its settings", old.Name, strings.Join(diffs, ", "))
	}
	return nil
}

// refuse is takeOver's FailedPrecondition: why req's volume does not get
// the directory.
func (a creation) refuse(req Request, format string, args ...any) error {
	return fault.New(fault.FailedPrecondition, "volume %q (claim %s) does not reuse directory %q: "+format,
		append([]any{req.Name, req.Claim, req.SubDir}, args...)...)
}
