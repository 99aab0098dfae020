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
	"io"
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

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/mountsec"
	"github.com/nfsdir/nfsdir/pkg/mounttable"
	"github.com/nfsdir/nfsdir/pkg/secdaemons"
)

// Mounter is what the controller and node services need from the system.
// Implementations must return by the context's deadline.
type Mounter interface {
	// Mount mounts the NFS source ("server:/path") on target with options.
	// On deadline the mount process group is killed and the error wraps
	// context.DeadlineExceeded.
	Mount(ctx context.Context, source, target string, options []string) error
	// Bind bind-mounts the directory from on target, then, when flags are
	// given, remounts the bind with those per-mount flags (ro, nosuid,
	// nodev, noexec, ...). Like Mount, it returns by the context's deadline
	// and the caller reads the mount table for what is mounted.
	Bind(ctx context.Context, from, target string, flags []string) error
	// Unmount unmounts target. A target that is not mounted is not an error.
	Unmount(ctx context.Context, target string) error
	// Mounted returns the mount table entry at target, or nil when nothing
	// is mounted there. It reads the mount table only.
	Mounted(target string) (*Entry, error)
	// Targets returns the mount points where source is mounted, from the
	// mount table only.
	Targets(source string) ([]string, error)
	// Table returns the mount table's entry at each mount point (the one
	// on top), read once.
	Table() (map[string]Entry, error)
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
	// Device is the superblock's device number ("major:minor"): NFS mounts
	// with the same one share the superblock, its cache and its options.
	Device string
}

// Usage is the statfs result of a mounted filesystem.
type Usage struct {
	TotalBytes, AvailableBytes, UsedBytes int64
	TotalInodes, FreeInodes, UsedInodes   int64
}

// IsStale reports whether err (at any depth of wrapping) says the mount is
// stale or its server is unreachable, so that unmounting and mounting again
// is the remedy.
func IsStale(err error) bool { return fault.Unreachable(err) }

// System is the Mounter of the running kernel. Create it with NewSystem.
type System struct {
	// UnmountGrace is how long a plain unmount may take before the forced
	// lazy detach.
	UnmountGrace time.Duration
	// Daemons checks, before a mount that asks for Kerberos or TLS, that
	// the daemons the kernel will call for it are there (nil: no check).
	Daemons   secdaemons.Checker
	mountInfo string

	mounting atomic.Int64 // mount(8) processes running

	mu         sync.Mutex
	probes     map[string]*probe   // in-flight statfs calls by path
	unmounting map[string]struct{} // targets with a plain umount2 in flight
}

// NewSystem returns a Mounter that runs mount(8) and umount2(2), and
// looks for the daemons of secure mounts among the processes of /proc.
func NewSystem() *System {
	return &System{UnmountGrace: 10 * time.Second, mountInfo: "/proc/self/mountinfo",
		Daemons: secdaemons.NewSystem("/proc", secdaemons.DefaultWhere),
		probes:  map[string]*probe{}, unmounting: map[string]struct{}{}}
}

var _ Mounter = (*System)(nil)

// Mount runs "mount -t nfs -o <options>,fg -- <source> <target>" and then
// confirms from the mount table that an NFS mount of source is at target:
// mount(8) exiting 0 is not proof (a helper that backgrounds itself exits 0
// with nothing mounted). Options that let mount(8) return before the mount
// is in place are refused, and "fg" comes last so that no configuration
// file can turn it into a background mount. A mount that asks for
// Kerberos (sec=) or TLS (xprtsec=) is refused at once when a daemon it
// needs is missing or when the node's NFSv4 connection to the server has
// other transport security, and unmounted when the mount table shows less
// security than it asked for: FailedPrecondition in each case.
func (s *System) Mount(ctx context.Context, source, target string, options []string) error {
	for _, o := range options {
		if mountopts.Detaching(o) {
			return fault.New(fault.InvalidArgument, "mount %q on %q: option %q is refused: it lets mount(8) succeed before anything is mounted", source, target, o)
		}
	}
	sec, err := mountsec.Asked(options)
	if err != nil {
		return fault.Wrap(fault.InvalidArgument, err, "mount %q on %q", source, target)
	}
	if needs := sec.Needs(); len(needs) > 0 && s.Daemons != nil {
		if err := s.Daemons.Check(ctx, needs); err != nil {
			return fault.Wrap(fault.KindOf(err), err, "mount %q on %q with %s", source, target, sec)
		}
	}
	if err := s.sharedConnection(ctx, source, target, options, sec); err != nil {
		return err
	}
	start := time.Now()
	out, err := s.run(ctx, "-t", "nfs", "-o", strings.Join(append(append([]string(nil), options...), "fg"), ","), "--", source, target)
	if ctx.Err() != nil {
		return fmt.Errorf("mount %q on %q: killed after %s: %w", source, target, time.Since(start).Round(time.Millisecond), ctx.Err())
	}
	if err != nil {
		err = classifyMountFailure(fmt.Errorf("mount %q on %q: %v: %s", source, target, err, strings.TrimSpace(out)), out)
		if hint := sec.Refused(); hint != "" && fault.Is(err, fault.PermissionDenied) {
			err = fault.Wrap(fault.PermissionDenied, err, "%s", hint)
		}
		return err
	}
	e, err := s.Mounted(target)
	if err != nil {
		return err
	}
	// Only the path of the source is compared: a mount sharing a
	// superblock is listed with that superblock's first host name.
	if e == nil || !strings.HasPrefix(e.FsType, "nfs") || !mounttable.SameSource(e.Source, source) {
		found := "nothing"
		if e != nil {
			found = fmt.Sprintf("%s %q", e.FsType, e.Source)
		}
		return fault.New(fault.Unavailable, "mount %q on %q: mount(8) exited 0 but the mount table shows %s there (output: %q)",
			source, target, found, strings.TrimSpace(out))
	}
	if err := sec.Verify(mountsec.Mounted(e.Options)); err != nil {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.UnmountGrace+5*time.Second)
		defer cancel()
		if uerr := s.Unmount(uctx, target); uerr != nil {
			klog.ErrorS(uerr, "unmounting a mount with less security than asked", "target", target)
		}
		if got := mountsec.Mounted(e.Options); sec.Transport != "" && got.Transport != sec.Transport {
			return fault.Wrap(fault.FailedPrecondition, err, "mount %q on %q (Linux gives all NFSv4 mounts of a server on a node one connection: "+
				"another mount of this server with %s, perhaps by another of its addresses, is the usual cause)", source, target, got)
		}
		return fault.Wrap(fault.FailedPrecondition, err, "mount %q on %q", source, target)
	}
	klog.V(4).InfoS("mounted", "source", source, "target", target, "options", strings.Join(options, ","),
		"security", mountsec.Mounted(e.Options).String(), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// run runs mount(8) with args in a process group of its own, killed
// whole when ctx ends (mount(8) forks mount.nfs).
func (s *System) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "mount", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	s.mounting.Add(1)
	defer s.mounting.Add(-1)
	return runCapture(cmd)
}

// Bind runs "mount --bind" and, with flags, "mount -o remount,bind,<flags>",
// both without canonicalizing paths (-c): the paths are the caller's
// checked ones, and the mount table, not mount(8), says what was bound. A
// path lookup on a server that does not answer is killed with the process
// when ctx ends.
func (s *System) Bind(ctx context.Context, from, target string, flags []string) error {
	steps := [][]string{{"--bind", "-c", "--", from, target}}
	if len(flags) > 0 {
		steps = append(steps, []string{"-c", "-o", "remount,bind," + strings.Join(flags, ","), "--", target})
	}
	for i, args := range steps {
		out, err := s.run(ctx, args...)
		if ctx.Err() != nil {
			err = fmt.Errorf("bind %q on %q: killed: %w", from, target, ctx.Err())
		} else if err != nil {
			err = fault.Wrap(fault.Internal, fmt.Errorf("%v: %s", err, strings.TrimSpace(out)), "bind %q on %q", from, target)
		}
		if err != nil {
			if i > 0 {
				s.undoBind(ctx, target)
			}
			return err
		}
	}
	return nil
}

// undoBind takes away a bind whose flags could not be set: it must not
// stay with fewer restrictions than asked for.
func (s *System) undoBind(ctx context.Context, target string) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.UnmountGrace+5*time.Second)
	defer cancel()
	if err := s.Unmount(uctx, target); err != nil {
		klog.ErrorS(err, "unmounting a bind whose flags could not be set", "target", target)
	}
}

// runCapture runs cmd with its output in one pipe it owns, so that
// waiting for the process never waits for a descendant that kept the pipe
// open. When cmd exits, what is left of its process group is killed; output
// still held open by a process outside the group is given up after a
// second.
func runCapture(cmd *exec.Cmd) (string, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		return "", err
	}
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(r, 64<<10))
		read <- b
	}()
	err = cmd.Wait()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	var out []byte
	select {
	case out = <-read:
	case <-time.After(time.Second):
		r.Close() // unblocks the reader
		out = <-read
	}
	r.Close()
	return string(out), err
}

// classifyMountFailure gives a failed mount(8) the kind its output names
// (mount.nfs prints the strerror of what the kernel or server said), so
// that the operator is told what to fix: access → PermissionDenied, a
// refused option → InvalidArgument, anything about reaching the server →
// Unavailable.
func classifyMountFailure(err error, out string) error {
	o := strings.ToLower(out)
	switch {
	case strings.Contains(o, "access denied") || strings.Contains(o, "permission denied") || strings.Contains(o, "operation not permitted"):
		return fault.Wrap(fault.PermissionDenied, err, "access refused")
	case strings.Contains(o, "invalid argument") || strings.Contains(o, "bad option") || strings.Contains(o, "unrecognized option") ||
		strings.Contains(o, "incorrect mount option"):
		return fault.Wrap(fault.InvalidArgument, err, "mount options refused")
	case strings.Contains(o, "no such file or directory"):
		return fault.Wrap(fault.NotFound, err, "export path not found")
	case strings.Contains(o, "connection refused") || strings.Contains(o, "timed out") || strings.Contains(o, "unreachable") ||
		strings.Contains(o, "no route") || strings.Contains(o, "resolve") || strings.Contains(o, "protocol not supported"):
		return fault.Wrap(fault.Unavailable, err, "NFS server not reachable")
	}
	return fault.Wrap(fault.Internal, err, "mount failed")
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
		klog.Warningf("unmount %q: %v; detaching", target, err)
	case <-grace.C:
		klog.Warningf("unmount %q: no answer in %s; detaching", target, s.UnmountGrace)
	case <-ctx.Done():
		klog.Warningf("unmount %q: %v; detaching", target, ctx.Err())
	}
	return s.detach(target)
}

// detach lazily detaches target from the mount tree; it does not wait for
// the server. It never uses MNT_FORCE: that makes the kernel fail every
// pending RPC of the superblock, which every mount of the same export with
// the same options shares, so other pods' writes and fsyncs would fail.
func (s *System) detach(target string) error {
	if err := unix.Unmount(target, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("detach %q: %w", target, err)
	}
	return nil
}

// Mounted reads the mount table for target.
func (s *System) Mounted(target string) (*Entry, error) {
	infos, err := s.table()
	if err != nil {
		return nil, err
	}
	target = filepath.Clean(target)
	var found *Entry
	for _, mi := range infos {
		if mi.MountPoint == target {
			// The last entry wins: it is the one on top.
			e := entryOf(mi)
			found = &e
		}
	}
	return found, nil
}

// Table reads the mount table once: the entry on top at each mount point.
func (s *System) Table() (map[string]Entry, error) {
	infos, err := s.table()
	if err != nil {
		return nil, err
	}
	out := make(map[string]Entry, len(infos))
	for _, mi := range infos {
		out[mi.MountPoint] = entryOf(mi)
	}
	return out, nil
}

func entryOf(mi mountutils.MountInfo) Entry {
	return Entry{Source: mi.Source, FsType: mi.FsType, Options: append(mi.MountOptions, mi.SuperOptions...),
		Device: fmt.Sprintf("%d:%d", mi.Major, mi.Minor)}
}

// Targets lists the mount points of source (compared by export path, as
// mounttable.SameSource does).
func (s *System) Targets(source string) ([]string, error) {
	infos, err := s.table()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, mi := range infos {
		if mounttable.SameSource(mi.Source, source) {
			out = append(out, mi.MountPoint)
		}
	}
	return out, nil
}

// table reads the mount table with mount points and sources decoded: the
// kernel writes a space, tab, newline and backslash in them as \040,
// \011, \012 and \134.
func (s *System) table() ([]mountutils.MountInfo, error) {
	infos, err := mountutils.ParseMountInfo(s.mountInfo)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	for i := range infos {
		infos[i].MountPoint = mounttable.Unescape(infos[i].MountPoint)
		infos[i].Source = mounttable.Unescape(infos[i].Source)
		infos[i].Root = mounttable.Unescape(infos[i].Root)
	}
	return infos, nil
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
