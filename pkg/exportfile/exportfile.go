// Package exportfile keeps a driver's named exports in step with a file:
// the chart writes its value exports into a ConfigMap that the controller
// and the node plugins mount, and a change of it (a new export for a
// pool, an export's new address) takes effect in the running processes
// once the kubelet has updated the file, without a restart.
package exportfile

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/export"
)

// Every is how often Watch reads the file.
var Every = 10 * time.Second

// Watcher makes names hold the fixed names (--export) and the file's.
type Watcher struct {
	path  string
	fixed map[string]export.Export
	names export.Names
	last  []byte // the text last read, valid or not
}

// New reads the file at path and makes names hold fixed and its names;
// an unreadable or invalid file, or a name it shares with fixed, is an
// error.
func New(path string, fixed map[string]export.Export, names export.Names) (*Watcher, error) {
	w := &Watcher{path: path, fixed: fixed, names: names}
	if _, err := w.Load(); err != nil {
		return nil, err
	}
	return w, nil
}

// Load reads the file and, when it changed and is valid, makes names
// hold what it says; it reports whether names changed. An invalid file
// changes nothing: the names it held before stay.
func (w *Watcher) Load() (bool, error) {
	text, err := read(w.path)
	if err != nil {
		return false, err
	}
	if w.last != nil && bytes.Equal(text, w.last) {
		return false, nil
	}
	w.last = text
	m, err := export.ParseFile(string(text))
	if err != nil {
		return false, fmt.Errorf("exports file %s: %v", w.path, err)
	}
	for name, e := range w.fixed {
		if _, dup := m[name]; dup {
			return false, fmt.Errorf("exports file %s: export %s is named by --export too", w.path, name)
		}
		m[name] = e
	}
	changes := Changes(w.names.Map(), m)
	if len(changes) == 0 {
		return false, nil
	}
	w.names.Replace(m)
	for _, c := range changes {
		klog.Info(c)
	}
	return true, nil
}

// Watch reads the file every Every until ctx ends, logging changes and
// errors.
func (w *Watcher) Watch(ctx context.Context) {
	t := time.NewTicker(Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := w.Load(); err != nil {
			klog.Errorf("%v; the exports named before stay", err)
		}
	}
}

// read returns the file's text, refusing one over export.MaxFile.
func read(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("exports file: %w", err)
	}
	defer f.Close()
	text, err := io.ReadAll(io.LimitReader(f, export.MaxFile+1))
	if err != nil {
		return nil, fmt.Errorf("exports file %s: %w", path, err)
	}
	return text, nil
}

// Changes describes, sorted by name, how the names after differ from
// before: added, moved and removed exports.
func Changes(before, after map[string]export.Export) []string {
	var out []string
	for name, e := range after {
		old, had := before[name]
		switch {
		case !had:
			out = append(out, fmt.Sprintf("export %s: added, at %s", name, e))
		case old != e:
			out = append(out, fmt.Sprintf("export %s: moved from %s to %s", name, old, e))
		}
	}
	for name, e := range before {
		if _, ok := after[name]; !ok {
			out = append(out, fmt.Sprintf("export %s: removed (was at %s); calls on its volumes are refused until it is named again", name, e))
		}
	}
	sort.Strings(out)
	return out
}
