package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/mountsec"
	"github.com/nfsdir/nfsdir/pkg/secdaemons"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// withoutTLS is what the lab's kernel answers a mount asking for TLS: a
// kernel older than 6.5 has no handshake upcall; a newer one has no tlshd
// running in the lab.
func withoutTLS() string {
	var u unix.Utsname
	unix.Uname(&u)
	var major, minor int
	for i, f := range strings.SplitN(unix.ByteSliceToString(u.Release[:]), ".", 3)[:2] {
		n := 0
		for _, c := range f {
			if c < '0' || c > '9' {
				break
			}
			n = n*10 + int(c-'0')
		}
		if i == 0 {
			major = n
		} else {
			minor = n
		}
	}
	if major < 6 || major == 6 && minor < 5 {
		return "no TLS handshake upcall"
	}
	return "no tlshd listens"
}

// TestSecureMountWithoutItsDaemonIsRefusedAtOnce: on the lab's kernel,
// where no tlshd and no rpc.gssd run, a class that asks for TLS or
// Kerberos is refused at once with FailedPrecondition naming what is
// missing, by CreateVolume (the controller's share mount) and by
// NodePublishVolume; nothing is mounted and no mount.nfs is left. A class
// that names sec=sys mounts, the security read back from the mount table.
func TestSecureMountWithoutItsDaemonIsRefusedAtOnce(t *testing.T) {
	lab.Require(t)
	if ps := lab.Processes("rpc.gssd"); len(ps) > 0 {
		t.Fatalf("rpc.gssd runs in the lab guest: %v", ps)
	}
	c := start(t, nil)
	missingTLS := withoutTLS()
	refused := func(what string, err error, took time.Duration, want string) {
		t.Helper()
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want FailedPrecondition naming %q", what, err, want)
		}
		if took > 10*time.Second {
			t.Errorf("%s: answered after %s", what, took)
		}
		t.Logf("%s: %s: %v", what, took.Round(time.Millisecond), err)
	}

	t0 := time.Now()
	_, err := c.Controller.CreateVolume(lab.Ctx(t, time.Minute), &csi.CreateVolumeRequest{Name: "pvc-tls", Parameters: params(),
		VolumeCapabilities: []*csi.VolumeCapability{lab.RWX("nfsvers=4.2", "xprtsec=tls")}})
	refused("CreateVolume with xprtsec=tls", err, time.Since(t0), missingTLS)

	v := c.Create(t, "pvc-secure", params(), lab.RWX("nfsvers=4.2"))
	for opts, want := range map[string]string{
		"sec=krb5p":              "no rpc.gssd runs",
		"xprtsec=mtls":           missingTLS,
		"sec=krb5i,xprtsec=tls":  missingTLS,
		"sec=krb5:krb5i,nolock":  "no rpc.gssd runs",
		"proto=tcp,xprtsec=mtls": missingTLS,
	} {
		target := filepath.Join(t.TempDir(), "t")
		t0 := time.Now()
		err := c.TryPublish(lab.Ctx(t, time.Minute), v, target, lab.RWX(append([]string{"nfsvers=4.2"}, strings.Split(opts, ",")...)...), false)
		refused("NodePublishVolume with "+opts, err, time.Since(t0), want)
		if lab.MountInfo(t, target) != "" {
			t.Errorf("%s: target mounted", opts)
		}
	}
	if ps := lab.Processes("mount.nfs"); len(ps) > 0 {
		t.Errorf("mount helpers left running: %v", ps)
	}

	target := filepath.Join(t.TempDir(), "sys")
	c.Publish(t, v, target, lab.RWX("nfsvers=4.2", "sec=sys"), false)
	if line := lab.MountInfo(t, target); !strings.Contains(line, "sec=sys") {
		t.Errorf("mount table: %q", line)
	}
	c.Unpublish(t, v, target)
	c.Delete(t, v)
}

// TestGssdIsFoundInTheNetworkNamespace: the check before a Kerberos mount
// finds an rpc.gssd that runs in this network namespace, and no longer
// once it ends; one running in another network namespace does not count.
func TestGssdIsFoundInTheNetworkNamespace(t *testing.T) {
	lab.Require(t)
	pipefs := "/var/lib/nfs/rpc_pipefs"
	if !strings.Contains(lab.MountInfo(t, pipefs), "rpc_pipefs") {
		if err := unix.Mount("rpc_pipefs", pipefs, "rpc_pipefs", 0, ""); err != nil {
			t.Fatalf("mount rpc_pipefs: %v", err)
		}
		defer unix.Unmount(pipefs, 0)
	}
	check := secdaemons.NewSystem("/proc", secdaemons.DefaultWhere)
	needs := []mountsec.Daemon{mountsec.Gssd}
	ctx := lab.Ctx(t, time.Minute)
	if err := check.Check(ctx, needs); !fault.Is(err, fault.FailedPrecondition) {
		t.Fatalf("before rpc.gssd: %v", err)
	}

	run := func(args ...string) *exec.Cmd {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return cmd
	}
	waitFor := func(want bool) error {
		var err error
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if err = check.Check(ctx, needs); (err == nil) == want {
				return err
			}
		}
		return err
	}

	// In a network namespace of its own it is not the kernel's here.
	other := run("unshare", "--net", "/usr/sbin/rpc.gssd", "-f", "-p", pipefs)
	time.Sleep(2 * time.Second)
	if err := check.Check(ctx, needs); !fault.Is(err, fault.FailedPrecondition) {
		t.Errorf("rpc.gssd in another network namespace counted: %v (processes %v)", err, lab.Processes("rpc.gssd"))
	}
	other.Process.Kill()
	other.Wait()

	gssd := run("/usr/sbin/rpc.gssd", "-f", "-p", pipefs)
	if err := waitFor(true); err != nil {
		t.Errorf("rpc.gssd runs (%v), the check says: %v", lab.Processes("rpc.gssd"), err)
	}
	gssd.Process.Kill()
	gssd.Wait()
	if err := waitFor(false); !fault.Is(err, fault.FailedPrecondition) || !strings.Contains(err.Error(), "no rpc.gssd runs") {
		t.Errorf("after rpc.gssd ended: %v", err)
	}
}
