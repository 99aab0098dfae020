package provision

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/nfsproto"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/safepath"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// Compounder sends NFSv4.1 COMPOUNDs to the share's server
// (nfsclient.Client): each call is one round trip, whatever the number of
// operations in it. Do returns an *nfsproto.OpError for a failed
// operation (those before it ran, none after it), an error wrapping
// nfsproto.ErrNotSent when none ran, and any other error when whether
// they ran is unknown.
type Compounder interface {
	Do(ctx context.Context, ops ...nfsproto.Op) error
}

// compounds is what an Area needs to act through a Compounder: the
// server's filehandles of the share root and of the records directory,
// both held open through the mount, so that every COMPOUND acts on the
// very directories the Area checked when it was opened, never on a path.
type compounds struct {
	c                         Compounder
	rootFH, volumeFH, trashFH []byte
	off                       atomic.Bool // the server refused the session: the mount only
}

// UseCompounds has Create make a volume at the top of the share with two
// COMPOUNDs sent through c: the record and the directory (mode 0500) and
// the check for a shared directory's record at the path in one, the seal
// and the volume's mode in the other (2 calls where the mount needs 9).
// It fails, and the Area goes on
// through the mount alone, when the mount does not give the server's
// filehandles in the form Linux's NFS client is known to (KernelHandle):
// the seal's handle digest must be the one the mount would compute.
func (a *Area) UseCompounds(c Compounder) error {
	root, err := serverFH(a.rootFile)
	if err != nil {
		return fmt.Errorf("the share root: %w", err)
	}
	vols, err := serverFH(a.volumesFile)
	if err != nil {
		return fmt.Errorf("%s: %w", volumesDir, err)
	}
	trash, err := serverFH(a.trashFile)
	if err != nil {
		return fmt.Errorf("%s: %w", trashDir, err)
	}
	a.compounds = &compounds{c: c, rootFH: root, volumeFH: vols, trashFH: trash}
	return nil
}

// serverFH returns the server's filehandle of the directory open as f,
// from the handle the kernel's NFS client gives it (name_to_handle_at asks
// the server nothing), after checking that rebuilding the kernel's handle
// from it gives the same bytes and type.
func serverFH(f *os.File) ([]byte, error) {
	var h unix.FileHandle
	err := withHeld(f, func(fd int) (err error) {
		h, _, err = unix.NameToHandleAt(fd, "", unix.AT_EMPTY_PATH)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("file handle: %w", err)
	}
	fh, fileid, ok := nfsproto.KernelHandle(h.Bytes())
	if !ok {
		return nil, fmt.Errorf("a file handle of type %d holds no NFS filehandle", h.Type())
	}
	if typ, b := nfsproto.KernelHandleOf(fh, fileid, nfsproto.ModeDir); typ != h.Type() || !bytes.Equal(b, h.Bytes()) {
		return nil, fmt.Errorf("the kernel's file handle (type %d, %x) is not in the form nfsdir rebuilds (type %d, %x)", h.Type(), h.Bytes(), typ, b)
	}
	return fh, nil
}

// compoundable tells whether Create makes req's volume through COMPOUNDs:
// a volume of its own, empty, with no owner to set (a chown through NFSv4
// names owners as strings, which nfsdir does not map) and no agent.
func (a *Area) compoundable(req Request) bool {
	return a.compounds != nil && !a.compounds.off.Load() && !req.Shared && req.Source == nil && req.UID < 0 && req.GID < 0 &&
		req.QuotaAgent == "" && req.CopyAgent == "" && len(req.SubDir) > 0
}

// refused turns the session off for good when err says the server
// refuses it (an RPC-level refusal: no NFSv4.1, no AUTH_SYS, ...).
func (c *compounds) refused(err error) {
	if errors.Is(err, nfsproto.ErrRPC) && c.off.CompareAndSwap(false, true) {
		klog.Warningf("the NFS server refuses nfsdir's own NFSv4.1 session, and volumes are made through the share mount from now on: %v", err)
	}
}

// absentByCompound looks each of names up in the directory of filehandle
// dir, at once, one COMPOUND each (a look-up that finds nothing ends its
// COMPOUND, so two cannot share one), and tells whether none is there.
// false also when a look-up could not be made: the caller then asks
// through the mount, which says why.
func (a *Area) absentByCompound(ctx context.Context, dir []byte, names ...string) bool {
	c := a.compounds
	errs := make([]error, len(names))
	fns := make([]func(), len(names))
	for i, name := range names {
		fns[i] = func() { errs[i] = c.c.Do(ctx, &nfsproto.PutFH{FH: dir}, &nfsproto.Lookup{Name: name}) }
	}
	together(fns...)
	for _, err := range errs {
		if !absentAt(err, 1) {
			c.refused(err)
			return false
		}
	}
	return true
}

// walkTo appends to ops one LOOKUP for each name of the share's path p
// ("." is the share root: none).
func walkTo(ops []nfsproto.Op, p string) []nfsproto.Op {
	if p == "." {
		return ops
	}
	for _, name := range strings.Split(p, "/") {
		ops = append(ops, &nfsproto.Lookup{Name: name})
	}
	return ops
}

// nestingKeys are the keys of the records that must not exist for a
// volume at a path below parents: a volume's or a shared directory's at
// any of them (checkNotNested).
func nestingKeys(parents []string) []string {
	keys := make([]string, 0, 2*len(parents))
	for _, p := range parents {
		keys = append(keys, volumeid.KeyForDir(p), volumeid.KeyForSharedDir(p))
	}
	return keys
}

// parentByCompound makes Create's look-ups for a volume below the share
// root (parents: its parents, deepest first) through the session, all at
// once, one COMPOUND each, and returns the filehandle of its parent: no
// volume's or shared directory's record for any parent (checkNotNested),
// and each parent a directory with no other share's metadata directory in
// it (checkNoShareAbove). Each parent is walked to from the share root,
// one LOOKUP a name; LOOKUP never follows a symlink, and a look-up in
// anything but a directory fails, so the walk that ends by finding no
// metadata directory went through directories only. ok false: something
// was found, a parent is missing, or a look-up failed; nothing was made,
// and the mount's path makes its checks again (and says why) or makes the
// parents.
func (a *Area) parentByCompound(ctx context.Context, parents []string) (fh []byte, ok bool) {
	c := a.compounds
	parentFH := &nfsproto.GetFH{}
	attrs := &nfsproto.GetAttr{Want: []uint32{nfsproto.AttrType}}
	walks := make([][]nfsproto.Op, len(parents))
	for i, p := range parents {
		ops := walkTo([]nfsproto.Op{&nfsproto.PutFH{FH: c.rootFH}}, p)
		if i == 0 {
			ops = append(ops, parentFH, attrs)
		}
		walks[i] = append(ops, &nfsproto.Lookup{Name: safepath.MetaDir})
	}
	errs := make([]error, len(walks))
	var noRecords bool
	fns := []func(){func() {
		noRecords = a.absentByCompound(ctx, c.volumeFH, nestingKeys(parents)...)
	}}
	for i, ops := range walks {
		fns = append(fns, func() { errs[i] = c.c.Do(ctx, ops...) })
	}
	together(fns...)
	for i, err := range errs {
		if !absentAt(err, len(walks[i])-1) {
			c.refused(err)
			return nil, false
		}
	}
	if !noRecords || attrs.Type != nfsproto.TypeDir || len(parentFH.FH) == 0 {
		return nil, false
	}
	return parentFH.FH, true
}

// createByCompound is Create's making of a fresh volume (record, directory,
// seal, mode) in two COMPOUNDs. done false: the record could not be made
// (it exists already: a retry, an abandoned creation, another volume's
// directory; or the server refused), or a shared directory's record is at
// the path; nothing was made, or what was is undone: Create goes on
// through the mount, which sorts these out.
//
// The steps and the states a failure leaves are those of the mount's
// path: the record first, exclusively (CREATE of the link fails when one
// exists); the directory, empty, mode 0500, in the same COMPOUND, which
// stops at the first failure, so a directory is never made without its
// record; then the seal written aside and renamed over the record, and the
// volume's mode, by the directory's filehandle. A directory at the path
// already (EXIST) is reported as the mount's path reports it and the
// record dropped. When the server's answer is lost (a time-out), whatever
// ran stays: the retry finds its record and finishes through the mount,
// which takes over an unsealed directory only when it is still exactly
// what the first COMPOUND makes (empty, mode 0500, nfsdir's owner).
func (a *Area) createByCompound(ctx context.Context, req Request) (_ *Record, done bool, err error) {
	c := a.compounds
	parentFH, parents := c.rootFH, safepath.Parents(req.SubDir)
	if len(parents) > 0 {
		// Below the share root, the checks go first (a round trip), so
		// that nothing is ever made inside another volume's directory.
		var ok bool
		if parentFH, ok = a.parentByCompound(ctx, parents); !ok {
			return nil, false, nil
		}
	}
	rec := newRecord(req)
	key := rec.Key()
	text, err := json.Marshal(rec)
	if err != nil {
		return nil, true, err
	}
	StepHook("create:dir", rec.SubDir)
	mode := uint32(newDirPerm)
	dir := &nfsproto.GetFH{}
	attrs := &nfsproto.GetAttr{Want: []uint32{nfsproto.AttrType, nfsproto.AttrFileID}}
	// The COMPOUND ends with the look-up of a shared directory's record at
	// the path (checkKind), which must find nothing: a look-up that finds
	// nothing stops a COMPOUND, so it goes last, after the record and the
	// directory, and its NFS4ERR_NOENT is the plain case's answer. When it
	// finds one, or cannot tell, what the COMPOUND made (a new, empty
	// directory and its record) is undone, as recheckNesting undoes a
	// volume that finds another around it, and the mount's path makes the
	// call from nothing: its checks go first, and say why.
	err = c.c.Do(ctx,
		&nfsproto.PutFH{FH: c.volumeFH}, &nfsproto.Create{Type: nfsproto.TypeLink, Name: key, Link: string(text)},
		&nfsproto.PutFH{FH: parentFH}, &nfsproto.Create{Type: nfsproto.TypeDir, Name: path.Base(rec.SubDir), Mode: &mode},
		dir, attrs,
		&nfsproto.PutFH{FH: c.volumeFH}, &nfsproto.Lookup{Name: volumeid.KeyForSharedDir(rec.SubDir)})
	var oe *nfsproto.OpError
	errors.As(err, &oe)
	switch {
	case absentAt(err, kindCheckAt):
	case err == nil, oe != nil && oe.Index >= kindCheckAt-1:
		// A shared directory's record at the path, or no answer on it.
		a.removeNewDir(rec.SubDir)
		a.dropRecord(key, rec)
		return nil, false, nil
	case oe != nil && oe.Index <= 1, errors.Is(err, nfsproto.ErrNotSent):
		// Nothing was made: a record is there already, the server said
		// no (NFS4ERR_DELAY, a stale records directory, ...), or no
		// session could be had. The mount's path goes on, and sorts it
		// out as before.
		c.refused(err)
		return nil, false, nil
	case oe != nil && oe.Index == 2:
		// The record only: the parent is gone since its look-up (a
		// stale filehandle). The mount's path goes on, from nothing.
		a.dropRecord(key, rec)
		return nil, false, nil
	case oe != nil && oe.Index <= 3:
		// The record was made, the directory was not (a directory made
		// by someone else is never removed here).
		if oe.Index == 3 && oe.Status == nfsproto.ErrExist {
			err = a.existsError(rec.SubDir)
		} else {
			err = onShare(&fs.PathError{Op: "CREATE", Path: rec.SubDir, Err: err}, "create %q", rec.SubDir)
		}
		a.dropRecord(key, rec)
		return nil, true, err
	case oe != nil:
		// The directory was made and cannot be read back: undo it.
		a.removeNewDir(rec.SubDir)
		a.dropRecord(key, rec)
		return nil, true, onShare(err, "check %q", rec.SubDir)
	default:
		return nil, true, unknownOutcome(err, rec)
	}
	if attrs.Type != nfsproto.TypeDir || attrs.FileID == 0 {
		a.removeNewDir(rec.SubDir)
		a.dropRecord(key, rec)
		return nil, true, fault.New(fault.Internal, "the server made %q as type %d, fileid %d", rec.SubDir, attrs.Type, attrs.FileID)
	}
	typ, h := nfsproto.KernelHandleOf(dir.FH, attrs.FileID, nfsproto.ModeDir)
	sealed := *rec
	sealed.FileID, sealed.Handle = attrs.FileID, digestOf(unix.NewFileHandle(typ, h))
	// Below the share root, the nesting check is made again once the
	// directory is there (recheckNesting says why), with the seal.
	alone := true
	together(
		func() { err = a.sealByCompound(ctx, key, &sealed, dir.FH) },
		func() {
			if len(parents) > 0 {
				alone = a.absentByCompound(ctx, c.volumeFH, nestingKeys(parents)...)
			}
		},
	)
	if err != nil {
		if sealed.FileID == 0 { // not sealed: undo, as the mount's path does
			a.removeNewDir(rec.SubDir)
			a.dropRecord(key, rec)
		}
		return nil, true, err
	}
	if !alone {
		// A record found around it, or the look-ups could not be made:
		// through the mount, which undoes the directory when nested.
		if err := a.recheckNesting(&sealed); err != nil {
			a.dropRecord(key, rec)
			return nil, true, err
		}
	}
	return &sealed, true, nil
}

// sealByCompound writes sealed, the record of the directory of filehandle
// dir, aside and renames it over the record, then sets the volume's mode,
// in one COMPOUND. sealed is unsealed (FileID 0) when its record was not
// replaced, or may not have been.
func (a *Area) sealByCompound(ctx context.Context, key string, sealed *Record, dir []byte) error {
	c := a.compounds
	text, err := json.Marshal(sealed)
	if err != nil {
		sealed.unseal()
		return err
	}
	tmp := key + sealSuffix
	err = c.c.Do(ctx,
		&nfsproto.PutFH{FH: c.volumeFH}, &nfsproto.Create{Type: nfsproto.TypeLink, Name: tmp, Link: string(text)},
		&nfsproto.PutFH{FH: c.volumeFH}, &nfsproto.SaveFH{}, &nfsproto.Rename{Old: tmp, New: key},
		&nfsproto.PutFH{FH: dir}, &nfsproto.SetMode{Mode: sealed.Mode & 0o7777})
	var oe *nfsproto.OpError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &oe) && oe.Index <= 4, errors.Is(err, nfsproto.ErrNotSent):
		// The record was not replaced: a seal link left by an interrupted
		// rewrite is in the way, the server refuses the rename for now
		// (its grace period after a restart: NFS4ERR_GRACE), or the
		// session is gone. The mount's path clears such a link and waits
		// the refusal out; then the mode is set.
		klog.V(2).Infof("%s: sealing through the mount: %v", sealed.describe(), err)
		if err := rewriteRecord(a.records(), key, sealed); err != nil {
			sealed.unseal()
			return err
		}
		err := c.c.Do(ctx, &nfsproto.PutFH{FH: dir}, &nfsproto.SetMode{Mode: sealed.Mode & 0o7777})
		if errors.Is(err, nfsproto.ErrNotSent) {
			// Through the mount, on the directory found sealed at its path.
			return a.makeDir(key, sealed, false)
		}
		if err != nil {
			return onShare(err, "set mode %04o of %q", sealed.Mode, sealed.SubDir)
		}
		return nil
	case oe != nil:
		return onShare(err, "set mode %04o of %q", sealed.Mode, sealed.SubDir)
	default:
		return unknownOutcome(err, sealed)
	}
}

// kindCheckAt is the index in createByCompound's first COMPOUND of its
// look-up of a shared directory's record at the volume's path.
const kindCheckAt = 7

// unknownOutcome is the answer when a COMPOUND's reply was lost: what it
// did stays, and a retry finishes it.
func unknownOutcome(err error, rec *Record) error {
	return fault.Wrap(fault.Unavailable, err, "%s: the NFS server's answer was lost; what it did stays, and a retry finishes it", rec.describe())
}

// deleteByCompound is DeleteVolume of the volume of id through COMPOUNDs,
// when its directory is known (knownDir): two round trips where the mount
// needs about nine, the pruning of a parent nfsdir made included (as
// deleteAs prunes). done false: nothing was changed, and the mount's path
// does the whole call, from the record's read on, as it would have:
// whatever is not the plain case (no record, a record held aside by an
// update or an interrupted removal, a pending entry in the trash, nothing
// or something else at the path, a policy other than delete, a volume of
// an agent, an unsealed or shared one) is left to it, and so is what
// follows any failure once something changed (it recovers every state a
// cut call leaves).
//
// The plain case: the look-ups go at once (the record and the absence of
// an update's; what is at the path, walked to from the share root, its
// handle, attributes and the absence of another share's metadata
// directory in it; the parent's marker, when there is a parent; the
// absence of a pending trash entry and of an interrupted removal's
// record); the directory must be the sealed one, by fileid and by the
// digest of its handle. Then one COMPOUND moves it from the parent walked
// through to its pending trash name, checks that what was moved is the
// very filehandle checked (VERIFY: the COMPOUND stops otherwise), removes
// it when empty, takes the record aside, checks that what was taken is
// the very link read (by its filehandle: a symlink's text never changes,
// so that link holds the record read) and removes it. The usage figure,
// when there is one, is dropped at the same time through the mount.
func (a *Area) deleteByCompound(ctx context.Context, id volumeid.ID, before func(*Record) error) (purge, done bool, err error) {
	c := a.compounds
	subDir, ok := a.knownDir(id.Key)
	if c == nil || c.off.Load() || a.onServer || !ok {
		return false, false, nil
	}
	update, aside, pending := id.Key+updateSuffix+id.Token, id.Key+asideSuffix+id.Token, pendingPrefix+trashName(id)
	text, recFH := &nfsproto.ReadLink{}, &nfsproto.GetFH{}
	recAttrs := &nfsproto.GetAttr{Want: []uint32{nfsproto.AttrType, nfsproto.AttrFileID}}
	fh := &nfsproto.GetFH{}
	attrs := &nfsproto.GetAttr{Want: []uint32{nfsproto.AttrType, nfsproto.AttrFileID}}
	// The directory is walked to from the share root, one LOOKUP a name
	// (never through a symlink: a look-up in one fails), and moved from
	// the very parent walked through, by its filehandle.
	parents := safepath.Parents(subDir)
	parentFH, grandFH := &nfsproto.GetFH{FH: c.rootFH}, &nfsproto.GetFH{}
	parentAttrs := &nfsproto.GetAttr{Want: []uint32{nfsproto.AttrType, nfsproto.AttrFileID}}
	walk := []nfsproto.Op{&nfsproto.PutFH{FH: c.rootFH}}
	if len(parents) > 0 {
		walk = walkTo(walk, path.Dir(parents[0]))
		walk = append(walk, grandFH, &nfsproto.Lookup{Name: path.Base(parents[0])}, parentFH, parentAttrs)
	}
	walk = append(walk, &nfsproto.Lookup{Name: path.Base(subDir)}, fh, attrs, &nfsproto.Lookup{Name: safepath.MetaDir})
	var recErr, pathErr, pendingErr, asideErr error
	noFigure, noMarker := false, true
	together(
		func() {
			recErr = c.c.Do(ctx, &nfsproto.PutFH{FH: c.volumeFH}, &nfsproto.Lookup{Name: id.Key}, recFH, recAttrs, text,
				&nfsproto.PutFH{FH: c.volumeFH}, &nfsproto.Lookup{Name: update})
		},
		func() { pathErr = c.c.Do(ctx, walk...) },
		func() {
			pendingErr = c.c.Do(ctx, &nfsproto.PutFH{FH: c.trashFH}, &nfsproto.Lookup{Name: pending})
		},
		func() { asideErr = c.c.Do(ctx, &nfsproto.PutFH{FH: c.volumeFH}, &nfsproto.Lookup{Name: aside}) },
		func() { noFigure = a.figureAbsent(id.Key) },
		func() {
			// A parent nfsdir made is pruned once the volume is gone
			// (pruneParents), as through the mount.
			if len(parents) > 0 {
				_, err := a.parents.Lstat(parentMarker(parents[0]))
				noMarker = errors.Is(err, fs.ErrNotExist)
			}
		},
	)
	if !absentAt(recErr, 6) || !absentAt(pathErr, len(walk)-1) || !absentAt(pendingErr, 1) || !absentAt(asideErr, 1) ||
		(len(parents) > 0 && parentAttrs.Type != nfsproto.TypeDir) {
		return false, false, nil
	}
	rec, err := parseRecord(id.Key, id.Key, text.Link)
	if err != nil || recAttrs.Type != nfsproto.TypeLink || rec.Token != id.Token || rec.SharedDir || rec.Shared || rec.SubDir != subDir ||
		rec.OnDelete != params.Delete || rec.FileID == 0 || rec.Handle == "" || rec.CopyAgent != "" ||
		rec.QuotaAgent != "" || rec.Filling || rec.Pending {
		return false, false, nil
	}
	typ, h := nfsproto.KernelHandleOf(fh.FH, attrs.FileID, nfsproto.ModeDir)
	if attrs.Type != nfsproto.TypeDir || attrs.FileID != rec.FileID || digestOf(unix.NewFileHandle(typ, h)) != rec.Handle {
		return false, false, nil // not the sealed directory: the mount's path says so
	}
	if before != nil {
		if err := before(rec); err != nil {
			return false, true, err
		}
	}
	StepHook("delete:move", rec.SubDir)
	ops := []nfsproto.Op{
		&nfsproto.PutFH{FH: parentFH.FH}, &nfsproto.SaveFH{}, &nfsproto.PutFH{FH: c.trashFH}, &nfsproto.Rename{Old: path.Base(subDir), New: pending},
		&nfsproto.Lookup{Name: pending}, &nfsproto.Verify{Type: nfsproto.TypeDir, FH: fh.FH, FileID: rec.FileID},
		&nfsproto.PutFH{FH: c.trashFH}, &nfsproto.Remove{Target: pending},
		&nfsproto.PutFH{FH: c.volumeFH}, &nfsproto.SaveFH{}, &nfsproto.Rename{Old: id.Key, New: aside},
		&nfsproto.Lookup{Name: aside}, &nfsproto.Verify{Type: nfsproto.TypeLink, FH: recFH.FH, FileID: recAttrs.FileID},
		&nfsproto.PutFH{FH: c.volumeFH}, &nfsproto.Remove{Target: aside},
	}
	pruneAt := len(ops) // where the parent's removal begins
	if !noMarker {
		// The parent nfsdir made goes too when the volume was the last
		// in it, as pruneParents does: the very directory walked through
		// (VERIFY), removed only when empty (a REMOVE of a directory is an
		// rmdir). Its removal failing (others are in it) ends the
		// COMPOUND after the volume is gone.
		ops = append(ops, &nfsproto.PutFH{FH: grandFH.FH}, &nfsproto.Lookup{Name: path.Base(parents[0])},
			&nfsproto.Verify{Type: nfsproto.TypeDir, FH: parentFH.FH, FileID: parentAttrs.FileID},
			&nfsproto.PutFH{FH: grandFH.FH}, &nfsproto.Remove{Target: path.Base(parents[0])})
	}
	var removeErr error
	tail := []func(){func() { removeErr = c.c.Do(ctx, ops...) }}
	if !noFigure {
		// A figure is counted data, which the accountant counts again for
		// a record a failed removal leaves (as the mount's path does).
		tail = append(tail, func() { a.dropFigure(id.Key, id.Token) })
	}
	together(tail...)
	var oe *nfsproto.OpError
	switch err := removeErr; {
	case err == nil:
		if !noMarker { // the parent is gone too: its marker, and those above
			_ = a.parents.Remove(parentMarker(parents[0]))
			a.pruneParents(parents[0])
		}
		return false, true, nil
	case errors.As(err, &oe) && oe.Index >= pruneAt:
		return false, true, nil // the volume is gone; its parent stays
	case oe != nil && oe.Index <= 3, errors.Is(err, nfsproto.ErrNotSent):
		return false, false, nil // nothing moved
	case oe != nil && oe.Index >= 12:
		// The record taken aside is not the one read (NFS4ERR_NOT_SAME:
		// another volume's, written at the same directory after this one
		// was read), or could not be removed: the mount's path puts it
		// back, or removes it when it is this volume's.
		if !noMarker {
			a.pruneParents(subDir) // the directory is gone
		}
		return false, true, settleAside(a.records(), id.Key, aside, id.Token)
	case oe != nil:
		// Moved, and then not the volume's (NFS4ERR_NOT_SAME: moved back
		// by the mount's path), not empty, or the record not taken aside:
		// the mount's path finishes from where this stopped.
		klog.V(2).Infof("%s: deleting through the mount from here: %v", rec.describe(), err)
		purge, err = a.deleteAs(id, "", nil, nil)
		return purge, true, err
	default:
		return false, true, unknownOutcome(err, rec)
	}
}

// absentAt tells whether err is a COMPOUND's stop at operation index
// for a name that is not there (a LOOKUP's NFS4ERR_NOENT): what a
// COMPOUND ending with a look-up for an absence answers when all before
// it went through.
func absentAt(err error, index int) bool {
	var oe *nfsproto.OpError
	return errors.As(err, &oe) && oe.Index == index && oe.Status == nfsproto.ErrNoEnt
}
