package provision

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/safepath"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// Lookup returns the record of a volume ID, or nil when the volume does not
// exist (never created, or deleted). A record with another token belongs to
// a later volume of the same name and counts as not found.
func (a *Area) Lookup(id volumeid.ID) (*Record, error) {
	rec, err := readRecord(a.records(), id.Key)
	a.dirs.learn(rec)
	if err != nil || rec == nil || rec.Token != id.Token || rec.SharedDir {
		return nil, err
	}
	return rec, nil
}

// Delete applies the record's onDelete policy to the volume of id and then
// removes the record. A volume that does not exist is not an error. With
// "delete", the directory is renamed into the trash at once and, unless it
// was empty and removed there at once, purged later by a Purger: purge
// reports whether the trash holds something for the Purger now.
func (a *Area) Delete(ctx context.Context, id volumeid.ID) (purge bool, err error) {
	return a.DeleteWith(ctx, id, nil)
}

// DeleteWith is Delete, calling before (when set) with the volume's record
// (nil: none) before anything changes; its error ends the call. A volume
// an agent made for this Area is known without reading the share (Agents.Made).
// Otherwise the record is read, and, when the volume's directory is known
// from its key (knownDirs), the look-ups DeleteVolume begins with go to the
// server at the same time as that read (lookUpToDelete).
func (a *Area) DeleteWith(ctx context.Context, id volumeid.ID, before func(*Record) error) (purge bool, err error) {
	rec := a.agents.Made(id)
	var pre *deleteChecks
	if rec == nil {
		if rec, pre, err = a.deletion().lookUpToDelete(id); err != nil {
			return false, err
		}
	}
	if before != nil {
		if err := before(rec); err != nil {
			return false, err
		}
	}
	return a.deletion().deleteFound(ctx, id, rec, pre)
}

// DeleteFound is Delete of the volume of id that Lookup found as rec (nil:
// not found) a moment ago: a volume that names a copy agent is deleted
// by the agent, on the server (RemoteMaker); any other, or one the agent
// does not delete, through the share mount. The agent reads the record
// again before it changes anything; through the mount, rec is taken as
// read unless an update held the record aside meanwhile, or rec came
// from an agent (Agents.Made) or a call to one came between.
func (a *Area) DeleteFound(ctx context.Context, id volumeid.ID, rec *Record) (purge bool, err error) {
	return a.deletion().deleteFound(ctx, id, rec, nil)
}

// deleteFound is DeleteFound; pre, when set, holds the look-ups made
// with the record's read (lookUpToDelete).
func (a deletion) deleteFound(ctx context.Context, id volumeid.ID, rec *Record, pre *deleteChecks) (purge bool, err error) {
	done, purge, err := a.agents.remove(ctx, id, rec)
	if !done {
		// rec was read from the share a moment ago in this call, unless
		// an agent had it (Agents.Made) or was asked meanwhile: read it again.
		if rec != nil && (rec.CopyAgent != "" || rec.QuotaAgent != "") {
			rec, pre = nil, nil
		}
		purge, err = a.deleteAs(id, "", rec, pre)
	}
	if err == nil {
		a.agents.forget(id)
	}
	return purge, err
}

// lookUpToDelete reads the record of id (nil: none) for a DeleteVolume.
// When the volume's directory is known from its key (knownDirs), the
// call's first look-ups (checkDelete's) go to the server at the same
// time, and come back as pre; whatever the record then says is checked
// against what they found, and they are made again, after the read, if
// the record is not the one they were made for.
func (a deletion) lookUpToDelete(id volumeid.ID) (rec *Record, pre *deleteChecks, err error) {
	subDir, ok := a.dirs.known(id.Key)
	if !ok || a.onServer {
		rec, err = a.Lookup(id)
		return rec, nil, err
	}
	var c deleteChecks
	a.atOnce()(
		func() { rec, err = a.Lookup(id) },
		func() { c = a.checkDelete(id, subDir, true) },
	)
	if err != nil || rec == nil {
		return rec, nil, err
	}
	return rec, &c, nil
}

// DiscardFill removes a volume whose fill from a snapshot or volume never
// completed, whatever its onDelete policy: nobody was ever given it, and a
// half-filled directory left in place would pass for data. A complete
// volume is FailedPrecondition: it is never discarded.
func (a *Area) DiscardFill(ctx context.Context, id volumeid.ID) error {
	_, err := a.deletion().deleteAs(id, params.Delete, nil, nil)
	return err
}

// deleteAs is Delete; with policy set, only an unfinished fill is deleted,
// with that policy. known is the record of id this call read from the
// share a moment ago, or nil: it is then read here. early, when set,
// holds the look-ups made at the same time as that read.
func (a deletion) deleteAs(id volumeid.ID, policy params.OnDelete, known *Record, early *deleteChecks) (purge bool, err error) {
	rec, pre, gone, err := a.deleteTarget(id, policy, known, early)
	if gone || err != nil {
		return gone, err
	}
	if policy != "" {
		if !rec.Filling {
			return false, fault.New(fault.FailedPrecondition, "volume %q is complete; only an unfinished fill is discarded", rec.Name)
		}
		rec.OnDelete = policy
	}
	// What is at the path, opened once (O_PATH): its attributes, handle
	// and names are read through the descriptor.
	if !pre.done {
		pre.path = a.probePath(rec.SubDir, rec.OnDelete != params.Retain)
		pre.pathErr = a.judgePath(rec, pre.path)
	}
	if pre.pathErr != nil {
		return false, pre.pathErr
	}
	exists := pre.path.exists
	if exists {
		switch rec.OnDelete {
		case params.Retain:
			klog.Infof("volume %q: retaining %q", rec.Name, rec.SubDir)
		case params.Archive:
			if err := a.removal().archive(rec); err != nil {
				return false, err
			}
		}
	}
	if rec.OnDelete != params.Retain && rec.OnDelete != params.Archive {
		// Also when nothing is at the path: an interrupted attempt may
		// have left the directory pending in the trash.
		StepHook("delete:move", rec.SubDir)
		if purge, err = a.removal().toTrash(rec, id, pre.noPending); err != nil {
			return false, err
		}
	}
	StepHook("delete:record", rec.SubDir)
	// The record's removal, the usage figure's and the parents' pruning
	// act on different names and none waits for another: the directory
	// has left its path already (or stays, retained or archived, and
	// then nothing is pruned), and a figure is counted data, which the
	// accountant counts again for a record a failed removal leaves.
	var recErr error
	tail := []func(){func() { recErr = removeRecordChecked(a.records(), id.Key, id.Token, pre.noAside) }}
	if !rec.Shared && !pre.noFigure {
		tail = append(tail, func() { a.Figures().drop(id.Key, id.Token) })
	}
	if rec.OnDelete != params.Retain && !pre.noMarker {
		tail = append(tail, func() { a.removal().pruneParents(rec.SubDir) })
	}
	a.atOnce()(tail...)
	if recErr == nil {
		gidsOf(a.Area).Release(rec, id.Key, id.Token)
	}
	return purge, recErr
}

// deleteTarget finds the volume deleteAs removes: its record (known,
// or read again when an expansion held it aside) and the checks made of
// its path (early ones when they still hold). A volume already gone has
// no record (gone); what an interrupted attempt left aside is settled then.
func (a deletion) deleteTarget(id volumeid.ID, policy params.OnDelete, known *Record, early *deleteChecks) (rec *Record, pre deleteChecks, gone bool, err error) {
	if known != nil && policy == "" {
		if early != nil && early.subDir == known.SubDir && !known.Shared {
			pre = *early
		} else {
			pre = a.checkDelete(id, known.SubDir, known.OnDelete != params.Retain)
		}
		if pre.done {
			pre.pathErr = a.judgePath(known, pre.path)
		}
	}
	// An update of the record (an expansion) may hold it aside: put it
	// back, so that the record is found, and removed, here.
	var aside bool
	if !pre.done {
		if aside, err = settleUpdateFound(a.records(), id.Key, id.Key+updateSuffix+id.Token); err != nil {
			return nil, pre, false, err
		}
	}
	rec = known
	if rec == nil || aside {
		if rec, err = a.Lookup(id); err != nil {
			return nil, pre, false, err
		}
	}
	if rec == nil {
		// Gone; an attempt interrupted while removing the record may have
		// left it aside, or the volume in the trash.
		return nil, pre, true, settleAside(a.records(), id.Key, id.Key+asideSuffix+id.Token, id.Token)
	}
	return rec, pre, false, nil
}

// atOnce returns together, or inTurn on the server's own file system
// (OnServer), where there are no round trips to overlap.
func (a *Area) atOnce() func(...func()) {
	if a.onServer {
		return inTurn
	}
	return together
}

// deleteChecks are the look-ups a DeleteVolume makes before it changes
// anything, made at once (checkDelete) when the volume's directory is
// known: each is one round trip to the server, and none depends on
// another's answer. done: they were made and no update holds the record
// aside (an update's record may say otherwise than the one known, so the
// call then makes them again, one after the other, from the record put
// back).
type deleteChecks struct {
	done      bool
	subDir    string    // the directory they were made for
	path      pathProbe // what is at subDir
	pathErr   error     // why it may not be moved (judgePath, once the record is known)
	noPending bool      // the trash holds no pending entry of an interrupted attempt
	noAside   bool      // no record of an interrupted removal is aside
	noFigure  bool      // no usage figure is stored under the record's key
	noMarker  bool      // the directory's parent is not one nfsdir made (or there is none)
}

// checkDelete makes deleteAs's first look-ups for the volume of id, whose
// directory is subDir, at the same time: the update that may hold the
// record aside, what is at its path (probePath), a pending entry in the
// trash and a record left aside by an interrupted removal. Whatever one
// finds other than nothing is looked up again where it is acted on, as
// before. The usage figure and the parent's marker are looked up with
// them: what was absent then is not looked up again at the end (a figure
// stored meanwhile is the accountant's to drop; a parent holds the
// volume's directory until it moves, so no one makes it, nor marks it,
// meanwhile). None of them needs the record: they may be made while it
// is read (lookUpToDelete). forRemoval: the directory may be moved away
// (unknown, or not retained).
func (a deletion) checkDelete(id volumeid.ID, subDir string, forRemoval bool) deleteChecks {
	c := deleteChecks{subDir: subDir, noMarker: true}
	var noUpdate bool
	absent := func(err error) bool { return errors.Is(err, fs.ErrNotExist) }
	checks := []func(){
		func() { c.path = a.probePath(subDir, forRemoval) },
		func() { _, err := a.records().Readlink(id.Key + updateSuffix + id.Token); noUpdate = absent(err) },
		func() { _, err := a.trash.Lstat(pendingPrefix + trashName(id)); c.noPending = absent(err) },
		func() { _, err := a.records().Readlink(id.Key + asideSuffix + id.Token); c.noAside = absent(err) },
		func() { c.noFigure = a.Figures().absent(id.Key) },
	}
	if parents := safepath.Parents(subDir); len(parents) > 0 {
		checks = append(checks, func() { _, err := a.parents.Lstat(parentMarker(parents[0])); c.noMarker = absent(err) })
	}
	a.atOnce()(checks...)
	if !noUpdate {
		return deleteChecks{}
	}
	c.done = true
	return c
}

// inTurn runs fns one after the other.
func inTurn(fns ...func()) {
	for _, fn := range fns {
		fn()
	}
}

// together runs fns at once and returns when all have returned.
func together(fns ...func()) {
	var wg sync.WaitGroup
	for _, fn := range fns[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn()
		}()
	}
	fns[0]()
	wg.Wait()
}

// pathProbe is what probePath found at a volume's path.
type pathProbe struct {
	exists    bool        // something is there
	err       error       // it could not be looked at
	st        fs.FileInfo // its attributes
	handle    string      // the digest of its file handle ("" when none)
	shareRoot bool        // it holds another share's metadata directory
}

// probePath opens what is at the share's path subDir once (O_PATH), never
// following a symlink, reads its attributes and file handle through that
// descriptor, looks for another share's metadata directory in it, and
// closes it: everything judgePath needs, without the record. shareRoot is
// looked for only with forRemoval (a retained directory stays whatever it
// holds).
func (a deletion) probePath(subDir string, forRemoval bool) (p pathProbe) {
	f, err := a.seals().freshOpenPath(subDir)
	if errors.Is(err, fs.ErrNotExist) {
		return p
	}
	p.exists = true
	if err != nil {
		p.err = fmt.Errorf("check %q: %w", subDir, err)
		return p
	}
	defer f.Close()
	if p.st, err = f.Stat(); err != nil {
		p.err = onShare(err, "check %q", subDir)
		return p
	}
	p.handle = fdHandleDigest(f)
	if forRemoval && p.st.IsDir() {
		var st unix.Stat_t
		p.shareRoot = unix.Fstatat(int(f.Fd()), safepath.MetaDir, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	}
	return p
}

// judgePath fails when what probePath found at rec's path must not be
// moved away for rec's onDelete policy (retain moves nothing): it is
// another share's root, or not the directory sealed into rec (or, for an
// older record without a seal, not provably nfsdir's).
func (a deletion) judgePath(rec *Record, p pathProbe) error {
	if !p.exists {
		return nil
	}
	if p.err != nil || rec.OnDelete == params.Retain {
		return p.err
	}
	if p.shareRoot {
		return fault.New(fault.FailedPrecondition, "volume %q: its directory %q is the root of another nfsdir share (it holds %s): a StorageClass uses it as its share, and nfsdir will not %s it; point that StorageClass elsewhere or move its data out first", rec.Name, rec.SubDir, safepath.MetaDir, rec.OnDelete)
	}
	if rec.FileID != 0 {
		return a.seals().checkSealedAs(rec, p.st, func() string { return p.handle })
	}
	if why := a.creation().unfinished(rec.SubDir); why != "" {
		// Made by an older nfsdir that sealed after chmod, or not
		// nfsdir's at all: nothing proves which.
		return fault.New(fault.FailedPrecondition, "directory %q was never sealed into the record of volume %q, and nfsdir cannot prove it is the one it made: %s. nfsdir leaves it alone: delete it by hand and retry", rec.SubDir, rec.Name, why)
	}
	return nil
}

// deletion is the room of Area with the steps of a delete: the checks of
// what is at a volume's path, the record found or read again, and the
// removal by the volume's onDelete policy.
type deletion struct{ *Area }

func (a *Area) deletion() deletion { return deletion{a} }
