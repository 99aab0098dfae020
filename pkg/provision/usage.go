package provision

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/capacity"
	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/safepath"
	"github.com/nfsdir/nfsdir/pkg/usage"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// Usage figures live beside the records:
//
//	.nfsdir/usage/<key>   the capacity.Figure of the directory of the
//	                      record <key> (a shared directory's for the
//	                      volumes that share it), as a symlink's target
//
// The directory is made by the first count on a share, so shares made by
// an older nfsdir get it without a migration. A figure carries its
// record's token: one left by an earlier volume of the same directory is
// never used, and the accountant removes figures whose record is gone.
const usageName = "usage"

// figureKey returns the key of the figure that stands for rec.
func figureKey(rec *Record) string {
	if rec.Shared {
		return volumeid.KeyForSharedDir(rec.SubDir)
	}
	return rec.Key()
}

// Figures is the room of an Area that keeps the usage figures of its
// share's volumes in .nfsdir/usage: counts, their storage, and the health
// they and the records tell.
type Figures struct{ a *Area }

// Figures returns the area's usage figures.
func (a *Area) Figures() Figures { return Figures{a} }

// dir returns the store of figures in the usage directory, opening the
// directory (and with create, making it) the first time.
func (fg Figures) dir(create bool) (usage.Figures, error) {
	r, err := fg.a.lazyMetaDir(usageName, &fg.a.usage, create)
	return figuresIn(r), err
}

// figuresIn is the store of figures in the usage directory open as r.
func figuresIn(r *os.Root) usage.Figures {
	return usage.Figures{Dir: r, Name: path.Join(safepath.MetaDir, usageName)}
}

// lazyMetaDir returns the metadata directory name kept in *slot, opening
// it (and with create, making it) the first time, with the checks every
// metadata directory gets (checkMetaDir): directories added after format 1
// began (usage, snapshots) come into being on first use, so older shares
// need no migration.
func (a *Area) lazyMetaDir(name string, slot **os.Root, create bool) (*os.Root, error) {
	a.umu.Lock()
	defer a.umu.Unlock()
	if *slot != nil {
		return *slot, nil
	}
	full := path.Join(safepath.MetaDir, name)
	if create {
		if err := mkdirMeta(a.meta, name, full); err != nil {
			return nil, err
		}
	}
	if err := checkMetaDir(a.meta, name, full, a.owner); err != nil {
		return nil, err
	}
	r, err := openMetaDir(a.meta, name)
	if err != nil {
		return nil, err
	}
	*slot = r
	return r, nil
}

// Inventory is the room of an Area that lists its share's records, for
// background work and paged listings, and settles the removals cut short
// that it finds.
type Inventory struct{ a *Area }

// Inventory returns the area's inventory.
func (a *Area) Inventory() Inventory { return Inventory{a} }

// Keys returns the keys of every record on the share (volumes and
// shared directories), sorted. It lists the whole records directory: for
// background work and paged listings, never on a volume's request path.
func (in Inventory) Keys() ([]string, error) {
	keys, _, err := in.Names()
	return keys, err
}

// Names lists the records directory: the keys of the records
// (sorted), and the names of records a removal took aside (key.del.token).
func (in Inventory) Names() (keys, removals []string, err error) {
	names, err := listNames(in.a.volumes)
	if err != nil {
		return nil, nil, onShare(err, "list %s", volumesDir)
	}
	for _, n := range names {
		switch {
		case strings.Contains(n, asideSuffix):
			removals = append(removals, n)
		case !strings.Contains(n, "."): // not a record taken aside or being rewritten
			keys = append(keys, n)
		}
	}
	slices.Sort(keys)
	return keys, removals, nil
}

// SettleRemovals finishes the record removals among names (from
// Names) that were interrupted at least grace ago. A removal takes
// the record aside, checks it is the one it meant, then removes it; a
// controller stopped in between, or a share remounted under it, leaves
// the aside behind, and when no call retries that removal (a creation that
// dropped its own record), nothing else would. Each is settled as the
// removal would have: removed if it carries the token its name says, put
// back otherwise. It returns how many it settled.
func (in Inventory) SettleRemovals(names []string, grace time.Duration) int {
	settled := 0
	for _, name := range names {
		key, token, ok := strings.Cut(name, asideSuffix)
		if !ok {
			continue
		}
		st, err := in.a.volumes.Lstat(name)
		if err != nil {
			continue
		}
		// A rename sets the link's ctime: the time it was taken aside.
		if sys, ok := st.Sys().(*syscall.Stat_t); !ok || time.Since(time.Unix(sys.Ctim.Unix())) < grace {
			continue
		}
		if err := settleAside(in.a.records(), key, name, token); err != nil {
			klog.Warningf("settling %s: %v", path.Join(volumesDir, name), err)
			continue
		}
		klog.Infof("settled %s, the record of an interrupted removal", path.Join(volumesDir, name))
		settled++
	}
	return settled
}

// metaNames opens (without making it) the metadata directory open gives,
// named what in errors, and lists it; nil and no names when the share
// never had one.
func metaNames(open func(create bool) (*os.Root, error), what string) (*os.Root, []string, error) {
	dir, err := open(false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	names, err := listNames(dir)
	if err != nil {
		return nil, nil, onShare(err, "list %s", what)
	}
	return dir, names, nil
}

func listNames(r *os.Root) ([]string, error) {
	d, err := r.Open(".")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

// Record returns the record stored under key, or nil.
func (in Inventory) Record(key string) (*Record, error) {
	rec, err := readRecord(in.a.records(), key)
	in.a.dirs.learn(rec)
	return rec, err
}

// store replaces the figure under key.
func (fg Figures) store(key string, fig capacity.Figure) error {
	dir, err := fg.dir(true)
	if err != nil {
		return err
	}
	if err := dir.Store(key, fig); err != nil {
		return onShare(err, "usage of record %s", key)
	}
	return nil
}

// Of returns the stored figure of rec's directory; ok is false when
// none was counted yet for this volume.
func (fg Figures) Of(rec *Record) (fig capacity.Figure, ok bool, err error) {
	dir, err := fg.dir(false)
	if errors.Is(err, fs.ErrNotExist) {
		return fig, false, nil
	}
	if err != nil {
		return fig, false, err
	}
	return readFigure(fg.a.records(), dir, rec)
}

// readFigure reads the figure standing for rec from the usage directory,
// and checks it is one counted for rec's directory (or, for a shared
// volume, for its shared directory as recorded now).
func readFigure(volumes recordDir, dir usage.Figures, rec *Record) (fig capacity.Figure, ok bool, err error) {
	key, token := figureKey(rec), rec.Token
	if rec.Shared {
		sd, err := readRecord(volumes, key)
		if err != nil || sd == nil {
			return fig, false, err
		}
		token = sd.Token
	}
	fig, ok, err = dir.Read(key, token)
	if err != nil {
		return fig, false, onShare(err, "usage of %q", rec.SubDir)
	}
	return fig, ok, nil
}

// Drop removes the figures, and temporary figures older than a
// minute, whose key holds no record among keys (sorted): left by deleted
// volumes, or by a count interrupted midway.
func (fg Figures) Drop(keys []string) {
	if dir, err := fg.dir(false); err == nil {
		dir.DropStale(keys)
	}
}

// absent reports whether no usage figure is stored under key (nor
// a usage directory to hold one): dropFigure would find nothing to drop.
func (fg Figures) absent(key string) bool {
	dir, err := fg.dir(false)
	return err != nil || !dir.Has(key)
}

// drop removes the figure of the deleted volume (key, token), and
// not one counted since for a later volume of the same directory.
func (fg Figures) drop(key, token string) {
	if dir, err := fg.dir(false); err == nil {
		dir.Drop(key, token)
	}
}

// View reads the records and figures of a share and writes nothing: for
// a node plugin, on a read-only mount of the share. It opens the metadata
// directories only if they are real directories owned by one user and
// writable by no other, as an Area does (it cannot probe which user that
// should be without writing).
type View struct {
	root                 *os.Root // the share root, the caller's
	meta, volumes, usage *os.Root // usage nil: no figure counted yet
	owner                uint32   // the metadata area's owner
}

// OpenView opens the metadata area below root for reading; a share
// without one is ErrNoArea. root stays the caller's and must outlive the
// View.
func OpenView(root *os.Root) (_ *View, err error) {
	meta, err := openMetaDir(root, safepath.MetaDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoArea
	}
	if err != nil {
		return nil, err
	}
	v := &View{root: root, meta: meta}
	defer func() {
		if err != nil {
			v.Close()
		}
	}()
	st, err := meta.Lstat(".")
	if err != nil {
		return nil, onShare(err, "check %s", safepath.MetaDir)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, fmt.Errorf("check %s: no owner information", safepath.MetaDir)
	}
	if err := checkMetaDir(meta, ".", safepath.MetaDir, sys.Uid); err != nil {
		return nil, err
	}
	v.owner = sys.Uid
	for _, d := range []struct {
		name string
		r    **os.Root
	}{{"volumes", &v.volumes}, {usageName, &v.usage}} {
		full := path.Join(safepath.MetaDir, d.name)
		if err := checkMetaDir(meta, d.name, full, sys.Uid); err != nil {
			if d.name == usageName && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, err
		}
		if *d.r, err = openMetaDir(meta, d.name); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// Volume returns the record of a volume ID, or nil when it does not
// exist. A record held aside by an expansion in progress is read there.
func (v *View) Volume(id volumeid.ID) (*Record, error) {
	rec, err := readRecord(recordDir{Root: v.volumes}, id.Key)
	if err == nil && rec == nil {
		rec, err = readAside(recordDir{Root: v.volumes}, id.Key, id.Key+updateSuffix+id.Token)
	}
	if err != nil || rec == nil || rec.Token != id.Token || rec.SharedDir {
		return nil, err
	}
	return rec, nil
}

// Figure returns the figure of rec; ok is false when none was counted yet.
func (v *View) Figure(rec *Record) (capacity.Figure, bool, error) {
	if v.usage == nil {
		return capacity.Figure{}, false, nil
	}
	return readFigure(recordDir{Root: v.volumes}, figuresIn(v.usage), rec)
}

// Close releases the View's handles.
func (v *View) Close() {
	for _, r := range []*os.Root{v.usage, v.volumes, v.meta} {
		if r != nil {
			r.Close()
		}
	}
}

// Problem is something wrong with a volume, as the controller sees it on
// the share.
type Problem struct {
	Reason  string // DirectoryMissing, DirectoryReplaced or OverCapacity
	Message string
	// Lost says the volume's data is not where the volume is (the
	// directory is gone or another one is at its path), as opposed to a
	// volume that works but needs attention.
	Lost bool
}

// Health checks rec's volume: its directory is there and is the one
// nfsdir recorded, and its last count is within its capacity. It costs a
// lookup, a file handle and a figure read.
func (fg Figures) Health(rec *Record) ([]Problem, error) {
	var out []Problem
	st, err := fg.a.seals().freshLstat(rec.SubDir)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		// ENOTDIR: a parent on the way is no longer a directory.
		return append(out, Problem{Reason: "DirectoryMissing", Lost: true,
			Message: fmt.Sprintf("directory %q of %s is gone from the share", rec.SubDir, rec.describe())}), nil
	case err != nil:
		return nil, onShare(err, "check %q", rec.SubDir)
	case rec.FileID != 0:
		if err := fg.a.seals().checkSealed(rec, st); err != nil {
			out = append(out, Problem{Reason: "DirectoryReplaced", Lost: true, Message: err.Error()})
		}
	}
	fig, ok, err := fg.Of(rec)
	if err != nil {
		return nil, err
	}
	if ok && rec.CapacityBytes > 0 && fig.Bytes > rec.CapacityBytes {
		out = append(out, Problem{Reason: "OverCapacity", Message: capacity.Report(rec.CapacityBytes, fig, capacity.Space{}).Over})
	}
	return out, nil
}

// OpenVolumeDir opens, without following any symlink, the directory of
// the exclusive volume whose directory is subDir and whose creation token
// is token, and returns it with its record: only a directory nfsdir
// recorded (made or adopted), still the one it sealed (same inode), is
// given. The quota agent acts on nothing else. A missing or other record
// is NotFound; a shared volume, an unsealed or replaced directory is
// FailedPrecondition. It writes nothing to the share, so the agent
// needs no right to.
func (v *View) OpenVolumeDir(subDir, token string) (*os.File, *Record, error) {
	if err := safepath.CheckVolumePath(subDir); err != nil {
		return nil, nil, fault.New(fault.InvalidArgument, "subDir %v", err)
	}
	rec, err := readRecord(recordDir{Root: v.volumes}, volumeid.KeyForDir(subDir))
	if err != nil {
		return nil, nil, err
	}
	if rec == nil || rec.SubDir != subDir || rec.Token != token || rec.SharedDir {
		return nil, nil, fault.New(fault.NotFound, "no nfsdir volume with directory %q and that token is recorded", subDir)
	}
	if rec.FileID == 0 {
		return nil, nil, fault.New(fault.FailedPrecondition, "volume %q: its directory %q is not sealed yet", rec.Name, subDir)
	}
	rootDir, err := v.root.Open(".")
	if err != nil {
		return nil, nil, err
	}
	defer rootDir.Close()
	fd, err := unix.Openat2(int(rootDir.Fd()), subDir, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV})
	if err != nil {
		return nil, nil, fault.Wrap(fault.FailedPrecondition, err, "volume %q: open %q without following symlinks", rec.Name, subDir)
	}
	f := os.NewFile(uintptr(fd), subDir)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Ino != rec.FileID {
		f.Close()
		return nil, nil, fault.New(fault.FailedPrecondition, "volume %q: %q is not the directory nfsdir recorded (inode %d, recorded %d)", rec.Name, subDir, st.Ino, rec.FileID)
	}
	return f, rec, nil
}
