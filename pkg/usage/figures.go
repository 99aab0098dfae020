package usage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/capacity"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// Figures stores the usage figures of one share's volumes in one
// directory, the share's .nfsdir/usage: one symlink per key whose target
// is the encoded capacity.Figure. A symlink is written and read in one
// call each, and replaced atomically by a rename. Every figure carries the
// creation token of the directory it counted, so a figure left by an
// earlier volume of the same key is never taken for a later one's.
type Figures struct {
	Dir  *os.Root // the figures' directory, the caller's
	Name string   // its path on the share, for messages
}

// Store replaces the figure under key atomically: written under a
// temporary name (key.new.<token>), renamed over the old one.
func (f Figures) Store(key string, fig capacity.Figure) error {
	text, err := fig.Encode()
	if err != nil {
		return err
	}
	tmp := key + ".new." + volumeid.NewToken()
	if err := f.Dir.Symlink(text, tmp); err != nil {
		var le *os.LinkError // its message would repeat the figure's text
		if errors.As(err, &le) {
			err = le.Err
		}
		return fmt.Errorf("write usage figure %s: %w", path.Join(f.Name, tmp), err)
	}
	if err := f.Dir.Rename(tmp, key); err != nil {
		f.Dir.Remove(tmp)
		return fmt.Errorf("store usage figure %s: %w", path.Join(f.Name, key), err)
	}
	return nil
}

// Read returns the figure stored under key if it was counted for the
// directory whose creation token is token; ok is false when there is
// none, or only one of another directory.
func (f Figures) Read(key, token string) (fig capacity.Figure, ok bool, err error) {
	text, err := f.Dir.Readlink(key)
	if errors.Is(err, fs.ErrNotExist) {
		return fig, false, nil
	}
	if err != nil {
		return fig, false, fmt.Errorf("read usage figure %s: %w", path.Join(f.Name, key), err)
	}
	fig, err = capacity.Decode(text)
	if err != nil {
		return fig, false, fmt.Errorf("%s: %w", path.Join(f.Name, key), err)
	}
	return fig, fig.Token == token, nil
}

// Has reports whether anything is stored under key.
func (f Figures) Has(key string) bool {
	_, err := f.Dir.Lstat(key)
	return !errors.Is(err, fs.ErrNotExist)
}

// Drop removes the figure under key if it was counted for the directory
// whose creation token is token (a deleted volume's), and not one counted
// since for a later directory of the same key.
func (f Figures) Drop(key, token string) {
	text, err := f.Dir.Readlink(key)
	if err != nil {
		return
	}
	if fig, err := capacity.Decode(text); err == nil && fig.Token != token {
		return
	}
	if err := f.Dir.Remove(key); err != nil && !errors.Is(err, fs.ErrNotExist) {
		klog.Warningf("remove usage figure %s: %v (removed by the next count)", path.Join(f.Name, key), err)
	}
}

// tempGrace is how long a temporary figure may stay before DropStale
// takes it for one a count left half-way: a store takes milliseconds.
const tempGrace = time.Minute

// DropStale removes the figures whose key is not among live (sorted) —
// left by deleted volumes — and the temporary ones older than a minute,
// left by a count interrupted between its write and its rename.
func (f Figures) DropStale(live []string) {
	d, err := f.Dir.Open(".")
	if err != nil {
		klog.Warningf("list %s: %v", f.Name, err)
		return
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		klog.Warningf("list %s: %v", f.Name, err)
		return
	}
	for _, n := range names {
		key, _, temp := strings.Cut(n, ".")
		if _, found := slices.BinarySearch(live, key); found && !temp {
			continue
		}
		if temp {
			if st, err := f.Dir.Lstat(n); err != nil || time.Since(st.ModTime()) < tempGrace {
				continue
			}
		}
		if err := f.Dir.Remove(n); err != nil && !errors.Is(err, fs.ErrNotExist) {
			klog.Warningf("remove stale usage figure %s: %v", path.Join(f.Name, n), err)
		}
	}
}
