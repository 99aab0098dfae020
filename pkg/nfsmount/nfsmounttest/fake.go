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
	f.table[filepath.Clean(target)] = nfsmount.Entry{Source: source, FsType: "nfs4", Options: options}
	return nil
}

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

// Probe stats the local directory behind path.
func (f *Fake) Probe(ctx context.Context, path string) (nfsmount.Usage, error) {
	return nfsmount.NewSystem().Probe(ctx, path)
}

// Actions returns the log of mount and unmount calls.
func (f *Fake) Actions() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.actions...)
}
