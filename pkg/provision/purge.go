package provision

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// Purger removes the trash of shares in the background with bounded
// concurrency. Deleted volumes are renamed into the trash synchronously, so
// DeleteVolume returns fast whatever their size; the purge resumes after a
// restart because the trash lives on the share.
//
// Removal works relative to open directory descriptors, one path component
// at a time, and never follows a symlink: a pod that still has the deleted
// volume mounted and swaps a directory for a symlink while it is purged gets
// its symlink removed, not the target.
type Purger struct {
	sem     chan struct{}
	wg      sync.WaitGroup
	removed atomic.Int64 // entries removed so far

	mu      sync.Mutex
	running map[string]bool // trash entries being purged, by share + name
}

// NewPurger returns a Purger running at most workers volume purges at once.
func NewPurger(workers int) *Purger {
	return &Purger{sem: make(chan struct{}, workers), running: map[string]bool{}}
}

// Kick starts purging every trash entry of the share at sharePath that is not
// already being purged. It returns at once; ctx stops the purges.
func (p *Purger) Kick(ctx context.Context, sharePath string, a *Area) {
	trash, err := a.root.Open(trashDir)
	if err != nil {
		klog.Warningf("open trash of %s: %v", sharePath, err)
		return
	}
	names, err := trash.Readdirnames(-1)
	if err != nil {
		klog.Warningf("list trash of %s: %v", sharePath, err)
	}
	var started sync.WaitGroup
	for _, name := range names {
		id := sharePath + "\x00" + name
		p.mu.Lock()
		if p.running[id] {
			p.mu.Unlock()
			continue
		}
		p.running[id] = true
		p.mu.Unlock()
		p.wg.Add(1)
		started.Add(1)
		go func() {
			defer p.wg.Done()
			defer started.Done()
			defer func() { p.mu.Lock(); delete(p.running, id); p.mu.Unlock() }()
			select {
			case p.sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-p.sem }()
			start := time.Now()
			if err := p.removeAt(ctx, int(trash.Fd()), name); err != nil {
				klog.Warningf("purge %q on %s: %v (will retry)", trashDir+"/"+name, sharePath, err)
				return
			}
			klog.V(2).Infof("purged %s/%s on %s in %s", trashDir, name, sharePath, time.Since(start).Round(time.Millisecond))
		}()
	}
	go func() { started.Wait(); trash.Close() }()
}

// Wait waits for the purges started so far.
func (p *Purger) Wait() { p.wg.Wait() }

// Removed returns how many files and directories the purges removed.
func (p *Purger) Removed() int64 { return p.removed.Load() }

// Pending returns how many purges are running or queued.
func (p *Purger) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.running)
}

// removeParallelism bounds concurrent unlinks within one directory.
const removeParallelism = 8

// removeAt removes name, a single path component inside the directory open
// as dirfd, with everything below it. It never follows symlinks. The files
// of a directory are unlinked by up to removeParallelism concurrent calls,
// keeping several requests in flight to the NFS server; subdirectories are
// descended one at a time. It checks ctx between batches.
func (p *Purger) removeAt(ctx context.Context, dirfd int, name string) error {
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := unix.Unlinkat(dirfd, name, 0)
		if err == nil {
			p.removed.Add(1)
			return nil
		}
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("unlink %s: %w", name, err)
		}
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch {
		case errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
			continue // swapped for a symlink or file: unlink that instead
		case err != nil:
			return fmt.Errorf("open %s: %w", name, err)
		}
		err = p.emptyDir(ctx, fd, name)
		if err != nil {
			return err
		}
		err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
		if err == nil {
			p.removed.Add(1)
			return nil
		}
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.ENOTEMPTY) || attempt > 100 {
			return fmt.Errorf("rmdir %s: %w", name, err)
		}
		// Something wrote into it meanwhile: empty it again.
	}
}

// emptyDir removes everything in the directory open as fd and closes fd.
func (p *Purger) emptyDir(ctx context.Context, fd int, name string) error {
	dir := os.NewFile(uintptr(fd), name)
	defer dir.Close()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := dir.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("rewind %s: %w", name, err)
		}
		ents, err := dir.ReadDir(1024)
		if len(ents) == 0 {
			if err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("read %s: %w", name, err)
			}
			return nil
		}
		var subdirs, files []string
		for _, e := range ents {
			if e.IsDir() {
				subdirs = append(subdirs, e.Name())
			} else {
				files = append(files, e.Name())
			}
		}
		if err := p.unlinkAll(ctx, fd, files); err != nil {
			return err
		}
		for _, d := range subdirs {
			if err := p.removeAt(ctx, fd, d); err != nil {
				return err
			}
		}
	}
}

// unlinkAll removes names from the directory open as fd, split into up to
// removeParallelism contiguous chunks removed concurrently.
func (p *Purger) unlinkAll(ctx context.Context, fd int, names []string) error {
	workers := min(removeParallelism, (len(names)+63)/64)
	if workers <= 1 {
		for _, n := range names {
			if err := p.removeAt(ctx, fd, n); err != nil {
				return err
			}
		}
		return nil
	}
	errc := make(chan error, workers)
	per := (len(names) + workers - 1) / workers
	for w := 0; w < workers; w++ {
		chunk := names[min(w*per, len(names)):min((w+1)*per, len(names))]
		go func() {
			for _, n := range chunk {
				if err := p.removeAt(ctx, fd, n); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	var first error
	for w := 0; w < workers; w++ {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}
