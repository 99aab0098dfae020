package provision

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/treecopy"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// CopyDir names a directory of the share to an agent on the server that
// copies trees there: either a volume's directory, by its record (SubDir
// and Token), or a directory of the snapshots directory (.nfsdir/snapshots)
// by its name there (Snapshot). FileID is the directory's inode number as
// the controller opened it, so that the agent acts only on that very
// directory.
type CopyDir struct {
	SubDir   string `json:"subDir,omitempty"`
	Token    string `json:"token,omitempty"`
	Snapshot string `json:"snapshot,omitempty"`
	FileID   uint64 `json:"fileID"`
}

func (d CopyDir) String() string {
	if d.Snapshot != "" {
		return snapshotsDir + "/" + d.Snapshot
	}
	return fmt.Sprintf("%q", d.SubDir)
}

// RemoteCopy is one copy for an agent: on the share (as NFS clients mount
// it), Src's tree into Dst, which must be empty; RootAttrs as
// treecopy.Copier.Copy's.
type RemoteCopy struct {
	Share     string  `json:"share"`
	Src       CopyDir `json:"src"`
	Dst       CopyDir `json:"dst"`
	RootAttrs bool    `json:"rootAttrs"`
}

// RemoteCopier has the copy agent at endpoint (host:port) copy a tree of
// the share on the server itself, where no file crosses the network and a
// file costs no NFS call.
type RemoteCopier interface {
	CopyTree(ctx context.Context, endpoint string, c RemoteCopy) (treecopy.Result, error)
	// CopyProgress tells how far the copy c has come (entries looked at,
	// bytes copied) while CopyTree waits for it.
	CopyProgress(ctx context.Context, endpoint string, c RemoteCopy) (entries, bytes int64, err error)
}

// progressEvery is how often the progress of a copy by an agent is asked
// for, for the callers' answers ("... copied so far").
var progressEvery = 5 * time.Second

// RemoteMake asks an agent on the server to make a volume (Area.Create)
// on the share, as NFS clients mount it, with the server's own file
// system.
type RemoteMake struct {
	Share   string  `json:"share"`
	Request Request `json:"request"`
}

// RemoteRemove asks an agent on the server to delete the volume recorded
// under Key with Token (Area.Delete) on the share.
type RemoteRemove struct {
	Share string `json:"share"`
	Key   string `json:"key"`
	Token string `json:"token"`
}

// RemoteRemoved is an agent's answer to RemoteRemove.
type RemoteRemoved struct {
	// Purge: the trash holds something for the controller's Purger (the
	// volume's directory was not empty). An agent older than this field
	// answers false for every volume; the controller purges after those
	// whatever they answer.
	Purge bool `json:"purge,omitempty"`
	// Answered: this agent fills Purge.
	Answered bool `json:"answered,omitempty"`
}

// RemoteMaker has the agent at endpoint make and delete volumes on the
// server, where the record, the directory, its seal and its mode cost no
// NFS call. An agent that does not (Unimplemented: older than this, not
// serving the share, or unable to act as the user nfsdir's files belong
// to) says so before it changes anything.
type RemoteMaker interface {
	MakeVolume(ctx context.Context, endpoint string, m RemoteMake) (*Record, error)
	RemoveVolume(ctx context.Context, endpoint string, r RemoteRemove) (RemoteRemoved, error)
}

// Agents is the room of an Area that reaches the agents on its share's
// server: copies made there, volumes made and removed there, and what
// they answered for the volumes they made.
type Agents struct {
	copier RemoteCopier // copies by agents on the server (Use)
	maker  RemoteMaker  // volumes made and removed by agents (Use)
	share  string       // the share as the agents know it

	mu   sync.Mutex
	made map[string]*Record // volumes agents made for this Area, by key.token (Made)
}

// Agents returns the area's link to the agents.
func (a *Area) Agents() *Agents { return &a.agents }

// Use has the Area's fills and snapshots copy through r when the
// volume involved names a copy agent, and, when r is a RemoteMaker too,
// such volumes made and deleted by the agent; share is the Area's share
// as NFS clients mount it (what agents serve).
func (g *Agents) Use(r RemoteCopier, share string) {
	g.copier, g.share = r, share
	g.maker, _ = r.(RemoteMaker)
}

// OnServer marks an Area opened by an agent on the server's own file
// system, not through an NFS mount: the directories it seals get the
// server file system's handle (Record.ServerHandle), and it compares
// only that one.
func (a *Area) OnServer() { a.onServer = true }

// FreshLookups marks an Area on a mount that asks the server for every
// name (lookupcache=none, the controller's share mounts): a name it
// resolves is never the client's memory of it, so no directory needs
// opening first to revalidate the names in it (freshLstat).
func (a *Area) FreshLookups() { a.freshLookups = true }

// agentDeclined reports whether an agent's answer to MakeVolume or
// RemoveVolume leaves the call to the controller: the agent does not do
// it (Unimplemented), or cannot be reached (Unavailable). The agent is
// an accelerator for these: the controller's own Create and Delete are
// safe beside a call the agent may still be running, as beside another
// controller's.
func agentDeclined(err error) bool {
	return fault.Is(err, fault.Unimplemented) || fault.Is(err, fault.Unavailable)
}

// make has the copy agent of req make its volume. done false: the
// agent does not (agentDeclined), and the caller makes it through the
// share mount.
func (g *Agents) make(ctx context.Context, req Request) (rec *Record, done bool, err error) {
	if req.CopyAgent == "" || g.maker == nil {
		return nil, false, nil
	}
	rec, err = g.maker.MakeVolume(ctx, req.CopyAgent, RemoteMake{Share: g.share, Request: req})
	if agentDeclined(err) {
		klog.Warningf("volume %q: agent %s does not make it (%v): making it through the controller's mount", req.Name, req.CopyAgent, err)
		return nil, false, nil
	}
	if err == nil && !req.GIDRange.None() && (rec == nil || !rec.GIDFromRange) {
		// An agent of a version without GID ranges made the volume
		// without one: refused rather than handed out without its GID.
		return nil, true, fault.New(fault.FailedPrecondition, "volume %q: agent %s made it without a GID of the class's range %s (an agent older than the controller?): upgrade the agent",
			req.Name, req.CopyAgent, req.GIDRange)
	}
	if err == nil {
		g.remember(rec)
	}
	return rec, true, err
}

// maxMade bounds the records an Area remembers (Made): beyond it, the
// records of further volumes are read from the share when needed.
const maxMade = 4096

// remember keeps what an agent answered for a volume it made.
func (g *Agents) remember(rec *Record) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.made == nil {
		g.made = map[string]*Record{}
	}
	if len(g.made) < maxMade {
		c := *rec
		g.made[rec.Key()+"."+rec.Token] = &c
	}
}

// Made returns the record an agent answered when it made the volume of
// id for this Area, or nil. It was true then; what it tells of the
// volume's creation (its agents, its directory, its seal) never changes
// for that token, and the agent and Delete read the record again before
// they change anything: a DeleteVolume of a volume this controller made
// needs no read of the share to know where to send it.
func (g *Agents) Made(id volumeid.ID) *Record {
	g.mu.Lock()
	defer g.mu.Unlock()
	if rec := g.made[id.Key+"."+id.Token]; rec != nil {
		c := *rec
		return &c
	}
	return nil
}

// forget drops what Made remembers of the volume of id.
func (g *Agents) forget(id volumeid.ID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.made, id.Key+"."+id.Token)
}

// remove has the copy agent of rec delete the volume of id. done
// false: the agent does not (agentDeclined), and the caller deletes it
// through the share mount.
func (g *Agents) remove(ctx context.Context, id volumeid.ID, rec *Record) (done, purge bool, err error) {
	if rec == nil || rec.CopyAgent == "" || g.maker == nil || (rec.ServerHandle == "" && rec.Handle != "") {
		// Sealed through NFS (made before its class named the agent):
		// only an NFS client can compare its handle.
		return false, false, nil
	}
	r, err := g.maker.RemoveVolume(ctx, rec.CopyAgent, RemoteRemove{Share: g.share, Key: id.Key, Token: id.Token})
	if agentDeclined(err) {
		klog.Warningf("volume %q: agent %s does not delete it (%v): deleting it through the controller's mount", rec.Name, rec.CopyAgent, err)
		return false, false, nil
	}
	return true, r.Purge || !r.Answered, err
}

// copyTree copies the tree of src (named from for an agent) into dst
// (named to): through the agent when one is given and the Area has a
// remote copier, else with c through the share mount. An agent that does
// not copy (Unimplemented: one older than copies, or one not serving this
// share; said before it writes anything) leaves the copy to c, with a
// warning; any other failure of the agent fails the attempt, which the
// caller tries again (into a fresh directory: the agent may have left part
// of a copy).
func (g *Agents) copyTree(ctx context.Context, c treecopy.Copier, agent string, src, dst int, from, to CopyDir, rootAttrs bool) (treecopy.Result, error) {
	if agent == "" || g.copier == nil {
		return c.Copy(ctx, src, dst, rootAttrs)
	}
	for _, d := range []struct {
		fd  int
		dir *CopyDir
	}{{src, &from}, {dst, &to}} {
		var st unix.Stat_t
		if err := unix.Fstat(d.fd, &st); err != nil {
			return treecopy.Result{}, onShare(err, "check %s", d.dir)
		}
		d.dir.FileID = st.Ino
	}
	rc := RemoteCopy{Share: g.share, Src: from, Dst: to, RootAttrs: rootAttrs}
	if c.Progress != nil {
		stop := make(chan struct{})
		defer close(stop)
		go g.follow(ctx, agent, rc, c.Progress, stop)
	}
	res, err := g.copier.CopyTree(ctx, agent, rc)
	if fault.Is(err, fault.Unimplemented) {
		klog.Warningf("copy agent %s does not copy %s here (%v): copying through the controller's mount", agent, from, err)
		return c.Copy(ctx, src, dst, rootAttrs)
	}
	return res, err
}

// follow copies the progress of the agent's copy rc into p until
// stop; an agent that cannot tell (older than progress) is not asked
// again.
func (g *Agents) follow(ctx context.Context, agent string, rc RemoteCopy, p *treecopy.Progress, stop <-chan struct{}) {
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		entries, bytes, err := g.copier.CopyProgress(ctx, agent, rc)
		if fault.Is(err, fault.Unimplemented) {
			return
		}
		if err == nil {
			p.Entries.Store(entries)
			p.Bytes.Store(bytes)
		}
	}
}

// OpenCopy opens, for an agent, the two directories of the copy c, and
// proves the copy is one nfsdir makes: each directory is nfsdir's, still
// the very one the controller opened (openCopyDir), and the records say
// to copy the one into the other: a snapshot being made is copied from
// the volume it was taken of, a volume being filled from the snapshot or
// volume its record names. Anything else is FailedPrecondition, NotFound
// or InvalidArgument: the agent copies nothing else.
func (v *View) OpenCopy(c RemoteCopy) (src, dst *os.File, err error) {
	src, from, err := v.openCopyDir(c.Src, false)
	if err != nil {
		return nil, nil, err
	}
	dst, to, err := v.openCopyDir(c.Dst, true)
	if err != nil {
		src.Close()
		return nil, nil, err
	}
	if !to.copiesFrom(from) {
		src.Close()
		dst.Close()
		return nil, nil, fault.New(fault.FailedPrecondition, "nfsdir's records do not say to copy %s into %s", c.Src, c.Dst)
	}
	return src, dst, nil
}

// copyEnd is what a directory of a copy is: a volume's (rec) or a
// snapshot's (snap).
type copyEnd struct {
	rec  *Record
	snap *Snapshot
}

// copiesFrom reports whether the records say to copy from into e.
func (e copyEnd) copiesFrom(from copyEnd) bool {
	switch {
	case e.snap != nil:
		return from.rec != nil && from.rec.Key() == e.snap.SourceKey && from.rec.Token == e.snap.SourceToken
	case e.rec != nil && e.rec.Source != nil && e.rec.Source.Archive == "":
		src := e.rec.Source
		if src.Snapshot {
			return from.snap != nil && from.snap.Key() == src.Key && from.snap.Token == src.Token
		}
		return from.rec != nil && from.rec.Key() == src.Key && from.rec.Token == src.Token
	}
	return false
}

// openCopyDir opens, without following any symlink, the directory d of a
// copy an agent is asked for, and proves it is one nfsdir copies from
// (dst false) or into (dst true), still the very directory the controller
// named (d.FileID):
//   - a volume's directory, as OpenVolumeDir gives it; a copy goes only
//     into a volume being filled (made from a snapshot or another volume,
//     not yet handed out);
//   - in the snapshots directory, a snapshot's complete copy to copy from
//     (key.token), or one of its copies being made to copy into
//     (.key.token.attempt), of a snapshot recorded with that token.
//
// A copy goes only into an empty directory.
func (v *View) openCopyDir(d CopyDir, dst bool) (*os.File, copyEnd, error) {
	var f *os.File
	var end copyEnd
	switch {
	case d.Snapshot != "" && d.SubDir == "" && d.Token == "":
		var err error
		if f, end.snap, err = v.openSnapshotCopy(d.Snapshot, dst); err != nil {
			return nil, end, err
		}
	case d.Snapshot == "":
		file, rec, err := v.OpenVolumeDir(d.SubDir, d.Token)
		if err != nil {
			return nil, end, err
		}
		if dst && (!rec.Filling || rec.Copied) {
			file.Close()
			return nil, end, fault.New(fault.FailedPrecondition, "volume %q is not being filled: nothing is copied into it", rec.Name)
		}
		f, end.rec = file, rec
	default:
		return nil, end, fault.New(fault.InvalidArgument, "a copy's directory is a volume's or a snapshot's, not both")
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Ino != d.FileID {
		f.Close()
		return nil, end, fault.New(fault.FailedPrecondition, "%s is not the directory the controller opened (inode %d, asked for %d): moved or made anew meanwhile", d, st.Ino, d.FileID)
	}
	if dst {
		empty, err := isEmpty(int(f.Fd()))
		if err != nil || !empty {
			f.Close()
			if err != nil {
				return nil, end, onShare(err, "check %s", d)
			}
			return nil, end, fault.New(fault.FailedPrecondition, "%s is not empty: a copy goes only into an empty directory", d)
		}
	}
	return f, end, nil
}

// openSnapshotCopy opens the directory name of the snapshots directory: a
// complete copy (key.token) when into is false, a copy being made
// (.key.token.attempt) when it is true, of the snapshot recorded under key
// with that token.
func (v *View) openSnapshotCopy(name string, into bool) (*os.File, *Snapshot, error) {
	parts := strings.Split(name, ".")
	if into {
		if len(parts) != 4 || parts[0] != "" {
			return nil, nil, fault.New(fault.InvalidArgument, "%q does not name a snapshot copy being made", name)
		}
		parts = parts[1:3]
	} else if len(parts) != 2 {
		return nil, nil, fault.New(fault.InvalidArgument, "%q does not name a snapshot's complete copy", name)
	}
	for _, p := range strings.Split(strings.TrimPrefix(name, "."), ".") {
		if p == "" || strings.Trim(p, "abcdefghijklmnopqrstuvwxyz234567") != "" {
			return nil, nil, fault.New(fault.InvalidArgument, "%q does not name a snapshot copy", name)
		}
	}
	if err := checkMetaDir(v.meta, snapshotsName, snapshotsDir, v.owner); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fault.New(fault.NotFound, "the share has no snapshots")
		}
		return nil, nil, err
	}
	dir, err := openMetaDir(v.meta, snapshotsName)
	if err != nil {
		return nil, nil, err
	}
	defer dir.Close()
	s, err := readSnapshot(dir, parts[0])
	if err != nil {
		return nil, nil, err
	}
	if s == nil || s.Token != parts[1] {
		return nil, nil, fault.New(fault.NotFound, "no snapshot is recorded for %s", path.Join(snapshotsDir, name))
	}
	fd, err := openAt(dir, name)
	if err != nil {
		return nil, nil, fault.Wrap(fault.FailedPrecondition, err, "snapshot %q: open %s without following symlinks", s.Name, path.Join(snapshotsDir, name))
	}
	return os.NewFile(uintptr(fd), path.Join(snapshotsDir, name)), s, nil
}
