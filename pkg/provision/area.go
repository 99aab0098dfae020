package provision

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sync"
	"syscall"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/pkg/safepath"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// Area is a share's managed directory tree opened for provisioning: the
// share root and its metadata area. The metadata directories are checked
// once, when the Area is opened, and kept open: records, parent markers and
// the trash are reached through those handles, never again by path, so
// nothing put at their names later (a symlink to a tenant's directory, say)
// is ever used. Create it with OpenArea; it is safe for concurrent use.
type Area struct {
	root    *os.Root
	meta    *os.Root // .nfsdir
	volumes *os.Root // .nfsdir/volumes
	parents *os.Root // .nfsdir/parents
	trash   *os.Root // .nfsdir/trash
	nodes   *os.Root // .nfsdir/nodes: the node plugins' claims (pkg/publock)
	// rootFile and trashFile are root and trash held open as files, for the
	// *at calls os.Root has no method for (rename between directories,
	// rmdir, file handles): opening "." for each costs six system calls,
	// and on an NFS mount's root a GETATTR (see atDir).
	rootFile, trashFile *os.File
	volumesFile         *os.File // volumes held open, for records (recordDir)
	owner               uint32   // the uid the server gives files nfsdir creates

	umu       sync.Mutex
	usage     *os.Root // .nfsdir/usage, once opened (Figures.dir)
	snapshots *os.Root // .nfsdir/snapshots, once opened (Snapshots.dir)
	pending   *os.Root // .nfsdir/pending, once opened (Pending.dir)
	gids      *os.Root // .nfsdir/gids, once opened (GIDs.dir)

	agents   Agents // the agents on the share's server (Agents)
	onServer bool   // opened on the server's own file system (OnServer)
	// freshLookups: on a mount that asks the server for every name
	// (FreshLookups).
	freshLookups bool

	dirs knownDirs // the directories of volumes, by record key
}

// maxKnownDirs bounds what knownDirs remembers: about 100 bytes each.
const maxKnownDirs = 1 << 16

// knownDirs remembers the directories of exclusive volumes by their
// record keys, at most maxKnownDirs of them.
type knownDirs struct {
	mu   sync.Mutex
	dirs map[string]string
}

// learn remembers the directory of the exclusive volume rec, just read
// from or written to the share, by its record key. Not for a volume that
// names an agent: its DeleteVolume asks the agent first, and reads the
// record again after that call, so look-ups made with the first read
// would be wasted.
func (k *knownDirs) learn(rec *Record) {
	if rec == nil || rec.Shared || rec.SharedDir || rec.SubDir == "" || rec.QuotaAgent != "" || rec.CopyAgent != "" {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dirs == nil {
		k.dirs = map[string]string{}
	}
	if _, ok := k.dirs[rec.Key()]; !ok && len(k.dirs) >= maxKnownDirs {
		for key := range k.dirs { // any one: the map's order is random
			delete(k.dirs, key)
			break
		}
	}
	k.dirs[rec.Key()] = rec.SubDir
}

// known returns the directory of the exclusive volume whose record key is
// key, when it was learnt. An exclusive volume's key is derived from its
// directory alone (volumeid.KeyForDir), so every record under key, of any
// token, names that directory: the answer is checked against the key and
// never stale.
func (k *knownDirs) known(key string) (string, bool) {
	k.mu.Lock()
	subDir, ok := k.dirs[key]
	k.mu.Unlock()
	if !ok || volumeid.KeyForDir(subDir) != key {
		return "", false
	}
	return subDir, true
}

// ErrNoArea is returned by OpenArea without create when the share has no
// metadata area, or one without its records directory: nfsdir never
// created a volume there.
var ErrNoArea = errors.New("the share has no nfsdir metadata area")

// metaDirs are the directories of the metadata area below MetaDir.
var metaDirs = []string{"volumes", "parents", "trash", "nodes"}

// OpenArea opens the metadata area below root, creating it when missing if
// create is set; otherwise a missing area is ErrNoArea, and nothing is
// written to the share. root stays owned by the caller and must outlive
// the Area.
//
// Each metadata directory must be a real directory (not a symlink), owned
// by the user nfsdir's own files get on this share (root, or the squashed
// user on a root_squash export) and writable by nobody else; anything else
// is FailedPrecondition naming the path, and the share is not used. Anyone
// who can write the share root could otherwise have nfsdir move volumes
// into, and purge, a directory of their choosing.
func OpenArea(root *os.Root, create bool) (_ *Area, err error) {
	if create {
		if err := mkdirMeta(root, safepath.MetaDir, safepath.MetaDir); err != nil {
			return nil, err
		}
	}
	meta, err := openMetaDir(root, safepath.MetaDir)
	if errors.Is(err, fs.ErrNotExist) && !create {
		return nil, ErrNoArea
	}
	if err != nil {
		return nil, err
	}
	a := &Area{root: root, meta: meta}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	owner, err := ownUID(meta)
	if err != nil {
		return nil, err
	}
	a.owner = owner
	if err := checkMetaDir(meta, ".", safepath.MetaDir, owner); err != nil {
		return nil, err
	}
	handles := []**os.Root{&a.volumes, &a.parents, &a.trash, &a.nodes}
	for i, name := range metaDirs {
		full := path.Join(safepath.MetaDir, name)
		if !create && i == 0 {
			// No records directory: nfsdir recorded nothing here (an
			// admin's file in .nfsdir, or a half-made area).
			if _, err := meta.Lstat(name); errors.Is(err, fs.ErrNotExist) {
				return nil, ErrNoArea
			}
		}
		// With records, the area is nfsdir's: a missing parents, trash
		// or nodes directory is completed even without create.
		if create || i > 0 {
			if err := mkdirMeta(meta, name, full); err != nil {
				return nil, err
			}
		}
		if err := checkMetaDir(meta, name, full, owner); err != nil {
			return nil, err
		}
		if *handles[i], err = openMetaDir(meta, name); err != nil {
			return nil, err
		}
	}
	if a.rootFile, err = root.Open("."); err != nil {
		return nil, onShare(err, "open the share root")
	}
	if a.trashFile, err = a.trash.Open("."); err != nil {
		return nil, onShare(err, "open %s", trashDir)
	}
	if a.volumesFile, err = a.volumes.Open("."); err != nil {
		return nil, onShare(err, "open %s/volumes", safepath.MetaDir)
	}
	return a, nil
}

// records is the records directory, with its descriptor held open.
func (a *Area) records() recordDir { return recordDir{a.volumes, a.volumesFile} }

// atDir runs fn with a descriptor of r's directory: the one held open
// for the share root and the trash, or one opened for the call. A held
// descriptor is referenced while fn runs (SyscallConn), so closing the
// Area meanwhile never lets fn act on a descriptor number reused for
// another file.
func (a *Area) atDir(r *os.Root, fn func(fd int) error) error {
	var held *os.File
	switch r {
	case a.root:
		held = a.rootFile
	case a.trash:
		held = a.trashFile
	}
	if held == nil {
		d, err := r.Open(".")
		if err != nil {
			return err
		}
		defer d.Close()
		return fn(int(d.Fd()))
	}
	return withHeld(held, fn)
}

// withHeld runs fn with the descriptor of f, a directory held open,
// referenced while fn runs (SyscallConn): closing f meanwhile never lets
// fn act on a descriptor number reused for another file.
func withHeld(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return fmt.Errorf("%w: %v", os.ErrClosed, err)
	}
	return ferr
}

// mkdirMeta creates the metadata directory name below parent unless
// something exists there (which the checks then judge).
func mkdirMeta(parent *os.Root, name, full string) error {
	if err := parent.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return onShare(err, "create nfsdir's metadata area %s", full)
	}
	return nil
}

// openMetaDir opens the directory name below parent as a Root and checks
// that what it opened is what Lstat saw at that name: a real directory,
// not a symlink swapped in between.
func openMetaDir(parent *os.Root, name string) (*os.Root, error) {
	st, err := parent.Lstat(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, onShare(err, "check %s", name)
	}
	if !st.IsDir() {
		return nil, notOurs(name, fmt.Sprintf("it is a %s, not a directory", typeName(st.Mode())))
	}
	r, err := parent.OpenRoot(name)
	if err != nil {
		return nil, onShare(err, "open %s", name)
	}
	got, err := r.Lstat(".")
	if err != nil || !os.SameFile(st, got) {
		r.Close()
		return nil, notOurs(name, "it was replaced while nfsdir opened it")
	}
	return r, nil
}

// checkMetaDir checks the owner and mode of the metadata directory name
// below meta (full: its path on the share, for messages).
func checkMetaDir(meta *os.Root, name, full string, owner uint32) error {
	st, err := meta.Lstat(name)
	if err != nil {
		return onShare(err, "check %s", full)
	}
	if !st.IsDir() {
		return notOurs(full, fmt.Sprintf("it is a %s, not a directory", typeName(st.Mode())))
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("check %s: no owner information", full)
	}
	if sys.Uid != owner {
		return notOurs(full, fmt.Sprintf("it is owned by uid %d, while nfsdir's files on this share get uid %d", sys.Uid, owner))
	}
	if st.Mode().Perm()&0o022 != 0 {
		return notOurs(full, fmt.Sprintf("its mode %04o lets others than its owner write it", st.Mode().Perm()))
	}
	return nil
}

func notOurs(p, why string) error {
	return fault.New(fault.FailedPrecondition, "nfsdir's metadata directory %s on the share is not as nfsdir made it: %s. nfsdir will not use this share until it is a directory of mode 0700 owned by the user nfsdir writes as, with nothing else able to write it (check who changed it: whoever can write the share root can replace it)", p, why)
}

func typeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m.IsRegular():
		return "regular file"
	default:
		return m.Type().String()
	}
}

// ownUID returns the owner the server gives files nfsdir creates on this
// share: root, or the user a root_squash export maps root to. It writes
// and removes a probe symlink in the metadata directory.
func ownUID(meta *os.Root) (uint32, error) {
	name := ".owner-" + volumeid.NewToken()
	if err := meta.Symlink("probe", name); err != nil {
		return 0, onShare(err, "write a probe in %s", safepath.MetaDir)
	}
	defer meta.Remove(name)
	st, err := meta.Lstat(name)
	if err != nil {
		return 0, onShare(err, "check a probe in %s", safepath.MetaDir)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("check a probe in %s: no owner information", safepath.MetaDir)
	}
	return sys.Uid, nil
}

// Close releases the Area's own handles (not the share root).
func (a *Area) Close() error {
	var errs []error
	a.umu.Lock()
	defer a.umu.Unlock()
	for _, r := range []*os.Root{a.usage, a.snapshots, a.pending, a.gids, a.volumes, a.parents, a.trash, a.nodes, a.meta} {
		if r != nil {
			errs = append(errs, r.Close())
		}
	}
	for _, f := range []*os.File{a.rootFile, a.trashFile, a.volumesFile} {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	return errors.Join(errs...)
}

// IsStale reports whether err means the Area's handles went stale (the
// server re-exported, or the metadata area was removed behind nfsdir's back)
// and the Area must be opened again.
func IsStale(err error) bool {
	return nfsmount.IsStale(err) || errors.Is(err, os.ErrClosed)
}
