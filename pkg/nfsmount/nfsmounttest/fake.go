// Package nfsmounttest provides a Mounter for tests on machines without NFS:
// an NFS source "server:/path" is served from a local directory
// <Base>/<server>/<path>, and "mounting" replaces the target directory with
// a symlink to it. It keeps a mount table and a log of actions.
package nfsmounttest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nfsdir/nfsdir/pkg/nfsmount"
)

// Fake is a stateful fake Mounter, safe for concurrent use.
type Fake struct {
	Base string // directory holding <server>/<share> trees

	mu      sync.Mutex
	table   map[string]nfsmount.Entry
	actions []string
	// MountErr, when set, is returned by Mount for any source it holds.
	MountErr map[string]error
	// MountDelay, when set, is how long Mount waits (without holding the
	// fake's lock) before it mounts.
	MountDelay time.Duration
	// ShareCache makes mounts of one server share what the Linux client
	// shares between them unless a mount asks for nosharecache: a later
	// mount gets the timeo, retrans (its superblock's) and nconnect (its
	// client's) of the first mount of the server that set them.
	ShareCache bool
	devices    int
	space      map[string]spaceAnswer // source -> Probe's answer
}

var _ nfsmount.Mounter = (*Fake)(nil)

// New returns a fake serving exports from base.
func New(base string) *Fake {
	return &Fake{Base: base, table: map[string]nfsmount.Entry{}, MountErr: map[string]error{}}
}

// ExportDir returns the local directory that serves server:share.
func (f *Fake) ExportDir(server, share string) string {
	return filepath.Join(f.Base, strings.Trim(server, "[]"), share)
}

func (f *Fake) local(source string) (string, error) {
	i := strings.LastIndex(source, ":/")
	if i < 0 {
		return "", fmt.Errorf("bad NFS source %q", source)
	}
	return f.ExportDir(source[:i], source[i+1:]), nil
}

// Mount links target to the local directory of source.
func (f *Fake) Mount(ctx context.Context, source, target string, options []string) error {
	if f.MountDelay > 0 {
		select {
		case <-time.After(f.MountDelay):
		case <-ctx.Done():
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.actions = append(f.actions, "mount "+source+" "+target+" "+strings.Join(options, ","))
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := f.MountErr[source]; err != nil {
		return err
	}
	if _, ok := f.table[filepath.Clean(target)]; ok {
		return fmt.Errorf("fake: %s is already mounted", target)
	}
	dir, err := f.local(source)
	if err != nil {
		return err
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("mount.nfs: access denied by server while mounting %s", source)
	}
	if err := os.Remove(target); err != nil {
		return fmt.Errorf("fake: target %s: %w", target, err)
	}
	if err := os.Symlink(dir, target); err != nil {
		return err
	}
	e := nfsmount.Entry{Source: source, FsType: "nfs4", Options: options}
	if f.ShareCache && !slices.Contains(options, "nosharecache") {
		host := source[:strings.LastIndex(source, ":/")]
		var mounts []nfsmount.Entry // host's, earliest (lowest device) first
		for _, other := range f.table {
			if strings.HasPrefix(other.Source, host+":/") && !slices.Contains(other.Options, "nosharecache") {
				mounts = append(mounts, other)
			}
		}
		slices.SortFunc(mounts, func(a, b nfsmount.Entry) int { return deviceNumber(a.Device) - deviceNumber(b.Device) })
		for i := len(mounts) - 1; i >= 0; i-- {
			e.Options = inherit(e.Options, mounts[i].Options, "timeo", "retrans", "nconnect")
		}
		if len(mounts) > 0 {
			e.Device = mounts[0].Device
		}
	}
	if e.Device == "" {
		f.devices++
		e.Device = fmt.Sprintf("0:%d", 100+f.devices)
	}
	f.table[filepath.Clean(target)] = e
	return nil
}

// inherit is options with the values of keys that first has taken from
// first.
func inherit(options, first []string, keys ...string) []string {
	had := map[string]string{}
	for _, o := range first {
		if k, _, _ := strings.Cut(o, "="); slices.Contains(keys, k) {
			had[k] = o
		}
	}
	var out []string
	for _, o := range options {
		if k, _, _ := strings.Cut(o, "="); had[k] == "" {
			out = append(out, o)
		}
	}
	for _, k := range keys {
		if had[k] != "" {
			out = append(out, had[k])
		}
	}
	return out
}

func deviceNumber(dev string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(dev, "0:"))
	return n
}

// Bind links target to what from resolves to. from must lie in a fake
// mount; the bind is listed as the kernel lists an NFS bind: the source
// with from's path below that mount appended, the same device, and the
// mount's options with flags in place of their opposites.
func (f *Fake) Bind(ctx context.Context, from, target string, flags []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.actions = append(f.actions, "bind "+from+" "+target+" "+strings.Join(flags, ","))
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, ok := f.table[filepath.Clean(target)]; ok {
		return fmt.Errorf("fake: %s is already mounted", target)
	}
	var point string
	for mp := range f.table {
		if (from == mp || strings.HasPrefix(from, mp+"/")) && len(mp) > len(point) {
			point = mp
		}
	}
	if point == "" {
		return fmt.Errorf("fake: bind from %s: not in a mount", from)
	}
	dir, err := filepath.EvalSymlinks(from)
	if err != nil {
		return fmt.Errorf("mount: %s: %w", from, err)
	}
	if err := os.Remove(target); err != nil {
		return fmt.Errorf("fake: target %s: %w", target, err)
	}
	if err := os.Symlink(dir, target); err != nil {
		return err
	}
	e := f.table[point]
	// The kernel lists where the bind arrived, symlinks followed.
	local, err := f.local(e.Source)
	if err == nil {
		local, err = filepath.EvalSymlinks(local)
	}
	rel, rerr := filepath.Rel(local, dir)
	switch {
	case err != nil:
		return err
	case rerr != nil || !filepath.IsLocal(rel) && rel != ".":
		e.Source, e.Device = "/dev/fake", "0:1"
	case rel == ".":
	default:
		e.Source = strings.TrimSuffix(e.Source, "/") + "/" + filepath.ToSlash(rel)
	}
	opts := slices.Clone(e.Options)
	for _, fl := range flags {
		opts = slices.DeleteFunc(opts, func(o string) bool { return o == fl || o == opposite[fl] })
		opts = append(opts, fl)
	}
	e.Options = opts
	f.table[filepath.Clean(target)] = e
	return nil
}

var opposite = map[string]string{"ro": "rw", "rw": "ro"}

// Unmount replaces the symlink at target with an empty directory.
func (f *Fake) Unmount(ctx context.Context, target string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.actions = append(f.actions, "unmount "+target)
	if _, ok := f.table[filepath.Clean(target)]; !ok {
		return nil
	}
	if err := os.Remove(target); err != nil {
		return err
	}
	delete(f.table, filepath.Clean(target))
	return os.Mkdir(target, 0o750)
}

// Mounted returns the fake mount table entry at target.
func (f *Fake) Mounted(target string) (*nfsmount.Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.table[filepath.Clean(target)]; ok {
		return &e, nil
	}
	return nil, nil
}

// Table returns a copy of the fake mount table.
func (f *Fake) Table() (map[string]nfsmount.Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]nfsmount.Entry, len(f.table))
	for t, e := range f.table {
		out[t] = e
	}
	return out, nil
}

// Targets lists the fake mount points of source.
func (f *Fake) Targets(source string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for t, e := range f.table {
		if e.Source == source {
			out = append(out, t)
		}
	}
	return out, nil
}

// SetSpace makes Probe of the mounts of source answer u (nil: stat the
// local directory again), or err when set: a full export, one that does
// not answer.
func (f *Fake) SetSpace(source string, u *nfsmount.Usage, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.space == nil {
		f.space = map[string]spaceAnswer{}
	}
	if u == nil && err == nil {
		delete(f.space, source)
		return
	}
	f.space[source] = spaceAnswer{u, err}
}

type spaceAnswer struct {
	u   *nfsmount.Usage
	err error
}

// Probe stats the local directory behind path, unless SetSpace gave the
// answer for the mount's source.
func (f *Fake) Probe(ctx context.Context, path string) (nfsmount.Usage, error) {
	f.mu.Lock()
	e, mounted := f.table[filepath.Clean(path)]
	a, set := f.space[e.Source]
	f.mu.Unlock()
	if mounted && set {
		if a.err != nil {
			return nfsmount.Usage{}, a.err
		}
		return *a.u, nil
	}
	return nfsmount.NewSystem().Probe(ctx, path)
}

// Actions returns the log of mount and unmount calls.
func (f *Fake) Actions() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.actions...)
}
