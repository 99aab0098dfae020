// Package lab gives tests access to the NFS lab guest (tests/nfsvm): whether
// they run inside it, the export it serves, and helpers to start a driver.
// Tests that need real NFS call Require, which skips them on a plain host.
package lab

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/csiserver"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
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
	ld := &Driver{Endpoint: cfg.Endpoint, Socket: l.Addr().(*net.UnixAddr).Name, StateDir: cfg.StateDir, stop: cancel, done: make(chan error, 1)}
	go func() { ld.done <- d.Serve(ctx, l) }()
	t.Cleanup(ld.Stop)
	return ld
}

// Stop stops the driver and waits for it.
func (d *Driver) Stop() {
	if d.stop == nil {
		return
	}
	d.stop()
	<-d.done
	d.stop = nil
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

// ReplaceExport replaces the filesystem behind the main export with a fresh,
// empty one and re-exports it: every file handle clients hold goes stale,
// as after a server that lost its filesystem or re-exported another one.
func ReplaceExport(t testing.TB) {
	Sh(t, "exportfs -ua && umount -l "+Export()+" && mount -t tmpfs -o size=1g,mode=0755 export "+Export()+" && exportfs -ra")
}
