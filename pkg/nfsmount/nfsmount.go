// Package nfsmount mounts and unmounts NFS without ever blocking a caller
// past its deadline: mount(8) runs in its own process group, killed whole
// when the context ends; unmount falls back to a forced lazy detach; mount
// state is read from /proc/self/mountinfo, never by stat-ing a target that
// may sit on a dead server.
package nfsmount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
	mountutils "k8s.io/mount-utils"
)

// Mounter is what the controller and node services need from the system.
// Implementations must return by the context's deadline.
type Mounter interface {
	// Mount mounts the NFS source ("server:/path") on target with options.
	// On deadline the mount process group is killed and the error wraps
	// context.DeadlineExceeded.
	Mount(ctx context.Context, source, target string, options []string) error
	// Unmount unmounts target. A target that is not mounted is not an error.
	Unmount(ctx context.Context, target string) error
	// Mounted returns the mount table entry at target, or nil when nothing
	// is mounted there. It reads the mount table only.
	Mounted(target string) (*Entry, error)
	// Targets returns the mount points where source is mounted, from the
	// mount table only.
	Targets(source string) ([]string, error)
	// Probe stats path within ctx and returns its filesystem usage; a
	// stale, dead or unreachable mount returns an error (ESTALE, EIO, a
	// deadline) instead of blocking.
	Probe(ctx context.Context, path string) (Usage, error)
}

// Entry is one mount table entry.
type Entry struct {
	Source  string
	FsType  string
	Options []string
}

// Usage is the statfs result of a mounted filesystem.
type Usage struct {
	TotalBytes, AvailableBytes, UsedBytes int64
	TotalInodes, FreeInodes, UsedInodes   int64
}

// IsStale reports whether err (at any depth of wrapping) says the mount is
// stale or its server is unreachable, so that unmounting and mounting again
// is the remedy.
func IsStale(err error) bool {
	for _, e := range []error{syscall.ESTALE, syscall.ENOTCONN, syscall.EIO, syscall.EHOSTDOWN, syscall.ENODEV} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// System is the Mounter of the running kernel. Create it with NewSystem.
type System struct {
	// UnmountGrace is how long a plain unmount may take before the forced
	// lazy detach.
	UnmountGrace time.Duration
	mountInfo    string

	mounting atomic.Int64 // mount(8) processes running

	mu         sync.Mutex
	probes     map[string]*probe   // in-flight statfs calls by path
	unmounting map[string]struct{} // targets with a plain umount2 in flight
}

// NewSystem returns a Mounter that runs mount(8) and umount2(2).
func NewSystem() *System {
	return &System{UnmountGrace: 10 * time.Second, mountInfo: "/proc/self/mountinfo",
		probes: map[string]*probe{}, unmounting: map[string]struct{}{}}
}

var _ Mounter = (*System)(nil)

// Mount runs "mount -t nfs -o <options> <source> <target>".
func (s *System) Mount(ctx context.Context, source, target string, options []string) error {
	args := []string{"-t", "nfs"}
	if len(options) > 0 {
		args = append(args, "-o", strings.Join(options, ","))
	}
	args = append(args, source, target)
	cmd := exec.CommandContext(ctx, "mount", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// Kill the whole group: mount(8) forks mount.nfs.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	s.mounting.Add(1)
	out, err := cmd.CombinedOutput()
	s.mounting.Add(-1)
	if ctx.Err() != nil {
		return fmt.Errorf("mount %s on %s: killed after %s: %w", source, target, time.Since(start).Round(time.Millisecond), ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("mount %s on %s: %v: %s", source, target, err, strings.TrimSpace(string(out)))
	}
	klog.V(4).Infof("mounted %s on %s (-o %s) in %s", source, target, strings.Join(options, ","), time.Since(start).Round(time.Millisecond))
	return nil
}

// Unmount unmounts target: a plain umount2 first; when that does not finish
// within UnmountGrace or the context, a forced lazy detach, which always
// returns at once. The plain attempt runs in a goroutine that is left to
// finish on its own if the kernel blocks it; while it is stuck, later calls
// for the same target detach at once instead of starting another.
func (s *System) Unmount(ctx context.Context, target string) error {
	e, err := s.Mounted(target)
	if err != nil || e == nil {
		return err
	}
	done := make(chan error, 1)
	s.mu.Lock()
	_, stuck := s.unmounting[target]
	if !stuck {
		s.unmounting[target] = struct{}{}
		go func() {
			err := unix.Unmount(target, 0)
			s.mu.Lock()
			delete(s.unmounting, target)
			s.mu.Unlock()
			done <- err
		}()
	}
	s.mu.Unlock()
	if stuck {
		return s.detach(target)
	}
	grace := time.NewTimer(s.UnmountGrace)
	defer grace.Stop()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, unix.EINVAL) {
			return nil
		}
		if !IsStale(err) && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("unmount %s: %w", target, err)
		}
		klog.Warningf("unmount %s: %v; detaching", target, err)
	case <-grace.C:
		klog.Warningf("unmount %s: no answer in %s; detaching", target, s.UnmountGrace)
	case <-ctx.Done():
		klog.Warningf("unmount %s: %v; detaching", target, ctx.Err())
	}
	return s.detach(target)
}

// detach force-detaches target; it does not wait for the server.
func (s *System) detach(target string) error {
	if err := unix.Unmount(target, unix.MNT_FORCE|unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		if err2 := unix.Unmount(target, unix.MNT_DETACH); err2 != nil && !errors.Is(err2, unix.EINVAL) {
			return fmt.Errorf("detach %s: %w", target, err2)
		}
	}
	return nil
}

// Mounted reads the mount table for target.
func (s *System) Mounted(target string) (*Entry, error) {
	infos, err := mountutils.ParseMountInfo(s.mountInfo)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	target = filepath.Clean(target)
	var found *Entry
	for _, mi := range infos {
		if mi.MountPoint == target {
			// The last entry wins: it is the one on top.
			found = &Entry{Source: mi.Source, FsType: mi.FsType, Options: append(mi.MountOptions, mi.SuperOptions...)}
		}
	}
	return found, nil
}

// Targets lists the mount points of source.
func (s *System) Targets(source string) ([]string, error) {
	infos, err := mountutils.ParseMountInfo(s.mountInfo)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	var out []string
	for _, mi := range infos {
		if mi.Source == source {
			out = append(out, mi.MountPoint)
		}
	}
	return out, nil
}

// probe is one statfs in flight; later callers for the same path wait for
// it instead of starting another that could block as well.
type probe struct {
	done    chan struct{}
	started time.Time
	usage   Usage
	err     error
}

// stuckAfter is how long a statfs may wait in the kernel before later
// callers stop waiting for it and are told at once that the server does not
// answer.
const stuckAfter = 5 * time.Second

// Probe runs statfs on path. At most one statfs per path is in flight: when
// the server is dead, at most one goroutine per path waits in the kernel, no
// matter how often the caller retries; and once it has waited stuckAfter,
// further calls return at once with an error wrapping
// context.DeadlineExceeded.
func (s *System) Probe(ctx context.Context, path string) (Usage, error) {
	s.mu.Lock()
	p, ok := s.probes[path]
	if !ok {
		p = &probe{done: make(chan struct{}), started: time.Now()}
		s.probes[path] = p
		go func() {
			p.usage, p.err = statfs(path)
			s.mu.Lock()
			delete(s.probes, path)
			s.mu.Unlock()
			close(p.done)
		}()
	}
	s.mu.Unlock()
	if waited := time.Since(p.started); ok && waited > stuckAfter {
		select {
		case <-p.done:
			return p.usage, p.err
		default:
			return Usage{}, fmt.Errorf("statfs %s: no answer for %s: %w", path, waited.Round(time.Second), context.DeadlineExceeded)
		}
	}
	select {
	case <-p.done:
		return p.usage, p.err
	case <-ctx.Done():
		return Usage{}, fmt.Errorf("statfs %s: no answer: %w", path, ctx.Err())
	}
}

func statfs(path string) (Usage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return Usage{}, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	bs := int64(st.Bsize)
	u := Usage{
		TotalBytes:     int64(st.Blocks) * bs,
		AvailableBytes: int64(st.Bavail) * bs,
		UsedBytes:      int64(st.Blocks-st.Bfree) * bs,
		TotalInodes:    int64(st.Files),
		FreeInodes:     int64(st.Ffree),
		UsedInodes:     int64(st.Files - st.Ffree),
	}
	return u, nil
}

// MountsInProgress returns how many mount(8) processes are running.
func (s *System) MountsInProgress() int64 { return s.mounting.Load() }

// InFlightProbes returns how many statfs calls are waiting in the kernel;
// tests use it to prove retries do not pile up goroutines.
func (s *System) InFlightProbes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.probes)
}
