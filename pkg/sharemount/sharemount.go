// Package sharemount keeps the controller's NFS shares mounted: one mount per
// export and option set under the state directory, reused by every call,
// health-checked with a bounded probe and mounted again when stale. It hands
// out an *os.Root of the share so that all work below it stays inside it.
package sharemount

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
)

// checkEvery is how long a successful health check is trusted.
const checkEvery = 5 * time.Second

// probeTimeout bounds one health check of a kept mount.
const probeTimeout = 10 * time.Second

// Share is a mounted export.
type Share struct {
	Export  export.Export
	Options mountopts.Options
	Path    string // mount point

	key     string // of the Manager's entry
	root    *os.Root
	checked time.Time
}

// Root returns the share opened as an *os.Root: paths resolved through it
// cannot leave the share, whatever symlinks it holds.
func (s *Share) Root() *os.Root { return s.root }

// Mounted returns the mount table entry of share's mount (the options the
// kernel lists for it), from the mount table only.
func (m *Manager) Mounted(share *Share) (*nfsmount.Entry, error) {
	return m.mounter.Mounted(share.Path)
}

// Manager owns the kept mounts. It is safe for concurrent use.
type Manager struct {
	dir          string
	mounter      nfsmount.Mounter
	mountTimeout time.Duration

	mu      sync.Mutex
	entries map[string]*entry
}

type entry struct {
	sem   chan struct{} // 1-slot lock that honours contexts
	share *Share
	point MountPoint // set when the entry is made, never changed
}

// New returns a Manager keeping mounts under dir/mounts, option records
// under dir/options and the list of exports it has mounted under dir/known.
func New(dir string, m nfsmount.Mounter, mountTimeout time.Duration) (*Manager, error) {
	for _, d := range []string{"mounts", "options", "known"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("state directory: %w", err)
		}
	}
	return &Manager{dir: dir, mounter: m, mountTimeout: mountTimeout, entries: map[string]*entry{}}, nil
}

// Key returns the name of the mount point for an export and option set.
func Key(e export.Export, opts mountopts.Options) string {
	sum := sha256.Sum256([]byte(e.String() + "\x00" + opts.Canonical()))
	return hex.EncodeToString(sum[:])[:16]
}

// Get returns the mounted share, mounting it or mounting it again when its
// mount went stale. The mount resolves every name with the server
// (lookupcache=none): nfsdir renames and removes by name what other
// controllers may change. Errors: Unavailable when the server does not
// answer, DeadlineExceeded when mounting took longer than the mount timeout.
func (m *Manager) Get(ctx context.Context, e export.Export, opts mountopts.Options) (*Share, error) {
	return m.get(ctx, e, opts, mainMount)
}

// GetReadOnly returns a read-only mount of the share, for a node plugin
// that reads volume records and usage figures and never writes.
func (m *Manager) GetReadOnly(ctx context.Context, e export.Export, opts mountopts.Options) (*Share, error) {
	return m.get(ctx, e, opts, viewMount)
}

// GetForPurge returns a second mount of the share, with the client's name
// cache on, for the background purge: it removes what only it touches
// (trash entries already proven to be deleted volumes), and a lookup per
// entry would make it twice as slow.
func (m *Manager) GetForPurge(ctx context.Context, e export.Export, opts mountopts.Options) (*Share, error) {
	return m.get(ctx, e, opts, purgeMount)
}

// GetClaims returns a read-write mount of the share's claims directory
// alone (.nfsdir/nodes, pkg/publock), for a node plugin: the rest of the
// share stays out of its reach. The directory must exist (the controller
// makes it).
func (m *Manager) GetClaims(ctx context.Context, e export.Export, opts mountopts.Options) (*Share, error) {
	return m.get(ctx, e, opts, claimsMount)
}

// mountKind tells a share's mounts apart; its value ends the mount's key.
type mountKind string

const (
	mainMount   mountKind = ""
	purgeMount  mountKind = "-purge"
	viewMount   mountKind = "-view"
	claimsMount mountKind = "-claims"
)

// use names what a mount of kind is for (MountPoint.Use).
func (k mountKind) use() string {
	if k == mainMount {
		return "main"
	}
	return string(k[1:])
}

// MountPoint is one of a Manager's mount points: the share it mounts and
// what for.
type MountPoint struct {
	Share export.Export // as StorageClasses name it (a claims mount mounts a directory of it)
	Use   string        // "main" (calls, counts, copies), "purge", "view" (a node's reads) or "claims"
}

// MountPoints returns the Manager's mount points by path: every mount it
// made or tried to make since it started (a share's mount is kept, and a
// mount made again after it went stale is made at the same path).
func (m *Manager) MountPoints() map[string]MountPoint {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]MountPoint, len(m.entries))
	for key, en := range m.entries {
		out[filepath.Join(m.dir, "mounts", key)] = en.point
	}
	return out
}

// ClaimsDir is the directory a claims mount mounts, below the share.
const ClaimsDir = ".nfsdir/nodes"

func (m *Manager) get(ctx context.Context, e export.Export, opts mountopts.Options, kind mountKind) (*Share, error) {
	opts = opts.ForShare()
	key := Key(e, opts) + string(kind)
	point := MountPoint{Share: e, Use: kind.use()}
	if kind == claimsMount {
		e = export.Export{Server: e.Server, Share: path.Join(e.Share, ClaimsDir)}
	}
	m.mu.Lock()
	en, ok := m.entries[key]
	if !ok {
		en = &entry{sem: make(chan struct{}, 1), point: point}
		m.entries[key] = en
	}
	m.mu.Unlock()

	select {
	case en.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fault.Wrap(fault.Aborted, ctx.Err(), "waiting for share %s", e)
	}
	defer func() { <-en.sem }()

	if s := en.share; s != nil {
		if time.Since(s.checked) < checkEvery {
			return s, nil
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		_, err := m.mounter.Probe(pctx, s.Path)
		cancel()
		if err == nil {
			s.checked = time.Now()
			return s, nil
		}
		if !nfsmount.IsStale(err) && ctx.Err() == nil && !isDeadline(err) {
			return nil, fault.Wrap(fault.Unavailable, err, "share %s", e)
		}
		klog.Warningf("kept mount of %s at %s is unhealthy (%v); mounting again", e, s.Path, err)
		s.root.Close()
		en.share = nil
		if err := m.mounter.Unmount(ctx, s.Path); err != nil {
			return nil, fault.Wrap(fault.Unavailable, err, "share %s", e)
		}
	}
	s, err := m.mount(ctx, e, opts, key, kind)
	if err != nil {
		return nil, err
	}
	en.share = s
	if kind == mainMount {
		m.remember(key, e, opts)
	}
	return s, nil
}

func isDeadline(err error) bool { return fault.KindOf(err) == fault.DeadlineExceeded }

func (m *Manager) mount(ctx context.Context, e export.Export, opts mountopts.Options, key string, kind mountKind) (*Share, error) {
	mp := filepath.Join(m.dir, "mounts", key)
	if err := os.MkdirAll(mp, 0o700); err != nil {
		return nil, fault.Wrap(fault.Internal, err, "state directory")
	}
	cur, err := m.mounter.Mounted(mp)
	if err != nil {
		return nil, err
	}
	if cur != nil && cur.Source != e.String() {
		klog.Warningf("%q holds %q, not %q; unmounting it", mp, cur.Source, e.String())
		if err := m.mounter.Unmount(ctx, mp); err != nil {
			return nil, fault.Wrap(fault.Unavailable, err, "share %s", e)
		}
		cur = nil
	}
	if cur == nil {
		mctx, cancel := context.WithTimeout(ctx, m.mountTimeout)
		mopts := opts.WithFreshLookups()
		switch kind {
		case purgeMount:
			mopts = opts
		case viewMount:
			mopts = mopts.WithReadOnly(true)
		}
		// Only the claims need locks (pkg/publock); on NFSv3 the other
		// mounts go without lockd (mountopts.WithoutLockd).
		if kind != claimsMount {
			mopts = mopts.WithoutLockd()
		}
		err := m.mounter.Mount(mctx, e.String(), mp, mopts)
		cancel()
		if err != nil {
			if isDeadline(err) {
				return nil, fault.Wrap(fault.DeadlineExceeded, err, "mounting share %s", e)
			}
			// A refused option (InvalidArgument), refused access
			// (PermissionDenied) or a missing daemon or security
			// (FailedPrecondition) is the operator's to fix and
			// retrying will not help; anything else may be the server's.
			kind := fault.KindOf(err)
			if kind != fault.InvalidArgument && kind != fault.PermissionDenied && kind != fault.FailedPrecondition {
				kind = fault.Unavailable
			}
			return nil, fault.Wrap(kind, err, "mounting share %s (check server, share and mountOptions)", e)
		}
	}
	root, err := os.OpenRoot(mp)
	if err != nil {
		return nil, fault.Wrap(fault.Unavailable, err, "opening share %s", e)
	}
	return &Share{Export: e, Options: opts, Path: mp, key: key, root: root, checked: time.Now()}, nil
}

// known is what the state directory keeps about an export nfsdir mounted,
// so that a restarted controller can resume work on it (purges).
type known struct {
	Server  string `json:"server"`
	Share   string `json:"share"`
	Options string `json:"options"`
}

func (m *Manager) remember(key string, e export.Export, opts mountopts.Options) {
	p := filepath.Join(m.dir, "known", key)
	if _, err := os.Stat(p); err == nil {
		return
	}
	b, _ := json.Marshal(known{Server: e.Server, Share: e.Share, Options: opts.String()})
	if err := os.WriteFile(p+".tmp", b, 0o600); err == nil {
		_ = os.Rename(p+".tmp", p)
	}
}

// Known returns the exports and options this state directory has mounted
// before, e.g. by a controller that has since restarted.
func (m *Manager) Known() ([]export.Export, []mountopts.Options) {
	ents, _ := os.ReadDir(filepath.Join(m.dir, "known"))
	var exps []export.Export
	var opts []mountopts.Options
	for _, en := range ents {
		b, err := os.ReadFile(filepath.Join(m.dir, "known", en.Name()))
		if err != nil {
			continue
		}
		var k known
		if json.Unmarshal(b, &k) != nil {
			continue
		}
		e, err := export.New(k.Server, k.Share)
		o, oerr := mountopts.Parse(k.Options)
		if err != nil || oerr != nil {
			klog.Warningf("state directory: ignoring %q: %v %v", en.Name(), err, oerr)
			continue
		}
		exps, opts = append(exps, e), append(opts, o)
	}
	return exps, opts
}

// Invalidate makes the next Get of share check its health at once instead
// of trusting the last check; call it when an operation on the share failed
// with a stale handle.
func (m *Manager) Invalidate(share *Share) {
	m.mu.Lock()
	en := m.entries[share.key]
	m.mu.Unlock()
	if en == nil {
		return
	}
	en.sem <- struct{}{}
	if en.share == share {
		share.checked = time.Time{}
	}
	<-en.sem
}

// Count returns how many share mounts are kept.
func (m *Manager) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, en := range m.entries {
		if en.share != nil {
			n++
		}
	}
	return n
}

// Usable reports whether the state directory can be written; Probe uses it.
func (m *Manager) Usable() error {
	f, err := os.CreateTemp(m.dir, ".probe-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// Close unmounts every kept share, all at once and each bounded by ctx, so
// that a share whose server does not answer delays no other.
func (m *Manager) Close(ctx context.Context) {
	m.mu.Lock()
	entries := m.entries
	m.entries = map[string]*entry{}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, en := range entries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select { // wait for a Get in progress on the share
			case en.sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			if s := en.share; s != nil {
				s.root.Close()
				if err := m.mounter.Unmount(ctx, s.Path); err != nil {
					klog.Warningf("unmount %s: %v", s.Path, err)
				}
			}
		}()
	}
	wg.Wait()
}

// RememberOptions stores the mount options whose digest a volume ID carries
// instead of the options themselves.
func (m *Manager) RememberOptions(digest string, opts mountopts.Options) error {
	p := filepath.Join(m.dir, "options", digest)
	text := opts.String()
	if b, err := os.ReadFile(p); err == nil && string(b) == text {
		return nil // known already: listings rebuild many IDs
	}
	// A name of its own per call: concurrent calls for one digest
	// (creates, listings) must not rename each other's file away.
	f, err := os.CreateTemp(filepath.Dir(p), digest+".tmp.*")
	if err != nil {
		return err
	}
	_, werr := f.WriteString(text)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), p); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}

// LookupOptions returns the options stored for digest. The error is
// FailedPrecondition when they are unknown here.
func (m *Manager) LookupOptions(digest string) (mountopts.Options, error) {
	b, err := os.ReadFile(filepath.Join(m.dir, "options", filepath.Base(digest)))
	if err != nil {
		return nil, fault.Wrap(fault.FailedPrecondition, err,
			"the volume ID refers to mount options %s that this controller's state directory does not hold", digest)
	}
	return mountopts.Parse(string(b))
}

// Usage returns the share's filesystem usage, bounded by the probe timeout.
func (m *Manager) Usage(ctx context.Context, s *Share) (nfsmount.Usage, error) {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	u, err := m.mounter.Probe(pctx, s.Path)
	if err != nil {
		return u, fault.Wrap(fault.Unavailable, err, "share %s", s.Export)
	}
	return u, nil
}
