// Package lab gives tests access to the NFS lab guest (tests/nfsvm): whether
// they run inside it, the export it serves, and helpers to start a driver.
// Tests that need real NFS call Require, which skips them on a plain host.
package lab

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/csiserver"
	"github.com/nfsdir/nfsdir/pkg/metrics"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"golang.org/x/sys/unix"
)

// Inside reports whether the test runs in the NFS lab guest.
func Inside() bool { return os.Getenv("NFSDIR_LAB") == "1" }

// Require skips the test unless it runs in the NFS lab guest.
func Require(t testing.TB) {
	t.Helper()
	if !Inside() {
		t.Skip("needs the NFS lab guest: run `make test-nfs` (go test -exec tests/nfsvm/run.sh)")
	}
}

// Server is the lab's NFS server address.
func Server() string { return env("NFSDIR_LAB_SERVER", "127.0.0.1") }

// Export is the lab's no_root_squash export (a tmpfs in the guest).
func Export() string { return env("NFSDIR_LAB_EXPORT", "/export") }

// SquashExport is the lab's root_squash export.
func SquashExport() string { return env("NFSDIR_LAB_SQUASH_EXPORT", "/export-squash") }

// XFSExport is the lab's export on XFS with reflinks (a loop device in the
// guest), where NFSv4.2 CLONE shares blocks.
func XFSExport() string { return env("NFSDIR_LAB_XFS_EXPORT", "/export-xfs") }

// QuotaExport is an export on XFS mounted with prjquota (a 512 MiB image on
// a loop device): project quotas set on its directories are enforced by
// the server.
func QuotaExport() string { return env("NFSDIR_LAB_QUOTA_EXPORT", "/export-quota") }

// Ext4QuotaExport is an export on ext4 made with project quotas (a 256 MiB
// image on a loop device): a full project is EDQUOT there.
func Ext4QuotaExport() string { return env("NFSDIR_LAB_EXT4_QUOTA_EXPORT", "/export-ext4quota") }

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// Driver is a driver serving on a unix socket in a test's temp directory.
type Driver struct {
	Endpoint string // unix:///...
	Socket   string // socket path
	StateDir string
	stop     context.CancelFunc
	done     chan error
	metrics  net.Addr // where its metrics are served, if anywhere
}

// StartDriver starts a driver in mode all with mounter m and returns when it
// serves. It stops when the test ends.
func StartDriver(t testing.TB, m nfsmount.Mounter, mutate func(*config.Config)) *Driver {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.NodeID = "lab-node"
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Endpoint = "unix://" + filepath.Join(dir, "csi.sock")
	cfg.MountTimeout = 30 * time.Second
	cfg.Version = "test"
	cfg.PublishRoot = os.TempDir() // tests publish on t.TempDir() targets; KubeletTarget for kubelet's layout
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	syscall.Umask(0) // as cmd/nfsdir does
	d, err := csiserver.New(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	l, err := csiserver.Listen(cfg.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var metricsAddr net.Addr
	if cfg.MetricsAddress != "" { // served as cmd/nfsdir does, until Stop
		if metricsAddr, err = metrics.Serve(ctx, cfg.MetricsAddress, d.HTTPHandler()); err != nil {
			cancel()
			t.Fatal(err)
		}
	}
	ld := &Driver{Endpoint: cfg.Endpoint, Socket: l.Addr().(*net.UnixAddr).Name, StateDir: cfg.StateDir, stop: cancel, done: make(chan error, 1), metrics: metricsAddr}
	go func() { ld.done <- d.Serve(ctx, l) }()
	t.Cleanup(ld.Stop)
	return ld
}

// Stop stops the driver and waits for it, and for its metrics address to
// be free again (the next driver of a test serves there).
func (d *Driver) Stop() {
	if d.stop == nil {
		return
	}
	d.stop()
	<-d.done
	d.stop = nil
	if d.metrics == nil {
		return
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if l, err := net.Listen("tcp", d.metrics.String()); err == nil {
			l.Close()
			return
		}
	}
}

// Sh runs a shell command in the guest and fails the test when it fails.
func Sh(t testing.TB, script string) string {
	t.Helper()
	out, err := exec.Command("/bin/sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return string(out)
}

// StopNFSServer stops the kernel NFS server; clients see a dead server.
func StopNFSServer(t testing.TB) { Sh(t, "rpc.nfsd 0") }

// StartNFSServer starts the kernel NFS server again and ends its grace
// period so that clients can lock and open at once.
func StartNFSServer(t testing.TB) {
	Sh(t, "rpc.nfsd 8 && (echo Y > /proc/fs/nfsd/v4_end_grace) 2>/dev/null; (echo Y > /proc/fs/lockd/nlm_end_grace) 2>/dev/null; true")
}

// CutNetwork takes the guest's loopback link down: the NFS server (on
// 127.0.0.1) stops answering without losing any state, as in a network
// partition; unix sockets (the CSI endpoint) keep working. It starts no
// process: a fork of a process holding files with dirty NFS pages closes
// them in execve, and that close waits for the server.
func CutNetwork(t testing.TB) { setLoopback(t, false) }

// RestoreNetwork brings the loopback link back, also without a process.
func RestoreNetwork(t testing.TB) { setLoopback(t, true) }

func setLoopback(t testing.TB, up bool) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		t.Fatal(err)
	}
	flags := ifr.Uint16() &^ unix.IFF_UP
	if up {
		flags |= unix.IFF_UP
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		t.Fatalf("set lo up=%v: %v", up, err)
	}
}

// ReplaceExport replaces the filesystem behind the main export with a fresh,
// empty one and re-exports it: every file handle clients hold goes stale,
// as after a server that lost its filesystem or re-exported another one.
func ReplaceExport(t testing.TB) {
	Sh(t, "exportfs -ua && umount -l "+Export()+" && mount -t tmpfs -o size=1g,mode=0755 export "+Export()+" && exportfs -ra")
}

// Process is an nfsdir binary started by a test.
type Process struct {
	Cmd      *exec.Cmd
	Endpoint string
	StateDir string
	Log      string // path of its log file
}

// StartBinary starts the nfsdir binary from PATH in mode all with the given
// state directory (a new one when empty) and extra flags, and waits until
// its Probe answers ready. It is killed when the test ends.
func StartBinary(t testing.TB, stateDir string, extra ...string) *Process {
	t.Helper()
	bin, err := exec.LookPath("nfsdir")
	if err != nil {
		t.Fatalf("the lab must carry the nfsdir binary (make test-nfs puts it on PATH): %v", err)
	}
	dir := t.TempDir()
	if stateDir == "" {
		stateDir = filepath.Join(dir, "state")
	}
	p := &Process{Endpoint: "unix://" + filepath.Join(dir, "csi.sock"), StateDir: stateDir, Log: filepath.Join(dir, "nfsdir.log")}
	logf, err := os.Create(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--mode=all", "--node-id=lab-node", "--endpoint=" + p.Endpoint, "--state-dir=" + stateDir, "-v=2",
		"--publish-root=" + os.TempDir()}, extra...)
	p.Cmd = exec.Command(bin, args...)
	p.Cmd.Stdout, p.Cmd.Stderr = logf, logf
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop()
		logf.Close()
		DetachBelow(dir) // mounts a killed process left behind
	})
	if err := p.waitReady(t); err != nil {
		t.Fatal(err)
	}
	return p
}

// Restart starts the binary again with the same arguments (after a Kill)
// and waits until it is ready. It may be called from any goroutine.
func (p *Process) Restart(t testing.TB) error {
	old := p.Cmd
	p.Cmd = exec.Command(old.Path, old.Args[1:]...)
	p.Cmd.Stdout, p.Cmd.Stderr = old.Stdout, old.Stderr
	if err := p.Cmd.Start(); err != nil {
		return err
	}
	return p.waitReady(t)
}

func (p *Process) waitReady(t testing.TB) error {
	c := Connect(t, p.Endpoint)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := c.Identity.Probe(context.Background(), &csi.ProbeRequest{})
		if err == nil && r.GetReady().GetValue() {
			return nil
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(p.Log)
			return fmt.Errorf("nfsdir not ready after 30s: %v\n%s", err, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill kills the process with SIGKILL, as a crash would, and reaps it.
func (p *Process) Kill() {
	if p.Cmd.ProcessState == nil {
		p.Cmd.Process.Kill()
		p.Cmd.Wait()
	}
}

// Stop stops the process with SIGTERM (it unmounts its shares), or SIGKILL
// after 30 s, and reaps it.
func (p *Process) Stop() {
	if p.Cmd.ProcessState != nil {
		return
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { p.Cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		p.Cmd.Process.Kill()
		<-done
	}
}

// DetachBelow lazily unmounts every mount point below dir.
func DetachBelow(dir string) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	lines := strings.Split(string(b), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		f := strings.Fields(lines[i])
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			syscall.Unmount(f[4], syscall.MNT_DETACH)
		}
	}
}

// Status returns a field of /proc/<pid>/status in kB or as a count
// (VmHWM, VmRSS, Threads).
func (p *Process) Status(field string) int64 {
	return procStatus(fmt.Sprint(p.Cmd.Process.Pid), field)
}

// SelfStatus returns a field of this process's /proc/self/status.
func SelfStatus(field string) int64 { return procStatus("self", field) }

func procStatus(pid, field string) int64 {
	b, _ := os.ReadFile("/proc/" + pid + "/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			var n int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &n)
			return n
		}
	}
	return -1
}

// OpenFDs counts the open file descriptors of pid ("self" for this process).
func OpenFDs(pid string) int {
	ents, _ := os.ReadDir("/proc/" + pid + "/fd")
	return len(ents)
}
