package serveragent

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/grpcstatus"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/safepath"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// MakeVolume implements Service: it runs nfsdir's own Create
// (provision.Area.Create, with every check it makes through a share
// mount) on the server's file system, as the user nfsdir's files belong
// to on the share, so that the record, the directory, its seal and its
// mode cost the controller no NFS call.
func (a *Agent) MakeVolume(ctx context.Context, req *provision.RemoteMake) (*provision.Record, error) {
	var rec *provision.Record
	err := a.onArea(req.Share, func(area *provision.Area) (err error) {
		rec, err = area.Create(ctx, req.Request)
		return err
	})
	a.audit(ctx, "make", &Volume{Share: req.Share, SubDir: req.Request.SubDir}, map[string]any{"name": req.Request.Name}, nil, err)
	return rec, grpcstatus.Of(err)
}

// RemoveVolume implements Service: provision.Area.Delete on the server,
// as MakeVolume. An empty volume's directory is removed at once; any other
// goes into the share's trash, which the controller purges (Purge).
func (a *Agent) RemoveVolume(ctx context.Context, req *provision.RemoteRemove) (*provision.RemoteRemoved, error) {
	purge, err := a.remove(ctx, req)
	a.audit(ctx, "remove", &Volume{Share: req.Share, Token: req.Token}, map[string]any{"key": req.Key}, nil, err)
	return &provision.RemoteRemoved{Purge: purge, Answered: true}, grpcstatus.Of(err)
}

func (a *Agent) remove(ctx context.Context, req *provision.RemoteRemove) (purge bool, err error) {
	if !volumeid.ValidKey(req.Key, req.Token) {
		return false, fault.New(fault.InvalidArgument, "%q and %q are not a record's key and token", req.Key, req.Token)
	}
	err = a.onArea(req.Share, func(area *provision.Area) (err error) {
		purge, err = area.Delete(ctx, volumeid.ID{Key: req.Key, Token: req.Token})
		return err
	})
	return purge, err
}

// onArea runs fn on nfsdir's metadata area of share, opened on the
// server's file system as the user who owns it: the user the NFS server
// gives the controller's files (root, or the one root_squash maps root
// to), so that whatever fn makes is owned as if the controller made it
// through its mount, and fn may do no more than the controller could.
// A share the agent does not serve, one whose area the controller did
// not make yet, or an owner the agent cannot act as is Unimplemented:
// said before anything changed, and the controller does it through its
// mount. The area stays open for the next call while the metadata
// directory is the same one, with the same owner.
func (a *Agent) onArea(share string, fn func(*provision.Area) error) error {
	share = path.Clean("/" + share)
	local, ok := a.exports[share]
	if !ok {
		return fault.New(fault.Unimplemented, "this agent does not make or delete volumes on share %q: not one of its export roots (--export, --copy-export)", share)
	}
	oa, err := a.openArea(share, local)
	if err != nil {
		return err
	}
	defer oa.use.RUnlock()
	return asUser(oa.uid, oa.gid, func() error { return fn(oa.area) })
}

// Close closes the metadata areas the agent keeps open, once no call uses
// them.
func (a *Agent) Close() {
	a.areaMu.Lock()
	defer a.areaMu.Unlock()
	for share, oa := range a.areas {
		oa.close()
		delete(a.areas, share)
	}
}

// openedArea is a share's metadata area the agent keeps open.
type openedArea struct {
	use      sync.RWMutex // read-held while in use; held to close it
	root     *os.Root
	area     *provision.Area
	dev, ino uint64 // of the metadata directory
	uid, gid int    // its owner
}

func (oa *openedArea) close() {
	oa.use.Lock()
	defer oa.use.Unlock()
	oa.area.Close()
	oa.root.Close()
}

// openArea returns share's area, read-locked for use: the one open if
// the metadata directory at the export root is still the same, with the
// same owner; otherwise it opens it anew (and closes the old one once
// nothing uses it).
func (a *Agent) openArea(share, local string) (*openedArea, error) {
	// What is at the export root's metadata name now, not following a
	// symlink: the area kept open is used only while it is the same.
	st, err := os.Lstat(path.Join(local, safepath.MetaDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fault.New(fault.Unimplemented, "share %q has no nfsdir metadata area yet: the controller makes it through its mount", share)
	}
	if err != nil {
		return nil, fault.Wrap(fault.Unavailable, err, "export root %s", local)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok || !st.IsDir() {
		return nil, fault.New(fault.FailedPrecondition, "%s/%s is not a directory", local, safepath.MetaDir)
	}
	a.areaMu.Lock()
	defer a.areaMu.Unlock()
	if oa := a.areas[share]; oa != nil && oa.dev == sys.Dev && oa.ino == sys.Ino && oa.uid == int(sys.Uid) && oa.gid == int(sys.Gid) {
		oa.use.RLock()
		return oa, nil
	}
	root, err := os.OpenRoot(local)
	if err != nil {
		return nil, fault.Wrap(fault.Unavailable, err, "export root %s", local)
	}
	// OpenArea checks the metadata directory it opens (a real directory,
	// owned by the user it acts as, writable by nobody else); one put at
	// the name since the look above has another inode, and the next call
	// opens it again.
	oa := &openedArea{root: root, dev: sys.Dev, ino: sys.Ino, uid: int(sys.Uid), gid: int(sys.Gid)}
	err = asUser(oa.uid, oa.gid, func() (err error) {
		oa.area, err = provision.OpenArea(root, false)
		return err
	})
	if errors.Is(err, provision.ErrNoArea) {
		err = fault.New(fault.Unimplemented, "share %q has no nfsdir records yet: the controller makes them through its mount", share)
	}
	if err != nil {
		root.Close()
		return nil, err
	}
	oa.area.OnServer()
	if old := a.areas[share]; old != nil {
		go old.close()
	}
	if a.areas == nil {
		a.areas = map[string]*openedArea{}
	}
	a.areas[share] = oa
	oa.use.RLock()
	return oa, nil
}

// asUser runs fn with the file system identity uid:gid. When that is not
// the agent's own, fn runs on an operating system thread of its own with
// that fsuid and fsgid (Linux keeps them per thread; a non-zero fsuid
// also drops the capabilities that override file permissions, as
// root_squash does); the thread is never given back to the Go runtime
// and ends with fn. An agent that cannot take that identity (it lacks
// CAP_SETUID or CAP_SETGID) is Unimplemented.
func asUser(uid, gid int, fn func() error) error {
	if uid == os.Geteuid() && gid == os.Getegid() {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the goroutine ends locked, so the thread ends
		// too, with its identity.
		runtime.LockOSThread()
		unix.Setfsgid(gid)
		unix.Setfsuid(uid)
		// An invalid id changes nothing and answers the current one.
		gotGID, _ := unix.SetfsgidRetGid(-1)
		gotUID, _ := unix.SetfsuidRetUid(-1)
		if gotUID != uid || gotGID != gid {
			done <- fault.New(fault.Unimplemented, "the agent cannot act as uid %d gid %d, who own nfsdir's files on this share (it needs CAP_SETUID and CAP_SETGID)", uid, gid)
			return
		}
		done <- fn()
	}()
	return <-done
}
